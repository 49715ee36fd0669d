//! A request body parsed as JSON whose objects name no member twice.
//!
//! serde_json's `Value` keeps the last of a repeated member; rmcp's own parse of the same
//! body refuses it (`415 unrecognized JSON-RPC message`). The gate and the edge's `tools/call`
//! read the parsed message (method, id, params), rmcp the bytes: with last-wins here,
//! `{"method":"ping","method":"tools/call",…}` was served as a call that rmcp would have
//! refused. Refusing a repeated member here keeps one reading of a body. Hand-written because
//! serde_json has no such option; the checks ride on the map insertion a `Value` does anyway.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value in which no object has a member twice.
pub(super) struct Unique(pub(super) Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor).map(Unique)
    }
}

pub(super) struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut values = Vec::with_capacity(items.size_hint().unwrap_or(0));
        while let Some(Unique(value)) = items.next_element()? {
            values.push(value);
        }
        Ok(Value::Array(values))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(name) = members.next_key::<String>()? {
            let Unique(value) = members.next_value()?;
            if let Some(_earlier) = object.insert(name, value) {
                return Err(de::Error::custom("an object names a member twice"));
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Value, String> {
        serde_json::from_str::<Unique>(text)
            .map(|Unique(value)| value)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_body_should_read_as_serde_json_reads_it_unless_a_member_repeats() {
        let text = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t",
            "arguments":{"n":-1,"u":18446744073709551615,"f":1.5,"b":true,"z":null,"a":[1,{"x":"y"}],
            "s":"\u00e9\n"}}}"#;
        let oracle: Value = serde_json::from_str(text).unwrap_or_default();
        assert_eq!(parse(text), Ok(oracle));
        for repeated in [
            r#"{"method":"ping","method":"tools/call"}"#,
            r#"{"params":{"arguments":{"name":"a","name":"b"}}}"#,
            r#"[{"id":1},{"id":2,"id":3}]"#,
        ] {
            let refused = parse(repeated);
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|e| e.contains("names a member twice")),
                "{repeated}: {refused:?}"
            );
        }
    }
}
