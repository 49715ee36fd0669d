//! The envelope against the oracle it replaces: serde_json's `Value` and rmcp's own derived
//! parse of a call's params, on the same text.

#![allow(clippy::unwrap_used)]

use super::*;

fn parse(text: &str) -> Result<Message, String> {
    Message::parse(text.as_bytes()).map_err(|e| e.to_string())
}

fn envelope(text: &str) -> Envelope {
    match parse(text) {
        Ok(Message::Single(envelope)) => *envelope,
        other => panic!("{text}: {other:?}"),
    }
}

/// The params text of `message`, as rmcp's derived parse reads it.
fn rmcp_params(message: &str) -> Result<CallToolRequestParams, String> {
    let value: Value = serde_json::from_str(message).unwrap();
    serde_json::from_value(value["params"].clone()).map_err(|e| e.to_string())
}

#[test]
fn a_calls_params_should_read_as_rmcps_own_parse_reads_them() {
    let calls = [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__t","arguments":{"n":-1,"s":"\u00e9","a":[1,{"x":null}]}}}"#,
        // The method after the params: read from their text once the method is known.
        r#"{"params":{"arguments":{"q":"x"},"name":"a__t"},"id":"r","method":"tools/call","jsonrpc":"2.0"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__t","arguments":null,"_meta":{"progressToken":7,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"na\u006de":"a__t","_meta":null,"extra":{"k":[1,2]}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"a__t","inputResponses":{"q1":{"action":"accept"}},"requestState":"opaque"}}"#,
    ];
    for text in calls {
        let message = envelope(text);
        assert_eq!(message.method(), Some("tools/call"), "{text}");
        let Params::Call(params) = &message.params else {
            panic!("{text}: {:?}", message.params);
        };
        assert_eq!(Ok(&**params), rmcp_params(text).as_ref(), "{text}");
        assert_eq!(message.param("name"), Some("a__t"));
        let oracle: Value = serde_json::from_str(text).unwrap();
        assert_eq!(message.id.as_ref(), oracle.get("id"), "{text}");
        assert_eq!(
            message.meta(),
            oracle["params"]["_meta"].as_object(),
            "{text}"
        );
        assert_eq!(message.answer, None);
    }
}

#[test]
fn a_calls_params_of_the_wrong_shape_should_give_rmcps_own_error() {
    for params in [
        r#"{"arguments":{}}"#,
        r#"{"name":5}"#,
        r#"{"name":null}"#,
        r#"{"name":"t","arguments":[1]}"#,
        r#"{"name":"t","_meta":"x"}"#,
        r#"{"name":"t","requestState":3}"#,
        r#"{"name":"t","inputResponses":[]}"#,
        r#""not params""#,
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
        let message = envelope(&text);
        let Params::Other(value) = message.params else {
            panic!("{text}: {:?}", message.params);
        };
        let ours =
            serde_json::from_value::<CallToolRequestParams>(value).map_err(|e| e.to_string());
        let rmcp = rmcp_params(&text);
        assert!(rmcp.is_err(), "{text}");
        assert_eq!(ours, rmcp, "{text}");
    }
}

#[test]
fn other_params_and_members_should_read_as_a_value_reads_them() {
    let texts = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r7","reason":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
        r#"{"jsonrpc":"2.0","method":"ping"}"#,
    ];
    for text in texts {
        let oracle: Value = serde_json::from_str(text).unwrap();
        let message = envelope(text);
        assert_eq!(message.id.as_ref(), oracle.get("id"), "{text}");
        assert_eq!(message.method(), oracle["method"].as_str(), "{text}");
        assert_eq!(message.untyped_params(), oracle.get("params"), "{text}");
        assert_eq!(
            message.meta_str("io.modelcontextprotocol/protocolVersion"),
            oracle["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str()
        );
        assert_eq!(
            message.param("protocolVersion"),
            oracle["params"]["protocolVersion"].as_str()
        );
        assert_eq!(message.answer, None);
    }
}

