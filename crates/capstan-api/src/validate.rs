//! Runtime validation: every error, each path-qualified, in the vocabulary admission uses.
//!
//! Two passes over the JSON form of a spec. The first checks it against the JSON Schema generated
//! from the Rust types (the same types and attributes the CRD's OpenAPI schema comes from), so
//! required fields, types, enums, patterns and bounds cannot drift between admission and runtime.
//! The second checks the rules that span fields (the CRD's CEL rules and list-map keys). Both
//! passes run on the raw JSON, so a wrong type in one place never hides an error in another.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};
use schemars::generate::SchemaSettings;
use schemars::transform::{Transform, transform_subschemas};
use schemars::{JsonSchema, Schema};
use serde_json::Value;

use crate::binding::CapabilityBindingSpec;
use crate::patterns::pattern_message;
use crate::qualifier::{CONSTRAINT_KINDS, MAX_QUALIFIER_NAME_LEN, RouteQualifierSpec};

/// One validation error: where, and what is wrong. Displayed as `path: message`, e.g.
/// `spec.skills[0].source: required`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldError {
    /// The field path, e.g. `spec.tools.mcpServers[1].name`.
    pub path: String,
    /// What is wrong, and where possible what would be right.
    pub message: String,
}

impl FieldError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Validates a CapabilityBinding or capability document spec. Returns every error, each
/// path-qualified from `spec`; empty means valid.
pub fn validate(spec: &CapabilityBindingSpec) -> Vec<FieldError> {
    match serde_json::to_value(spec) {
        Ok(value) => validate_binding_spec(&value),
        // Serializing a derived struct of strings, numbers and vectors cannot fail.
        Err(error) => vec![FieldError::new(
            "spec",
            format!("cannot be encoded: {error}"),
        )],
    }
}

/// Validates the JSON form of a binding spec, as found under `spec` in a document or CR.
pub fn validate_binding_spec(spec: &Value) -> Vec<FieldError> {
    check_binding_spec(&without_nulls(spec))
}

/// [`validate_binding_spec`] for a value whose nulls are already removed.
pub(crate) fn check_binding_spec(spec: &Value) -> Vec<FieldError> {
    let mut errors = schema_errors(&BINDING_SPEC_SCHEMA, "spec", spec);
    binding_rules(spec, &mut errors);
    finish(errors)
}

/// Validates a RouteQualifier spec. Returns every error, each path-qualified from `spec`.
pub fn validate_qualifier(spec: &RouteQualifierSpec) -> Vec<FieldError> {
    match serde_json::to_value(spec) {
        Ok(value) => validate_qualifier_spec(&value),
        Err(error) => vec![FieldError::new(
            "spec",
            format!("cannot be encoded: {error}"),
        )],
    }
}

/// Validates the JSON form of a RouteQualifier spec.
pub fn validate_qualifier_spec(spec: &Value) -> Vec<FieldError> {
    check_qualifier_spec(&without_nulls(spec))
}

/// [`validate_qualifier_spec`] for a value whose nulls are already removed.
pub(crate) fn check_qualifier_spec(spec: &Value) -> Vec<FieldError> {
    let mut errors = schema_errors(&QUALIFIER_SPEC_SCHEMA, "spec", spec);
    qualifier_rules(spec, &mut errors);
    finish(errors)
}

/// Validates a RouteQualifier name: the merge order key, bounded so it fits decision records.
pub fn validate_qualifier_name(name: &str) -> Option<FieldError> {
    (name.chars().count() > MAX_QUALIFIER_NAME_LEN).then(|| {
        FieldError::new(
            "metadata.name",
            format!("must be at most {MAX_QUALIFIER_NAME_LEN} characters"),
        )
    })
}

