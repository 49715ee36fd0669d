//! Prompts, resources, resource templates and completion through the sidecar
//! (docs/mcp-surface.md "Prompts, resources and completion"): only what a binding's selectors
//! name is listed and reachable, under the composed names and URIs, in both revisions. The
//! provider is the Python `mcp` SDK server, the client the Python SDK's; the oracle is the same
//! client asking the same server directly, and the server's own count of the reads it answered.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_testkit::PythonServer;
use capstan_testkit::sidecar::*;
use serde_json::{Value, json};

const SERVER: &str = "crates/capstan-compose/tests/python/streamco_server.py";

/// Where the first binding's resources are shown: `capstan://<binding>/<server>/`.
const PREFIX: &str = "capstan://streamco-binding/streamco/";

/// Runs `tests/python/offerings.py` against `target` in `mode` and reads its report.
fn offerings(target: &str, mode: &str, ops: &Value) -> Vec<Value> {
    let report = python_report(
        "offerings.py",
        &[target, "demo-project", mode, &ops.to_string()],
    );
    serde_json::from_value(report).unwrap()
}

/// The server's count of the reads it answered, by URI.
fn reads_seen(target: &str, tool: &str) -> Value {
    let report = offerings(target, "legacy", &json!([{"op": "call", "name": tool}]));
    let text = report[0]["ok"]["content"][0]["text"].as_str().unwrap();
    serde_json::from_str::<Value>(text).unwrap()["reads"].clone()
}

/// Two bindings on one Python server: `streamco-binding` with Capstan's names and URIs, and
/// `plain-binding` with the server's own (`promptNames: Unprefixed`, `resourceUris: AsListed`).
/// Neither selects the server's `secret` resource nor its `internal_notes` prompt.
fn documents(endpoint: &str) -> Value {
    let mut prefixed = binding_document("streamco-binding", "streamco", endpoint, &["reads_seen"]);
    let server = &mut prefixed["spec"]["tools"]["mcpServers"][0];
    server["promptSelector"] = json!({"include": ["triage"]});
    server["resourceSelector"] =
        json!({"include": ["streamco://runbooks/lag", "streamco://streams/{name}"]});
    let mut plain = binding_document("plain-binding", "plain", endpoint, &[]);
    let server = &mut plain["spec"]["tools"]["mcpServers"][0];
    server["promptSelector"] = json!({"include": ["triage"]});
    server["promptNames"] = json!("Unprefixed");
    server["resourceSelector"] = json!({"include": ["streamco://runbooks/lag"]});
    server["resourceUris"] = json!("AsListed");
    for document in [&mut prefixed, &mut plain] {
        document["metadata"]["namespace"] = json!("demo-project");
    }
    json!([prefixed, plain])
}

