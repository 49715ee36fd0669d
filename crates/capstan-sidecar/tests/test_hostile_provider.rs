//! A hostile provider cannot speak in another binding's name or in Capstan's: every resource
//! URI it names in an answer — read contents, embedded resources and resource links of tool
//! results and prompts — stays in its own URI space or the answer is refused
//! (docs/mcp-surface.md "URIs in answers"), and every question it asks reaches the person in
//! its own name, a link only to a host its binding admits (docs/mcp-surface.md "A provider's
//! questions"). The provider is `tests/python/hostile_server.py` (the Python `mcp` SDK, its answers
//! written by hand), the client the Python SDK's; the oracle is the server's own record of what
//! reached it and the victim's own resource read directly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_testkit::PythonServer;
use capstan_testkit::sidecar::*;
use serde_json::{Value, json};

const SERVER: &str = "crates/capstan-sidecar/tests/python/hostile_server.py";

/// The victim's resource as the sidecar shows it.
const VICTIM_URI: &str = "capstan://victim-b/v/h://pub/a";

/// Three bindings in one project on the one hostile server: `victim-b` shows `h://pub/a` the
/// Capstan way, `victim-c` shows `h://pub/c`… as listed, `attacker` (as listed) and
/// `attacker-p` (the Capstan way) each select `h://secret/b` and may call every tool.
fn documents(endpoint: &str) -> Value {
    let tools = [
        "meta_seen",
        "claim",
        "embed",
        "record",
        "ask",
        "ask_url",
        "sample",
        "roots_seen",
        "log_as_capstan",
        "ask_later",
    ];
    let mut victim_b = binding_document("victim-b", "v", endpoint, &[]);
    victim_b["spec"]["tools"]["mcpServers"][0]["resourceSelector"] =
        json!({"include": ["h://pub/a"]});
    let mut victim_c = binding_document("victim-c", "c", endpoint, &[]);
    let server = &mut victim_c["spec"]["tools"]["mcpServers"][0];
    server["resourceSelector"] = json!({"include": ["file:///docs/{+path}"]});
    server["resourceUris"] = json!("AsListed");
    let mut attacker = binding_document("attacker", "x", endpoint, &tools);
    let server = &mut attacker["spec"]["tools"]["mcpServers"][0];
    server["resourceSelector"] = json!({"include": ["h://secret/b"]});
    server["resourceUris"] = json!("AsListed");
    server["promptSelector"] = json!({"include": ["spoof"]});
    server["toolNames"] = json!("Unprefixed");
    server["urlElicitationHosts"] = json!(["login.attacker.example"]);
    let mut attacker_p = binding_document("attacker-p", "p", endpoint, &tools);
    let server = &mut attacker_p["spec"]["tools"]["mcpServers"][0];
    server["resourceSelector"] = json!({"include": ["h://secret/b"]});
    server["promptSelector"] = json!({"include": ["spoof"]});
    let mut documents = json!([victim_b, victim_c, attacker, attacker_p]);
    for document in documents.as_array_mut().unwrap() {
        document["metadata"]["namespace"] = json!("demo-project");
    }
    documents
}

fn offerings(target: &str, mode: &str, ops: &Value) -> Vec<Value> {
    let report = python_report(
        "offerings.py",
        &[target, "demo-project", mode, &ops.to_string()],
    );
    serde_json::from_value(report).unwrap()
}

/// Every URI an answer's contents, blocks or messages name.
fn uris(answer: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut walk = vec![answer];
    while let Some(value) = walk.pop() {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(uri)) = map.get("uri") {
                    found.push(uri.clone());
                }
                walk.extend(map.values());
            }
            Value::Array(items) => walk.extend(items),
            _ => {}
        }
    }
    found.sort();
    found
}

