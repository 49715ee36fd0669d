//! The schema pass: the JSON Schema generated from the Rust types, compiled once, checked
//! against the raw JSON of a spec.

use std::sync::LazyLock;

use jsonschema::Validator;
use schemars::generate::SchemaSettings;
use schemars::transform::{Transform, transform_subschemas};
use schemars::{JsonSchema, Schema};
use serde_json::Value;

use super::FieldError;
use super::render::render_schema_error;
use crate::binding::CapabilityBindingSpec;
use crate::qualifier::RouteQualifierSpec;

pub(super) static BINDING_SPEC_SCHEMA: LazyLock<Validator> =
    LazyLock::new(|| compile(runtime_schema::<CapabilityBindingSpec>()));

pub(super) static QUALIFIER_SPEC_SCHEMA: LazyLock<Validator> =
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

/// Every error of `instance` against `validator`, worded and placed under `prefix`.
pub(super) fn schema_errors(
    validator: &Validator,
    prefix: &str,
    instance: &Value,
) -> Vec<FieldError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_schemas_should_compile() {
        LazyLock::force(&BINDING_SPEC_SCHEMA);
        LazyLock::force(&QUALIFIER_SPEC_SCHEMA);
    }

    fn transformed(schema: Value) -> Value {
        let mut schema = Schema::try_from(schema).unwrap_or_default();
        DropNullAlternatives.transform(&mut schema);
        schema.to_value()
    }

    /// What the schema pass rewrites so errors can name the field's own type and list the
    /// allowed values — and what it leaves as it is.
    #[test]
    fn null_alternatives_and_one_constant_variants_should_be_rewritten() {
        use serde_json::json;
        let cases = [
            // `Option<T>` of a simple type: the null goes.
            (
                json!({"type": ["string", "null"]}),
                json!({"type": "string"}),
            ),
            (
                json!({"type": ["string", "integer", "null"]}),
                json!({"type": ["string", "integer"]}),
            ),
            // `Option<T>` of a schema: T's own keywords, where the field had none of its own.
            (
                json!({"description": "d", "anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "description": "t"}]}),
                json!({"description": "d", "type": "integer", "minimum": 0}),
            ),
            // A union of three, or of two without null, is no Option.
            (
                json!({"anyOf": [{"type": "null"}, {"type": "string"}, {"type": "integer"}]}),
                json!({"anyOf": [{"type": "null"}, {"type": "string"}, {"type": "integer"}]}),
            ),
            (
                json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
                json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
            ),
            // A documented unit enum: one constant a variant, as `const` or a one-value `enum`.
            (
                json!({"oneOf": [{"const": "a", "description": "A"}, {"enum": ["b"]}]}),
                json!({"enum": ["a", "b"]}),
            ),
            // A variant of two values, or with no constant, keeps the union.
            (
                json!({"oneOf": [{"const": "a"}, {"enum": ["b", "c"]}]}),
                json!({"oneOf": [{"const": "a"}, {"enum": ["b", "c"]}]}),
            ),
            (
                json!({"oneOf": [{"const": "a"}, {"type": "object"}]}),
                json!({"oneOf": [{"const": "a"}, {"type": "object"}]}),
            ),
        ];
        for (schema, expected) in cases {
            assert_eq!(transformed(schema.clone()), expected, "{schema}");
        }
    }
}