fn names(list: &Value, items: &str, member: &str) -> Vec<String> {
    list["ok"][items]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|item| item[member].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts a refusal: -32602 naming what was asked in `data.<member>` — an unknown name or
/// URI, or a URI whose path could climb out of a template's prefix.
fn assert_unknown(answer: &Value, member: &str, asked: &str) {
    let error = &answer["error"];
    assert_eq!(error["code"], -32602, "{asked}: {answer}");
    assert_eq!(error["data"][member], asked, "{answer}");
    assert!(
        error["message"].as_str().is_some_and(|m| {
            m.contains("is available to this assistant")
                || m.contains("which no resource template of this assistant reads")
        }),
        "{answer}"
    );
}

#[test]
fn only_selected_prompts_and_resources_should_be_listed_and_reached_in_both_revisions() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let sidecar = Sidecar::start(&documents(&endpoint), &[server.address.to_string()], &[]);
    let socket = sidecar.socket.to_str().unwrap();

    // The oracle: what the client gets from the server itself, by the server's own names.
    let direct = offerings(
        &endpoint,
        "legacy",
        &json!([
            {"op": "get", "name": "triage", "arguments": {"stream": "orders"}},
            {"op": "read", "uri": "streamco://streams/orders"},
            {"op": "complete", "prompt": "triage", "argument": "stream", "value": "ord"},
            {"op": "read", "uri": "streamco://runbooks/lag"},
        ]),
    );
    let before = reads_seen(&endpoint, "reads_seen");
    assert_eq!(
        before,
        json!({"streamco://streams/orders": 1, "streamco://runbooks/lag": 1})
    );

    let refused_uris = [
        // Offered by the server, selected by no binding.
        format!("{PREFIX}streamco://secret"),
        "streamco://secret".to_owned(),
        // Not what the selected template produces: a simple expression never spans a `/`.
        format!("{PREFIX}streamco://streams/orders/../../secret"),
        // Another binding's server under this binding's prefix.
        "capstan://plain-binding/plain/streamco://secret".to_owned(),
    ];
    for mode in ["legacy", "2026-07-28"] {
        let mut ops = vec![
            json!({"op": "prompts"}),
            json!({"op": "resources"}),
            json!({"op": "templates"}),
            json!({"op": "get", "name": "streamco__triage", "arguments": {"stream": "orders"}}),
            json!({"op": "read", "uri": format!("{PREFIX}streamco://streams/orders")}),
            json!({"op": "complete", "prompt": "streamco__triage", "argument": "stream", "value": "ord"}),
            json!({"op": "read", "uri": "streamco://runbooks/lag"}),
            json!({"op": "get", "name": "triage", "arguments": {"stream": "orders"}}),
            json!({"op": "get", "name": "streamco__internal_notes"}),
            json!({"op": "get", "name": "internal_notes"}),
        ];
        ops.extend(
            refused_uris
                .iter()
                .map(|uri| json!({"op": "read", "uri": uri})),
        );
        let through = offerings(socket, mode, &Value::from(ops));

        // Listed: what the selectors name, under each binding's naming, in binding order.
        assert_eq!(
            names(&through[0], "prompts", "name"),
            ["streamco__triage", "triage"],
            "{mode}"
        );
        assert_eq!(
            names(&through[1], "resources", "uri"),
            [
                format!("{PREFIX}streamco://runbooks/lag"),
                "streamco://runbooks/lag".to_owned()
            ],
            "{mode}"
        );
        assert_eq!(
            names(&through[2], "resourceTemplates", "uriTemplate"),
            [format!("{PREFIX}streamco://streams/{{name}}")],
            "{mode}"
        );
        // Caching hints are of the 2026-07-28 revision (a session revision's client reads
        // none: rmcp leaves them out).
        for list in through[0..3].iter().filter(|_| mode != "legacy") {
            assert_eq!(list["ok"]["cacheScope"], "private", "{mode}: {list}");
            assert!(
                list["ok"]["ttlMs"].as_u64().is_some_and(|ttl| ttl > 0),
                "{mode}: {list}"
            );
        }

        // Reached: the server's own answer, URIs shown as the caller named them.
        assert_eq!(
            through[3]["ok"]["messages"], direct[0]["ok"]["messages"],
            "{mode}"
        );
        let read = &through[4]["ok"]["contents"][0];
        assert_eq!(read["uri"], format!("{PREFIX}streamco://streams/orders"));
        assert_eq!(read["text"], direct[1]["ok"]["contents"][0]["text"]);
        assert_eq!(
            through[5]["ok"]["completion"], direct[2]["ok"]["completion"],
            "{mode}"
        );
        assert_eq!(
            through[6]["ok"]["contents"], direct[3]["ok"]["contents"],
            "{mode}"
        );
        assert_eq!(
            through[7]["ok"]["messages"], direct[0]["ok"]["messages"],
            "{mode}"
        );

        // Refused: a prompt no selector names, and every URI outside the selectors.
        assert_unknown(&through[8], "name", "streamco__internal_notes");
        assert_unknown(&through[9], "name", "internal_notes");
        for (answer, uri) in through[10..].iter().zip(&refused_uris) {
            assert_unknown(answer, "uri", uri);
        }
    }

    // The server answered the selected reads (two per revision) and never a refused one.
    let after = reads_seen(&endpoint, "reads_seen");
    assert_eq!(
        after,
        json!({"streamco://streams/orders": 3, "streamco://runbooks/lag": 3}),
        "{before} → {after}"
    );
}