/// Asserts `answer` is the refusal of an answer naming `uri` outside `binding`'s URI space: a
/// protocol error, or a tool error (`isError`, its structured error), that names both.
fn assert_refused(answer: &Value, binding: &str, uri: &str) {
    let message = answer["error"]["message"]
        .as_str()
        .or_else(|| answer["ok"]["structuredContent"]["error"]["message"].as_str())
        .unwrap_or_else(|| panic!("not refused: {answer}"));
    assert!(
        message.contains(&format!(
            "binding {binding} answered with the resource URI {uri:?}"
        )),
        "not refused naming {binding} and {uri:?}: {answer}"
    );
    assert!(
        !uris(answer).iter().any(|u| u == uri),
        "the claimed URI reached the caller: {answer}"
    );
}

#[test]
fn a_provider_should_never_name_another_bindings_resource_in_its_answers() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let sidecar = Sidecar::start(&documents(&endpoint), &[server.address.to_string()], &[]);
    let socket = sidecar.socket.to_str().unwrap();

    // The oracle: the server answers h://secret/b for the victim's URI too, directly.
    let direct = offerings(
        &endpoint,
        "legacy",
        &json!([{"op": "read", "uri": "h://secret/b"}]),
    );
    assert_eq!(
        uris(&direct[0]["ok"]),
        vec!["capstan://victim-b/v/h://pub/a", "h://secret/b"],
        "{direct:?}"
    );

    for mode in ["legacy", "2026-07-28"] {
        let before = reads(&endpoint);
        let answers = offerings(
            socket,
            mode,
            &json!([
                // As listed: the victim's URI under the sidecar's scheme.
                {"op": "read", "uri": "h://secret/b"},
                {"op": "call", "name": "embed", "arguments": {"uri": VICTIM_URI}},
                {"op": "get", "name": "x__spoof", "arguments": {"uri": VICTIM_URI}},
                // As listed: a URI another as-listed server's template produces.
                {"op": "call", "name": "claim", "arguments": {"uri": "file:///docs/guide.md"}},
                {"op": "read", "uri": "h://secret/b"},
                {"op": "call", "name": "embed", "arguments": {"uri": "file:///docs/guide.md"}},
                // As listed: whitespace a client may trim into the victim's URI.
                {"op": "call", "name": "embed", "arguments": {"uri": format!(" {VICTIM_URI}")}},
                // The Capstan way: whatever it names lands under its own prefix.
                {"op": "call", "name": "claim", "arguments": {"uri": VICTIM_URI}},
                {"op": "read", "uri": "capstan://attacker-p/p/h://secret/b"},
                {"op": "call", "name": "p__embed", "arguments": {"uri": VICTIM_URI}},
                {"op": "get", "name": "p__spoof", "arguments": {"uri": VICTIM_URI}},
                // The victim's own resource is still its own.
                {"op": "read", "uri": VICTIM_URI},
            ]),
        );
        assert_refused(&answers[0], "attacker", VICTIM_URI);
        assert_eq!(
            answers[0]["error"]["data"]["kind"], "upstream_malformed",
            "{mode}: {answers:?}"
        );
        assert_eq!(
            answers[1]["ok"]["isError"], true,
            "{mode}: {:?}",
            answers[1]
        );
        assert_refused(&answers[1], "attacker", VICTIM_URI);
        assert_refused(&answers[2], "attacker", VICTIM_URI);
        assert_refused(&answers[4], "attacker", "file:///docs/guide.md");
        assert!(
            answers[4]
                .to_string()
                .contains("MCP server c of binding victim-c"),
            "{mode}: the owner is not named: {:?}",
            answers[4]
        );
        assert_refused(&answers[5], "attacker", "file:///docs/guide.md");
        assert_refused(&answers[6], "attacker", &format!(" {VICTIM_URI}"));
        let own = "capstan://attacker-p/p/";
        assert_eq!(
            uris(&answers[8]["ok"]),
            vec![format!("{own}{VICTIM_URI}"), format!("{own}h://secret/b")],
            "{mode}: {:?}",
            answers[8]
        );
        for answer in &answers[9..11] {
            let named = uris(&answer["ok"]);
            assert!(!named.is_empty(), "{mode}: {answer}");
            assert!(named.iter().all(|u| u.starts_with(own)), "{mode}: {answer}");
        }
        assert_eq!(
            uris(&answers[11]["ok"]),
            vec![VICTIM_URI.to_owned()],
            "{mode}"
        );
        assert_eq!(answers[11]["ok"]["contents"][0]["text"], "public text");
        // The refusals are Capstan's, made on what the server answered: every read reached it.
        let after = reads(&endpoint);
        assert_eq!(
            after[before.len()..].to_vec(),
            vec!["h://secret/b", "h://secret/b", "h://secret/b", "h://pub/a"],
            "{mode}"
        );
    }
}

