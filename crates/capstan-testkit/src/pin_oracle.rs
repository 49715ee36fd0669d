//! The pin of a listed tool or a skill body, computed apart from Capstan's code (docs/pins.md
//! defines them).

use serde_json::Value;

/// The pin of a listed tool (raw JSON), computed apart from Capstan's code: the tool's `name`,
/// `description`, `inputSchema` and `annotations` (those present), written with sorted keys
/// and no whitespace — RFC 8785's form for the strings, integers and booleans the demo tools
/// use — and hashed with SHA-256: `sha256:<hex>`. docs/pins.md defines the digest.
pub fn pin_oracle(tool: &Value) -> String {
    pin_oracle_of(tool, &["name", "description", "inputSchema", "annotations"])
}

/// The pin of any listed definition (raw JSON) over `members` (those present), as
/// [`pin_oracle`]: a prompt's `name`, `description`, `arguments`; a resource's `uri`, `name`,
/// `description`, `mimeType`; a template's `uriTemplate`, `name`, `description`, `mimeType`.
pub fn pin_oracle_of(listed: &Value, members: &[&str]) -> String {
    use sha2::Digest as _;
    let mut covered = serde_json::Map::new();
    for &member in members {
        if let Some(value) = listed.get(member) {
            covered.insert(member.to_owned(), value.clone());
        }
    }
    let mut text = String::new();
    sorted_compact(&Value::Object(covered), &mut text);
    let digest = sha2::Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The pin of a skill body, computed apart from Capstan's code: `sha256:` and the lower-case
/// hex SHA-256 of its bytes (what `sha256sum` prints for the file the provider serves).
pub fn body_pin_oracle(body: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(body);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `value` as JSON with object keys sorted and no whitespace (integral numbers only).
fn sorted_compact(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                sorted_compact(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                sorted_compact(item, out);
            }
            out.push(']');
        }
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (_, Some(u), _) => out.push_str(&u.to_string()),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e15 => {
                out.push_str(&(f as i64).to_string())
            }
            _ => panic!("pin_oracle: {n} is not an integer; the oracle writes integers only"),
        },
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{pin_oracle, sorted_compact};

    fn compact(value: &serde_json::Value) -> String {
        let mut out = String::new();
        sorted_compact(value, &mut out);
        out
    }

    #[test]
    fn sorted_compact_should_sort_keys_at_every_depth_without_whitespace() {
        let value = json!({"b": [1, {"z": true, "a": null}], "a": "x y"});
        assert_eq!(
            compact(&value),
            r#"{"a":"x y","b":[1,{"a":null,"z":true}]}"#
        );
    }

    #[test]
    fn sorted_compact_should_write_an_integral_float_as_an_integer() {
        assert_eq!(compact(&json!({"n": 3.0})), r#"{"n":3}"#);
    }

    #[test]
    fn pin_oracle_should_ignore_members_outside_the_pin() {
        let tool = json!({"name": "t", "description": "d", "inputSchema": {"type": "object"}});
        let mut titled = tool.clone();
        titled["title"] = json!("A title");
        assert_eq!(pin_oracle(&tool), pin_oracle(&titled));
    }

    #[test]
    fn pin_oracle_should_change_when_the_description_changes() {
        let tool = json!({"name": "t", "description": "d"});
        let redescribed = json!({"name": "t", "description": "e"});
        assert_ne!(pin_oracle(&tool), pin_oracle(&redescribed));
        assert!(
            pin_oracle(&tool).starts_with("sha256:"),
            "{}",
            pin_oracle(&tool)
        );
    }
}