#[test]
fn a_sessions_subscriptions_and_prompt_changes_should_reach_it_and_nothing_else() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document(
        "streamco-binding",
        "streamco",
        &endpoint,
        &["touch", "add_prompt"],
    );
    document["metadata"]["namespace"] = json!("demo-project");
    let entry = &mut document["spec"]["tools"]["mcpServers"][0];
    entry["promptSelector"] = json!({"include": ["triage", "escalate"]});
    entry["resourceSelector"] =
        json!({"include": ["streamco://runbooks/lag", "streamco://streams/{name}"]});
    let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
    let socket = sidecar.socket.to_str().unwrap();
    let shown = |uri: &str| format!("{PREFIX}{uri}");
    let touch = |uris: &[&str]| json!({"op": "call", "name": "streamco__touch", "arguments": {"uris": uris}});

    let report = offerings(
        socket,
        "legacy",
        &json!([
            {"op": "subscribe", "uri": shown("streamco://streams/orders")},
            // Updated: a resource nobody subscribed to, a URI of the template nobody
            // subscribed to, and the subscribed one.
            touch(&["streamco://runbooks/lag", "streamco://streams/clicks", "streamco://streams/orders"]),
            {"op": "until", "count": 1, "seconds": 10},
            {"op": "call", "name": "streamco__add_prompt"},
            {"op": "until", "count": 2, "seconds": 10},
            {"op": "prompts"},
            {"op": "unsubscribe", "uri": shown("streamco://streams/orders")},
            {"op": "subscribe", "uri": shown("streamco://streams/clicks")},
            touch(&["streamco://streams/orders", "streamco://streams/clicks"]),
            {"op": "until", "count": 3, "seconds": 10},
            {"op": "subscribe", "uri": shown("streamco://secret")},
            touch(&[]),
        ]),
    );
    // What the server holds: the upstream's own URIs, subscribed and unsubscribed as asked;
    // never the refused one.
    let subscribed = |answer: &Value| -> Value {
        let text = answer["ok"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"));
        serde_json::from_str::<Value>(text).unwrap()["subscribed"].clone()
    };
    assert_eq!(subscribed(&report[1]), json!(["streamco://streams/orders"]));
    assert_eq!(subscribed(&report[8]), json!(["streamco://streams/clicks"]));
    assert_unknown(&report[10], "uri", &shown("streamco://secret"));
    assert_eq!(
        subscribed(&report[11]),
        json!(["streamco://streams/clicks"])
    );

    // The prompt the server added is listed after the client was told.
    assert_eq!(
        names(&report[5], "prompts", "name"),
        ["streamco__triage", "streamco__escalate"]
    );
    // Told: each subscribed update once, under the URI the client subscribed by, and the
    // prompt list change — never an update it did not subscribe to (the server sent five).
    assert_eq!(
        report[12]["notifications"],
        json!([
            {"method": "notifications/resources/updated", "uri": shown("streamco://streams/orders")},
            {"method": "notifications/prompts/list_changed"},
            {"method": "notifications/resources/updated", "uri": shown("streamco://streams/clicks")},
        ])
    );
}

#[test]
fn a_listen_stream_should_be_told_when_the_prompts_change() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document(
        "streamco-binding",
        "streamco",
        &endpoint,
        &["add_prompt", "touch"],
    );
    document["metadata"]["namespace"] = json!("demo-project");
    let entry = &mut document["spec"]["tools"]["mcpServers"][0];
    entry["promptSelector"] = json!({"include": ["triage", "escalate"]});
    // The server declares no `listChanged`; it is followed on its standalone stream because
    // it sends updates of the resources its binding selects (`resources.subscribe`).
    entry["resourceSelector"] = json!({"include": ["streamco://runbooks/lag"]});
    let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
    let report = offerings(
        sidecar.socket.to_str().unwrap(),
        "2026-07-28",
        &json!([
            {"op": "prompts"},
            // The prompt is added once the sidecar's own stream to the server is open (the
            // server's count of its listen streams): a change said before it would not be heard.
            {"op": "listen", "call": "streamco__add_prompt", "seconds": 10,
             "ready": {"name": "streamco__touch", "arguments": {"uris": []},
                       "until": {"contains": "\"streams\": 1"}, "seconds": 10}},
            {"op": "prompts"},
        ]),
    );
    assert_eq!(names(&report[0], "prompts", "name"), ["streamco__triage"]);
    assert_eq!(report[1]["ok"]["event"], "PromptsListChanged", "{report:?}");
    assert_eq!(
        names(&report[2], "prompts", "name"),
        ["streamco__triage", "streamco__escalate"]
    );
}

/// The Python server and a sidecar with one binding selecting its two resources and its
/// `touch` tool.
fn touching() -> (PythonServer, Sidecar) {
    touching_with(&["touch"])
}

/// The same, with the binding allowing `tools`.
fn touching_with(tools: &[&str]) -> (PythonServer, Sidecar) {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document("streamco-binding", "streamco", &endpoint, tools);
    document["metadata"]["namespace"] = json!("demo-project");
    document["spec"]["tools"]["mcpServers"][0]["resourceSelector"] =
        json!({"include": ["streamco://runbooks/lag", "streamco://streams/{name}"]});
    let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
    (server, sidecar)
}