/// Sorts errors by location (array indices numerically) so output is stable and an object's
/// errors read top to bottom, and drops exact duplicates.
fn finish(mut errors: Vec<FieldError>) -> Vec<FieldError> {
    errors.sort_by_cached_key(|e| (path_sort_key(&e.path), e.message.clone()));
    errors.dedup();
    errors
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum SortSegment {
    Key(String),
    Index(usize),
}

fn path_sort_key(path: &str) -> Vec<SortSegment> {
    let mut key = Vec::new();
    for part in path.split('.') {
        let mut pieces = part.split('[');
        if let Some(name) = pieces.next() {
            key.push(SortSegment::Key(name.to_owned()));
        }
        for index in pieces {
            let index = index.trim_end_matches(']');
            key.push(match index.parse() {
                Ok(i) => SortSegment::Index(i),
                Err(_) => SortSegment::Key(index.to_owned()),
            });
        }
    }
    key
}

// ---------------------------------------------------------------------------------------------
// Schema pass

static BINDING_SPEC_SCHEMA: LazyLock<Validator> =
    LazyLock::new(|| compile(runtime_schema::<CapabilityBindingSpec>()));

static QUALIFIER_SPEC_SCHEMA: LazyLock<Validator> =
    LazyLock::new(|| compile(runtime_schema::<RouteQualifierSpec>()));

fn compile(schema: Value) -> Validator {
    // The schema is generated from this crate's own types and compiled by its unit tests
    // (`runtime_schemas_should_compile`), so failure here is a build defect, not an input error.
    #[allow(clippy::expect_used)]
    jsonschema::validator_for(&schema).expect("schema generated from capstan-api types compiles")
}

/// The JSON Schema (draft 2020-12) of `T` used at runtime. Optional fields are simply absent
/// from `required`: the instance has its nulls removed first, as the apiserver drops nulls for
/// fields that are not nullable.
pub fn runtime_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with_transform(DropNullAlternatives)
        .into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

/// Rewrites `Option<T>`'s `T | null` into `T`, and documented unit enums (a `oneOf` of one
/// `const` per variant) into a plain `enum`, so errors can list the allowed values.
#[derive(Clone, Debug)]
struct DropNullAlternatives;

impl Transform for DropNullAlternatives {
    fn transform(&mut self, schema: &mut Schema) {
        transform_subschemas(self, schema);
        let Some(object) = schema.as_object_mut() else {
            return;
        };
        if let Some(Value::Array(types)) = object.get_mut("type") {
            types.retain(|t| t != "null");
            if types.len() == 1 {
                let only = types.remove(0);
                object.insert("type".into(), only);
            }
        }
        if let Some(Value::Array(one_of)) = object.get("oneOf") {
            let constants: Option<Vec<Value>> = one_of
                .iter()
                .map(
                    |variant| match (variant.get("const"), variant.get("enum")) {
                        (Some(value), _) => Some(value.clone()),
                        (None, Some(Value::Array(values))) if values.len() == 1 => {
                            Some(values[0].clone())
                        }
                        _ => None,
                    },
                )
                .collect();
            if let Some(constants) = constants {
                object.remove("oneOf");
                object.insert("enum".into(), Value::Array(constants));
            }
        }
        if let Some(Value::Array(any_of)) = object.get("anyOf") {
            let is_null = |s: &Value| s.get("type").is_some_and(|t| t == "null");
            if any_of.len() == 2 && any_of.iter().any(is_null) {
                let kept = any_of.iter().find(|s| !is_null(s)).cloned();
                object.remove("anyOf");
                if let Some(Value::Object(kept)) = kept {
                    for (key, value) in kept {
                        object.entry(key).or_insert(value);
                    }
                }
            }
        }
    }
}

/// Removes null-valued object members in place: an explicit null reads as absent, as producers
/// that serialize zero values (Go's `encoding/json` without `omitempty`) intend.
pub(crate) fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

fn has_null_member(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.values().any(|v| v.is_null() || has_null_member(v)),
        Value::Array(items) => items.iter().any(has_null_member),
        _ => false,
    }
}

/// `value` without null-valued object members, copied only when it has some.
fn without_nulls(value: &Value) -> Cow<'_, Value> {
    if has_null_member(value) {
        let mut owned = value.clone();
        strip_nulls(&mut owned);
        Cow::Owned(owned)
    } else {
        Cow::Borrowed(value)
    }
}

fn schema_errors(validator: &Validator, prefix: &str, instance: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    // Most input is valid, and a yes/no answer is far cheaper than collecting errors.
    if validator.is_valid(instance) {
        return errors;
    }
    for error in validator.iter_errors(instance) {
        render_schema_error(prefix, instance, &error, &mut errors);
    }
    errors
}

/// Turns the JSON Pointer of a place in `instance` into a field path (`tools[0].name`, no
/// leading dot), walking the instance so array indices and numeric keys are told apart.
pub fn pointer_to_path(instance: &Value, pointer: &str) -> String {
    field_path("", instance, pointer)
        .trim_start_matches('.')
        .to_owned()
}

