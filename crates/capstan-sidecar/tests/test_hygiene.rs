//! The sidecar's edges: identity on every request (raw HTTP with curl), bad input, and socket
//! hygiene.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use capstan_testkit::sidecar::*;
use serde_json::Value;

const CALL: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"streamco__streams_list","arguments":{}}}"#;
const VERSIONS: [&str; 5] = [
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
    "2026-07-28",
];

fn streamco_sidecar() -> (DemoProvider, Sidecar) {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    (provider, sidecar)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_call_without_initialize_should_be_refused_for_every_revision() {
    let (provider, sidecar) = streamco_sidecar();
    for version in VERSIONS {
        let (code, body, _) = sidecar.curl(
            "POST",
            "/mcp",
            &[
                (PROJECT_HEADER, "demo-project"),
                ("authorization", "Bearer t"),
                ("mcp-protocol-version", version),
            ],
            Some(CALL),
        );
        assert_eq!(code, 400, "{version}: {body}");
        // A session revision needs its session; 2026-07-28 has none, but its requests must
        // name their method in a header and carry their own `_meta`, which this one lacks.
        let expected = if version == "2026-07-28" {
            "missing required Mcp-Method header"
        } else {
            "no MCP session: send `initialize` first"
        };
        assert!(body.contains(expected), "{version}: {body}");
    }
    assert!(provider.tool_calls().await.is_empty());
}

#[test]
fn a_request_without_a_project_should_be_refused() {
    let (_provider, sidecar) = streamco_sidecar();
    let session = sidecar.curl_initialize("demo-project", "t");
    for version in VERSIONS {
        let (code, body, _) = sidecar.curl(
            "POST",
            "/mcp",
            &[
                ("authorization", "Bearer t"),
                ("mcp-session-id", &session),
                ("mcp-protocol-version", version),
            ],
            Some(CALL),
        );
        assert_eq!(code, 400, "{body}");
        assert!(
            body.contains("the x-capstan-project header is missing"),
            "{body}"
        );
    }
    let (code, body, _) = sidecar.curl("GET", "/v1/composition", &[], None);
    assert_eq!(code, 400, "{body}");
}

#[test]
fn another_token_or_project_in_a_session_should_be_refused() {
    let (_provider, sidecar) = streamco_sidecar();
    let session = sidecar.curl_initialize("demo-project", "token-a");
    for version in VERSIONS {
        for (project, token) in [("demo-project", "token-b"), ("other-project", "token-a")] {
            let (code, body, _) = sidecar.curl(
                "POST",
                "/mcp",
                &[
                    (PROJECT_HEADER, project),
                    ("authorization", &format!("Bearer {token}")),
                    ("mcp-session-id", &session),
                    ("mcp-protocol-version", version),
                ],
                Some(CALL),
            );
            assert_eq!(code, 403, "{project}/{token}: {body}");
            assert_refusal(
                &body,
                "forbidden",
                "this session belongs to another project or caller",
            );
        }
        // No token at all is another caller too.
        let (code, body, _) = sidecar.curl(
            "POST",
            "/mcp",
            &[
                (PROJECT_HEADER, "demo-project"),
                ("mcp-session-id", &session),
                ("mcp-protocol-version", version),
            ],
            Some(CALL),
        );
        assert_eq!(code, 403, "{body}");
        assert_refusal(
            &body,
            "forbidden",
            "this session belongs to another project or caller",
        );
    }
    // The rightful caller still gets through.
    let (code, body, _) = sidecar.curl(
        "POST",
        "/mcp",
        &[
            (PROJECT_HEADER, "demo-project"),
            ("authorization", "Bearer token-a"),
            ("mcp-session-id", &session),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        Some(CALL),
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"result\""), "{body}");
}

/// The headers of a request in `session` of caller `t` in project `demo-project`.
fn in_session(session: &str) -> [(&'static str, &str); 4] {
    [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer t"),
        ("mcp-session-id", session),
        ("mcp-protocol-version", "2025-11-25"),
    ]
}

#[test]
fn bad_input_should_get_clear_errors_and_the_sidecar_keep_serving() {
    let (_provider, mut sidecar) = streamco_sidecar();
    let session = sidecar.curl_initialize("demo-project", "t");
    let headers = in_session(&session);
    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(r#"{"jsonrpc":"#));
    assert_eq!(code, 400);
    assert!(
        body.contains("-32700") && body.contains("parse error"),
        "{body}"
    );

    let (_, body, _) = sidecar.curl(
        "POST",
        "/mcp",
        &headers,
        Some(r#"{"jsonrpc":"2.0","id":3,"method":"bogus/method"}"#),
    );
    assert!(body.contains("-32601"), "{body}");

    let (_, body, _) = sidecar.curl(
        "POST",
        "/mcp",
        &headers,
        Some(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope"}}"#),
    );
    assert!(
        body.contains(r#"no tool named \"nope\" is available"#),
        "{body}"
    );

    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"streamco__streams_get","arguments":{{"name":"{}"}}}}}}"#,
        "x".repeat(5 * 1024 * 1024)
    );
    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(&huge));
    assert_eq!(code, 413, "{}", &body[..body.len().min(200)]);
    assert!(body.contains("exceeds 4194304 bytes"), "{body}");

    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers[1..], Some(CALL));
    assert_eq!(code, 400, "{body}");

    assert!(sidecar.is_running());
    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(CALL));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("clickstream"), "{body}");
    let (code, body, _) = sidecar.curl("GET", "/healthz", &[], None);
    assert_eq!((code, body.as_str()), (200, "ok\n"));
}

