//! A tool as the index reads it: the fields its text is split into, each weighted for what it
//! says about the tool.

use serde_json::Value;

use crate::text;

/// One composed tool, with what Capstan knows of the binding that contributes it. Serialized
/// only as a key: two tool sets that serialize alike index alike.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ToolDoc {
    /// The name a caller calls it by (namespaced by its binding).
    pub name: String,
    /// The provider's own name for it (without the namespace).
    pub tool: String,
    /// The service the binding contributes for (its provider's name for itself).
    pub service: String,
    /// Other names the service goes by (the binding's name, its title).
    pub service_aliases: Vec<String>,
    /// The tool's `title` and its annotations' `title`.
    pub titles: Vec<String>,
    /// The tool's description.
    pub description: String,
    /// The tool's input schema.
    pub input_schema: Value,
    /// The tool's annotations (`readOnlyHint`, `destructiveHint`, …).
    pub annotations: Option<Value>,
    /// What else the binding says about the tool: its knowledge concepts, the `cap.*`
    /// capabilities it serves and their features.
    pub context: Vec<String>,
}

/// The fields of a document. Their weights are [`crate::Tuning::field_weights`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The provider's name of the tool, split into words.
    Name = 0,
    /// Its titles.
    Title,
    /// The description's first sentence: what the tool does.
    Lead,
    /// The rest of the description.
    Body,
    /// Argument names and the values of enumerations (a multi-method tool's methods).
    Arguments,
    /// Argument descriptions.
    ArgumentText,
    /// The service and its aliases.
    Service,
    /// The binding's knowledge concepts and capabilities; the annotations' verbs.
    Context,
}

/// How many fields a document has.
pub const FIELDS: usize = 8;

/// The terms of each field of `doc`, indexed by `Field as usize`.
pub fn field_terms(doc: &ToolDoc) -> [Vec<String>; FIELDS] {
    let mut fields: [Vec<String>; FIELDS] = Default::default();
    fields[Field::Name as usize] = text::terms(&doc.tool);
    fields[Field::Title as usize] = doc.titles.iter().flat_map(|t| text::terms(t)).collect();
    let (lead, body) = split_lead(&doc.description);
    fields[Field::Lead as usize] = text::terms(lead);
    fields[Field::Body as usize] = text::terms(body);
    let mut arguments = Vec::new();
    let mut argument_text = Vec::new();
    schema_terms(&doc.input_schema, 0, &mut arguments, &mut argument_text);
    fields[Field::Arguments as usize] = arguments;
    fields[Field::ArgumentText as usize] = argument_text;
    fields[Field::Service as usize] = std::iter::once(&doc.service)
        .chain(&doc.service_aliases)
        .flat_map(|s| text::terms(s))
        .collect();
    let mut context: Vec<String> = doc.context.iter().flat_map(|c| text::terms(c)).collect();
    context.extend(annotation_terms(doc.annotations.as_ref()));
    fields[Field::Context as usize] = context;
    fields
}

/// The description's first sentence, and the rest.
fn split_lead(description: &str) -> (&str, &str) {
    let trimmed = description.trim_start();
    let end = trimmed
        .char_indices()
        .find(|&(i, c)| {
            c == '\n' || (c == '.' && trimmed[i + 1..].starts_with(|n: char| n.is_whitespace()))
        })
        .map_or(trimmed.len(), |(i, _)| i);
    (&trimmed[..end], &trimmed[end..])
}

/// How deep into nested objects argument names are read: the top level names what a tool
/// acts on; a level below still names its parts (a filter's fields); deeper is detail.
const SCHEMA_DEPTH: usize = 2;

/// Argument names, enumeration values and descriptions of `schema`'s properties.
fn schema_terms(schema: &Value, depth: usize, names: &mut Vec<String>, text: &mut Vec<String>) {
    if depth >= SCHEMA_DEPTH {
        return;
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        names.extend(text::terms(name));
        for value in enumerated(property) {
            names.extend(text::terms(value));
        }
        if let Some(description) = property.get("description").and_then(Value::as_str) {
            text.extend(text::terms(description));
        }
        schema_terms(property, depth + 1, names, text);
        if let Some(items) = property.get("items") {
            schema_terms(items, depth + 1, names, text);
        }
    }
}

/// The string values a property is limited to (`enum`, or `const`s of a `oneOf`/`anyOf`).
fn enumerated(property: &Value) -> Vec<&str> {
    let mut values: Vec<&str> = property
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for key in ["oneOf", "anyOf"] {
        for branch in property
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            values.extend(branch.get("const").and_then(Value::as_str));
        }
    }
    values
}

/// The verbs a tool's annotations imply: a read-only tool reads, a destructive one deletes.
fn annotation_terms(annotations: Option<&Value>) -> Vec<String> {
    let hint = |name: &str| {
        annotations
            .and_then(|a| a.get(name))
            .and_then(Value::as_bool)
    };
    let mut verbs = Vec::new();
    if hint("readOnlyHint") == Some(true) {
        verbs.push("read");
    }
    if hint("destructiveHint") == Some(true) && hint("readOnlyHint") != Some(true) {
        verbs.push("delete");
    }
    verbs.into_iter().map(text::stem).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_lead_should_be_the_first_sentence() {
        assert_eq!(
            split_lead("Get a file. Reads v1.2 too."),
            ("Get a file", ". Reads v1.2 too.")
        );
        assert_eq!(
            split_lead("Lists pods\nin a namespace"),
            ("Lists pods", "\nin a namespace")
        );
        assert_eq!(split_lead("no end"), ("no end", ""));
    }

    #[test]
    fn a_multi_method_tools_methods_should_be_argument_terms() {
        let doc = ToolDoc {
            tool: "pull_request_read".into(),
            input_schema: json!({"properties": {
                "method": {"enum": ["get_diff", "get_reviews"], "description": "The method"},
                "filter": {"type": "object", "properties": {"assigneeId": {}}},
            }}),
            ..ToolDoc::default()
        };
        let fields = field_terms(&doc);
        let arguments = &fields[Field::Arguments as usize];
        for word in ["diff", "reviews", "method", "assignee"] {
            assert!(
                arguments.contains(&text::stem(word)),
                "{word} in {arguments:?}"
            );
        }
        assert_eq!(fields[Field::ArgumentText as usize], ["method"]);
    }
}