#[test]
fn an_answer_should_be_kept_whole_and_anything_else_as_a_value() {
    for text in [
        r#"{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept","content":{"a":[1]}}}"#,
        r#"{"error":{"code":-1,"message":"no"},"id":"s-2","jsonrpc":"2.0"}"#,
    ] {
        let oracle: Value = serde_json::from_str(text).unwrap();
        let message = envelope(text);
        assert_eq!(message.answer.as_ref(), Some(&oracle), "{text}");
        assert_eq!(message.method(), None);
    }
    for text in [
        r#"[{"jsonrpc":"2.0","id":1,"method":"initialize"},{"jsonrpc":"2.0","method":"ping"}]"#,
        r#""not a message""#,
        "5",
        "null",
        "[]",
    ] {
        let oracle: Value = serde_json::from_str(text).unwrap();
        assert!(
            matches!(parse(text), Ok(Message::Other(ref value)) if *value == oracle),
            "{text}"
        );
    }
    assert!(parse(r#"{"id":1,"method":"tools/call","params":{"name":"t""#).is_err());
    assert!(parse("").is_err());
}

#[test]
fn a_member_named_twice_anywhere_should_refuse_the_body() {
    for text in [
        r#"{"method":"ping","method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"ping"}"#,
        r#"{"x":1,"id":1,"x":2,"method":"ping"}"#,
        r#"{"id":1,"id":2,"method":"ping"}"#,
        r#"{"id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#,
        r#"{"id":1,"method":"tools/call","params":{"name":"a","n\u0061me":"b"}}"#,
        r#"{"id":1,"method":"tools/call","params":{"name":"a","arguments":{"k":1,"k":2}}}"#,
        r#"{"id":1,"method":"tools/call","params":{"name":"a","arguments":{"k":[{"z":1,"z":1}]}}}"#,
        r#"{"id":1,"method":"tools/call","params":{"name":"a","other":1,"other":2}}"#,
        r#"{"id":1,"method":"tools/call","params":{"name":"a","_meta":{"p":1,"p":2}}}"#,
        r#"{"params":{"name":"a","arguments":{"k":1,"k":2}},"id":1,"method":"tools/call"}"#,
        r#"{"params":{"cursor":"a","cursor":"b"},"id":1,"method":"tools/list"}"#,
        r#"{"id":1,"method":"tools/list","params":{"cursor":"a","cursor":"b"}}"#,
        r#"{"id":"s","result":{"a":1,"a":2}}"#,
        r#"{"id":1,"method":"ping","unknown":{"a":1,"a":2}}"#,
        r#"[{"id":1},{"id":2,"id":3}]"#,
    ] {
        let refused = parse(text);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("names a member twice")),
            "{text}: {refused:?}"
        );
    }
}

#[test]
fn many_unknown_members_should_be_read_in_linear_time() {
    // A hostile body of 100,000 distinct unknown members: checked with a set, not pairwise.
    let members: Vec<String> = (0..100_000).map(|i| format!(r#""m{i}":{i}"#)).collect();
    let text = format!(r#"{{"id":1,"method":"ping",{}}}"#, members.join(","));
    assert_eq!(envelope(&text).method(), Some("ping"));
    let params = format!(
        r#"{{"id":1,"method":"tools/call","params":{{"name":"t",{}}}}}"#,
        members.join(",")
    );
    assert!(matches!(envelope(&params).params, Params::Call(_)));
}

/// A JSON value written as text, whose objects may name a member twice.
#[derive(Clone, Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Text(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl Node {
    fn text(&self) -> String {
        match self {
            Node::Null => "null".into(),
            Node::Bool(b) => b.to_string(),
            Node::Int(i) => i.to_string(),
            Node::Text(s) => Value::String(s.clone()).to_string(),
            Node::Array(items) => {
                let items: Vec<String> = items.iter().map(Node::text).collect();
                format!("[{}]", items.join(","))
            }
            Node::Object(members) => {
                let members: Vec<String> = members
                    .iter()
                    .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), v.text()))
                    .collect();
                format!("{{{}}}", members.join(","))
            }
        }
    }
}