/// A request body of megabytes is served on a thread of its own (`edge/gate/large.rs`), so the
/// other sessions' requests keep the worker: the call reaches the provider and its answer the
/// caller byte for byte, a malformed one is refused as the worker refuses it, and the sidecar
/// has started that thread (it exists only once such a request came).
#[test]
fn a_large_request_should_be_served_whole_on_its_own_thread() {
    let (_provider, sidecar) = streamco_sidecar();
    let threads = || {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", sidecar.pid())).unwrap();
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_owned())
            .collect::<Vec<_>>()
    };
    let session = sidecar.curl_initialize("demo-project", "t");
    let headers = in_session(&session);
    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(CALL));
    assert_eq!(code, 200, "{body}");
    assert!(
        !threads().contains(&"capstan-large".to_owned()),
        "{:?}",
        threads()
    );

    let name: String = (0..3 * 1024 * 1024)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"streamco__streams_get","arguments":{{"name":"{name}"}}}}}}"#
    );
    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(&call));
    assert_eq!(code, 200, "{}", &body[..body.len().min(300)]);
    // The provider answers that no stream has that name, quoting it whole.
    assert!(
        body.contains(&format!(r#"no stream named \"{name}\""#)),
        "{}",
        &body[..300]
    );
    assert!(
        threads().contains(&"capstan-large".to_owned()),
        "{:?}",
        threads()
    );

    let malformed = format!(r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":"{name}"#);
    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(&malformed));
    assert_eq!(code, 400, "{}", &body[..body.len().min(300)]);
    assert!(body.contains("-32700"), "{}", &body[..body.len().min(300)]);
    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(CALL));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("clickstream"), "{body}");
}

