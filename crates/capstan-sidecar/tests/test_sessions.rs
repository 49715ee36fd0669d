//! Sessions through a real sidecar on a Unix socket: independent clients, isolation between
//! projects, session lifecycle, metering, and what never reaches a provider.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use capstan_testkit::sidecar::*;
use serde_json::{Value, json};
use sha2::Digest;

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_client_in_legacy_mode_should_initialize_list_read_instructions_and_call() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let output = python_sdk_client(&sidecar, "legacy");
    assert_sdk_client_saw_streamco(&output, "2025-11-25");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_1_client_should_initialize_list_read_instructions_and_call() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let output = typescript_sdk_client(&sidecar, "client.mjs");
    // The 1.x SDK speaks only the session revisions: it sees what it always saw.
    assert_sdk_client_saw_streamco(&output, "2025-11-25");
    // The client ended its session: the upstream session is closed too.
    eventually("the upstream session is closed", || async {
        upstream_deletes(&provider).await.checked_sub(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_projects_should_see_only_their_own_documents() {
    let provider = DemoProvider::start(&[]);
    let documents = json!([
        binding(
            "mine",
            Some("project-a"),
            "alpha",
            &provider,
            &["streams_list"]
        ),
        binding(
            "theirs",
            Some("project-b"),
            "beta",
            &provider,
            &["streams_get"]
        ),
    ]);
    let sidecar = Sidecar::start(&documents, &[provider.host()], &[]);
    let (a, b) = tokio::join!(
        sidecar.session("project-a", Some("token-a")),
        sidecar.session("project-b", Some("token-b"))
    );
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.into_owned()).collect()
    };
    assert_eq!(
        names(a.list_all_tools().await.unwrap()),
        ["alpha__streams_list"]
    );
    assert_eq!(
        names(b.list_all_tools().await.unwrap()),
        ["beta__streams_get"]
    );
    // Another project's tool cannot be called by naming it.
    let error = a
        .call_tool(call("beta__streams_get", json!({"name": "orders"})))
        .await
        .unwrap_err();
    assert_no_such_tool(&error, "beta__streams_get");
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

/// A demo provider, a sidecar serving StreamCo from it, and a session that has made one call.
async fn streamco_session_after_one_call() -> (
    DemoProvider,
    Sidecar,
    rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>,
) {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    session
        .call_tool(call("streamco__streams_list", json!({})))
        .await
        .unwrap();
    (provider, sidecar, session)
}

#[tokio::test(flavor = "multi_thread")]
async fn ending_a_session_should_close_its_upstream_sessions() {
    let (provider, _sidecar, session) = streamco_session_after_one_call().await;
    assert_eq!(upstream_deletes(&provider).await, 0);
    session.cancel().await.unwrap();
    let closed = eventually("the upstream session is closed", || async {
        Some(upstream_deletes(&provider).await).filter(|n| *n > 0)
    })
    .await;
    assert_eq!(closed, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_session_should_hold_no_standalone_stream() {
    let (provider, _sidecar, session) = streamco_session_after_one_call().await;
    // rmcp's client would open the stream beside `initialized`; three more round trips on the
    // same upstream session, one after another, give such a request every chance to arrive
    // first (no fixed wait: a loaded machine slows both alike).
    for _ in 0..3 {
        session
            .call_tool(call("streamco__streams_list", json!({})))
            .await
            .unwrap();
    }
    let requests = provider.requests().await;
    assert!(
        provider.mcp_requests("POST").await >= 3,
        "initialize, initialized, tools/list, the call: {requests:?}"
    );
    assert_eq!(
        provider.mcp_requests("GET").await,
        0,
        "a standalone GET stream was opened: {requests:?}"
    );
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn max_task_duration_should_end_the_task() {
    let provider = DemoProvider::start(&[]);
    let mut documents = streamco(&provider);
    documents["items"][0]["spec"]["authority"]["maxTaskDurationSeconds"] = json!(1);
    let sidecar = Sidecar::start(&documents, &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    let before = session
        .call_tool(call("streamco__streams_list", json!({})))
        .await
        .unwrap();
    assert_ne!(before.is_error, Some(true));
    assert_eq!(upstream_deletes(&provider).await, 0);
    // Calls are served until the deadline, refused after it.
    let error = eventually("a call after the time limit is rejected", || async {
        let result = session
            .call_tool(call("streamco__streams_list", json!({})))
            .await
            .unwrap();
        (result.is_error == Some(true)).then(|| result.structured_content.unwrap()["error"].clone())
    })
    .await;
    assert_eq!(error["kind"], "rejected");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("time limit (1s"),
        "{error}"
    );
    // The upstream was closed at the deadline, not at the session's end (the close is sent
    // once the task is marked expired, so it may trail the refusal).
    let closed = eventually("the upstream session is closed at the deadline", || async {
        Some(upstream_deletes(&provider).await).filter(|n| *n > 0)
    })
    .await;
    assert_eq!(closed, 1);
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_running_at_the_time_limit_should_be_cut_for_the_limit_not_blamed_on_the_provider() {
    let provider = DemoProvider::start(&["hang-calls"]);
    let mut documents = streamco(&provider);
    documents["items"][0]["spec"]["authority"]["maxTaskDurationSeconds"] = json!(1);
    let sidecar = Sidecar::start(&documents, &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    let cancelled_before = provider_messages(&provider, "notifications/cancelled").await;
    // The provider never answers: only the time limit can end this call.
    let result = session
        .call_tool(call("streamco__streams_list", json!({})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let error = result.structured_content.unwrap()["error"].clone();
    assert_eq!(error["kind"], "rejected", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("time limit (1s") && message.contains("while the call ran"),
        "{error}"
    );
    // The provider was told the call is abandoned.
    eventually("the provider is told the call was cancelled", || async {
        (provider_messages(&provider, "notifications/cancelled").await > cancelled_before)
            .then_some(())
    })
    .await;
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_dying_mid_session_should_fail_only_its_tools() {
    let mut doomed = DemoProvider::start(&[]);
    let healthy = DemoProvider::start(&[]);
    let documents = json!([
        binding("doomed", None, "doomed", &doomed, &["streams_list"]),
        binding("healthy", None, "healthy", &healthy, &["streams_list"]),
    ]);
    let sidecar = Sidecar::start(&documents, &[doomed.host(), healthy.host()], &[]);
    let session = sidecar.session("p", None).await;
    doomed.kill();
    let failed = session
        .call_tool(call("doomed__streams_list", json!({})))
        .await
        .unwrap();
    assert_eq!(failed.is_error, Some(true));
    let error = &failed.structured_content.unwrap()["error"];
    assert_eq!(error["kind"], "upstream_unavailable");
    assert_eq!(error["retryable"], true);
    let ok = session
        .call_tool(call("healthy__streams_list", json!({})))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true));
    session.cancel().await.unwrap();
}

fn properties_named_project(schema: &Value, path: &str, found: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get("properties") {
                for key in properties.keys() {
                    if key.eq_ignore_ascii_case("project") {
                        found.push(format!("{path}.{key}"));
                    }
                }
            }
            for (key, value) in map {
                properties_named_project(value, &format!("{path}/{key}"), found);
            }
        }
        Value::Array(items) => {
            for item in items {
                properties_named_project(item, path, found);
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_composed_tool_should_take_a_project_argument() {
    let provider = DemoProvider::start(&[]);
    let mut documents = streamco(&provider);
    // The provider offers a tool taking `Project`; even allow-listed, it is not exposed.
    documents["items"][0]["spec"]["tools"]["mcpServers"][0]["toolSelector"]["include"]
        .as_array_mut()
        .unwrap()
        .push(json!("streams_by_project"));
    let sidecar = Sidecar::start(&documents, &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    let tools = session.list_all_tools().await.unwrap();
    assert_eq!(
        tools.len(),
        4,
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let mut found = Vec::new();
    for tool in &tools {
        properties_named_project(
            &Value::Object((*tool.input_schema).clone()),
            &tool.name,
            &mut found,
        );
    }
    assert!(found.is_empty(), "{found:?}");
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_callers_token_should_never_reach_a_provider() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let token = "caller-secret-7f3a";
    let session = sidecar.session("demo-project", Some(token)).await;
    session
        .call_tool(call("streamco__streams_list", json!({})))
        .await
        .unwrap();
    session
        .call_tool(call("load_skill", json!({"name": "lag-triage"})))
        .await
        .unwrap();
    session.cancel().await.unwrap();
    let requests = provider.requests().await;
    assert!(requests.len() > 3);
    let recorded = serde_json::to_string(&requests).unwrap();
    assert!(!recorded.contains(token), "the token reached the provider");
    assert!(!recorded.to_ascii_lowercase().contains("x-capstan-project"));
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_calls_should_be_metered_and_built_ins_not() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    session
        .call_tool(call("streamco__streams_get", json!({"name": "orders"})))
        .await
        .unwrap();
    session
        .call_tool(call("streamco__streams_get", json!({"name": 7})))
        .await
        .unwrap();
    let skill = session
        .call_tool(call("load_skill", json!({"name": "lag-triage"})))
        .await
        .unwrap();
    let text = serde_json::to_string(&skill.content).unwrap();
    assert!(text.contains("Triage consumer lag"), "{text}");
    session.cancel().await.unwrap();
    let events = sidecar.meter_events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["service"], "streaming.streamco.example");
    assert_eq!(events[0]["project"], "demo-project");
    assert_eq!(events[0]["binding"], "streamco-binding");
    assert_eq!(events[0]["tool"], "streamco__streams_get");
    assert_eq!(events[0]["outcome"], "ok");
    assert_eq!(events[1]["outcome"], "invalid_input");
    assert!(events[0]["durationMs"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn arguments_should_be_checked_against_the_input_schema() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    let before = provider.tool_calls().await;
    let result = session
        .call_tool(call("streamco__streams_get", json!({})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    let error = &result.structured_content.unwrap()["error"];
    assert_eq!(error["kind"], "invalid_input");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("\"name\" is a required property"),
        "{error}"
    );
    let result = session
        .call_tool(call("streamco__streams_get", json!({"name": 5})))
        .await
        .unwrap();
    let error = &result.structured_content.unwrap()["error"];
    assert_eq!(
        (&error["kind"], &error["field"]),
        (&json!("invalid_input"), &json!("name"))
    );
    // Nothing invalid was forwarded; a valid call is.
    assert_eq!(provider.tool_calls().await, before);
    session
        .call_tool(call("streamco__streams_get", json!({"name": "orders"})))
        .await
        .unwrap();
    let mut expected = before;
    expected.push("streams_get".to_owned());
    assert_eq!(provider.tool_calls().await, expected);
    session.cancel().await.unwrap();
}

/// What `capstanctl compose --socket … --project demo-project <extra>` prints; it must succeed.
fn capstanctl_compose(sidecar: &Sidecar, extra: &[&str]) -> String {
    let socket = sidecar.socket.to_str().unwrap();
    let mut args = vec!["compose", "--socket", socket, "--project", "demo-project"];
    args.extend_from_slice(extra);
    let output = Command::new(binary("capstanctl"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn capstanctl_should_show_the_composition_and_call_a_tool() {
    let provider = DemoProvider::start(&[]);
    let mut documents = streamco(&provider);
    documents["items"].as_array_mut().unwrap().push(json!({
        "metadata": { "name": "outside", "namespace": "demo-project" },
        "spec": {
            "serviceRef": { "name": "x" }, "serviceName": "x.example",
            "serviceAgentRef": { "name": "x" }, "configurationVersion": "v1",
            "tools": { "mcpServers": [{ "name": "x", "endpoint": "http://169.254.169.254/mcp",
                                        "toolSelector": { "include": ["t"] } }] }
        }
    }));
    let sidecar = Sidecar::start(&documents, &[provider.host()], &[]);
    let capstanctl = binary("capstanctl");
    let socket = sidecar.socket.to_str().unwrap();
    let table = capstanctl_compose(&sidecar, &[]);
    assert!(
        table.starts_with("project demo-project: 3 tools, 1 skills, 2 bindings (1 degraded)"),
        "{table}"
    );
    assert!(
        table.contains(
            "streamco__streams_get        no        streamco-binding / streaming.streamco.example"
        ),
        "{table}"
    );
    assert!(table.contains("outside           DEGRADED\n  - endpoint http://169.254.169.254/mcp was not dialed: address 169.254.169.254 is link-local"), "{table}");

    let composition: Value =
        serde_json::from_str(&capstanctl_compose(&sidecar, &["--json"])).unwrap();
    assert_eq!(composition["tools"][0]["mutating"], false);
    assert_eq!(composition["bindings"][1]["degraded"], true);
    assert_eq!(composition["builtins"], json!(["load_skill"]));

    // `capstanctl call` against the sidecar, as demo-project.
    let call = |args: &[&str]| {
        Command::new(&capstanctl)
            .args(["call", "--socket", socket, "--project", "demo-project"])
            .args(args)
            .output()
            .unwrap()
    };
    let called = call(&["streamco__streams_get", r#"{"name":"orders"}"#]);
    assert!(
        called.status.success(),
        "{}",
        String::from_utf8_lossy(&called.stderr)
    );
    let printed: Value = serde_json::from_slice(&called.stdout).unwrap();
    assert_eq!(printed["state"], "Healthy");

    let refused = call(&["streamco__streams_get", "{}"]);
    assert_eq!(refused.status.code(), Some(1));
    let refusal = String::from_utf8_lossy(&refused.stdout);
    assert!(refusal.starts_with("error: invalid_input: "), "{refusal}");

    // For a machine: the whole result, as the MCP client read it.
    let as_json = call(&["-o", "json", "streamco__streams_get", "{}"]);
    assert_eq!(as_json.status.code(), Some(1));
    let result: Value = serde_json::from_slice(&as_json.stdout).unwrap();
    assert_eq!(result["isError"], true);
    assert_eq!(
        result["structuredContent"]["error"]["kind"],
        "invalid_input"
    );

    // What a caller is told: the provider's knowledge under its provenance.
    let instructions = capstanctl_compose(&sidecar, &["--instructions"]);
    assert!(
        instructions.contains("binding streamco-binding · configuration v1"),
        "{instructions}"
    );

    let missing = Command::new(&capstanctl)
        .args([
            "compose",
            "--socket",
            "/nonexistent/composer.sock",
            "--project",
            "p",
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("is the sidecar running?"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_session_should_end_and_a_busy_one_should_not() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(
        &streamco(&provider),
        &[provider.host()],
        &[("CAPSTAN_SESSION_IDLE_SECONDS", "1")],
    );
    let idle = sidecar.curl_initialize("demo-project", "t");
    let busy = sidecar.session("demo-project", Some("t")).await;
    // Tool calls on the busy session only, until the idle one has been reaped (its upstream
    // session closed — observed at the provider, since a request would keep it alive).
    let stop = Arc::new(AtomicBool::new(false));
    let caller = tokio::spawn({
        let peer = busy.peer().clone();
        let stop = stop.clone();
        async move {
            let mut calls = 0;
            while !stop.load(Ordering::Acquire) {
                let result = peer
                    .call_tool(call("streamco__streams_list", json!({})))
                    .await
                    .unwrap();
                assert_ne!(result.is_error, Some(true));
                calls += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            calls
        }
    });
    eventually("the idle session's upstream is closed", || async {
        (upstream_deletes(&provider).await > 0).then_some(())
    })
    .await;
    stop.store(true, Ordering::Release);
    assert!(caller.await.unwrap() > 0);
    // The idle session is gone: its id is refused by the sidecar's own check (a JSON-RPC
    // body, not rmcp's plain-text 404).
    let (code, body) = sidecar.curl_in_session(
        &idle,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"streamco__streams_list","arguments":{}}}"#,
    );
    assert_eq!(code, 404, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["error"]["code"], -32001, "{body}");
    assert_eq!(
        upstream_deletes(&provider).await,
        1,
        "exactly the idle session's upstream is closed"
    );
    // The busy session still works.
    let result = busy
        .call_tool(call("streamco__streams_get", json!({"name": "orders"})))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true));
    busy.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_upstream_mid_session_should_fail_only_its_tools() {
    let broken = DemoProvider::start(&[]);
    let healthy = DemoProvider::start(&[]);
    let documents = json!([
        binding("broken", None, "broken", &broken, &["streams_list"]),
        binding("healthy", None, "healthy", &healthy, &["streams_list"]),
    ]);
    let sidecar = Sidecar::start(&documents, &[broken.host(), healthy.host()], &[]);
    let session = sidecar.session("p", None).await;
    broken.set_faults(&["malformed"]).await;
    let failed = session
        .call_tool(call("broken__streams_list", json!({})))
        .await
        .unwrap();
    assert_eq!(failed.is_error, Some(true));
    let error = &failed.structured_content.unwrap()["error"];
    assert_eq!(error["kind"], "upstream_malformed", "{error}");
    assert_eq!(error["retryable"], false);
    let ok = session
        .call_tool(call("healthy__streams_list", json!({})))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true));
    session.cancel().await.unwrap();
}

/// A sidecar on the StreamCo fixture serving `/metrics`, and the metrics address.
fn streamco_with_metrics(provider: &DemoProvider) -> (Sidecar, String) {
    let address = free_address();
    let sidecar = Sidecar::start(
        &streamco(provider),
        &[provider.host()],
        &[("CAPSTAN_METRICS_ADDRESS", &address)],
    );
    (sidecar, address)
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_should_count_sessions_calls_and_source_reads() {
    let provider = DemoProvider::start(&[]);
    let (sidecar, address) = streamco_with_metrics(&provider);
    let session = sidecar.session("demo-project", None).await;
    session
        .call_tool(call("streamco__streams_get", json!({"name": "orders"})))
        .await
        .unwrap();
    session
        .call_tool(call("streamco__streams_get", json!({})))
        .await
        .unwrap();
    let text = metrics(&address).await;
    for line in [
        "capstan_sidecar_sessions_active 1",
        "capstan_sidecar_sessions_total 1",
        "capstan_sidecar_compose_duration_seconds_count 1",
        r#"capstan_sidecar_tool_calls_total{outcome="ok"} 1"#,
        r#"capstan_sidecar_tool_calls_total{outcome="invalid_input"} 1"#,
        r#"capstan_sidecar_source_reads_total{outcome="miss"} 1"#,
        "capstan_sidecar_upstream_connect_failures_total 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in\n{text}"
        );
    }
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_outage_should_be_counted_as_an_error_not_as_no_capabilities() {
    // Nothing listens on the provider API's port: every read fails.
    let address = free_address();
    let dead = format!("http://{}", free_address());
    let sidecar = Sidecar::start(
        &json!([]),
        &[],
        &[
            ("CAPABILITY_SOURCE", "http"),
            ("CAPABILITY_PROVIDER_URL", &dead),
            ("CAPSTAN_METRICS_ADDRESS", &address),
        ],
    );
    let session = sidecar.session("demo-project", None).await;
    session.cancel().await.unwrap();
    // A provider API that answers, with no documents for the project: that is `empty`.
    let api = RecordingProviderApi::start(json!([])).await;
    let answering = Sidecar::start(
        &json!([]),
        &[],
        &[
            ("CAPABILITY_SOURCE", "http"),
            ("CAPABILITY_PROVIDER_URL", &api.url),
            ("CAPSTAN_METRICS_ADDRESS", &free_address()),
        ],
    );
    let (code, _, _) = answering.curl(
        "GET",
        "/v1/composition",
        &[(PROJECT_HEADER, "demo-project")],
        None,
    );
    assert_eq!((code, api.count()), (200, 1));
    let text = metrics(&address).await;
    assert!(
        text.lines()
            .any(|l| l == r#"capstan_sidecar_source_reads_total{outcome="error"} 1"#),
        "{text}"
    );
    assert!(!text.contains(r#"outcome="empty""#), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_composition_requests_should_compose_once_per_caller() {
    let provider = DemoProvider::start(&[]);
    let (sidecar, address) = streamco_with_metrics(&provider);
    let compositions = |text: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("capstan_sidecar_compose_duration_seconds_count "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert_eq!(compositions(&metrics(&address).await), 0);
    let socket = sidecar.socket.clone();
    let answers = futures::future::join_all((0..50).map(|_| {
        let socket = socket.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl")
                .args(["-s", "--unix-socket"])
                .arg(&socket)
                .args([
                    "-H",
                    "X-Capstan-Project: demo-project",
                    "-H",
                    "Authorization: Bearer t",
                    "http://localhost/v1/composition",
                ])
                .output()
                .unwrap()
        })
    }))
    .await;
    for answer in answers {
        let composition: Value = serde_json::from_slice(&answer.unwrap().stdout).unwrap();
        assert_eq!(composition["project"], "demo-project");
        assert_eq!(composition["tools"].as_array().unwrap().len(), 3);
    }
    assert_eq!(compositions(&metrics(&address).await), 1);
    // Another caller composes for itself.
    let (code, _, _) = sidecar.curl(
        "GET",
        "/v1/composition",
        &[
            (PROJECT_HEADER, "demo-project"),
            ("authorization", "Bearer u"),
        ],
        None,
    );
    assert_eq!(code, 200);
    assert_eq!(compositions(&metrics(&address).await), 2);
    // A caller with a live session is answered from it: the session composed once, and
    // inspecting composes nothing more.
    let session = sidecar.session("demo-project", Some("v")).await;
    assert_eq!(compositions(&metrics(&address).await), 3);
    let (code, body, _) = sidecar.curl(
        "GET",
        "/v1/composition",
        &[
            (PROJECT_HEADER, "demo-project"),
            ("authorization", "Bearer v"),
        ],
        None,
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(compositions(&metrics(&address).await), 3);
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_call_should_keep_its_session_alive_past_the_idle_timeout() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(
        &streamco(&provider),
        &[provider.host()],
        &[
            ("CAPSTAN_SESSION_IDLE_SECONDS", "1"),
            ("CAPSTAN_CALL_TIMEOUT_SECONDS", "3"),
        ],
    );
    let session = sidecar.session("demo-project", Some("t")).await;
    // The provider stops answering calls: this one runs until the call timeout (3 s), three
    // times the idle timeout, with no other request on the session.
    provider.set_faults(&["hang-calls"]).await;
    let result = session
        .call_tool(call("streamco__streams_list", json!({})))
        .await
        .unwrap();
    let error = &result.structured_content.unwrap()["error"];
    assert_eq!(error["kind"], "upstream_unavailable", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no answer within 3s"),
        "{error}"
    );
    provider.set_faults(&[]).await;
    // The session outlived the call: it was busy, not idle.
    let result = session
        .call_tool(call("streamco__streams_get", json!({"name": "orders"})))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true));
    assert_eq!(upstream_deletes(&provider).await, 0);
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_composed_name_over_64_characters_should_be_shortened_and_call_through() {
    let provider = DemoProvider::start(&[]);
    let mut documents = streamco(&provider);
    let server = format!("streamco-{}", "x".repeat(51));
    let tool = "streams_consumer_lag_breakdown";
    assert_eq!((server.len(), tool.len()), (60, 30));
    let entry = &mut documents["items"][0]["spec"]["tools"]["mcpServers"][0];
    entry["name"] = json!(server);
    entry["toolSelector"]["include"] = json!([tool]);
    let sidecar = Sidecar::start(&documents, &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    let names = tool_names(&session).await;
    // The oracle: the full name's first 55 characters, `_`, 8 hex digits of its SHA-256.
    let full = format!("{server}__{tool}");
    let digest: String = sha2::Sha256::digest(full.as_bytes())[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let expected = format!("{}_{digest}", &full[..55]);
    assert_eq!(names, [expected.as_str(), "load_skill"]);
    assert_eq!(expected.len(), 64);
    let before = provider.tool_calls().await;
    let result = session
        .call_tool(call(&expected, json!({"name": "clickstream"})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(
        result
            .structured_content
            .as_ref()
            .map(|c| c["partitions"][0]["consumerLag"].clone()),
        Some(json!(48_210))
    );
    let after = provider.tool_calls().await;
    assert_eq!(after[before.len()..], [tool]);
    // The mapping, as /v1/composition (through capstanctl --json) and capstanctl show it.
    let composition: Value =
        serde_json::from_str(&capstanctl_compose(&sidecar, &["--json"])).unwrap();
    assert_eq!(composition["tools"][0]["name"], json!(expected));
    assert_eq!(composition["tools"][0]["shortenedFrom"], json!(full));
    let table = capstanctl_compose(&sidecar, &[]);
    assert!(
        table.contains(&format!(
            "{expected}  no        streamco-binding / streaming.streamco.example (shortened from {full})"
        )),
        "{table}"
    );
    session.cancel().await.unwrap();
}

/// Asserts that `error` is the protocol error for a tool this session does not have.
fn assert_no_such_tool(error: &rmcp::ServiceError, name: &str) {
    match error {
        rmcp::ServiceError::McpError(error) => {
            assert_eq!(
                error.code,
                rmcp::model::ErrorCode::INVALID_PARAMS,
                "{error:?}"
            );
            assert!(
                error
                    .message
                    .contains(&format!("no tool named {name:?} is available")),
                "{error:?}"
            );
        }
        other => panic!("{name}: expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_outside_the_allow_list_should_never_reach_the_provider() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let session = sidecar.session("demo-project", Some("t")).await;
    let before = provider.tool_calls().await;
    // The provider offers streams_export and streams_restart; the allow-list does not.
    for name in [
        "streams_export",
        "streamco__streams_export",
        "streamco__streams_restart",
        "streams_list",
    ] {
        let error = session
            .call_tool(call(name, json!({"name": "orders"})))
            .await
            .unwrap_err();
        assert_no_such_tool(&error, name);
    }
    // The same through the direct path, raw.
    let id = sidecar.curl_initialize("demo-project", "t");
    let (code, body) = sidecar.curl_in_session(
        &id,
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"streamco__streams_export","arguments":{}}}"#,
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("-32602"), "{body}");
    assert_eq!(provider.tool_calls().await, before);
    // The recording sees calls that are allowed: the oracle can tell.
    session
        .call_tool(call("streamco__streams_list", json!({})))
        .await
        .unwrap();
    let after = provider.tool_calls().await;
    assert_eq!(after[before.len()..], ["streams_list"]);
    session.cancel().await.unwrap();
}