fn node() -> impl proptest::strategy::Strategy<Value = Node> {
    use proptest::prelude::*;
    const NAMES: [&str; 14] = [
        "jsonrpc",
        "id",
        "method",
        "params",
        "result",
        "error",
        "name",
        "arguments",
        "_meta",
        "inputResponses",
        "requestState",
        "requestId",
        "protocolVersion",
        "x",
    ];
    const TEXTS: [&str; 6] = ["tools/call", "initialize", "ping", "a__t", "r", ""];
    let leaf = prop_oneof![
        Just(Node::Null),
        any::<bool>().prop_map(Node::Bool),
        (-3i64..3).prop_map(Node::Int),
        proptest::sample::select(&TEXTS[..]).prop_map(|s| Node::Text(s.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Node::Array),
            proptest::collection::vec(
                (
                    proptest::sample::select(&NAMES[..]).prop_map(str::to_owned),
                    inner
                ),
                0..6
            )
            .prop_map(Node::Object),
        ]
    })
}

/// A body: any value, or an object with a `method` (mostly `tools/call`) and object params
/// among other members, in any order.
fn body() -> impl proptest::strategy::Strategy<Value = Node> {
    use proptest::prelude::*;
    let member = || {
        (
            proptest::sample::select(&["id", "name", "arguments", "_meta", "x"][..]),
            node(),
        )
    };
    let shaped = (
        proptest::collection::vec(member(), 0..4),
        proptest::collection::vec(member(), 0..5),
        proptest::sample::select(&["tools/call", "tools/call", "ping"][..]),
        any::<proptest::sample::Index>(),
        any::<proptest::sample::Index>(),
    )
        .prop_map(|(members, params, method, at_method, at_params)| {
            let own = |(name, node): (&str, Node)| (name.to_owned(), node);
            let mut members: Vec<(String, Node)> = members.into_iter().map(own).collect();
            let params = Node::Object(params.into_iter().map(own).collect());
            members.insert(
                at_method.index(members.len() + 1),
                ("method".into(), Node::Text(method.into())),
            );
            members.insert(
                at_params.index(members.len() + 1),
                ("params".into(), params),
            );
            Node::Object(members)
        });
    prop_oneof![node(), shaped]
}

proptest::proptest! {
    /// Any body reads as the `Value` parse with repeated members refused (`unique.rs`) reads it,
    /// and a call's params as rmcp's own parse of them: the same refusals, the same method, id,
    /// params and answer, the same error for params that are not a call's.
    #[test]
    fn any_body_should_read_as_the_value_parse_and_rmcp_read_it(body in body()) {
        let text = body.text();
        let oracle = serde_json::from_str::<Unique>(&text).map(|Unique(v)| v);
        let ours = Message::parse(text.as_bytes());
        proptest::prop_assert_eq!(ours.is_err(), oracle.is_err(), "{}", text);
        let (Ok(ours), Ok(oracle)) = (ours, oracle) else {
            return Ok(());
        };
        let Message::Single(message) = ours else {
            proptest::prop_assert!(!oracle.is_object());
            return Ok(());
        };
        proptest::prop_assert_eq!(message.id.as_ref(), oracle.get("id"));
        proptest::prop_assert_eq!(message.method(), oracle["method"].as_str());
        let answers = oracle.get("result").is_some() || oracle.get("error").is_some();
        proptest::prop_assert_eq!(message.answer.as_ref(), answers.then_some(&oracle));
        let params = oracle.get("params").cloned();
        match (message.method(), &message.params) {
            (Some("tools/call"), Params::Call(typed)) => {
                let rmcp = serde_json::from_value::<CallToolRequestParams>(params.unwrap_or_default());
                proptest::prop_assert_eq!(Ok(&**typed), rmcp.as_ref().map_err(ToString::to_string));
            }
            (Some("tools/call"), untyped) => {
                let ours = match untyped {
                    Params::Other(value) => value.clone(),
                    _ => Value::Null,
                };
                let ours = serde_json::from_value::<CallToolRequestParams>(ours);
                let rmcp = serde_json::from_value::<CallToolRequestParams>(params.unwrap_or_default());
                proptest::prop_assert!(rmcp.is_err());
                proptest::prop_assert_eq!(
                    ours.map_err(|e| e.to_string()),
                    rmcp.map_err(|e| e.to_string())
                );
            }
            (_, _) => proptest::prop_assert_eq!(message.untyped_params(), params.as_ref()),
        }
    }
}
