//! The argument headers of a 2026-07-28 tool call: a tool's schema marks an argument with
//! `x-mcp-header` and its value travels as `Mcp-Param-<name>` beside the body, so that a
//! proxy can route on it. A tool whose marks break the rules is refused as it is listed
//! ([`header_defect`]): a header it asks for could not be sent as it means. The same headers
//! a caller sends Capstan are checked against its body ([`argument_header_mismatch`]).
//!
//! Hand-written: rmcp builds and checks these only inside its own transport (crate-private).

use std::collections::BTreeMap;

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use rmcp::model::{JsonObject, Tool};
use serde_json::Value;

/// The prefix of a tool argument's header.
pub(crate) const MCP_PARAM_PREFIX: &str = "Mcp-Param-";
/// A header value that cannot travel bare is sent as `=?base64?<value>?=`.
const BASE64_PREFIX: &str = "=?base64?";
const BASE64_SUFFIX: &str = "?=";

/// A tool argument that travels as a header too (`x-mcp-header` on a property reached from
/// the schema's root through `properties` alone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    /// The property names from the root to the argument.
    pub(crate) path: Vec<String>,
    /// The header's name after `Mcp-Param-`.
    pub(crate) name: String,
}

/// Why the argument headers of a 2026-07-28 `tools/call` a caller sent (`headers`) do not say
/// what its body says, if they do not: for each argument `marks` names (the tool's, from
/// [`param_headers`]: made once per tool list, not per call), a `Mcp-Param-<name>` header exactly once, equal to the argument's value (a
/// Base64-wrapped value decoded) when the argument is present and not null, and no such header
/// when it is absent. A proxy between the caller and Capstan routes on these headers; one that
/// contradicts the body would route one call as another. The same rules as rmcp's server
/// applies to the requests it serves (hand-written: its check is crate-private).
pub fn argument_header_mismatch(
    headers: &http::HeaderMap,
    marks: &[ParamHeader],
    arguments: Option<&serde_json::Map<String, Value>>,
) -> Option<String> {
    for ParamHeader { path, name } in marks {
        let header = format!("{MCP_PARAM_PREFIX}{name}");
        let mut values = headers.get_all(header.as_str()).iter();
        let sent = match (values.next(), values.next()) {
            (_, Some(_)) => return Some(format!("{header} is sent more than once")),
            (Some(value), None) => match value.to_str().ok().and_then(decoded_header_value) {
                Some(value) => Some(value),
                None => return Some(format!("{header} is neither text nor valid Base64")),
            },
            (None, None) => None,
        };
        let argument = path
            .split_first()
            .and_then(|(first, rest)| {
                rest.iter()
                    .try_fold(arguments?.get(first)?, |at, key| at.get(key))
            })
            .filter(|value| !value.is_null())
            .and_then(primitive);
        let argument_path = path.join(".");
        match (sent, argument) {
            (None, None) => {}
            (Some(_), None) => {
                return Some(format!(
                    "{header} is sent for `{argument_path}`, which the body does not hold"
                ));
            }
            (None, Some(_)) => {
                return Some(format!("{header} is missing for `{argument_path}`"));
            }
            (Some(sent), Some(argument)) if sent != argument => {
                return Some(format!(
                    "{header} says {sent:?}, the body's `{argument_path}` {argument:?}"
                ));
            }
            (Some(_), Some(_)) => {}
        }
    }
    None
}

/// A header value as the caller meant it: `=?base64?…?=` decoded, anything else as it is;
/// `None` when the wrapped value is not Base64 of UTF-8 text.
pub fn decoded_header_value(value: &str) -> Option<String> {
    match value
        .strip_prefix(BASE64_PREFIX)
        .and_then(|rest| rest.strip_suffix(BASE64_SUFFIX))
    {
        Some(encoded) => BASE64_STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_owned()),
    }
}

/// The argument headers of each of `tools` that has any, by the tool's own name.
pub fn param_headers(tools: &[Tool]) -> BTreeMap<String, Vec<ParamHeader>> {
    tools
        .iter()
        .filter_map(|tool| {
            let mut found = Vec::new();
            collect(&tool.input_schema, &mut Vec::new(), &mut found);
            (!found.is_empty()).then(|| (tool.name.to_string(), found))
        })
        .collect()
}

fn collect(schema: &JsonObject, path: &mut Vec<String>, found: &mut Vec<ParamHeader>) {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return;
    };
    for (name, property) in properties {
        let Value::Object(property) = property else {
            continue;
        };
        path.push(name.clone());
        if let Some(Value::String(header)) = property.get("x-mcp-header")
            && !header.is_empty()
        {
            found.push(ParamHeader {
                path: path.clone(),
                name: header.clone(),
            });
        }
        collect(property, path, found);
        path.pop();
    }
}