/// The URIs the server was asked to read so far, by its own record.
fn reads(endpoint: &str) -> Vec<String> {
    let report = offerings(
        endpoint,
        "legacy",
        &json!([{"op": "call", "name": "record"}]),
    );
    let text = report[0]["ok"]["content"][0]["text"].as_str().unwrap();
    serde_json::from_str::<Value>(text).unwrap()["reads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_template_should_read_nothing_outside_its_literal_prefix() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let sidecar = Sidecar::start(&documents(&endpoint), &[server.address.to_string()], &[]);
    let socket = sidecar.socket.to_str().unwrap();
    let climbing = [
        "file:///docs/../../etc/passwd",
        "file:///docs/%2e%2e/%2E%2E/etc/passwd",
        "file:///docs/.%2e/secret",
        "file:///docs/..%2Fetc%2Fpasswd",
        "file:///docs/..%5Csecret",
        "file:///docs/%252e%252e/secret",
    ];
    for mode in ["legacy", "2026-07-28"] {
        let before = reads(&endpoint);
        let mut ops: Vec<Value> = climbing
            .iter()
            .map(|uri| json!({"op": "read", "uri": uri}))
            .collect();
        ops.push(json!({"op": "read", "uri": "file:///docs/guides/start.md"}));
        let answers = offerings(socket, mode, &Value::Array(ops));
        for (uri, answer) in climbing.iter().zip(&answers) {
            let error = &answer["error"];
            assert_eq!(error["code"], -32602, "{mode} {uri}: {answer}");
            assert_eq!(error["data"]["uri"], *uri, "{mode}: {answer}");
            assert!(
                error["message"].as_str().unwrap().contains("in its path"),
                "{mode}: {answer}"
            );
        }
        assert_eq!(
            answers[climbing.len()]["ok"]["contents"][0]["text"],
            "document file:///docs/guides/start.md",
            "{mode}"
        );
        // Only the plain read reached the server, by its own record.
        assert_eq!(
            reads(&endpoint)[before.len()..].to_vec(),
            vec!["file:///docs/guides/start.md"],
            "{mode}"
        );
    }
}

/// Runs `tests/python/questions.py` against `target` in `mode` with `calls`.
fn questions(target: &str, mode: &str, calls: &Value) -> Value {
    python_report(
        "questions.py",
        &[target, "demo-project", mode, &calls.to_string()],
    )
}

/// The attribution every question of the attacker's must open with.
const ASKER: &str = "attacker.example (binding attacker, MCP server x) asks: ";

/// The origin `_meta` member of the attacker's requests.
fn origin() -> Value {
    json!({"service": "attacker.example", "binding": "attacker", "server": "x"})
}

#[test]
fn a_providers_questions_should_reach_the_person_in_its_own_name_and_links_only_to_its_hosts() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let sidecar = Sidecar::start(&documents(&endpoint), &[server.address.to_string()], &[]);
    let socket = sidecar.socket.to_str().unwrap();
    let lure = "Capstan session expired: paste your bearer token";
    let evil = "https://login.capstan-sidecar.example.evil/reauth";
    let admitted = "https://login.attacker.example/start";

    // Mid-call, in a session revision.
    let report = questions(
        socket,
        "legacy",
        &json!([
            {"name": "ask", "arguments": {"message": lure}},
            {"name": "ask_url", "arguments": {"url": evil, "message": "Sign in to Capstan"}},
            {"name": "ask_url", "arguments": {"url": admitted, "message": "Sign in"}},
            {"name": "sample", "arguments": {"text": "hello"}},
            {"name": "roots_seen"},
            {"name": "log_as_capstan"},
        ]),
    );
    let asked = report["asked"].as_array().unwrap();
    // The oracle is the client's own record: what it was asked, in order.
    assert_eq!(asked.len(), 4, "{report}");
    assert_eq!(asked[0]["message"], format!("{ASKER}{lure}"), "{report}");
    assert_eq!(asked[0]["meta"][ORIGIN], origin(), "{report}");
    assert_eq!(
        (&asked[1]["mode"], &asked[1]["url"], &asked[1]["message"]),
        (
            &json!("url"),
            &json!(admitted),
            &json!(format!("{ASKER}Sign in"))
        ),
        "the refused link reached the client, or the admitted one did not: {report}"
    );
    let prompt = asked[2]["systemPrompt"].as_str().unwrap();
    assert!(
        prompt.starts_with("This request comes from attacker.example (binding attacker, MCP server x) through Capstan"),
        "{prompt}"
    );
    assert_eq!(asked[2]["meta"][ORIGIN], origin(), "{report}");
    assert_eq!(asked[3]["method"], "roots/list");
    // The provider was told why its link was refused; it went on with the call.
    let refused = tool_text(&report["results"][1]);
    assert!(
        refused.contains("urlElicitationHosts")
            && refused.contains("login.capstan-sidecar.example.evil"),
        "{refused}"
    );
    assert!(
        tool_text(&report["results"][0]).contains("t0k3n"),
        "{report}"
    );
    let logs = report["logs"].as_array().unwrap();
    assert!(
        logs.iter().any(|log| log["logger"] == "attacker/x/capstan"),
        "{report}"
    );
    assert!(
        logs.iter().all(|log| log["logger"] != "capstan"),
        "{report}"
    );

    // In an input_required result, in 2026-07-28.
    let report = questions(
        socket,
        "2026-07-28",
        &json!([
            {"name": "ask_later", "arguments": {"url": admitted}},
            {"name": "ask_later", "arguments": {"url": evil}},
        ]),
    );
    let asked = report["asked"].as_array().unwrap();
    assert_eq!(
        asked.len(),
        3,
        "only the admitted round reaches the client: {report}"
    );
    let form = asked.iter().find(|a| a["mode"] == "form").unwrap();
    assert_eq!(form["message"], format!("{ASKER}{lure}"), "{report}");
    assert_eq!(form["meta"][ORIGIN], origin(), "{report}");
    let link = asked.iter().find(|a| a["mode"] == "url").unwrap();
    assert_eq!(link["url"], admitted);
    assert_eq!(link["message"], format!("{ASKER}Sign in to Capstan"));
    let sampled = asked
        .iter()
        .find(|a| a["method"] == "sampling/createMessage")
        .unwrap();
    assert!(
        sampled["systemPrompt"]
            .as_str()
            .unwrap()
            .starts_with("This request comes from attacker.example"),
        "{report}"
    );
    assert!(
        tool_text(&report["results"][0]).contains("t0k3n"),
        "{report}"
    );
    let second = &report["results"][1];
    assert_eq!(second["isError"], true, "{report}");
    assert_eq!(
        second["structuredContent"]["error"]["kind"], "forbidden",
        "{report}"
    );
}

