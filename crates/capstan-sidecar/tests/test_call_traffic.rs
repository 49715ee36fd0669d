//! A call's own traffic through the sidecar (docs/mcp-surface.md): the provider's progress and log
//! messages about a call reach its caller under the caller's own progress token; the provider sees
//! a token Capstan minted, never the caller's; progress on a token that is not the call's never
//! reaches the caller; a question the provider asks mid-call is refused at once to a client that
//! did not declare the capability, and relayed to one that did, its answer going back to the
//! provider; a call the caller cancels is cancelled at the provider. The provider and the client
//! are both the Python `mcp` SDK, and the oracle is the same client run against the same server
//! directly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use capstan_testkit::PythonServer;
use capstan_testkit::sidecar::*;
use serde_json::{Value, json};

const SERVER: &str = "crates/capstan-sidecar/tests/python/chatty_server.py";

/// The server's tools, every one allowed.
const ALLOWED: [&str; 7] = [
    "count_steps",
    "ask_user",
    "confirm",
    "confirm_calls",
    "leak_progress",
    "wait_for_cancel",
    "cancelled_calls",
];

/// Runs `tests/python/traffic.py` against `target` (a socket path or a URL) and reads its
/// report; with `answers`, the client declares elicitation and answers "go".
fn traffic(target: &str, answers: bool) -> Value {
    let mut args = vec![target, "demo-project", "caller-token"];
    if answers {
        args.push("answers");
    }
    python_report("traffic.py", &args)
}

/// The client's reports against the chatty server directly and through a sidecar serving it
/// (every tool allowed), in that order.
fn directly_and_through(answers: bool) -> (Value, Value) {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document("chatty-binding", "chatty", &endpoint, &ALLOWED);
    document["metadata"]["namespace"] = json!("demo-project");
    let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
    let direct = traffic(&endpoint, answers);
    let through = traffic(sidecar.socket.to_str().unwrap(), answers);
    (direct, through)
}

