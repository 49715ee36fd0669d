//! Runtime validation: every error, each path-qualified, in the vocabulary admission uses.
//!
//! Two passes over the JSON form of a spec. The first checks it against the JSON Schema generated
//! from the Rust types (the same types and attributes the CRD's OpenAPI schema comes from), so
//! required fields, types, enums, patterns and bounds cannot drift between admission and runtime
//! (`schema.rs`, errors worded by `render.rs`). The second checks the rules that span fields,
//! what the CRD expresses with CEL rules and list-map keys (`binding_rules.rs`,
//! `qualifier_rules.rs`). Both passes run on the raw JSON, so a wrong type in one place never
//! hides an error in another.

use std::fmt;

use serde_json::Value;

use crate::binding::CapabilityBindingSpec;
use crate::qualifier::{MAX_QUALIFIER_NAME_LEN, RouteQualifierSpec};

mod auth_rules;
mod binding_rules;
mod fields;
mod nulls;
mod path;
mod qualifier_rules;
mod render;
mod schema;

pub(crate) use nulls::strip_nulls;
pub use path::pointer_to_path;
pub(crate) use render::json_type;
pub use schema::runtime_schema;

use nulls::without_nulls;
use path::path_sort_key;
use schema::{BINDING_SPEC_SCHEMA, QUALIFIER_SPEC_SCHEMA, schema_errors};

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
    binding_rules::check(spec, &mut errors);
    auth_rules::check(spec, &mut errors);
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
    qualifier_rules::check(spec, &mut errors);
    finish(errors)
}

/// A JSON Schema generated from a type `T` (the way the CRD schemas are), compiled once, that
/// reports errors in the same path-qualified words as [`validate()`]. For other documents
/// Capstan reads, such as capability packs.
pub struct TypeSchema(jsonschema::Validator);

impl std::fmt::Debug for TypeSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TypeSchema")
    }
}

impl TypeSchema {
    /// The runtime schema of `T`, compiled. Fails only if `T`'s derived schema is not a valid
    /// JSON Schema, a defect of `T` its crate's tests should catch.
    pub fn of<T: schemars::JsonSchema>() -> Result<Self, SchemaDefect> {
        jsonschema::validator_for(&runtime_schema::<T>())
            .map(Self)
            .map_err(|e| SchemaDefect {
                type_name: std::any::type_name::<T>(),
                reason: e.to_string(),
            })
    }

    /// Every error of `instance` (nulls removed first), each placed under `prefix`, sorted.
    pub fn errors(&self, prefix: &str, instance: &Value) -> Vec<FieldError> {
        finish(schema_errors(&self.0, prefix, &without_nulls(instance)))
    }
}

/// A type whose derived schema is not a valid JSON Schema: a defect of the type, not of any
/// document checked against it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the derived schema of {type_name} is not a valid JSON Schema: {reason}")]
pub struct SchemaDefect {
    /// The Rust type the schema was derived from.
    pub type_name: &'static str,
    /// What the JSON Schema compiler refused.
    pub reason: String,
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
    fn valid_spec_should_have_no_errors() {
        assert_eq!(
            lines(&validate_binding_spec(&valid_spec())),
            Vec::<String>::new()
        );
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
        // Whole numbers are integers at either end of their range, fractions numbers.
        for (value, got) in [
            (json!(-1), "integer"),
            (json!(u64::MAX), "integer"),
            (json!(1.5), "number"),
        ] {
            let mut spec = valid_spec();
            spec["serviceName"] = value;
            assert_eq!(
                lines(&validate_binding_spec(&spec)),
                [format!("spec.serviceName: must be a string, got {got}")]
            );
        }
    }

    #[test]
    fn null_optional_field_should_read_as_absent() {
        let mut spec = valid_spec();
        spec["knowledge"] = Value::Null;
        assert!(validate_binding_spec(&spec).is_empty());
        // Inside a list's entries too, where it is the only null.
        let mut spec = valid_spec();
        spec["tools"]["mcpServers"][0]["mutating"] = Value::Null;
        assert_eq!(lines(&validate_binding_spec(&spec)), Vec::<String>::new());
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

    /// The typed entry points hold a spec built in code to the same rules as its JSON form.
    #[test]
    fn a_typed_spec_should_be_held_to_the_same_rules() {
        let mut spec = valid_spec();
        spec["tools"]["mcpServers"][0]["mutating"] = json!(["drop_all"]);
        let spec: crate::CapabilityBindingSpec = serde_json::from_value(spec).unwrap();
        assert_eq!(
            lines(&validate(&spec)),
            [
                "spec.tools.mcpServers[0].mutating[0]: \"drop_all\" is not in \
              spec.tools.mcpServers[0].toolSelector.include; a tool the allow-list does not \
              admit cannot be flagged mutating"
            ]
        );
        let qualifier = crate::RouteQualifierSpec {
            constraint: crate::qualifier::RouteConstraint::Only { targets: vec![] },
            ..Default::default()
        };
        assert_eq!(
            lines(&validate_qualifier(&qualifier)),
            ["spec.constraint.targets: must not be empty when kind is only"]
        );
    }

    /// A schema made from a type reports an instance's errors in the same path-qualified
    /// words as the CRD specs' validation, under the prefix given; it debug-prints by name
    /// (a compiled schema is long and says nothing to a reader).
    #[test]
    fn a_type_schema_should_name_each_error_under_its_prefix() {
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)] // Only its schema is used.
        struct Pack {
            name: String,
            #[schemars(range(max = 10))]
            size: Option<u8>,
            #[schemars(length(min = 3))]
            code: Option<String>,
            #[schemars(extend("const" = "v1"))]
            version: Option<String>,
            #[schemars(length(min = 1, max = 2))]
            tags: Option<Vec<String>>,
            #[schemars(length(min = 2))]
            pair: Option<Vec<String>>,
        }
        let schema = TypeSchema::of::<Pack>().unwrap();
        assert_eq!(format!("{schema:?}"), "TypeSchema");
        let instance = json!({"size": 11, "code": "ab", "version": "V2"});
        assert_eq!(
            lines(&schema.errors("pack", &instance)),
            [
                "pack.code: must be at least 3 characters",
                "pack.name: required",
                "pack.size: must be at most 10",
                "pack.version: must be v1",
            ]
        );
        assert!(
            schema
                .errors("pack", &json!({"name": "a", "size": null}))
                .is_empty()
        );
        for (field, items, error) in [
            ("tags", json!([]), "pack.tags: must not be empty"),
            (
                "tags",
                json!(["a", "b", "c"]),
                "pack.tags: must have at most 2 items, got 3",
            ),
            (
                "pair",
                json!(["a"]),
                "pack.pair: must have at least 2 items",
            ),
        ] {
            let instance = json!({"name": "a", field: items});
            assert_eq!(lines(&schema.errors("pack", &instance)), [error]);
        }
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