/// What the sidecar serves in no way is refused with the status a client reads, and what a
/// revision does not have is an unknown method in it: a batch (no revision served has them),
/// an id that is no id, an answer nobody asked for, an HTTP method MCP does not use; `ping`
/// and `resources/subscribe` without a session (2026-07-28 has neither), 404 there as that
/// revision answers an unknown method, and `subscriptions/listen` inside a session.
#[test]
fn what_no_revision_serves_should_be_refused_as_each_revision_says() {
    let (_provider, sidecar) = streamco_sidecar();
    let session = sidecar.curl_initialize("demo-project", "t");
    let in_session = [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer t"),
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#;
    let (code, body, _) = sidecar.curl("POST", "/mcp", &in_session, Some(batch));
    assert_eq!(code, 415, "{body}");
    let bad_id = r#"{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}"#;
    let (code, body, _) = sidecar.curl("POST", "/mcp", &in_session, Some(bad_id));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("-32600"), "{body}");
    let (code, _, headers) = sidecar.curl("PUT", "/mcp", &in_session, Some("{}"));
    assert_eq!(code, 405);
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("allow: get, post, delete"),
        "{headers}"
    );
    let listen =
        r#"{"jsonrpc":"2.0","id":2,"method":"subscriptions/listen","params":{"notifications":{}}}"#;
    let (code, body, _) = sidecar.curl("POST", "/mcp", &in_session, Some(listen));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("-32601"), "{body}");
    let ping = r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#;
    let (code, body, _) = sidecar.curl("POST", "/mcp", &in_session, Some(ping));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""result":{}"#), "{body}");

    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
    for (method, params) in [
        ("ping", String::new()),
        ("resources/subscribe", r#""uri":"capstan://x","#.to_owned()),
        ("no/such-method", String::new()),
    ] {
        let mut sessionless = vec![
            (PROJECT_HEADER, "demo-project"),
            ("authorization", "Bearer t"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
        ];
        if method == "resources/subscribe" {
            sessionless.push(("mcp-name", "capstan://x"));
        }
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"{method}","params":{{{params}{meta}}}}}"#
        );
        let (code, body, _) = sidecar.curl("POST", "/mcp", &sessionless, Some(&request));
        assert_eq!(code, 404, "{method}: {body}");
        assert!(body.contains("-32601"), "{method}: {body}");
    }
    let answer = r#"{"jsonrpc":"2.0","id":9,"result":{}}"#;
    let sessionless = [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer t"),
        ("mcp-protocol-version", "2026-07-28"),
    ];
    let (code, body, _) = sidecar.curl("POST", "/mcp", &sessionless, Some(answer));
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("does not accept JSON-RPC responses"),
        "{body}"
    );
}

#[test]
fn the_socket_should_be_0660_and_a_stale_one_replaced() {
    let provider = DemoProvider::start(&[]);
    let mut first = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let mode = std::fs::metadata(&first.socket)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o660);
    // A crash (SIGKILL) leaves the socket file behind; the next start replaces it.
    first.kill();
    assert!(first.socket.exists());
    let fixture = first.dir.join("documents.json");
    let second = Sidecar::start_at(
        &first.dir,
        &first.socket,
        &fixture,
        &first.metering,
        &[provider.host()],
        &[],
    );
    let (code, _, _) = second.curl("GET", "/healthz", &[], None);
    assert_eq!(code, 200);
    std::mem::forget(first); // its directory belongs to `second` now
}

#[test]
fn a_regular_file_at_the_socket_path_should_not_be_deleted() {
    let dir = temp_dir("file");
    let socket = dir.join("composer.sock");
    std::fs::write(&socket, "precious").unwrap();
    let fixture = repo_root().join("examples/streamco/capability-documents.json");
    let output = Sidecar::command(&socket, &fixture, &dir.join("m.jsonl"), &[], &[])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is not a socket; it was left alone"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "precious");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tool_call_in_a_session_should_be_answered_with_json_and_its_headers_checked() {
    let (_provider, sidecar) = streamco_sidecar();
    let session = sidecar.curl_initialize("demo-project", "t");
    let headers = |version: &'static str| {
        [
            (PROJECT_HEADER, "demo-project"),
            ("authorization", "Bearer t"),
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", version),
        ]
    };
    let (code, body, response_headers) =
        sidecar.curl("POST", "/mcp", &headers("2025-11-25"), Some(CALL));
    assert_eq!(code, 200, "{body}");
    assert!(
        response_headers
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{response_headers}"
    );
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["jsonrpc"], "2.0");
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["result"]["isError"], false, "{body}");

    // A revision without sessions inside a session, one the sidecar does not speak, or a
    // method header contradicting the body.
    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers("2026-07-28"), Some(CALL));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("MCP-Protocol-Version"), "{body}");
    let (code, body, _) = sidecar.curl("POST", "/mcp", &headers("2099-01-01"), Some(CALL));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("MCP-Protocol-Version"), "{body}");
    let mut contradicting = headers("2025-11-25").to_vec();
    contradicting.push(("mcp-method", "tools/list"));
    let (code, body, _) = sidecar.curl("POST", "/mcp", &contradicting, Some(CALL));
    assert_eq!(code, 400, "{body}");

    // Malformed params are a JSON-RPC error, not a crash.
    let (code, body, _) = sidecar.curl(
        "POST",
        "/mcp",
        &headers("2025-11-25"),
        Some(r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"arguments":{}}}"#),
    );
    assert_eq!(code, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["id"], "x");
    assert_eq!(answer["error"]["code"], -32602, "{body}");
}

