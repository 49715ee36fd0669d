//! Schema errors in Capstan's vocabulary: `required`, `must be one of …`,
//! `must be an array, got string`, a sentence per pattern.

use jsonschema::ValidationError;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::Value;

use super::FieldError;
use super::path::field_path;
use crate::patterns::pattern_message;

/// Words one schema error and pushes it (or, for several missing or unknown fields, each).
pub(super) fn render_schema_error(
    prefix: &str,
    instance: &Value,
    error: &ValidationError<'_>,
    out: &mut Vec<FieldError>,
) {
    let path = field_path(prefix, instance, error.instance_path().as_str());
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            out.push(FieldError::new(format!("{path}.{name}"), "required"));
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            for name in unexpected {
                out.push(FieldError::new(format!("{path}.{name}"), "unknown field"));
            }
        }
        _ => out.push(FieldError::new(path, sentence(error))),
    }
}

/// The sentence for an error about the value at the error's own path (a missing or unknown
/// field names a field below it, so `render_schema_error` words those itself); a kind with no
/// sentence of ours keeps the validator's own words.
fn sentence(error: &ValidationError<'_>) -> String {
    match error.kind() {
        ValidationErrorKind::Type { kind } => {
            format!(
                "must be {}, got {}",
                expected_type(kind),
                json_type(error.instance())
            )
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
        ValidationErrorKind::MinItems { limit: 1 } => "must not be empty".to_owned(),
        ValidationErrorKind::MinItems { limit } => format!("must have at least {limit} items"),
        ValidationErrorKind::MaxItems { limit } => format!(
            "must have at most {limit} items, got {}",
            error.instance().as_array().map_or(0, Vec::len)
        ),
        ValidationErrorKind::Minimum { limit } => format!("must be at least {limit}"),
        ValidationErrorKind::Maximum { limit } => format!("must be at most {limit}"),
        _ => error.to_string(),
    }
}

/// What a `type` keyword asks for, as a person says it: `a string`, or for several types
/// `one of a null, an integer`, always in one order (null first, object last), whatever order
/// the schema lists them in.
fn expected_type(kind: &TypeKind) -> String {
    match kind {
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
    }
}

fn with_article(type_name: &str) -> String {
    match type_name {
        "array" | "integer" | "object" => format!("an {type_name}"),
        other => format!("a {other}"),
    }
}

/// The JSON type of a value, as messages name it.
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