/// A primitive argument as its header text; `None` for null, objects and arrays.
pub(crate) fn primitive(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// `value` as a header value: bare when it can be, else Base64 between the markers (leading
/// or trailing blanks, characters outside printable ASCII, or text that looks encoded).
pub(crate) fn header_value(value: &str) -> String {
    let blank_edge = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let unprintable = value.chars().any(|c| !(' '..='~').contains(&c));
    let looks_encoded = value.starts_with(BASE64_PREFIX) && value.ends_with(BASE64_SUFFIX);
    if blank_edge || unprintable || looks_encoded {
        format!(
            "{BASE64_PREFIX}{}{BASE64_SUFFIX}",
            BASE64_STANDARD.encode(value)
        )
    } else {
        value.to_owned()
    }
}

/// Why the `x-mcp-header` marks of `schema` (a tool's input schema) break the rules, if they
/// do: a mark sits on a property reached from the root through `properties` alone, names an
/// HTTP token no other mark of the tool names (in any case), and marks a string, integer or
/// boolean.
pub(crate) fn header_defect(schema: &JsonObject) -> Option<String> {
    if schema.contains_key("x-mcp-header") {
        return Some("x-mcp-header marks the schema's root, not a property".into());
    }
    if marks_off_the_chain(schema, true) {
        return Some("x-mcp-header marks a schema not reached through `properties` alone".into());
    }
    let mut marks = Vec::new();
    collect_marks(schema, &mut Vec::new(), &mut marks);
    let mut seen = std::collections::BTreeSet::new();
    for (path, property) in marks {
        let path = path.join(".");
        let Some(Value::String(name)) = property.get("x-mcp-header") else {
            return Some(format!("property `{path}`: x-mcp-header is not a string"));
        };
        if name.is_empty() || !name.chars().all(is_token_char) {
            return Some(format!(
                "property `{path}`: x-mcp-header {name:?} is not an HTTP token"
            ));
        }
        if !seen.insert(name.to_ascii_lowercase()) {
            return Some(format!(
                "property `{path}`: x-mcp-header {name:?} is named twice (in any case)"
            ));
        }
        let kind = property.get("type").and_then(Value::as_str);
        if !matches!(kind, Some("string" | "integer" | "boolean")) {
            let kind = kind.map_or_else(|| "no type".to_owned(), |kind| format!("type {kind:?}"));
            return Some(format!(
                "property `{path}`: x-mcp-header marks a property of {kind}; only a string, \
                 integer or boolean travels as a header"
            ));
        }
    }
    None
}

/// Every property carrying an `x-mcp-header` member (of any value) on a `properties` chain.
fn collect_marks<'a>(
    schema: &'a JsonObject,
    path: &mut Vec<&'a str>,
    found: &mut Vec<(Vec<&'a str>, &'a JsonObject)>,
) {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return;
    };
    for (name, property) in properties {
        let Value::Object(property) = property else {
            continue;
        };
        path.push(name);
        if property.contains_key("x-mcp-header") {
            found.push((path.clone(), property));
        }
        collect_marks(property, path, found);
        path.pop();
    }
}

/// Whether `schema` (on a `properties` chain from the root when `on_chain`) holds an
/// `x-mcp-header` anywhere off such a chain: under `items`, `$defs`, `anyOf` and the like.
fn marks_off_the_chain(schema: &JsonObject, on_chain: bool) -> bool {
    schema.iter().any(|(key, value)| match key.as_str() {
        "x-mcp-header" => !on_chain,
        "properties" => value.as_object().is_some_and(|properties| {
            properties
                .values()
                .any(|property| subschema_marks_off_the_chain(property, on_chain))
        }),
        // Instance data and property names, not schemas.
        "default" | "const" | "enum" | "examples" | "dependentRequired" | "required" => false,
        _ => subschema_marks_off_the_chain(value, false),
    })
}

fn subschema_marks_off_the_chain(value: &Value, on_chain: bool) -> bool {
    match value {
        Value::Object(schema) => marks_off_the_chain(schema, on_chain),
        Value::Array(items) => items
            .iter()
            .any(|item| subschema_marks_off_the_chain(item, false)),
        _ => false,
    }
}