/// The `_meta` member naming a relayed request's binding and server.
const ORIGIN: &str = "capabilities.assistant.miloapis.com/origin";

/// The first text of a tool result.
fn tool_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_typescript_client_should_be_asked_in_the_providers_name_too() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let sidecar = Sidecar::start(&documents(&endpoint), &[server.address.to_string()], &[]);
    let lure = "Capstan session expired: paste your bearer token";
    let evil = "https://login.capstan-sidecar.example.evil/reauth";
    let run = |mode: &str, calls: Value| {
        let output = typescript_sdk_script(
            &sidecar,
            "questions.mjs",
            &["demo-project", mode, &calls.to_string()],
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };

    let report = run(
        "legacy",
        json!([
            {"name": "ask", "arguments": {"message": lure}},
            {"name": "ask_url", "arguments": {"url": evil, "message": "Sign in"}},
            {"name": "sample", "arguments": {"text": "hello"}},
        ]),
    );
    let asked = report["asked"].as_array().unwrap();
    assert_eq!(
        asked.len(),
        2,
        "the refused link reached the client: {report}"
    );
    assert_eq!(asked[0]["message"], format!("{ASKER}{lure}"), "{report}");
    assert_eq!(asked[0]["meta"][ORIGIN], origin(), "{report}");
    assert!(
        asked[1]["systemPrompt"]
            .as_str()
            .unwrap()
            .starts_with("This request comes from attacker.example"),
        "{report}"
    );
    assert_eq!(asked[1]["meta"][ORIGIN], origin(), "{report}");

    let report = run(
        "auto",
        json!([
            {"name": "ask_later", "arguments": {"url": "https://login.attacker.example/a"}},
            {"name": "ask_later", "arguments": {"url": evil}},
        ]),
    );
    assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
    let asked = report["asked"].as_array().unwrap();
    assert_eq!(
        asked.len(),
        3,
        "only the admitted round reaches the client: {report}"
    );
    for question in asked.iter().filter(|a| a["method"] == "elicitation/create") {
        assert!(
            question["message"].as_str().unwrap().starts_with(ASKER),
            "{report}"
        );
    }
    assert_eq!(
        report["results"][1]["structuredContent"]["error"]["kind"], "forbidden",
        "{report}"
    );
}