/// Turns a JSON Pointer into a field path (`spec.tools.mcpServers[0].name`), walking the
/// instance so array indices and numeric keys are told apart.
fn field_path(prefix: &str, instance: &Value, pointer: &str) -> String {
    let mut path = prefix.to_owned();
    let mut at = Some(instance);
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        match at {
            Some(Value::Array(items)) => {
                path.push_str(&format!("[{token}]"));
                at = token.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            other => {
                path.push('.');
                path.push_str(&token);
                at = other.and_then(|v| v.get(&token));
            }
        }
    }
    path
}

fn render_schema_error(
    prefix: &str,
    instance: &Value,
    error: &ValidationError<'_>,
    out: &mut Vec<FieldError>,
) {
    let path = field_path(prefix, instance, error.instance_path().as_str());
    let message = match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            out.push(FieldError::new(format!("{path}.{name}"), "required"));
            return;
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            for name in unexpected {
                out.push(FieldError::new(format!("{path}.{name}"), "unknown field"));
            }
            return;
        }
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => with_article(&t.to_string()),
                TypeKind::Multiple(set) => {
                    use jsonschema::JsonType as T;
                    let all = [
                        T::Null,
                        T::Boolean,
                        T::Integer,
                        T::Number,
                        T::String,
                        T::Array,
                        T::Object,
                    ];
                    let names: Vec<_> = all
                        .into_iter()
                        .filter(|t| set.contains(*t))
                        .map(|t| with_article(t.as_str()))
                        .collect();
                    format!("one of {}", names.join(", "))
                }
            };
            format!("must be {expected}, got {}", json_type(error.instance()))
        }
        ValidationErrorKind::Enum { options } => match options.as_ref() {
            Value::Array(options) => format!(
                "must be one of {}",
                options.iter().map(plain).collect::<Vec<_>>().join(", ")
            ),
            other => format!("must be one of {}", plain(other)),
        },
        ValidationErrorKind::Constant { expected_value } => {
            format!("must be {}", plain(expected_value))
        }
        ValidationErrorKind::Pattern { pattern } => match pattern_message(pattern) {
            Some(sentence) => sentence.to_owned(),
            None => format!("must match {pattern}"),
        },
        ValidationErrorKind::MinLength { limit: 1 } => "must not be empty".to_owned(),
        ValidationErrorKind::MinLength { limit } => format!("must be at least {limit} characters"),
        ValidationErrorKind::MaxLength { limit } => format!(
            "must be at most {limit} characters, got {}",
            error.instance().as_str().map_or(0, |s| s.chars().count())
        ),
        ValidationErrorKind::MinItems { limit } => format!("must have at least {limit} items"),
        ValidationErrorKind::MaxItems { limit } => format!(
            "must have at most {limit} items, got {}",
            error.instance().as_array().map_or(0, Vec::len)
        ),
        ValidationErrorKind::Minimum { limit } => format!("must be at least {limit}"),
        ValidationErrorKind::Maximum { limit } => format!("must be at most {limit}"),
        _ => error.to_string(),
    };
    out.push(FieldError::new(path, message));
}

fn with_article(type_name: &str) -> String {
    match type_name {
        "array" | "integer" | "object" => format!("an {type_name}"),
        other => format!("a {other}"),
    }
}

pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as a person writes it: strings unquoted.
fn plain(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

// ---------------------------------------------------------------------------------------------
// Rule pass: what the CRD expresses with CEL rules and list-map keys. These read the raw JSON
// and skip what has the wrong type (the schema pass already reported it).

/// Items of the array at `key` of `value`, if it is one.
fn items<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// Reports each repeated value as a duplicate of its first occurrence.
fn duplicates<'a>(entries: impl IntoIterator<Item = (String, &'a str)>, out: &mut Vec<FieldError>) {
    let mut first: HashMap<&str, String> = HashMap::new();
    for (path, value) in entries {
        match first.get(value) {
            Some(original) => out.push(FieldError::new(path, format!("duplicate of {original}"))),
            None => {
                first.insert(value, path);
            }
        }
    }
}