#[test]
fn a_providers_progress_and_logs_should_reach_the_caller_and_nothing_else_should() {
    let (direct, through) = directly_and_through(false);

    // Progress and logs: what the client sees directly, it sees through Capstan.
    assert_eq!(
        direct["count"]["progress"].as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(through["count"]["progress"], direct["count"]["progress"]);
    assert_eq!(
        through["count"]["logs"],
        json!(["step 1 of 3", "step 2 of 3", "step 3 of 3"])
    );
    assert_eq!(through["count"]["logs"], direct["count"]["logs"]);

    // The provider saw Capstan's token, not the client's (the client's own, directly).
    let seen = &through["count"]["answer"]["token"];
    assert!(
        seen.as_str().is_some_and(|t| t.starts_with("capstan-")),
        "the provider saw {seen}"
    );
    assert!(direct["count"]["answer"]["token"].is_number());

    // Progress on another call's token (the one the first call was given) never reaches the
    // caller; the call's own does.
    assert_eq!(
        through["leak"]["progress"],
        json!([{"progress": 1.0, "total": 1.0, "message": "mine"}])
    );

    // A question mid-call to a client that declared no elicitation is refused at once as
    // "method not found"; the call completes.
    assert_eq!(through["ask"]["isError"], false);
    assert_eq!(through["ask"]["answer"]["outcome"], "error");
    assert_eq!(through["ask"]["answer"]["code"], -32601, "{through}");

    // A call the client gives up is cancelled at the provider, as it is directly.
    let cancelled = |report: &Value| {
        report["cancel"]["after"].as_i64().unwrap() - report["cancel"]["before"].as_i64().unwrap()
    };
    assert_eq!(cancelled(&direct), 1, "{direct}");
    assert_eq!(cancelled(&through), 1, "{through}");
    assert_ne!(through["cancel"]["outcome"], "answered");

    // Capstan takes logging/setLevel (a server without logging is not asked: directly it
    // refuses the method).
    assert_eq!(through["setLevel"], "ok");
    assert_eq!(direct["setLevel"], "Method not found");
}

/// A session-revision provider may assign no session (a stateless server): Capstan calls it
/// like any other, so what it says about a call reaches the caller. Such a server was once left
/// with rmcp's client, which passed none of it back.
#[test]
fn a_stateless_providers_progress_and_logs_should_reach_the_caller() {
    let server = PythonServer::start_script_with(SERVER, &["stateless"]);
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document("chatty-binding", "chatty", &endpoint, &ALLOWED);
    document["metadata"]["namespace"] = json!("demo-project");
    let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
    let report = |target: &str| python_report("progress.py", &[target, "demo-project", "t"]);
    let direct = report(&endpoint);
    let through = report(sidecar.socket.to_str().unwrap());

    // The oracle: the same client against the server itself.
    assert_eq!(
        direct["progress"].as_array().map(Vec::len),
        Some(3),
        "{direct}"
    );
    assert_eq!(through["isError"], false, "{through}");
    assert_eq!(through["progress"], direct["progress"], "{through}");
    assert_eq!(through["logs"], direct["logs"], "{through}");
    // Under Capstan's token, as with a server that keeps sessions.
    let seen = &through["answer"]["token"];
    assert!(
        seen.as_str().is_some_and(|t| t.starts_with("capstan-")),
        "the provider saw {seen}"
    );
}

/// A CA and a certificate for 127.0.0.1 that it signed, made with `openssl` in `dir`: the CA's
/// certificate, the server's certificate and the server's key.
fn certificates(dir: &Path, ca_name: &str) -> [PathBuf; 3] {
    let run = |args: &[&str]| {
        let output = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("running openssl");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let subject = format!("/CN={ca_name}");
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", &subject,
        ],
        &["-addext", "basicConstraints=critical,CA:TRUE"],
        &["-addext", "keyUsage=critical,keyCertSign"],
    ]
    .concat());
    run(&[
        &["req"][..],
        &ec,
        &["-keyout", "server.key", "-out", "server.csr"],
        &["-subj", "/CN=127.0.0.1"],
    ]
    .concat());
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    ["ca.crt", "server.crt", "server.key"].map(|file| dir.join(file))
}

