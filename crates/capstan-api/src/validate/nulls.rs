//! Nulls read as absent: producers that serialize zero values (Go's `encoding/json` without
//! `omitempty`) write `null` for fields they mean to leave out, and the apiserver drops nulls
//! for fields that are not nullable.

use std::borrow::Cow;

use serde_json::Value;

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
pub(super) fn without_nulls(value: &Value) -> Cow<'_, Value> {
    if has_null_member(value) {
        let mut owned = value.clone();
        strip_nulls(&mut owned);
        Cow::Owned(owned)
    } else {
        Cow::Borrowed(value)
    }
}