fn binding_rules(spec: &Value, out: &mut Vec<FieldError>) {
    let servers_path = "spec.tools.mcpServers";
    let servers = spec
        .get("tools")
        .map_or(&[][..], |tools| items(tools, "mcpServers"));

    duplicates(
        servers.iter().enumerate().filter_map(|(i, server)| {
            Some((format!("{servers_path}[{i}].name"), text(server, "name")?))
        }),
        out,
    );

    for (i, server) in servers.iter().enumerate() {
        let at = format!("{servers_path}[{i}]");
        if let Some(name) = text(server, "name") {
            if name.contains("__") {
                out.push(FieldError::new(
                    format!("{at}.name"),
                    "must not contain \"__\", the tool namespace delimiter",
                ));
            }
            if name == "cap" {
                out.push(FieldError::new(
                    format!("{at}.name"),
                    "\"cap\" is reserved for routed capabilities",
                ));
            }
        }

        let include_path = format!("{at}.toolSelector.include");
        let include_value = server.get("toolSelector").and_then(|s| s.get("include"));
        // A wrong-typed allow-list is already reported; checking entries against it would only
        // add noise.
        let include_readable = include_value.is_none_or(Value::is_array);
        let include: Vec<&str> = include_value
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        duplicates(
            server
                .get("toolSelector")
                .map_or(&[][..], |s| items(s, "include"))
                .iter()
                .enumerate()
                .filter_map(|(j, tool)| Some((format!("{include_path}[{j}]"), tool.as_str()?))),
            out,
        );

        let mutating = items(server, "mutating");
        duplicates(
            mutating
                .iter()
                .enumerate()
                .filter_map(|(j, tool)| Some((format!("{at}.mutating[{j}]"), tool.as_str()?))),
            out,
        );
        for (j, tool) in mutating.iter().enumerate() {
            if let Some(tool) = tool.as_str()
                && include_readable
                && !include.contains(&tool)
            {
                out.push(FieldError::new(
                    format!("{at}.mutating[{j}]"),
                    format!(
                        "\"{tool}\" is not in {include_path}; a tool the allow-list does not \
                         admit cannot be flagged mutating"
                    ),
                ));
            }
        }

        let capabilities = items(server, "capabilities");
        duplicates(
            capabilities.iter().enumerate().filter_map(|(j, mapping)| {
                Some((
                    format!("{at}.capabilities[{j}].capabilityId"),
                    text(mapping, "capabilityId")?,
                ))
            }),
            out,
        );
        for (j, mapping) in capabilities.iter().enumerate() {
            if let Some(tool) = text(mapping, "tool")
                && include_readable
                && !include.contains(&tool)
            {
                out.push(FieldError::new(
                    format!("{at}.capabilities[{j}].tool"),
                    format!(
                        "\"{tool}\" is not in {include_path}; a route cannot reach a tool the \
                         allow-list does not admit"
                    ),
                ));
            }
            duplicates(
                items(mapping, "features")
                    .iter()
                    .enumerate()
                    .filter_map(|(k, feature)| {
                        Some((
                            format!("{at}.capabilities[{j}].features[{k}]"),
                            feature.as_str()?,
                        ))
                    }),
                out,
            );
        }
    }

    duplicates(
        items(spec, "skills")
            .iter()
            .enumerate()
            .filter_map(|(i, skill)| {
                Some((format!("spec.skills[{i}].name"), text(skill, "name")?))
            }),
        out,
    );
}