/// A provider behind HTTPS: its calls go on TLS lanes (capstan-upstream `mcp/lane.rs`), so
/// this is that path's call traffic — progress and logs relayed, a question answered back to
/// the provider, a cancellation — with the outcomes the same client sees from the same server
/// over plain HTTP. Its certificate is checked: a
/// sidecar trusting another CA opens nothing there and says why.
#[test]
fn a_provider_behind_https_should_be_served_alike_and_only_under_a_trusted_certificate() {
    let dir = temp_dir("tls");
    let other_dir = dir.join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let [ca, cert, key] = certificates(&dir, "capstan-test-ca");
    let [other_ca, ..] = certificates(&other_dir, "another-test-ca");
    let server = PythonServer::start_script_with(
        SERVER,
        &["--tls", cert.to_str().unwrap(), key.to_str().unwrap()],
    );
    let endpoint = format!("https://{}/mcp", server.address);
    let mut document = binding_document("chatty-binding", "chatty", &endpoint, &ALLOWED);
    document["metadata"]["namespace"] = json!("demo-project");
    let hosts = [server.address.to_string()];
    let identity = [
        ("x-capstan-project", "demo-project"),
        ("authorization", "Bearer caller-token"),
    ];

    // The refusal: a sidecar trusting only another CA composes none of the server's tools,
    // and its composition names the server and the certificate.
    let untrusting = Sidecar::start(
        &json!([document]),
        &hosts,
        &[("SSL_CERT_FILE", other_ca.to_str().unwrap())],
    );
    let (code, composition, _) = untrusting.curl("GET", "/v1/composition", &identity, None);
    assert_eq!(code, 200, "{composition}");
    let composition: Value = serde_json::from_str(&composition).unwrap();
    let binding = &composition["bindings"][0];
    assert_eq!(binding["degraded"], true, "{composition}");
    assert_eq!(binding["exposed"], json!([]), "{composition}");
    assert_eq!(composition["tools"], json!([]), "{composition}");
    // The reason names the server's address and what is wrong with it, in the client's words.
    let reasons = binding["reasons"].to_string();
    assert!(
        reasons.contains(&endpoint) && reasons.contains("invalid peer certificate"),
        "{composition}"
    );
    drop(untrusting);

    // Trusting the server's CA: the same traffic as over plain HTTP, the oracle being the same
    // client against the same server script served over plain HTTP.
    let sidecar = Sidecar::start(
        &json!([document]),
        &hosts,
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    );
    let through = traffic(sidecar.socket.to_str().unwrap(), true);
    let plain = PythonServer::start_script(SERVER);
    let direct = traffic(&format!("http://{}/mcp", plain.address), true);
    assert_eq!(
        direct["count"]["progress"].as_array().map(Vec::len),
        Some(3),
        "{direct}"
    );
    assert_eq!(
        through["count"]["progress"], direct["count"]["progress"],
        "{through}"
    );
    assert_eq!(
        through["count"]["logs"], direct["count"]["logs"],
        "{through}"
    );
    let seen = &through["count"]["answer"]["token"];
    assert!(
        seen.as_str().is_some_and(|t| t.starts_with("capstan-")),
        "the provider saw {seen}"
    );
    assert_eq!(
        through["leak"]["progress"],
        json!([{"progress": 1.0, "total": 1.0, "message": "mine"}])
    );
    assert_eq!(
        direct["ask"]["answer"],
        json!({"outcome": "accept", "data": "go: What now?"})
    );
    // Through Capstan the question reached the client in the provider's name.
    assert_eq!(
        through["ask"]["answer"],
        json!({"outcome": "accept", "data": format!("go: {ASKER}What now?")}),
        "{through}"
    );
    let cancelled = |report: &Value| {
        report["cancel"]["after"].as_i64().unwrap() - report["cancel"]["before"].as_i64().unwrap()
    };
    assert_eq!(cancelled(&through), 1, "{through}");
    assert_ne!(through["cancel"]["outcome"], "answered");
}

#[test]
fn a_providers_question_should_reach_a_client_that_can_answer_and_its_answer_the_provider() {
    let (direct, through) = directly_and_through(true);

    // The provider got the client's own answer, through Capstan as directly — to the question
    // as the client saw it, in the provider's name (docs/mcp-surface.md "A provider's
    // questions").
    assert_eq!(
        direct["ask"]["answer"],
        json!({"outcome": "accept", "data": "go: What now?"})
    );
    assert_eq!(
        through["ask"]["answer"],
        json!({"outcome": "accept", "data": format!("go: {ASKER}What now?")}),
        "{through}"
    );
}

/// How the chatty provider's questions open through Capstan.
const ASKER: &str = "chatty-binding.example (binding chatty-binding, MCP server chatty) asks: ";

/// Runs `tests/python/input_required.py` against `target` in `mode` (`legacy` or
/// `2026-07-28`); with `answers`, the client declares elicitation and answers "go".
fn input_required(target: &str, mode: &str, answers: bool) -> Value {
    let mut args = vec![target, "demo-project", mode];
    if answers {
        args.push("answers");
    }
    python_report("input_required.py", &args)
}

