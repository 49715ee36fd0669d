//! A kind's OpenAPI v3 schema as `schema_get` shows it (pure): `$ref`s inlined (to a depth
//! that keeps the answer readable), narrowed to one part by a dotted path.

use serde_json::{Map, Value};

/// Largest schema answer, in bytes of JSON: references are inlined less deeply until it fits.
pub const MAX_SCHEMA_BYTES: usize = 96 * 1024;

/// Deepest reference inlining tried first.
const MAX_DEPTH: usize = 8;

/// Resolves a local `$ref` (`#/components/schemas/<name>`) in `document`.
fn resolve<'a>(reference: &str, document: &'a Value) -> Option<(&'a Value, String)> {
    let name = reference.strip_prefix("#/components/schemas/")?;
    let pointer = format!(
        "/components/schemas/{}",
        name.replace('~', "~0").replace('/', "~1")
    );
    document.pointer(&pointer).map(|s| (s, name.to_owned()))
}

/// The schema a node stands for: itself, or the target of its `$ref` (also the
/// `allOf: [{$ref}]` form Kubernetes uses for fields with defaults).
fn target<'a>(node: &'a Value, document: &'a Value) -> Option<(&'a Value, String)> {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        return resolve(reference, document);
    }
    if let Some([only]) = node
        .get("allOf")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        && let Some(reference) = only.get("$ref").and_then(Value::as_str)
    {
        return resolve(reference, document);
    }
    None
}