/// A character of an HTTP token (RFC 9110 section 5.6.2).
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_header_value_should_travel_bare_only_when_it_survives_as_one() {
        assert_eq!(header_value("streams_list"), "streams_list");
        assert_eq!(
            header_value("streamco://runbooks/lag"),
            "streamco://runbooks/lag"
        );
        // The oracle: Base64 of the UTF-8 bytes, computed by hand.
        assert_eq!(header_value("é"), "=?base64?w6k=?=");
        assert_eq!(header_value(" x"), "=?base64?IHg=?=");
        assert_eq!(header_value("a\nb"), "=?base64?YQpi?=");
        assert_eq!(header_value("=?base64?x?="), "=?base64?PT9iYXNlNjQ/eD89?=");
    }

    #[test]
    fn argument_headers_should_follow_properties_only_and_keep_their_path() {
        let schema = json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "target": {"type": "object", "properties": {
                    "id": {"type": "integer", "x-mcp-header": "TargetId"}
                }},
                "items": {"type": "array", "items": {"type": "string", "x-mcp-header": "Nope"}},
                "plain": {"type": "string"}
            }
        });
        let tool = Tool::new(
            "t",
            "",
            std::sync::Arc::new(schema.as_object().unwrap().clone()),
        );
        let headers = param_headers(&[tool]);
        assert_eq!(
            headers["t"],
            [
                ParamHeader {
                    path: vec!["region".into()],
                    name: "Region".into()
                },
                ParamHeader {
                    path: vec!["target".into(), "id".into()],
                    name: "TargetId".into()
                },
            ]
        );
    }

    #[test]
    fn a_callers_argument_headers_should_say_what_its_body_says() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "target": {"type": "object", "properties": {
                "id": {"type": "integer", "x-mcp-header": "TargetId"}}}}});
        let tool = Tool::new(
            "t",
            "",
            std::sync::Arc::new(schema.as_object().unwrap().clone()),
        );
        let marks = param_headers(&[tool]).remove("t").unwrap();
        let check = |headers: &[(&str, &str)], arguments: Value| {
            let mut map = http::HeaderMap::new();
            for (name, value) in headers {
                map.append(
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    http::HeaderValue::from_str(value).unwrap(),
                );
            }
            argument_header_mismatch(&map, &marks, arguments.as_object())
        };
        let body = json!({"region": "eu west", "target": {"id": 7}});
        assert_eq!(
            check(
                &[("mcp-param-region", "eu west"), ("mcp-param-targetid", "7")],
                body.clone()
            ),
            None
        );
        // The oracle for Base64: "eu west" encoded by hand.
        assert_eq!(
            check(
                &[
                    ("mcp-param-region", "=?base64?ZXUgd2VzdA==?="),
                    ("mcp-param-targetid", "7")
                ],
                body.clone()
            ),
            None
        );
        assert_eq!(check(&[], json!({})), None);
        let refused = [
            (
                vec![("mcp-param-region", "us east"), ("mcp-param-targetid", "7")],
                body.clone(),
                "says \"us east\"",
            ),
            (
                vec![("mcp-param-targetid", "7")],
                body.clone(),
                "Mcp-Param-Region is missing",
            ),
            (
                vec![("mcp-param-region", "eu west")],
                json!({"region": "eu west"}),
                "",
            ),
            (
                vec![
                    ("mcp-param-region", "eu west"),
                    ("mcp-param-region", "eu west"),
                    ("mcp-param-targetid", "7"),
                ],
                body.clone(),
                "more than once",
            ),
            (
                vec![
                    ("mcp-param-region", "=?base64?!!?="),
                    ("mcp-param-targetid", "7"),
                ],
                body.clone(),
                "valid Base64",
            ),
        ];
        for (headers, arguments, reason) in refused {
            let found = check(&headers, arguments);
            if reason.is_empty() {
                assert_eq!(found, None, "an absent argument needs no header");
                continue;
            }
            assert!(
                found.as_deref().is_some_and(|f| f.contains(reason)),
                "{headers:?}: {found:?} should say {reason:?}"
            );
        }
        let sent_for_absent = check(&[("mcp-param-region", "eu west")], json!({}));
        assert!(sent_for_absent.is_some_and(|f| f.contains("does not hold")));
    }

    #[test]
    fn a_tool_whose_header_marks_break_the_rules_should_be_told_why() {
        let defect = |schema: Value| header_defect(schema.as_object().unwrap());
        let property = |mark: Value| json!({"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": mark}}});
        assert_eq!(defect(property(json!("Region"))), None);
        let nested = json!({"type": "object", "properties": {"target": {"type": "object",
            "properties": {"id": {"type": "integer", "x-mcp-header": "TargetId"}}}}});
        assert_eq!(defect(nested), None);
        // Each rule broken once, the property it names in the reason.
        let cases = [
            (json!({"type": "object", "x-mcp-header": "Root"}), "root"),
            (
                json!({"type": "object", "properties": {"items": {"type": "array",
                    "items": {"type": "string", "x-mcp-header": "Item"}}}}),
                "not reached through `properties` alone",
            ),
            (property(json!(7)), "`region`: x-mcp-header is not a string"),
            (property(json!("")), "is not an HTTP token"),
            (property(json!("Two words")), "is not an HTTP token"),
            (
                json!({"type": "object", "properties": {
                    "a": {"type": "string", "x-mcp-header": "Zone"},
                    "b": {"type": "string", "x-mcp-header": "zone"}}}),
                "named twice",
            ),
            (
                json!({"type": "object", "properties": {"tags": {"type": "array",
                    "x-mcp-header": "Tags"}}}),
                "of type \"array\"",
            ),
        ];
        for (schema, reason) in cases {
            let found = defect(schema.clone());
            assert!(
                found.as_deref().is_some_and(|f| f.contains(reason)),
                "{schema}: {found:?} should say {reason:?}"
            );
        }
    }
}