fn qualifier_rules(spec: &Value, out: &mut Vec<FieldError>) {
    let Some(constraint) = spec.get("constraint").filter(|c| c.is_object()) else {
        return;
    };
    // An unknown kind is already reported; its shape rules would only add noise.
    let Some(kind) = text(constraint, "kind").filter(|k| CONSTRAINT_KINDS.contains(k)) else {
        return;
    };
    let at = "spec.constraint";
    let takes_targets = matches!(kind, "only" | "ignore");
    match constraint.get("targets") {
        None if takes_targets => out.push(FieldError::new(
            format!("{at}.targets"),
            format!("required when kind is {kind}"),
        )),
        Some(Value::Array(targets)) if takes_targets && targets.is_empty() => {
            out.push(FieldError::new(
                format!("{at}.targets"),
                format!("must not be empty when kind is {kind}"),
            ))
        }
        Some(_) if !takes_targets => out.push(FieldError::new(
            format!("{at}.targets"),
            format!("not allowed when kind is {kind}; only and ignore take targets"),
        )),
        _ => {}
    }
    match constraint.get("target") {
        None if kind == "pin" => out.push(FieldError::new(
            format!("{at}.target"),
            "required when kind is pin",
        )),
        Some(_) if kind != "pin" => out.push(FieldError::new(
            format!("{at}.target"),
            format!("not allowed when kind is {kind}; only pin takes a target"),
        )),
        _ => {}
    }
    duplicates(
        items(constraint, "targets")
            .iter()
            .enumerate()
            .filter_map(|(i, target)| Some((format!("{at}.targets[{i}]"), target.as_str()?))),
        out,
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn valid_spec() -> Value {
        json!({
            "serviceRef": { "name": "streamco" },
            "serviceName": "streaming.streamco.example",
            "serviceAgentRef": { "name": "streamco-agent" },
            "configurationVersion": "v1",
            "tools": { "mcpServers": [{
                "name": "streamco",
                "endpoint": "http://127.0.0.1:7810/mcp",
                "toolSelector": { "include": ["streams_list", "pipeline_restart"] },
                "mutating": ["pipeline_restart"]
            }]},
            "skills": [{ "name": "lag-triage", "description": "Triage lag", "source": "http://127.0.0.1:7810/runbooks/lag.md" }]
        })
    }

    fn lines(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn runtime_schemas_should_compile() {
        LazyLock::force(&BINDING_SPEC_SCHEMA);
        LazyLock::force(&QUALIFIER_SPEC_SCHEMA);
    }

    #[test]
    fn valid_spec_should_have_no_errors() {
        assert_eq!(
            lines(&validate_binding_spec(&valid_spec())),
            Vec::<String>::new()
        );
    }

    #[test]
    fn pointers_should_read_as_field_paths() {
        let instance = serde_json::json!({"name": 1, "items": [{"id": 1}], "a/b": 1, "0": 1});
        assert_eq!(pointer_to_path(&instance, ""), "");
        assert_eq!(pointer_to_path(&instance, "/name"), "name");
        assert_eq!(pointer_to_path(&instance, "/items/0/id"), "items[0].id");
        assert_eq!(pointer_to_path(&instance, "/a~1b"), "a/b");
        // A numeric key of an object is a key, not an index.
        assert_eq!(pointer_to_path(&instance, "/0"), "0");
    }

    #[test]
    fn missing_skill_source_should_read_required_at_its_path() {
        let mut spec = valid_spec();
        spec["skills"][0]
            .as_object_mut()
            .map(|s| s.remove("source"));
        assert_eq!(
            lines(&validate_binding_spec(&spec)),
            ["spec.skills[0].source: required"]
        );
    }

    #[test]
    fn wrong_type_should_name_path_and_both_types() {
        let mut spec = valid_spec();
        spec["skills"] = json!("lag-triage");
        assert_eq!(
            lines(&validate_binding_spec(&spec)),
            ["spec.skills: must be an array, got string"]
        );
    }

    #[test]
    fn null_optional_field_should_read_as_absent() {
        let mut spec = valid_spec();
        spec["knowledge"] = Value::Null;
        assert!(validate_binding_spec(&spec).is_empty());
    }

    #[test]
    fn structural_and_rule_errors_should_be_reported_together() {
        let mut spec = valid_spec();
        spec.as_object_mut().map(|s| s.remove("serviceName"));
        spec["tools"]["mcpServers"][0]["mutating"] = json!(["pipeline_restart", "drop_all"]);
        assert_eq!(
            lines(&validate_binding_spec(&spec)),
            [
                "spec.serviceName: required",
                "spec.tools.mcpServers[0].mutating[1]: \"drop_all\" is not in \
                 spec.tools.mcpServers[0].toolSelector.include; a tool the allow-list does not \
                 admit cannot be flagged mutating",
            ]
        );
    }

    #[test]
    fn errors_should_sort_indices_numerically() {
        let mut errors = vec![
            FieldError::new("spec.skills[10].name", "x"),
            FieldError::new("spec.skills[2].name", "x"),
        ];
        errors = finish(errors);
        assert_eq!(errors[0].path, "spec.skills[2].name");
    }

    #[test]
    fn typed_validate_should_agree_with_json_validate() {
        let spec: CapabilityBindingSpec =
            serde_json::from_value(valid_spec()).unwrap_or_else(|e| panic!("{e}"));
        assert!(validate(&spec).is_empty());
    }

    #[test]
    fn qualifier_name_should_be_bounded() {
        assert!(validate_qualifier_name(&"q".repeat(128)).is_none());
        assert_eq!(
            validate_qualifier_name(&"q".repeat(129)).map(|e| e.to_string()),
            Some("metadata.name: must be at most 128 characters".to_owned())
        );
    }
}
