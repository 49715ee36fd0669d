//! The 2026-07-28 revision beside the session revisions, on one endpoint: the official SDK
//! clients in auto mode negotiate it (no `initialize`, no session), list and call; every
//! request carries its own identity and headers, and none that fails a check reaches a tool;
//! a caller's task without a session is kept by (project, token) while it is used (its listen
//! streams: `test_list_changed.rs`). The oracles are the clients' own reports and the demo
//! provider's request log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_testkit::sidecar::*;
use serde_json::{Value, json};

const REVISION: &str = "2026-07-28";

/// A JSON-RPC request of the 2026-07-28 revision: its `_meta` carries the revision and the
/// client's capabilities.
fn modern(id: u64, method: &str, mut params: Value) -> String {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": REVISION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "curl", "version": "1"},
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// POSTs a 2026-07-28 `body` as `headers` (project, token, Mcp-* as given) plus the revision
/// header; returns (status, body).
fn post(sidecar: &Sidecar, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut all = vec![("mcp-protocol-version", REVISION)];
    all.extend_from_slice(headers);
    let (status, body, _) = sidecar.curl("POST", "/mcp", &all, Some(body));
    (status, body)
}

/// The JSON-RPC message in an answer that is JSON or one SSE event.
fn message(body: &str) -> Value {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .find_map(|data| serde_json::from_str(data.trim()).ok())
        .or_else(|| serde_json::from_str(body).ok())
        .unwrap_or_else(|| panic!("not a JSON-RPC answer: {body:?}"))
}

const CALL_GET: (&str, &str) = ("mcp-method", "tools/call");

/// The headers of [`call_get_body`] from caller `t` of demo-project.
fn call_get_headers() -> [(&'static str, &'static str); 4] {
    [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer t"),
        CALL_GET,
        ("mcp-name", "streamco__streams_get"),
    ]
}

fn call_get_body(id: u64) -> String {
    modern(
        id,
        "tools/call",
        json!({"name": "streamco__streams_get", "arguments": {"name": "orders"}}),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_client_in_auto_mode_should_negotiate_2026_07_28_list_and_call() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let output = python_sdk_client(&sidecar, "auto");
    assert_sdk_client_saw_streamco(&output, REVISION);
    // Metered as in a session: one event, named by the binding's service.
    let events = sidecar.meter_events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["service"], "streaming.streamco.example");
    assert_eq!(events[0]["tool"], "streamco__streams_get");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_2_client_in_auto_mode_should_negotiate_2026_07_28_list_and_call() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let output = typescript_sdk_client(&sidecar, "client_sdk2.mjs");
    assert_sdk_client_saw_streamco(&output, REVISION);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2026_07_28_request_that_fails_a_check_should_never_reach_a_tool() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let project = (PROJECT_HEADER, "demo-project");
    let token = ("authorization", "Bearer t");
    let named = ("mcp-name", "streamco__streams_get");
    let before = provider.tool_calls().await;

    // No project header: refused before anything is composed or called.
    let (status, body) = post(&sidecar, &[token, CALL_GET, named], &call_get_body(1));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("project"), "{body}");
    // Headers that contradict the body: the name, the method.
    let (status, body) = post(
        &sidecar,
        &[
            project,
            token,
            CALL_GET,
            ("mcp-name", "streamco__streams_list"),
        ],
        &call_get_body(2),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(message(&body)["error"]["code"], -32020, "{body}");
    let (status, body) = post(
        &sidecar,
        &[project, token, ("mcp-method", "tools/list"), named],
        &call_get_body(3),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(message(&body)["error"]["code"], -32020, "{body}");
    // No Mcp-Name at all.
    let (status, body) = post(&sidecar, &[project, token, CALL_GET], &call_get_body(4));
    assert_eq!(status, 400, "{body}");
    // The right name and a wrong one, or the name twice: a singleton header sent twice.
    for twice in [("mcp-name", "streamco__streams_list"), named] {
        let (status, body) = post(
            &sidecar,
            &[project, token, CALL_GET, named, twice],
            &call_get_body(7),
        );
        assert_eq!(status, 400, "{twice:?}: {body}");
        assert_eq!(message(&body)["error"]["code"], -32020, "{body}");
    }
    // The header names 2026-07-28, the `_meta` another revision.
    let other_meta = call_get_body(8).replace(
        &format!(r#""io.modelcontextprotocol/protocolVersion":"{REVISION}""#),
        r#""io.modelcontextprotocol/protocolVersion":"2025-11-25""#,
    );
    assert_ne!(
        other_meta,
        call_get_body(8),
        "the body names no _meta revision"
    );
    let (status, body) = post(&sidecar, &[project, token, CALL_GET, named], &other_meta);
    assert_eq!(status, 400, "{body}");
    // A revision this sidecar does not speak.
    let future = call_get_body(5).replace(REVISION, "2099-01-01");
    let (status, body, _) = sidecar.curl(
        "POST",
        "/mcp",
        &[
            ("mcp-protocol-version", "2099-01-01"),
            project,
            token,
            CALL_GET,
            named,
        ],
        Some(&future),
    );
    assert_eq!(
        (status, message(&body)["error"]["code"].clone()),
        (400, json!(-32022)),
        "{body}"
    );
    assert_eq!(
        provider.tool_calls().await,
        before,
        "a refused request reached the provider"
    );

    // The same call, well formed — its name in plain text, and Base64-encoded as the
    // revision allows: each reaches the provider once.
    let encoded = "=?base64?c3RyZWFtY29fX3N0cmVhbXNfZ2V0?=";
    for (id, name) in [(6, "streamco__streams_get"), (9, encoded)] {
        let (status, body) = post(
            &sidecar,
            &[project, token, CALL_GET, ("mcp-name", name)],
            &call_get_body(id),
        );
        assert_eq!(status, 200, "{name}: {body}");
        let answer = message(&body);
        assert_eq!(
            answer["result"]["structuredContent"]["name"], "orders",
            "{body}"
        );
        assert_eq!(answer["result"]["resultType"], "complete", "{body}");
    }
    assert_eq!(
        provider.tool_calls().await[before.len()..],
        ["streams_get", "streams_get"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_without_a_session_should_be_kept_per_token_and_end_after_its_ttl() {
    let provider = DemoProvider::start(&[]);
    // Room for two tasks: whether an ended task gave its place back is seen by a third caller.
    let sidecar = Sidecar::start(
        &streamco(&provider),
        &[provider.host()],
        &[
            ("CAPSTAN_SESSIONLESS_TTL_SECONDS", "2"),
            ("CAPSTAN_MAX_SESSIONS", "2"),
        ],
    );
    // A task of a 2026-07-28 caller speaks 2026-07-28 to the provider, which offers it: each
    // composition opens it with one `server/discover` (and never `initialize`).
    let discovers = || provider_messages(&provider, "server/discover");
    let ask = |token: &str, id: u64| {
        let authorization = format!("Bearer {token}");
        post(
            &sidecar,
            &[
                (PROJECT_HEADER, "demo-project"),
                ("authorization", &authorization),
                ("mcp-method", "tools/list"),
            ],
            &modern(id, "tools/list", json!({})),
        )
    };
    let list = |token: &str, id: u64| {
        let (status, body) = ask(token, id);
        assert_eq!(status, 200, "{body}");
        message(&body)["result"]["tools"].as_array().unwrap().len()
    };
    assert_eq!(list("a", 1), 4);
    assert_eq!(list("a", 2), 4);
    // One composition for token a: one upstream session.
    assert_eq!(discovers().await, 1);
    // Another token is another caller: never served a's task, composed for itself.
    assert_eq!(list("b", 3), 4);
    assert_eq!(discovers().await, 2);
    assert_eq!(provider_messages(&provider, "initialize").await, 0);
    // Both places held: a third caller is refused, the sidecar's cap named, and composes nothing.
    let (status, body) = ask("c", 4);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("(CAPSTAN_MAX_SESSIONS)"), "{body}");
    assert_eq!(discovers().await, 2);
    // Unused past their TTL, both tasks end and give their places back: the third caller is
    // admitted (composed for itself), and then a's next request composes a new task.
    eventually(
        "the tasks past their TTL give their places back",
        || async { (ask("c", 5).0 == 200).then_some(()) },
    )
    .await;
    assert_eq!(discovers().await, 3);
    assert_eq!(list("a", 6), 4);
    assert_eq!(discovers().await, 4, "the next request composes a new task");
}

#[tokio::test(flavor = "multi_thread")]
async fn max_task_duration_should_end_a_task_without_a_session_and_the_next_call_start_another() {
    let provider = DemoProvider::start(&[]);
    let mut documents = streamco(&provider);
    documents["items"][0]["spec"]["authority"] = json!({"maxTaskDurationSeconds": 1});
    // Room for one task: whether the ended task gave its place back is seen by another caller.
    let sidecar = Sidecar::start(
        &documents,
        &[provider.host()],
        &[("CAPSTAN_MAX_SESSIONS", "1")],
    );
    let headers = call_get_headers();
    let (status, body) = post(&sidecar, &headers, &call_get_body(1));
    assert_eq!(
        (status, message(&body)["result"]["isError"].clone()),
        (200, json!(false))
    );
    assert_eq!(provider_messages(&provider, "server/discover").await, 1);
    // The time limit ends the task and it gives up its place: another caller is admitted — it
    // is refused, the cap named, while the task lives — and its own task, composed for it, ends
    // at the same limit.
    let mut other = call_get_headers();
    other[1] = ("authorization", "Bearer u");
    eventually(
        "the task at its time limit gives its place back",
        || async {
            let (status, body) = post(&sidecar, &other, &call_get_body(9));
            if status == 503 {
                assert!(body.contains("(CAPSTAN_MAX_SESSIONS)"), "{body}");
            }
            (status == 200).then_some(())
        },
    )
    .await;
    assert_eq!(provider_messages(&provider, "server/discover").await, 2);
    // Without a session there is nothing to start again by hand: the next call is a new task,
    // composed anew (its upstream opened again), once the other caller's has ended too.
    let body = eventually("the first caller's next call is served", || async {
        let (status, body) = post(&sidecar, &headers, &call_get_body(2));
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(message(&body)["result"]["isError"], false, "{body}");
    assert_eq!(
        provider.tool_calls().await,
        ["streams_get", "streams_get", "streams_get"]
    );
    assert_eq!(provider_messages(&provider, "server/discover").await, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn discover_and_initialize_should_advertise_both_eras_and_list_changed() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let caller = [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer t"),
        ("mcp-method", "server/discover"),
    ];
    let (status, body) = post(&sidecar, &caller, &modern(1, "server/discover", json!({})));
    assert_eq!(status, 200, "{body}");
    let discovered = message(&body)["result"].clone();
    let versions = discovered["supportedVersions"].as_array().unwrap();
    assert!(versions.contains(&json!(REVISION)), "{discovered}");
    assert!(versions.contains(&json!("2025-11-25")), "{discovered}");
    assert_eq!(discovered["capabilities"]["tools"]["listChanged"], true);
    // The caller's own instructions: discovering composed the caller's task.
    let instructions = discovered["instructions"].as_str().unwrap_or_default();
    assert!(
        instructions.contains("## Overview — streaming.streamco.example"),
        "{discovered}"
    );
    assert_eq!(discovered["cacheScope"], "private", "{discovered}");
    // A session revision's initialize says the same of its tools.
    let (status, body, _) = sidecar.curl(
        "POST",
        "/mcp",
        &[
            (PROJECT_HEADER, "demo-project"),
            ("authorization", "Bearer t"),
        ],
        Some(INITIALIZE),
    );
    assert_eq!(status, 200, "{body}");
    let initialized = message(&body)["result"].clone();
    assert_eq!(initialized["protocolVersion"], "2025-11-25");
    assert_eq!(initialized["capabilities"]["tools"]["listChanged"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_without_a_session_should_take_a_place_under_the_session_cap() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(
        &streamco(&provider),
        &[provider.host()],
        &[("CAPSTAN_MAX_SESSIONS", "1")],
    );
    let headers = [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer t"),
        ("mcp-method", "tools/list"),
    ];
    let session = sidecar.session("demo-project", Some("other")).await;
    // Refused before rmcp sees it, as an `initialize` would be: 503 with Retry-After and the
    // setting named — not a JSON-RPC error inside a 200.
    let (status, body, head) = sidecar.curl(
        "POST",
        "/mcp",
        &[
            ("mcp-protocol-version", REVISION),
            headers[0],
            headers[1],
            headers[2],
        ],
        Some(&modern(1, "tools/list", json!({}))),
    );
    assert_eq!(status, 503, "{body}");
    assert_eq!(header_value(&head, "retry-after").as_deref(), Some("5"));
    assert_refusal(&body, "unavailable", "(CAPSTAN_MAX_SESSIONS)");
    // The place frees with the session, and the refused caller is served on its next request.
    session.cancel().await.unwrap();
    eventually("the caller without a session is served", || async {
        let (_, body) = post(&sidecar, &headers, &modern(2, "tools/list", json!({})));
        message(&body)["result"]["tools"]
            .as_array()
            .map(|tools| tools.len())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2026_07_28_call_that_is_answered_should_never_be_cancelled_at_the_provider() {
    // Found by the sidecar bench's independent client: every call to a 2026-07-28 provider
    // was followed by a `notifications/cancelled` naming it, sent while the call ran — an
    // extra request per call, and a provider honouring it would have given the call up.
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let headers = call_get_headers();
    let cancelled_before = provider_messages(&provider, "notifications/cancelled").await;
    for id in 1..=3 {
        let (status, body) = post(&sidecar, &headers, &call_get_body(id));
        assert_eq!(status, 200, "{body}");
        assert_eq!(message(&body)["result"]["isError"], false, "{body}");
    }
    // The task spoke 2026-07-28 to the provider (no session), and each call reached it once.
    assert_eq!(provider_messages(&provider, "server/discover").await, 1);
    assert_eq!(provider_messages(&provider, "initialize").await, 0);
    assert_eq!(
        provider.tool_calls().await,
        ["streams_get", "streams_get", "streams_get"]
    );
    // A cancellation would have been sent as each call started, so those of the first two
    // calls would be in the log by the time the third is answered.
    assert_eq!(
        provider_messages(&provider, "notifications/cancelled").await - cancelled_before,
        0
    );
}

/// A caller of a session revision gets no `resultType` in a call's answer — a 2026-07-28 member
/// its revision has no place for (rmcp takes it out for the calls it serves) — whether the
/// answer comes from a provider (spoken to in whichever revision it chose) or from a built-in.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_revisions_call_answer_should_carry_no_result_type() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let session = sidecar.curl_initialize("demo-project", "t");
    for (id, name, arguments) in [
        (2, "streamco__streams_get", json!({"name": "orders"})),
        // A built-in's refusal of its arguments: still a tool result.
        (3, "load_skill", json!({})),
    ] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments}});
        let (status, body) = sidecar.curl_in_session(&session, &call.to_string());
        assert_eq!(status, 200, "{name}: {body}");
        let answer = message(&body);
        assert!(answer["result"]["content"].is_array(), "{name}: {body}");
        assert_eq!(answer["result"].get("resultType"), None, "{name}: {body}");
    }
}

/// A body naming a member twice is refused before anything reads it: rmcp refuses such a body,
/// and the middleware, which reads the method and params itself, must not read one that rmcp
/// would not (`{"method":"ping","method":"tools/call"}` was served as a call). In a session
/// and without one; the provider's own count of calls is the oracle.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_naming_a_member_twice_should_be_refused_and_reach_no_provider() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let session = sidecar.curl_initialize("demo-project", "t");
    let before = provider.tool_calls().await;
    let call = r#""params":{"name":"streamco__streams_get","arguments":{"name":"orders"}}"#;
    let twice = [
        format!(r#"{{"jsonrpc":"2.0","id":4,"method":"ping","method":"tools/call",{call}}}"#),
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"streamco__streams_get","arguments":{"name":"orders","name":"secret"}}}"#.to_owned(),
    ];
    for body in &twice {
        let (status, answer) = sidecar.curl_in_session(&session, body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(message(&answer)["error"]["code"], -32700, "{answer}");
        assert!(answer.contains("names a member twice"), "{answer}");
    }
    let sessionless = modern(
        6,
        "tools/call",
        json!({"name": "streamco__streams_get", "arguments": {"name": "orders"}}),
    )
    .replacen(r#""jsonrpc":"2.0""#, r#""jsonrpc":"2.0","id":99"#, 1);
    let (status, answer) = post(&sidecar, &call_get_headers(), &sessionless);
    assert_eq!(status, 400, "{sessionless}: {answer}");
    assert_eq!(
        provider.tool_calls().await,
        before,
        "a refused body reached the provider"
    );
    // The same calls, each member once, are served.
    let once = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call",{call}}}"#);
    let (status, answer) = sidecar.curl_in_session(&session, &once);
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = post(&sidecar, &call_get_headers(), &call_get_body(8));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        provider.tool_calls().await[before.len()..],
        ["streams_get", "streams_get"]
    );
}

/// A provider that answers `initialize` with 2026-07-28 (a revision without `initialize`), as
/// `tests/python/odd_revision_server.py` does, is spoken to as that revision; asked a question
/// mid-call all the same, the session caller's answer must reach it — on the session it
/// assigned — and a provider that assigned none, which nothing can answer, must fail the call
/// at once as malformed, never leave it waiting to its time limit. The oracles: the client's
/// own record of what it was asked, and the server's of the answers it received.
#[test]
fn a_provider_answering_initialize_with_a_sessionless_revision_should_still_be_answered() {
    for mode in ["session", "stateless"] {
        let server = capstan_testkit::PythonServer::start_script_with(
            "crates/capstan-sidecar/tests/python/odd_revision_server.py",
            &[mode],
        );
        let endpoint = format!("http://{}/mcp", server.address);
        let mut document = binding_document("odd-binding", "odd", &endpoint, &["ask", "record"]);
        document["metadata"]["namespace"] = json!("demo-project");
        document["spec"]["tools"]["mcpServers"][0]["toolNames"] = json!("Unprefixed");
        let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
        let socket = sidecar.socket.to_str().unwrap();
        let report = python_report(
            "questions.py",
            &[
                socket,
                "demo-project",
                "legacy",
                &json!([{"name": "ask"}, {"name": "record"}]).to_string(),
            ],
        );
        let asked = report["asked"].as_array().unwrap();
        let text = |i: usize| {
            report["results"][i]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        let received: Value = serde_json::from_str(&text(1)).unwrap();
        if mode == "session" {
            assert_eq!(asked.len(), 1, "{report}");
            assert!(text(0).contains("t0k3n"), "{report}");
            assert_eq!(
                received["received"][0]["session"], "odd-session",
                "{report}"
            );
            assert_eq!(
                received["received"][0]["result"]["content"]["token"], "t0k3n",
                "{report}"
            );
        } else {
            // Nobody was asked a question whose answer could go nowhere.
            assert!(asked.is_empty(), "{report}");
            let error = &report["results"][0]["structuredContent"]["error"];
            assert_eq!(error["kind"], "upstream_malformed", "{report}");
            assert_eq!(received["received"], json!([]), "{report}");
        }
    }
}

/// What `tests/python/headed_server.py` answers a call with: the `Mcp-*` headers the call
/// reached it with and every method it was asked.
fn provider_record(body: &str) -> Value {
    let text = message(body)["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("{body}"))
}

/// A 2026-07-28 provider's tools may mark arguments to travel as `Mcp-Param-*` headers
/// (`tests/python/headed_server.py`): a tool whose mark breaks the rules (an array) is not
/// offered, one whose mark keeps them is, and its call reaches the provider with the argument
/// in its header. A session caller's upstream is opened the same way: the provider refuses
/// `initialize` and is asked `server/discover`. The oracles: the sidecar's list, and the
/// headers and methods the provider itself recorded.
#[test]
fn a_tool_whose_argument_headers_break_the_rules_should_not_be_offered() {
    let server = capstan_testkit::PythonServer::start_script(
        "crates/capstan-sidecar/tests/python/headed_server.py",
    );
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document(
        "headed-binding",
        "headed",
        &endpoint,
        &["region_of", "tags_of"],
    );
    document["metadata"]["namespace"] = json!("demo-project");
    let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
    let headers = [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer t"),
    ];

    let mut list_headers = headers.to_vec();
    list_headers.push(("mcp-method", "tools/list"));
    let (status, body) = post(&sidecar, &list_headers, &modern(1, "tools/list", json!({})));
    assert_eq!(status, 200, "{body}");
    let names: Vec<String> = message(&body)["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .filter(|name| name.starts_with("headed"))
        .collect();
    assert_eq!(names, ["headed__region_of"], "{body}");

    let mut call_headers = headers.to_vec();
    call_headers.extend([
        ("mcp-method", "tools/call"),
        ("mcp-name", "headed__region_of"),
        ("mcp-param-region", "eu-west"),
    ]);
    let call = modern(
        2,
        "tools/call",
        json!({"name": "headed__region_of", "arguments": {"region": "eu-west"}}),
    );
    let (status, body) = post(&sidecar, &call_headers, &call);
    assert_eq!(status, 200, "{body}");
    let seen = provider_record(&body);
    assert_eq!(seen["headers"]["mcp-param-region"], "eu-west", "{seen}");
    assert_eq!(seen["headers"]["mcp-name"], "region_of", "{seen}");
    assert_eq!(seen["headers"]["mcp-protocol-version"], REVISION, "{seen}");

    // A session caller: its upstream session is opened with `initialize`, refused, then
    // `server/discover`; the tool with the broken mark is not offered to it either.
    let session = sidecar.curl_initialize("demo-project", "t");
    let (status, body) = sidecar.curl_in_session(
        &session,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).to_string(),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("headed__region_of") && !body.contains("headed__tags_of"),
        "{body}"
    );
    let (_, body) = sidecar.curl_in_session(
        &session,
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "headed__region_of", "arguments": {"region": "eu-west"}}})
        .to_string(),
    );
    let seen = provider_record(&body);
    let asked: Vec<&str> = seen["asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let initialize = asked.iter().position(|m| *m == "initialize");
    assert!(
        initialize.is_some_and(|at| asked.get(at + 1) == Some(&"server/discover")),
        "the provider should have been asked initialize, then server/discover: {asked:?}"
    );
}

/// A 2026-07-28 caller's `Mcp-Param-*` header must say what its body says (a proxy between the
/// caller and the sidecar routes on it): one that contradicts the body, or is missing for an
/// argument the tool marks, is refused with -32020 and 400 and reaches no provider; the same
/// call with the header right is served. The oracle: the provider's own record of what it was
/// asked (`tests/python/headed_server.py`).
#[test]
fn a_callers_argument_header_that_contradicts_its_body_should_reach_no_provider() {
    let server = capstan_testkit::PythonServer::start_script(
        "crates/capstan-sidecar/tests/python/headed_server.py",
    );
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document("headed-binding", "headed", &endpoint, &["region_of"]);
    document["metadata"]["namespace"] = json!("demo-project");
    let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
    let call = |id: u64, region: Option<&str>| {
        let mut headers = vec![
            (PROJECT_HEADER, "demo-project"),
            ("authorization", "Bearer t"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "headed__region_of"),
        ];
        if let Some(region) = region {
            headers.push(("mcp-param-region", region));
        }
        let body = modern(
            id,
            "tools/call",
            json!({"name": "headed__region_of", "arguments": {"region": "eu-west"}}),
        );
        post(&sidecar, &headers, &body)
    };
    for (id, region) in [
        (1, Some("us-east")),
        (2, None),
        (3, Some("=?base64?dXMtZWFzdA==?=")),
    ] {
        let (status, body) = call(id, region);
        assert_eq!(status, 400, "{region:?}: {body}");
        let error = &message(&body)["error"];
        assert_eq!(error["code"], -32020, "{region:?}: {body}");
        assert!(
            error["message"]
                .as_str()
                .unwrap_or_default()
                .contains("Mcp-Param-Region"),
            "{body}"
        );
    }
    let (status, body) = call(4, Some("eu-west"));
    assert_eq!(status, 200, "{body}");
    let seen = provider_record(&body);
    let calls = seen["asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|method| *method == "tools/call")
        .count();
    assert_eq!(
        calls, 1,
        "only the call with the right header reached it: {seen}"
    );
}