/// The `_meta` the server recorded for the last call, by its own record.
fn last_meta(endpoint: &str) -> Value {
    let report = offerings(
        endpoint,
        "legacy",
        &json!([{"op": "call", "name": "record"}]),
    );
    let text = report[0]["ok"]["content"][0]["text"].as_str().unwrap();
    let record = serde_json::from_str::<Value>(text).unwrap();
    record["metas"].as_array().unwrap().last().cloned().unwrap()
}

#[test]
fn a_callers_trace_context_should_reach_a_provider_only_valid_and_bounded() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let sidecar = Sidecar::start(&documents(&endpoint), &[server.address.to_string()], &[]);
    let parent = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
    let hostile = json!({
        "traceparent": format!("{parent}-{}", "a".repeat(200 * 1024)),
        "tracestate": format!("a=b\nX-Injected: 1,{}", "k=v,".repeat(25 * 1024)),
        "baggage": "user=alice\nX-Injected: 1",
        "note": "kept",
    });
    let valid = json!({"traceparent": parent, "tracestate": "rojo=00f067aa0ba902b7",
                       "baggage": "user=alice"});
    let session = sidecar.curl_initialize("demo-project", "t");
    let in_session = |meta: &Value| {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                          "params": {"name": "meta_seen", "arguments": {}, "_meta": meta}});
        let (status, body) = sidecar.curl_in_session(&session, &body.to_string());
        assert_eq!(status, 200, "{body}");
    };
    let sessionless = |meta: &Value| {
        let mut meta = meta.clone();
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "curl", "version": "1"});
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                          "params": {"name": "meta_seen", "arguments": {}, "_meta": meta}});
        let headers = [
            ("mcp-protocol-version", "2026-07-28"),
            (PROJECT_HEADER, "demo-project"),
            ("authorization", "Bearer t"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "meta_seen"),
        ];
        let (status, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(&body.to_string()));
        assert_eq!(status, 200, "{body}");
    };
    for (revision, send) in [
        ("session", &in_session as &dyn Fn(&Value)),
        ("2026-07-28", &sessionless),
    ] {
        // Tracing is off in this sidecar: nothing of its own replaces what the caller sent.
        send(&hostile);
        let seen = last_meta(&endpoint);
        assert_eq!(seen["note"], "kept", "{revision}: {seen}");
        for key in ["traceparent", "tracestate", "baggage"] {
            assert!(
                seen.get(key).is_none(),
                "{revision}: {key} reached the provider: {seen}"
            );
        }
        send(&valid);
        let seen = last_meta(&endpoint);
        assert_eq!(seen["traceparent"], parent, "{revision}: {seen}");
        assert_eq!(
            seen["tracestate"], "rojo=00f067aa0ba902b7",
            "{revision}: {seen}"
        );
        assert_eq!(seen["baggage"], "user=alice", "{revision}: {seen}");
    }
}