#[test]
fn a_providers_question_should_reach_the_caller_in_its_own_revision_and_the_answer_the_provider() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document("chatty-binding", "chatty", &endpoint, &ALLOWED);
    document["metadata"]["namespace"] = json!("demo-project");
    document["spec"]["tools"]["mcpServers"][0]["promptSelector"] = json!({"include": ["approve"]});
    let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
    let socket = sidecar.socket.to_str().unwrap();
    let answered = json!([{"type": "text", "text": "{\"answer\": \"go: Proceed?\"}"}]);

    // The oracle: the same client against the server directly. In 2026-07-28 the server
    // answers `input_required` and the client calls again with its answer and the server's
    // request state (two requests, one a retry); in a session revision it asks mid-call.
    let direct = input_required(&endpoint, "2026-07-28", true);
    assert_eq!(direct["result"]["content"], answered, "{direct}");
    assert_eq!(
        direct["server"],
        json!({"count": 1 + 1, "retries": 1}),
        "{direct}"
    );
    // The `approve` prompt asks the same way; the server reads its own request state back.
    let approved = json!([{"role": "user", "content": {"type": "text",
        "text": "approved: go: Approve? (state approve-1)"}}]);
    assert_eq!(direct["prompt"]["messages"], approved, "{direct}");

    // Through Capstan, a 2026-07-28 caller: the result passed to it, its retry to the
    // provider (which checks its own request state), the same answer.
    // The questions reach the caller in the provider's name.
    let answered = json!([{"type": "text",
        "text": format!("{{\"answer\": \"go: {ASKER}Proceed?\"}}")}]);
    let approved = json!([{"role": "user", "content": {"type": "text",
        "text": format!("approved: go: {ASKER}Approve? (state approve-1)")}}]);
    let through = input_required(socket, "2026-07-28", true);
    assert_eq!(through["result"]["content"], answered, "{through}");
    assert_eq!(
        through["server"],
        json!({"count": 2 + 2, "retries": 2}),
        "{through}"
    );
    assert_eq!(through["prompt"]["messages"], approved, "{through}");

    // A session-revision caller through Capstan is asked mid-call: one request, no retry.
    let legacy = input_required(socket, "legacy", true);
    assert_eq!(legacy["result"]["content"], answered, "{legacy}");
    assert_eq!(
        legacy["server"],
        json!({"count": 5, "retries": 2}),
        "{legacy}"
    );
    // The prompt asks only in 2026-07-28 (in a session revision the server itself refuses
    // its own answer): its error reaches a session's client as the server gave it.
    assert_eq!(
        legacy["prompt_error"],
        json!({"code": -32603, "message": "Handler returned an invalid result"}),
        "{legacy}"
    );

    // A 2026-07-28 caller that declared no elicitation: the provider sees no such capability
    // (Capstan's own are never offered in its place) and refuses, as it does directly.
    let direct = input_required(&endpoint, "2026-07-28", false);
    assert_eq!(direct["error"]["code"], -32021, "{direct}");
    // Through Capstan the same error, as the revision says a server reports it: -32021 with
    // the capabilities required.
    let through = input_required(socket, "2026-07-28", false);
    assert_eq!(through["error"]["code"], -32021, "{through}");
    assert_eq!(
        through["error"]["data"]["requiredCapabilities"],
        direct["error"]["data"]["requiredCapabilities"],
        "{through} / {direct}"
    );
    let message = through["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("did not declare the form elicitation capability"),
        "{through}"
    );
    assert_eq!(through["server"]["retries"], 2, "{through}");
}