/// `schema` with references inlined up to `depth` levels; deeper ones, and any that would
/// recurse, become `{"$ref": name, "description": "not expanded …"}`.
fn expand_to(schema: &Value, document: &Value, depth: usize, stack: &mut Vec<String>) -> Value {
    if let Some((resolved, name)) = target(schema, document) {
        if depth == 0 || stack.contains(&name) {
            return not_expanded(schema, resolved, name);
        }
        stack.push(name);
        let expanded = expand_to(resolved, document, depth - 1, stack);
        stack.pop();
        return with_own_annotations(expanded, schema);
    }
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let value = expand_keyword(key, value, document, depth, stack);
                    (key.clone(), value)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The stand-in for a reference to `name` (resolved to `resolved`) left unexpanded: its name,
/// the field's description (or else the type's), and how to see the rest.
fn not_expanded(schema: &Value, resolved: &Value, name: String) -> Value {
    let mut stub = Map::new();
    stub.insert("$ref".into(), Value::String(name.clone()));
    if let Some(description) = schema
        .get("description")
        .or_else(|| resolved.get("description"))
    {
        stub.insert("description".into(), description.clone());
    }
    stub.insert(
        "x-capstan-not-expanded".into(),
        Value::String(format!(
            "call schema_get with a path ending here to see {name}"
        )),
    );
    Value::Object(stub)
}

/// A referenced type inlined for a field: the field's own description and default win over
/// the referenced type's.
fn with_own_annotations(mut expanded: Value, schema: &Value) -> Value {
    if let (Some(map), Some(own)) = (expanded.as_object_mut(), schema.as_object()) {
        for key in ["description", "default"] {
            if let Some(value) = own.get(key) {
                map.insert(key.into(), value.clone());
            }
        }
    }
    expanded
}

/// The value of one keyword of a schema, with the subschemas it holds expanded: every
/// property's, the one of `items`, `additionalProperties` and `not`, each of `allOf`, `anyOf`
/// and `oneOf`. Any other keyword's value is data, kept as it is.
fn expand_keyword(
    key: &str,
    value: &Value,
    document: &Value,
    depth: usize,
    stack: &mut Vec<String>,
) -> Value {
    match key {
        "properties" | "patternProperties" => Value::Object(
            value
                .as_object()
                .map(|props| {
                    props
                        .iter()
                        .map(|(name, prop)| (name.clone(), expand_to(prop, document, depth, stack)))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        "items" | "additionalProperties" | "not" => expand_to(value, document, depth, stack),
        "allOf" | "anyOf" | "oneOf" => Value::Array(
            value
                .as_array()
                .map(|all| {
                    all.iter()
                        .map(|s| expand_to(s, document, depth, stack))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        _ => value.clone(),
    }
}

/// `schema` with references inlined as deeply as fits in [`MAX_SCHEMA_BYTES`]; the depth used
/// is returned with it.
pub fn expand(schema: &Value, document: &Value) -> (Value, usize) {
    let mut depth = MAX_DEPTH;
    loop {
        let expanded = expand_to(schema, document, depth, &mut Vec::new());
        let size = serde_json::to_vec(&expanded).map(|v| v.len()).unwrap_or(0);
        if size <= MAX_SCHEMA_BYTES || depth == 0 {
            return (expanded, depth);
        }
        depth -= 1;
    }
}

/// A path into a kind's schema that names a field the schema does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoSuchField {
    /// Where the path went wrong: the fields walked so far, or `the kind`.
    pub at: String,
    /// The field it named there.
    pub field: String,
    /// The fields there are.
    pub fields: Vec<String>,
}

impl std::fmt::Display for NoSuchField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self { at, field, fields } = self;
        if fields.is_empty() {
            write!(
                f,
                "{at} has no field {field:?} (it has no fields to narrow into)"
            )
        } else {
            write!(
                f,
                "{at} has no field {field:?}; its fields are: {}",
                fields.join(", ")
            )
        }
    }
}

impl std::error::Error for NoSuchField {}

/// The part of `schema` at `path` (dotted field names; a list's entries are stepped into
/// without naming them), or the fields available where the path went wrong.
pub fn narrow(schema: &Value, document: &Value, path: &str) -> Result<Value, NoSuchField> {
    let mut here = schema.clone();
    let mut walked = Vec::new();
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let segment = segment.trim_end_matches("[]");
        loop {
            if let Some((resolved, _)) = target(&here, document) {
                here = resolved.clone();
            } else if here.get("type").and_then(Value::as_str) == Some("array") {
                here = here.get("items").cloned().unwrap_or(Value::Null);
            } else {
                break;
            }
        }
        let next = here
            .get("properties")
            .and_then(|p| p.get(segment))
            .cloned()
            .or_else(|| {
                // A map's values: any key reaches the `additionalProperties` schema.
                here.get("additionalProperties")
                    .filter(|v| v.is_object())
                    .cloned()
            });
        match next {
            Some(next) => {
                walked.push(segment.to_owned());
                here = next;
            }
            None => {
                let fields = here
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                let at = if walked.is_empty() {
                    "the kind".to_owned()
                } else {
                    walked.join(".")
                };
                return Err(NoSuchField {
                    at,
                    field: segment.to_owned(),
                    fields,
                });
            }
        }
    }
    Ok(here)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn document() -> Value {
        json!({"components": {"schemas": {
            "Widget": {"type": "object", "required": ["spec"], "properties": {
                "metadata": {"allOf": [{"$ref": "#/components/schemas/ObjectMeta"}], "description": "Standard metadata."},
                "spec": {"$ref": "#/components/schemas/WidgetSpec"}}},
            "WidgetSpec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "description": "How big."},
                "parts": {"type": "array", "items": {"$ref": "#/components/schemas/Part"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "Part": {"type": "object", "properties": {
                "name": {"type": "string"},
                "child": {"$ref": "#/components/schemas/Part"}}},
            "ObjectMeta": {"type": "object", "description": "Meta.", "properties": {"name": {"type": "string"}}}
        }}})
    }

    #[test]
    fn references_should_be_inlined_and_recursion_stopped() {
        let document = document();
        let widget = document.pointer("/components/schemas/Widget").unwrap();
        let (expanded, depth) = expand(widget, &document);
        assert_eq!(depth, MAX_DEPTH);
        assert_eq!(expanded["properties"]["spec"]["required"], json!(["size"]));
        assert_eq!(
            expanded["properties"]["metadata"]["description"],
            json!("Standard metadata."),
            "the field's own description wins"
        );
        let part = &expanded["properties"]["spec"]["properties"]["parts"]["items"];
        assert_eq!(part["properties"]["name"]["type"], json!("string"));
        assert_eq!(
            part["properties"]["child"]["$ref"],
            json!("Part"),
            "a recursive type stops"
        );
    }

    #[test]
    fn a_path_should_narrow_through_references_and_lists() {
        let document = document();
        let widget = document.pointer("/components/schemas/Widget").unwrap();
        assert_eq!(
            narrow(widget, &document, "spec.size").unwrap(),
            json!({"type": "integer", "description": "How big."})
        );
        let part = narrow(widget, &document, "spec.parts").unwrap();
        assert_eq!(
            narrow(&part, &document, "name").unwrap()["type"],
            json!("string")
        );
        assert_eq!(
            narrow(widget, &document, "spec.labels.anykey").unwrap(),
            json!({"type": "string"})
        );
        assert_eq!(
            narrow(widget, &document, "spec.colour")
                .unwrap_err()
                .to_string(),
            "spec has no field \"colour\"; its fields are: labels, parts, size"
        );
    }
}