/// A URI of the server's template `streamco://streams/{name}`.
fn stream(name: &str) -> String {
    format!("streamco://streams/{name}")
}

/// The URIs of the updates a client was told of, in order.
fn updated(notifications: &Value) -> Vec<String> {
    notifications
        .as_array()
        .unwrap_or_else(|| panic!("{notifications}"))
        .iter()
        .filter(|n| n["method"] == "notifications/resources/updated")
        .map(|n| n["uri"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_sessions_resource_updates_should_never_reach_another_callers_session() {
    let (_server, sidecar) = touching();
    let shown = |uri: &str| format!("{PREFIX}{uri}");
    // Two callers of one project, each in a session of its own. The server is careless: it
    // tells every session that ever subscribed of every update, subscribed or not. The last
    // URI of each session sorts after the others, so once it is told, all before it were.
    let report = offerings(
        sidecar.socket.to_str().unwrap(),
        "legacy",
        &json!([
            {"client": "a", "op": "subscribe", "uri": shown(&stream("orders"))},
            {"client": "a", "op": "subscribe", "uri": shown(&stream("zz-a"))},
            {"client": "b", "op": "subscribe", "uri": shown(&stream("clicks"))},
            {"client": "b", "op": "subscribe", "uri": shown(&stream("zz-b"))},
            {"client": "a", "op": "call", "name": "streamco__touch", "arguments": {
                "everyone": true,
                "uris": [stream("orders"), stream("clicks"), "streamco://runbooks/lag",
                         stream("zz-a"), stream("zz-b")]}},
            {"client": "a", "op": "until", "uri": shown(&stream("zz-a")), "seconds": 10},
            {"client": "b", "op": "until", "uri": shown(&stream("zz-b")), "seconds": 10},
        ]),
    );
    let peers = &report.last().unwrap()["peers"];
    assert_eq!(
        updated(&peers["a"]),
        [shown(&stream("orders")), shown(&stream("zz-a"))],
        "{report:?}"
    );
    assert_eq!(
        updated(&peers["b"]),
        [shown(&stream("clicks")), shown(&stream("zz-b"))],
        "{report:?}"
    );
}

#[test]
fn a_flood_of_updates_should_lose_no_subscribed_resource_and_tell_nothing_else() {
    let (_server, sidecar) = touching();
    let shown = |name: &str| format!("{PREFIX}{}", stream(name));
    // A client slow to read its notifications; 3,000 updates of one subscribed URI, one of
    // another in their midst, 3,000 more; then 600 distinct URIs nobody subscribed to (more
    // than the sidecar holds apart) and a last one.
    let first = json!({"op": "call", "name": "streamco__touch", "arguments": {
        "uris": [stream("orders"), stream("clicks"), stream("orders"), stream("zz")],
        "times": [3_000, 1, 3_000, 1]}});
    let second: Vec<String> = (0..600)
        .map(|n| stream(&format!("s{n}")))
        .chain([stream("last")])
        .collect();
    let report = offerings(
        sidecar.socket.to_str().unwrap(),
        "legacy",
        &json!([
            {"op": "subscribe", "uri": shown("orders")},
            {"op": "subscribe", "uri": shown("clicks")},
            {"op": "subscribe", "uri": shown("zz")},
            {"op": "slow", "seconds": 0.005},
            first,
            {"op": "until", "uri": shown("zz"), "seconds": 30},
            {"op": "unsubscribe", "uri": shown("zz")},
            {"op": "subscribe", "uri": shown("last")},
            {"op": "call", "name": "streamco__touch", "arguments": {"uris": second}},
            {"op": "until", "uri": shown("last"), "seconds": 30},
            {"op": "call", "name": "streamco__touch", "arguments": {"uris": []}},
        ]),
    );
    let told = updated(&report.last().unwrap()["notifications"]);
    let first_round = report[5]["ok"]["received"].as_u64().unwrap() as usize;
    let count = |uris: &[String], name: &str| uris.iter().filter(|u| **u == shown(name)).count();
    eprintln!(
        "a flood of 6,002 updates was told as {first_round}; 601 more as {}",
        told.len() - first_round
    );
    // The first round: each subscribed URI told, the one in the flood's midst exactly once,
    // the repeated one at least once and never more often than the server said it.
    assert_eq!(count(&told[..first_round], "clicks"), 1, "{told:?}");
    assert_eq!(count(&told[..first_round], "zz"), 1, "{told:?}");
    let orders = count(&told[..first_round], "orders");
    assert!((1..=6_000).contains(&orders), "{orders}");
    // The second: the last URI told, and never a URI the session did not subscribe to then.
    let subscribed = [shown("orders"), shown("clicks"), shown("last")];
    assert!(told[first_round..].contains(&shown("last")), "{told:?}");
    for uri in &told {
        assert!(
            subscribed.contains(uri) || *uri == shown("zz"),
            "told of {uri}, never subscribed"
        );
    }
    // The session still answers.
    assert!(
        report[10]["ok"]["content"][0]["text"].is_string(),
        "{report:?}"
    );
}

#[test]
fn a_subscription_should_follow_its_resource_to_the_servers_new_session() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let documents = |tools: &[&str]| {
        let mut document = binding_document("streamco-binding", "streamco", &endpoint, tools);
        document["metadata"]["namespace"] = json!("demo-project");
        document["spec"]["tools"]["mcpServers"][0]["resourceSelector"] =
            json!({"include": ["streamco://streams/{name}"]});
        json!([document])
    };
    let sidecar = Sidecar::start(
        &documents(&["touch"]),
        &[server.address.to_string()],
        &[("CAPSTAN_REFRESH_SECONDS", "1")],
    );
    let shown = |name: &str| format!("{PREFIX}{}", stream(name));
    let touch = |name: &str| json!({"op": "call", "name": "streamco__touch", "arguments": {"uris": [stream(name)]}});
    // The binding changes under the subscription (another tool allowed): the sidecar opens
    // the server's session again. The server's own record of what the calling session
    // subscribed to is the oracle.
    let report = offerings(
        sidecar.socket.to_str().unwrap(),
        "legacy",
        &json!([
            {"op": "subscribe", "uri": shown("orders")},
            touch("orders"),
            {"op": "write", "path": sidecar.fixture_path(), "json": documents(&["touch", "reads_seen"])},
            {"op": "until", "method": "notifications/tools/list_changed", "seconds": 20},
            touch("orders"),
            {"op": "until", "count": 4, "seconds": 10},
        ]),
    );
    let touched = |answer: &Value| -> Value {
        let text = answer["ok"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"));
        serde_json::from_str::<Value>(text).unwrap()
    };
    let (before, after) = (touched(&report[1]), touched(&report[4]));
    assert_eq!(before["mine"], json!([stream("orders")]), "{report:?}");
    assert_eq!(
        report.last().unwrap()["notifications"],
        json!([
            {"method": "notifications/resources/updated", "uri": shown("orders")},
            // Told once when the new session follows it (what that session said before was
            // heard by no one), before the tools it changed.
            {"method": "notifications/resources/updated", "uri": shown("orders")},
            {"method": "notifications/tools/list_changed"},
            {"method": "notifications/resources/updated", "uri": shown("orders")},
        ]),
        "{report:?}"
    );
    // The server's session is another, and it holds the subscription.
    assert_ne!(before["session"], after["session"], "{report:?}");
    assert_eq!(after["mine"], json!([stream("orders")]), "{report:?}");
}

#[test]
fn a_listen_stream_should_hear_updates_of_the_resources_it_names_and_no_others() {
    let (_server, sidecar) = touching();
    let shown = |name: &str| format!("{PREFIX}{}", stream(name));
    // A 2026-07-28 caller (no session) listens for one resource; the server says three were
    // updated. Its upstream is spoken to in 2026-07-28 too: the server's record of what its
    // open listen streams name is the oracle for the subscription, while the caller's stream
    // is open and after it closed. The updates are sent once that record names the resource:
    // the acknowledgement precedes the sidecar's stream to the server (docs/mcp-surface.md),
    // and an update sent before that stream opened went unheard on a loaded machine.
    let listening = json!({"until": {"contains": "orders"}, "seconds": 10,
                           "name": "streamco__touch", "arguments": {"uris": []}});
    let report = offerings(
        sidecar.socket.to_str().unwrap(),
        "2026-07-28",
        &json!([
            {"op": "listen", "subscriptions": [shown("orders")], "seconds": 3, "events": 3,
             "ready": listening,
             "call": "streamco__touch",
             "arguments": {"uris": [stream("clicks"), "streamco://runbooks/lag", stream("orders")]},
             "then": listening},
            {"op": "call", "until": {"lacks": "orders"}, "seconds": 10, "name": "streamco__touch",
             "arguments": {"uris": []}},
        ]),
    );
    let listened = &report[0]["ok"];
    assert_eq!(listened["honored"], json!([shown("orders")]), "{report:?}");
    // Told of its resource alone (in 3 s waiting for a third event), not the two others: once
    // when the server followed it, and for the update (the two may be told as one).
    let events = listened["events"].as_array().unwrap();
    assert!(matches!(events.len(), 1 | 2), "{report:?}");
    for event in events {
        assert_eq!(
            *event,
            json!({"type": "ResourceUpdated", "uri": shown("orders")}),
            "{report:?}"
        );
    }
    let mine = |answer: &Value| -> Value {
        let text = answer["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"));
        serde_json::from_str::<Value>(text).unwrap()["listening"].clone()
    };
    assert_eq!(
        mine(&listened["then"]),
        json!([stream("orders")]),
        "{report:?}"
    );
    assert_eq!(mine(&report[1]["ok"]), json!([]), "{report:?}");
}

/// The two windows where a provider's update could fall between streams (docs/mcp-surface.md
/// "Subscriptions"), each forced by the server holding the sidecar's new stream to it
/// unacknowledged (`slow_listens`); the events are what the Python SDK client received.
#[test]
fn an_update_said_while_a_listen_stream_to_the_provider_opens_should_not_be_lost() {
    let (_server, sidecar) = touching_with(&["touch", "slow_listens"]);
    let socket = sidecar.socket.to_str().unwrap();
    let updated = |name: &str| json!([{"type": "ResourceUpdated", "uri": format!("{PREFIX}{}", stream(name))}]);

    // Said after the caller's stream was acknowledged, before the sidecar's stream to the
    // server named the resource: told once that stream is acknowledged ("read it again") —
    // after the update was said, or the caller would read what it replaced.
    let report = python_report(
        "listen_windows.py",
        &[socket, "demo-project", PREFIX, "acknowledged"],
    );
    let mut told = updated("orders");
    told[0]["after"] = json!(true);
    assert_eq!(report["first"], told, "{report}");

    // Said while the sidecar's stream to the server is opened again for another subscription:
    // the stream it replaces is heard until then, so the first listen hears it; the second is
    // told of its own resource once it is followed, and of nothing else.
    let report = python_report(
        "listen_windows.py",
        &[socket, "demo-project", PREFIX, "reopened"],
    );
    // (The first listen was told of its resource once when followed, as above.)
    assert_eq!(report["initial"], updated("orders"), "{report}");
    assert_eq!(report["first"], updated("orders"), "{report}");
    assert_eq!(report["second"], updated("clicks"), "{report}");
}

#[test]
fn past_the_time_limit_forwarded_requests_should_be_refused_naming_it_and_reach_no_provider() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let mut documents = documents(&endpoint);
    documents[0]["spec"]["authority"]["maxTaskDurationSeconds"] = json!(1);
    let sidecar = Sidecar::start(&documents, &[server.address.to_string()], &[]);
    let lag = format!("{PREFIX}streamco://runbooks/lag");
    let report = offerings(
        sidecar.socket.to_str().unwrap(),
        "legacy",
        &json!([
            {"op": "read", "uri": lag},
            // The tool error that says the limit has passed (its upstream sessions closed).
            {"op": "call", "name": "streamco__reads_seen", "until": {"contains": "time limit"}, "seconds": 10},
            {"op": "read", "uri": lag},
            {"op": "get", "name": "streamco__triage", "arguments": {"stream": "orders"}},
            {"op": "complete", "prompt": "streamco__triage", "argument": "stream", "value": "ord"},
            {"op": "subscribe", "uri": lag},
        ]),
    );
    assert!(report[0]["ok"]["contents"].is_array(), "{report:?}");
    assert!(
        report[1]["ok"]["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains("time limit")),
        "{report:?}"
    );
    for refused in &report[2..6] {
        let error = &refused["error"];
        assert_eq!(error["code"], -32600, "{refused}");
        assert_eq!(error["data"]["kind"], "rejected", "{refused}");
        assert_eq!(error["data"]["retryable"], false, "{refused}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("time limit (1s")),
            "{refused}"
        );
    }
    // The server answered the one read before the limit, no other.
    assert_eq!(
        reads_seen(&endpoint, "reads_seen"),
        json!({"streamco://runbooks/lag": 1})
    );
}
