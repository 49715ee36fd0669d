//! Reading fields of raw JSON for the rule pass: what has the wrong type is skipped (the schema
//! pass has reported it already).

use std::collections::HashMap;

use serde_json::Value;

use super::FieldError;

/// Items of the array at `key` of `value`, if it is one.
pub(super) fn items<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The string at `key` of `value`, if it is one.
pub(super) fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// Reports each repeated value as a duplicate of its first occurrence.
pub(super) fn duplicates<'a>(
    entries: impl IntoIterator<Item = (String, &'a str)>,
    out: &mut Vec<FieldError>,
) {
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