fn assert_session_not_found(code: u16, body: &str, what: &str) {
    assert_eq!(code, 404, "{what}: {body}");
    let answer: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    assert_eq!(answer["error"]["code"], -32001, "{what}: {body}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("send `initialize` to start a new one"),
        "{what}: {body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn session_ids_that_are_not_bound_should_be_refused_with_404_before_anything_runs() {
    let (provider, sidecar) = streamco_sidecar();
    let ended = sidecar.curl_initialize("demo-project", "t");
    let headers = |id: &str| {
        [
            (PROJECT_HEADER, "demo-project".to_owned()),
            ("authorization", "Bearer t".to_owned()),
            ("mcp-session-id", id.to_owned()),
            ("mcp-protocol-version", "2025-11-25".to_owned()),
        ]
    };
    let (code, _, _) = sidecar.curl(
        "DELETE",
        "/mcp",
        &headers(&ended)
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<Vec<_>>(),
        None,
    );
    assert_eq!(code, 204);
    let before = provider.mcp_requests("POST").await;
    for id in ["made-up-session", ended.as_str()] {
        let headers = headers(id);
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        for body in [
            CALL,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
        ] {
            let (code, answer, _) = sidecar.curl("POST", "/mcp", &headers, Some(body));
            assert_session_not_found(code, &answer, &format!("{id} {body}"));
        }
        let (code, answer, _) = sidecar.curl("GET", "/v1/composition", &headers, None);
        assert_session_not_found(code, &answer, &format!("{id} /v1/composition"));
    }
    // Not one of those requests reached the provider.
    assert_eq!(provider.mcp_requests("POST").await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn projects_that_are_not_project_names_should_be_refused_before_any_source_is_asked() {
    let api = RecordingProviderApi::start(serde_json::json!([])).await;
    let sidecar = Sidecar::start(
        &serde_json::json!([]),
        &[],
        &[
            ("CAPABILITY_SOURCE", "http"),
            ("CAPABILITY_PROVIDER_URL", &api.url),
        ],
    );
    let long = "a".repeat(254);
    for project in [
        "..",
        ".",
        "a/b",
        "%2e%2e",
        "A",
        "a..b",
        long.as_str(),
        "projé",
    ] {
        let headers = [(PROJECT_HEADER, project), ("authorization", "Bearer t")];
        let (code, body, _) = sidecar.curl("POST", "/mcp", &headers, Some(INITIALIZE));
        assert_eq!(code, 400, "{project}: {body}");
        assert!(
            body.contains("a project name is a Kubernetes object name (DNS-1123 subdomain)"),
            "{project}: {body}"
        );
        let (code, body, _) = sidecar.curl("GET", "/v1/composition", &headers, None);
        assert_eq!(code, 400, "{project}: {body}");
    }
    assert_eq!(api.count(), 0, "the provider API was asked");
    // The oracle works: a project name is passed on.
    let (code, body, _) = sidecar.curl(
        "POST",
        "/mcp",
        &[(PROJECT_HEADER, "a.b-c"), ("authorization", "Bearer t")],
        Some(INITIALIZE),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(api.count(), 1);
}

/// The three caps at their defaults (1,024 places, 256 per caller, 512 per project): four
/// callers, two projects, fill the sidecar; then the sidecar's cap refuses (503), a full
/// caller is refused wherever it goes and a full project whoever asks (429), each naming its
/// setting; every open session is still served, and ending one frees its place.
#[test]
fn sessions_beyond_a_cap_should_be_refused_naming_the_cap_and_the_open_ones_served() {
    // No documents: sessions are cheap, the caps are what is tested.
    let sidecar = Sidecar::start(&serde_json::json!([]), &[], &[]);
    let initialize = |project: &str, token: &str| {
        sidecar.raw(
            "POST",
            "/mcp",
            &[
                (PROJECT_HEADER, project),
                ("authorization", &format!("Bearer {token}")),
            ],
            INITIALIZE,
        )
    };
    let refusal = |project: &str, token: &str, status: u16, message: &str| {
        let (code, head, body) = initialize(project, token);
        assert_eq!(code, status, "{project} {token}: {body}");
        assert_eq!(header_value(&head, "retry-after").as_deref(), Some("5"));
        assert_refusal(&body, "unavailable", message);
    };
    let mut ids = Vec::new();
    let mut open = |project: &str, token: &str| {
        for _ in 0..256 {
            let (code, head, body) = initialize(project, token);
            assert_eq!(code, 200, "{body}");
            let id = header_value(&head, "mcp-session-id").expect("a session id");
            ids.push((project.to_owned(), token.to_owned(), id));
        }
    };
    // One caller fills its share and is refused wherever it goes next.
    open("p0", "t0");
    refusal(
        "p2",
        "t0",
        429,
        "this caller (bearer token) holds 256 sessions, tasks and streams, the most one caller \
         may (CAPSTAN_MAX_SESSIONS_PER_CALLER)",
    );
    // A second caller fills project p0, which then refuses whoever asks.
    open("p0", "t2");
    refusal(
        "p0",
        "t5",
        429,
        "project p0 holds 512 sessions, tasks and streams, the most one project may \
         (CAPSTAN_MAX_SESSIONS_PER_PROJECT)",
    );
    // Two more callers in p1 fill the sidecar.
    open("p1", "t1");
    open("p1", "t3");
    refusal(
        "p2",
        "t4",
        503,
        "1024 sessions, tasks and streams are open, the most this sidecar serves \
         (CAPSTAN_MAX_SESSIONS)",
    );
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    for (project, token, id) in &ids {
        let (code, _, body) = sidecar.raw(
            "POST",
            "/mcp",
            &[
                (PROJECT_HEADER, project),
                ("authorization", &format!("Bearer {token}")),
                ("mcp-session-id", id),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            list,
        );
        assert_eq!(code, 200, "{body}");
        assert!(body.contains(r#""tools":[]"#), "{body}");
    }
    // Ending one session frees its place (for its caller, in its project).
    let (project, token, id) = &ids[0];
    let (code, _, _) = sidecar.raw(
        "DELETE",
        "/mcp",
        &[
            (PROJECT_HEADER, project),
            ("authorization", &format!("Bearer {token}")),
            ("mcp-session-id", id),
        ],
        "",
    );
    assert_eq!(code, 204);
    let mut admitted = false;
    for _ in 0..100 {
        let (code, _, _) = initialize(project, token);
        if code == 200 {
            admitted = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(admitted, "the ended session's place was not freed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_other_than_localhost_should_be_refused_on_every_path() {
    let (provider, sidecar) = streamco_sidecar();
    let session = sidecar.curl_initialize("demo-project", "t");
    let before = provider.tool_calls().await;
    let identity = [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer t"),
    ];
    let in_session = [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer t"),
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    for host in [
        "evil.example",
        "127.0.0.1",
        "localhost.evil.example",
        "localhost:x",
    ] {
        for (method, path, headers, body) in [
            ("POST", "/mcp", &identity[..], Some(INITIALIZE)),
            // A tools/call in a session: answered before rmcp's own Host check.
            ("POST", "/mcp", &in_session[..], Some(CALL)),
            ("POST", "/mcp", &in_session[..], Some(list)),
            ("GET", "/mcp", &in_session[..], None),
            ("DELETE", "/mcp", &in_session[..], None),
            ("GET", "/v1/composition", &identity[..], None),
            ("GET", "/healthz", &[][..], None),
        ] {
            let mut headers = headers.to_vec();
            headers.push(("host", host));
            let (code, answer, _) = sidecar.curl(method, path, &headers, body);
            assert_eq!(code, 403, "{host} {method} {path}: {answer}");
            assert!(
                answer.contains("the Host header must be localhost"),
                "{host} {method} {path}: {answer}"
            );
        }
    }
    assert_eq!(provider.tool_calls().await, before);
    // With the right Host the same session (not ended by the refused DELETE) is served.
    let (code, answer, _) = sidecar.curl("POST", "/mcp", &in_session, Some(CALL));
    assert_eq!(code, 200, "{answer}");
    let mut expected = before;
    expected.push("streams_list".to_owned());
    assert_eq!(provider.tool_calls().await, expected);
}

/// A request refused before its body is needed is still answered: the sidecar reads the body
/// before it sends the refusal, so a client that writes the body after its headers (Python's
/// http.client) reads the 400/401/403 instead of a broken pipe.
#[test]
fn a_refusal_should_reach_a_client_that_writes_its_body_after_its_headers() {
    let (provider, sidecar) = streamco_sidecar();
    let output = std::process::Command::new("python3")
        .arg(repo_root().join("crates/capstan-sidecar/tests/python/refused.py"))
        .arg(&sidecar.socket)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 10, "{lines:?}");
    // The refusal each case must read, in the order refused.py sends them.
    let expected = [
        (400, "the x-capstan-project header: "),
        (400, "the x-capstan-project header: "),
        (400, "the x-capstan-project header: "),
        (400, "the x-capstan-project header: "),
        (400, "the x-capstan-project header: "),
        (400, "the x-capstan-project header is missing"),
        (401, "the Authorization header must be `Bearer <token>`"),
        (401, "the Authorization header must be `Bearer <token>`"),
        (403, "the Host header must be localhost"),
        (400, "the x-capstan-project header: "),
    ];
    for (line, (status, message)) in lines.iter().zip(expected) {
        assert_eq!(line["status"], status, "{line}");
        assert_refusal(line["body"].as_str().unwrap(), "forbidden", message);
    }
    drop(provider);
}

/// Each start-up step refuses the setting it cannot use: the sidecar exits non-zero, before it
/// serves, with a message naming the setting. One wrong setting at a time, the rest valid (a
/// readable fixture); each start bounded, so a sidecar that serves anyway fails the test
/// rather than hanging it.
#[test]
fn a_setting_that_cannot_be_used_should_stop_the_sidecar_naming_it() {
    let dir = temp_dir("bad-settings");
    let fixture = dir.join("fixture.json");
    std::fs::write(&fixture, "[]").unwrap();
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("CAPABILITY_DOCS_FIXTURE", "/nonexistent/fixture.json")],
            "fixture /nonexistent/fixture.json is not a readable file",
        ),
        (
            &[("CAPABILITY_SOURCE", "http")],
            "CAPABILITY_SOURCE=http needs CAPABILITY_PROVIDER_URL",
        ),
        (
            &[("CAPSTAN_PROJECT_HEADER", "not a header")],
            "CAPSTAN_PROJECT_HEADER \"not a header\" is not a header name",
        ),
        (
            &[("CAPSTAN_CALLER_CHECK", "sar")],
            "CAPSTAN_CALLER_CHECK=sar needs a control plane to ask",
        ),
        (
            &[("CAPSTAN_METERING_SINK", "/nonexistent/dir/events.jsonl")],
            "metering sink /nonexistent/dir/events.jsonl",
        ),
    ];
    for (index, (env, expected)) in cases.into_iter().enumerate() {
        let socket = dir.join(format!("{index}.sock"));
        let metering = dir.join(format!("{index}.jsonl"));
        let mut command = Sidecar::command(&socket, &fixture, &metering, &[], env);
        command
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > std::time::Duration::from_secs(30) {
                let _ = child.kill();
                panic!("{env:?}: the sidecar still ran after 30 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
        assert!(!status.success(), "{env:?}: exited {status}");
        assert!(stderr.contains(expected), "{env:?}: {stderr}");
        assert!(!socket.exists(), "{env:?}: the socket was bound");
    }
}