/// Found attacking the `input_required` pass-through as a hostile caller: a routed call's retry
/// was routed again, so it could carry one provider's `requestState` and the caller's answers
/// to another provider of the capability; then a state was looked up across the whole task, so
/// `cap__A`'s could be sent to `cap__B`, metered as `cap__A`. Capstan now seals every state it
/// hands a caller with who asked, for that caller and that name (`task/request_states.rs`): a retry
/// goes back to the provider that asked if it is still eligible, and a state that does not
/// verify — forged, another capability's, another caller's — is a JSON-RPC error that reaches
/// no provider.
#[test]
fn a_routed_calls_retry_should_go_back_to_the_provider_that_asked_and_a_foreign_state_nowhere() {
    let asker = PythonServer::start_script(SERVER);
    let other = PythonServer::start_script(SERVER);
    let document = |binding: &str, server: &str, at: &PythonServer| {
        let endpoint = format!("http://{}/mcp", at.address);
        let tools = ["create_issue", "confirm_calls"];
        let mut document = binding_document(binding, server, &endpoint, &tools);
        document["metadata"]["namespace"] = json!("demo-project");
        document["spec"]["tools"]["mcpServers"][0]["capabilities"] = json!([
            {"capabilityId": "cap.issue.create", "tool": "create_issue"},
            {"capabilityId": "cap.web.search", "tool": "confirm_calls"},
        ]);
        document
    };
    let documents = json!([
        document("asker-binding", "asker", &asker),
        document("other-binding", "other", &other)
    ]);
    let hosts = [asker.address.to_string(), other.address.to_string()];
    let sidecar = Sidecar::start(&documents, &hosts, &[]);
    // One request of the caller holding `token`; its JSON-RPC message.
    let call_as = |token: &str, id: u64, params: Value| -> Value {
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "curl", "version": "1"},
        });
        let name = params["name"].as_str().unwrap().to_owned();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let authorization = format!("Bearer {token}");
        let headers = [
            ("mcp-protocol-version", "2026-07-28"),
            (PROJECT_HEADER, "demo-project"),
            ("authorization", authorization.as_str()),
            ("mcp-method", "tools/call"),
            ("mcp-name", name.as_str()),
        ];
        let (status, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(&body.to_string()));
        assert_eq!(status, 200, "{body}");
        body.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .or_else(|| serde_json::from_str(&body).ok())
            .unwrap_or_else(|| panic!("{body}"))
    };
    let call = |id: u64, params: Value| call_as("t", id, params);
    let counts = |id: u64, server: &str| -> Value {
        let result = call(
            id,
            json!({"name": format!("{server}__confirm_calls"), "arguments": {}}),
        )["result"]
            .clone();
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
    };
    let refused_as_unverified = |message: &Value| {
        let error = &message["error"];
        assert_eq!(error["code"], -32602, "{message}");
        assert_eq!(error["data"]["field"], "requestState", "{message}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("failed integrity verification"),
            "{message}"
        );
    };

    // The first call goes to the asker, which asks.
    let asked = call(
        1,
        json!({"name": "cap__issue_create",
               "arguments": {"title": "t", "route": {"only": ["asker-binding"]}}}),
    )["result"]
        .clone();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let state = asked["requestState"].as_str().unwrap().to_owned();
    let key = asked["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let responses = json!({key: {"action": "accept", "content": {"answer": "go"}}});
    let retry = |name: &str, route: Option<Value>, state: &str| {
        let mut arguments = if name == "cap__web_search" {
            json!({"query": "q"})
        } else {
            json!({"title": "t"})
        };
        if let Some(route) = route {
            arguments["route"] = route;
        }
        json!({"name": name, "arguments": arguments,
               "inputResponses": responses, "requestState": state})
    };

    // Nothing that does not verify reaches a provider: a forged state, the state tampered, the
    // state sent to another capability, or by another caller.
    refused_as_unverified(&call(2, retry("cap__issue_create", None, "forged")));
    refused_as_unverified(&call(
        3,
        retry("cap__issue_create", None, &format!("{state}-TAMPERED")),
    ));
    refused_as_unverified(&call(4, retry("cap__web_search", None, &state)));
    refused_as_unverified(&call_as("u", 5, retry("cap__issue_create", None, &state)));
    // Answers without the state cannot be routed anywhere.
    let unstated = call(
        6,
        json!({"name": "cap__issue_create", "arguments": {"title": "t"},
               "inputResponses": responses}),
    )["result"]
        .clone();
    assert_eq!(
        unstated["structuredContent"]["error"]["field"], "requestState",
        "{unstated}"
    );
    // A retry whose route now excludes the asker is refused: eligibility is judged again.
    let excluded = call(
        7,
        retry(
            "cap__issue_create",
            Some(json!({"only": ["other-binding"]})),
            &state,
        ),
    )["result"]
        .clone();
    assert_eq!(excluded["isError"], true, "{excluded}");
    assert_eq!(
        excluded["structuredContent"]["error"]["code"], "asker_not_eligible",
        "{excluded}"
    );
    // By the providers' own counts, none of the above reached either; and none was metered
    // (a state crossing capabilities was once forwarded, metered as the capability that asked).
    assert_eq!(counts(8, "asker"), json!({"count": 1, "retries": 0}));
    assert_eq!(counts(9, "other"), json!({"count": 0, "retries": 0}));
    let routed: Vec<Value> = sidecar
        .meter_events()
        .into_iter()
        .filter(|event| event.get("capability").is_some_and(|c| !c.is_null()))
        .collect();
    assert_eq!(
        routed.len(),
        1,
        "only the first call was forwarded: {routed:?}"
    );

    // The retry itself goes back to the asker, which reads its own state.
    let answered = call(10, retry("cap__issue_create", None, &state))["result"].clone();
    assert_eq!(
        answered["content"][0]["text"], "{\"title\": \"t\", \"answer\": \"go\"}",
        "{answered}"
    );
    assert_eq!(counts(11, "asker"), json!({"count": 2, "retries": 1}));
    assert_eq!(counts(12, "other"), json!({"count": 0, "retries": 0}));
}

#[test]
fn a_callers_per_request_log_level_should_reach_its_provider_in_2026_07_28() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document("chatty-binding", "chatty", &endpoint, &ALLOWED);
    document["metadata"]["namespace"] = json!("demo-project");
    let sidecar = Sidecar::start(&json!([document]), &[server.address.to_string()], &[]);
    let socket = sidecar.socket.to_str().unwrap();
    let steps = json!(["step 1 of 3", "step 2 of 3", "step 3 of 3"]);
    // The provider logs each step at `info` and sends what the request's level lets through:
    // the oracle is the same client directly.
    for (level, expected) in [("info", steps.clone()), ("error", json!([]))] {
        let direct = python_report("levels.py", &[&endpoint, "demo-project", level]);
        assert_eq!(direct["logs"], expected, "directly at {level}");
        let through = python_report("levels.py", &[socket, "demo-project", level]);
        assert_eq!(through["logs"], expected, "through Capstan at {level}");
    }
}

/// A provider's question waits for the person, not against the provider's time: with a 1 s
/// call limit, a question answered after 2 s still completes the call. A question nobody
/// answers within the question timeout ends the call as `unanswered` (naming what was asked and
/// the setting), not as the provider's `upstream_unavailable` at the call limit.
#[test]
fn a_question_should_wait_for_the_person_and_an_unanswered_one_say_so() {
    let server = PythonServer::start_script(SERVER);
    let endpoint = format!("http://{}/mcp", server.address);
    let mut document = binding_document("chatty-binding", "chatty", &endpoint, &ALLOWED);
    document["metadata"]["namespace"] = json!("demo-project");
    let run = |question_timeout: &str, delay: &str| {
        let sidecar = Sidecar::start(
            &json!([document]),
            &[server.address.to_string()],
            &[
                ("CAPSTAN_CALL_TIMEOUT_SECONDS", "1"),
                ("CAPSTAN_QUESTION_TIMEOUT_SECONDS", question_timeout),
            ],
        );
        let calls = json!([{"name": "chatty__ask_user"}]).to_string();
        let socket = sidecar.socket.to_str().unwrap().to_owned();
        python_report(
            "questions.py",
            &[&socket, "demo-project", "legacy", &calls, delay],
        )
    };

    // Answered after 2 s: twice the call's own limit, well within the question's.
    let answered = run("30", "2");
    let text = answered["results"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("\"outcome\": \"accept\""), "{answered}");
    assert_eq!(answered["results"][0]["isError"], false, "{answered}");

    // Never answered in time (the client takes 10 s, the question may wait 2 s).
    let unanswered = run("2", "10");
    let error = &unanswered["results"][0]["structuredContent"]["error"];
    assert_eq!(error["kind"], "unanswered", "{unanswered}");
    assert_eq!(error["retryable"], true, "{unanswered}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("elicitation/create")
            && message.contains("CAPSTAN_QUESTION_TIMEOUT_SECONDS"),
        "{message}"
    );
}
