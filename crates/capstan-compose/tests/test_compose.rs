//! Composition against real MCP servers on loopback: the demo provider and an independent
//! server written with the Python `mcp` SDK.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use capstan_compose::composer::ToolCallError;
use capstan_compose::composition::Composition;
use capstan_compose::limits::Limits;
use capstan_upstream::mcp::CallError;
use common::*;
use serde_json::{Value, json};

fn tool_names(composition: &Composition) -> Vec<&str> {
    composition.tools.iter().map(|t| t.name.as_str()).collect()
}

fn args(value: Value) -> Option<serde_json::Map<String, Value>> {
    value.as_object().cloned()
}

/// Asserts that a call was refused as a tool this composition does not have.
fn assert_unknown<T: std::fmt::Debug>(answer: Result<T, ToolCallError>, name: &str) {
    match answer {
        Err(ToolCallError::Unknown { name: asked }) => assert_eq!(asked, name),
        other => panic!("{name}: expected an unknown tool, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn streamco_should_compose_against_the_demo_provider() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&streamco_documents(provider.address))
        .await;
    let composition = &composed.composition;
    assert_eq!(
        tool_names(composition),
        [
            "streamco__pipeline_diagnose",
            "streamco__streams_get",
            "streamco__streams_list"
        ]
    );
    assert!(composition.mutating.is_empty());
    let outcome = &composition.bindings[0];
    assert!(!outcome.degraded(), "{:?}", outcome.reasons());

    // A tool on the allow-list is forwarded.
    let result = composed
        .call_tool(
            "streamco__streams_get",
            args(json!({"name": "clickstream"})),
        )
        .await
        .unwrap();
    assert_eq!(result.structured_content.unwrap()["state"], "Lagging");

    // The knowledge under its provenance header, the concepts and the skills list.
    let instructions = &composition.instructions;
    assert!(
        instructions.contains(&format!(
            "## Overview — streaming.streamco.example\nSource: http://{}/llms-full.txt (LLMDocs) · \
             binding streamco-binding · configuration v1\n\n# StreamCo streaming",
            provider.address
        )),
        "{instructions}"
    );
    assert!(instructions.contains(
        "- Stream (streaming.streamco.example), from streaming.streamco.example: A live stream"
    ));
    assert!(instructions.contains("# Available skills\n\n"));
    assert!(instructions.contains(
        "- lag-triage (streaming.streamco.example): Step-by-step procedure for triaging pipeline consumer lag"
    ));
    // Only name and description enter the prompt, never the body.
    assert!(!instructions.contains("Triage consumer lag"));

    let skill = composed.load_skill("lag-triage").await.unwrap();
    assert!(
        skill.starts_with("# Skill lag-triage — streaming.streamco.example\nSource: "),
        "{skill}"
    );
    assert!(skill.contains("1. Call streams_list and find streams whose state is Lagging."));
    let error = composed.load_skill("nope").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "no skill named \"nope\" is available; the instructions list the ones that are"
    );
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_outside_the_allow_list_should_be_refused_by_any_name() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&streamco_documents(provider.address))
        .await;
    for name in [
        "streams_export",
        "streamco__streams_export",
        "streamco__streams_restart",
    ] {
        assert_unknown(composed.call_tool(name, None).await, name);
    }
    // The raw upstream name of an allowed tool is not a composed name either.
    assert_unknown(
        composed.call_tool("streams_list", None).await,
        "streams_list",
    );
    // None of those reached the provider, whose log records every tool called; an allowed
    // call does.
    assert_eq!(provider.tool_calls().await, Vec::<String>::new());
    composed
        .call_tool("streamco__streams_list", None)
        .await
        .unwrap();
    assert_eq!(provider.tool_calls().await, ["streams_list"]);
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn streamco_should_compose_against_an_independent_python_server() {
    let server = PythonServer::start();
    let hosts = vec![server.address.to_string()];
    let text = serde_json::to_string(&json!([binding(
        "streamco-binding",
        "streamco",
        &format!("http://{}/mcp", server.address),
        &["streams_list", "streams_get", "pipeline_diagnose"],
    )]))
    .unwrap();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    assert_eq!(
        tool_names(&composed.composition),
        [
            "streamco__pipeline_diagnose",
            "streamco__streams_get",
            "streamco__streams_list"
        ]
    );
    let result = composed
        .call_tool("streamco__streams_get", args(json!({"name": "orders"})))
        .await
        .unwrap();
    let text = serde_json::to_string(&result).unwrap();
    assert!(text.contains("python"), "{text}");
    assert_unknown(
        composed.call_tool("streamco__streams_export", None).await,
        "streamco__streams_export",
    );
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unprefixed_server_should_be_called_by_its_own_names_and_never_take_a_built_in() {
    let server = PythonServer::start();
    let hosts = vec![server.address.to_string()];
    let endpoint = format!("http://{}/mcp", server.address);
    let mut unprefixed = binding(
        "plain",
        "streamco",
        &endpoint,
        &["streams_list", "streams_get"],
    );
    unprefixed["spec"]["tools"]["mcpServers"][0]["toolNames"] = json!("Unprefixed");
    let prefixed = binding("prefixed", "other", &endpoint, &["resources_list"]);
    let text = serde_json::to_string(&json!([unprefixed, prefixed])).unwrap();
    let mut documents = documents(&text);
    // What the binding rules refuse, as a source that skipped them would hand it over: an
    // unprefixed server offering a tool under a built-in name.
    let server_entry = &mut documents[0].spec.tools.as_mut().unwrap().mcp_servers[0];
    let include = &mut server_entry.tool_selector.as_mut().unwrap().include;
    include.push("resources_list".to_owned());
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents)
        .await;
    let composition = &composed.composition;
    assert_eq!(
        tool_names(composition),
        ["streams_get", "streams_list", "other__resources_list"]
    );
    assert_eq!(
        composition.bindings[0].reasons(),
        [
            "tool name resources_list is a built-in tool of the sidecar and is not exposed; keep \
          the server's prefix (remove toolNames)"
        ]
    );
    assert!(composition.bindings[1].reasons().is_empty());

    let result = composed
        .call_tool("streams_get", args(json!({"name": "orders"})))
        .await
        .unwrap();
    let text = serde_json::to_string(&result).unwrap();
    assert!(text.contains("python"), "{text}");
    let result = composed
        .call_tool("other__resources_list", None)
        .await
        .unwrap();
    let text = serde_json::to_string(&result).unwrap();
    assert!(text.contains("provider resources"), "{text}");
    for name in ["streamco__streams_get", "resources_list", "streams_export"] {
        assert_unknown(composed.call_tool(name, None).await, name);
    }
    composed.close().await;
}

/// Two bindings: `bad` on a faulty provider, `good` on a healthy one.
async fn compose_with_fault(fault: &str, limits: Limits) -> Composition {
    let faulty = DemoProvider::start(&[fault]);
    let healthy = DemoProvider::start(&[]);
    let hosts = vec![faulty.host(), healthy.host()];
    let text = serde_json::to_string(&json!([
        binding(
            "bad",
            "bad",
            &faulty.url("/mcp"),
            &["streams_list", "streams_get"]
        ),
        binding("good", "good", &healthy.url("/mcp"), &["streams_list"]),
    ]))
    .unwrap();
    // A safety net against a hang, not a measurement: the connect timeout is what bounds it.
    let composed = tokio::time::timeout(
        Duration::from_secs(120),
        composer(&hosts, &hosts, limits).compose(&documents(&text)),
    )
    .await
    .expect("composing did not finish");
    let composition = composed.composition.clone();
    composed.close().await;
    composition
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_upstream_should_degrade_only_its_binding_within_the_timeout() {
    let limits = Limits {
        connect_timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    let composition = compose_with_fault("hang", limits).await;
    assert_eq!(tool_names(&composition), ["good__streams_list"]);
    let bad = &composition.bindings[0];
    assert!(bad.degraded());
    assert!(
        bad.upstream_errors[0].contains("no answer within 2s"),
        "{:?}",
        bad.upstream_errors
    );
    assert!(!composition.bindings[1].degraded());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_500_should_degrade_only_its_binding() {
    let composition = compose_with_fault("http-500", Limits::default()).await;
    assert_eq!(tool_names(&composition), ["good__streams_list"]);
    let bad = &composition.bindings[0];
    assert!(bad.degraded());
    assert!(
        bad.upstream_errors[0].contains("500"),
        "{:?}",
        bad.upstream_errors
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_response_should_degrade_only_its_binding() {
    let composition = compose_with_fault("malformed", Limits::default()).await;
    assert_eq!(tool_names(&composition), ["good__streams_list"]);
    assert!(composition.bindings[0].degraded());
    assert!(!composition.bindings[1].degraded());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declared_tool_the_server_lacks_should_be_reported_missing() {
    let composition = compose_with_fault("drop-tool:streams_get", Limits::default()).await;
    assert_eq!(
        tool_names(&composition),
        ["bad__streams_list", "good__streams_list"]
    );
    let bad = &composition.bindings[0];
    assert_eq!(bad.missing, ["bad/streams_get"]);
    assert_eq!(
        bad.reasons(),
        ["declared tool bad/streams_get is not offered by the server"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_binding_should_win_a_namespaced_name() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let text = serde_json::to_string(&json!([
        binding(
            "first",
            "streamco",
            &provider.url("/mcp"),
            &["streams_list"]
        ),
        binding(
            "second",
            "streamco",
            &provider.url("/mcp"),
            &["streams_list", "streams_get"]
        ),
    ]))
    .unwrap();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    let composition = &composed.composition;
    assert_eq!(
        tool_names(composition),
        ["streamco__streams_list", "streamco__streams_get"]
    );
    assert_eq!(composition.tools[0].binding, "first");
    let second = &composition.bindings[1];
    assert_eq!(second.exposed, ["streamco__streams_get"]);
    assert_eq!(
        second.reasons(),
        ["tool name streamco__streams_list is already taken by binding first"]
    );
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_outside_the_allow_list_should_never_be_dialed() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec!["mcp.example.com".to_owned()];
    let composed = compose_binding(
        &hosts,
        "outside",
        "streamco",
        &provider.url("/mcp"),
        &["streams_list"],
    )
    .await;
    let outcome = &composed.composition.bindings[0];
    assert_eq!(
        outcome.refused,
        [format!(
            "endpoint {} was not dialed: address 127.0.0.1 (from host 127.0.0.1) port {} is not \
             in the allow-list (mcp.example.com)",
            provider.url("/mcp"),
            provider.address.port()
        )]
    );
    assert!(
        provider
            .requests()
            .await
            .iter()
            .all(|r| r["path"] == "/debug/requests")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ip_literal_tricks_should_be_refused_as_the_addresses_they_are() {
    // The allow-list names the provider by name only; every spelling of its address is refused,
    // and metadata addresses are refused whatever the list says.
    let provider = DemoProvider::start(&[]);
    let port = provider.address.port();
    let hosts = vec![format!("localhost:{port}"), "169.254.169.254".to_owned()];
    let endpoints = [
        format!("http://2130706433:{port}/mcp"),
        format!("http://0x7f.0.0.1:{port}/mcp"),
        format!("http://[::ffff:127.0.0.1]:{port}/mcp"),
        "http://169.254.169.254/mcp".to_owned(),
    ];
    let bindings: Vec<Value> = endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| {
            binding(
                &format!("trick-{i}"),
                &format!("s{i}"),
                e,
                &["streams_list"],
            )
        })
        .collect();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&serde_json::to_string(&bindings).unwrap()))
        .await;
    assert!(composed.composition.tools.is_empty());
    for (outcome, endpoint) in composed.composition.bindings.iter().zip(&endpoints) {
        assert_eq!(outcome.refused.len(), 1, "{endpoint}: {outcome:?}");
        assert!(
            outcome.refused[0].contains("was not dialed"),
            "{}",
            outcome.refused[0]
        );
    }
    assert!(composed.composition.bindings[3].refused[0].contains("link-local"));
    assert!(
        provider
            .requests()
            .await
            .iter()
            .all(|r| r["path"] == "/debug/requests")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_allowed_name_should_be_dialed_at_its_checked_address() {
    // `localhost` resolves (through the guarded resolver) to loopback, which is allowed.
    let provider = DemoProvider::start(&[]);
    let port = provider.address.port();
    let hosts = vec![format!("localhost:{port}")];
    let text = serde_json::to_string(&json!([binding(
        "by-name",
        "streamco",
        &format!("http://localhost:{port}/mcp"),
        &["streams_list"]
    )]))
    .unwrap();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    assert_eq!(
        tool_names(&composed.composition),
        ["streamco__streams_list"]
    );
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_failing_knowledge_source_should_not_degrade_the_binding() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let text = knowledge_binding(&[provider.url("/llms-full.txt"), provider.url("/missing.md")]);
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    let outcome = &composed.composition.bindings[0];
    assert_eq!(outcome.knowledge_total, 2);
    assert_eq!(outcome.knowledge_errors.len(), 1, "{outcome:?}");
    assert!(
        outcome.knowledge_errors[0].ends_with("HTTP 404"),
        "{outcome:?}"
    );
    assert!(!outcome.degraded());
    assert!(
        composed
            .composition
            .instructions
            .contains("# StreamCo streaming")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn all_knowledge_failing_should_degrade_the_binding() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let text = knowledge_binding(&[provider.url("/missing.md"), "http://127.0.0.1:1/x".into()]);
    let composed = composer(
        &hosts,
        &[provider.host(), "127.0.0.1:1".into()],
        Limits::default(),
    )
    .compose(&documents(&text))
    .await;
    let outcome = &composed.composition.bindings[0];
    assert!(outcome.degraded());
    assert!(
        outcome.reasons()[0].starts_with("all 2 knowledge sources failed"),
        "{outcome:?}"
    );
    assert!(
        !composed
            .composition
            .instructions
            .contains("# Provider knowledge")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_knowledge_should_be_cut_at_the_cap_without_degrading() {
    let provider = DemoProvider::start(&["oversized-knowledge"]);
    let hosts = vec![provider.host()];
    let text = knowledge_binding(&[provider.url("/llms-full.txt")]);
    let limits = Limits::default();
    let cap = limits.knowledge_source_cap;
    let composed = composer(&hosts, &hosts, limits)
        .compose(&documents(&text))
        .await;
    let outcome = &composed.composition.bindings[0];
    assert_eq!(outcome.knowledge_truncated, 1);
    assert!(!outcome.degraded());
    let instructions = &composed.composition.instructions;
    assert!(
        instructions.len() > cap && instructions.len() < cap + 2048,
        "{}",
        instructions.len()
    );
    assert!(instructions.contains("[truncated: the source is longer than the knowledge cap]"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_to_a_refused_host_should_not_be_followed() {
    // The allowed server answers with a redirect to the metadata address.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route(
            "/moved",
            axum::routing::get(|| async {
                (
                    axum::http::StatusCode::FOUND,
                    [(
                        axum::http::header::LOCATION,
                        "http://169.254.169.254/latest/meta-data",
                    )],
                )
            }),
        )
        .route(
            "/elsewhere",
            axum::routing::get(|| async {
                (
                    axum::http::StatusCode::FOUND,
                    [(axum::http::header::LOCATION, "http://127.0.0.2:1/doc")],
                )
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let hosts = vec![address.to_string()];
    let text = knowledge_binding(&[
        format!("http://{address}/moved"),
        format!("http://{address}/elsewhere"),
    ]);
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    let errors = &composed.composition.bindings[0].knowledge_errors;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].contains("was not dialed") && errors[0].contains("link-local"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("was not dialed") && errors[1].contains("not in the allow-list"),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_endpoint_that_redirects_should_not_be_followed() {
    // Both hosts are allowed; the first sends every MCP request to the second. MCP follows no
    // redirect: a session moved elsewhere would be a session nobody checked.
    let provider = DemoProvider::start(&[]);
    let target = provider.url("/mcp");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::any(move || {
            let target = target.clone();
            async move {
                (
                    axum::http::StatusCode::TEMPORARY_REDIRECT,
                    [(axum::http::header::LOCATION, target)],
                )
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let hosts = vec![address.to_string(), provider.host()];
    let endpoint = format!("http://{address}/mcp");
    let composed = compose_binding(&hosts, "moved", "streamco", &endpoint, &["streams_list"]).await;
    let outcome = &composed.composition.bindings[0];
    assert!(composed.composition.tools.is_empty());
    assert_eq!(outcome.upstream_errors.len(), 1, "{outcome:?}");
    assert!(
        outcome.upstream_errors[0].starts_with(&format!("connecting to {endpoint}: ")),
        "{outcome:?}"
    );
    assert!(
        provider
            .requests()
            .await
            .iter()
            .all(|r| r["path"] == "/debug/requests"),
        "the redirect was followed"
    );
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn knowledge_redirects_should_be_followed_up_to_five_hops_each_checked_again() {
    // `/hop/N` redirects to `/hop/N-1`; `/hop/0` answers. `/out/N` does the same, but
    // `/out/0` redirects to 127.0.0.2, which the allow-list does not name.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/{chain}/{n}",
        axum::routing::get(
            move |axum::extract::Path((chain, n)): axum::extract::Path<(String, u32)>| {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    use axum::response::IntoResponse;
                    let location = match (chain.as_str(), n) {
                        ("hop", 0) => return "arrived after the hops".into_response(),
                        ("out", 0) => format!("http://127.0.0.2:{}/hop/0", address.port()),
                        (chain, n) => format!("/{chain}/{}", n - 1),
                    };
                    (
                        axum::http::StatusCode::FOUND,
                        [(axum::http::header::LOCATION, location)],
                    )
                        .into_response()
                }
            },
        ),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let hosts = vec![address.to_string()];
    let text = knowledge_binding(&[
        format!("http://{address}/hop/5"),
        format!("http://{address}/hop/6"),
        format!("http://{address}/out/3"),
    ]);
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    let composition = &composed.composition;
    // Five redirects are followed.
    assert!(
        composition.instructions.contains("arrived after the hops"),
        "{}",
        composition.instructions
    );
    let errors = &composition.bindings[0].knowledge_errors;
    assert_eq!(errors.len(), 2, "{errors:?}");
    // A sixth is not: /hop/6 … /hop/1 were asked, /hop/0 never.
    assert!(
        errors[0].starts_with(&format!("http://{address}/hop/6: "))
            && errors[0].contains("more than 5 redirects"),
        "{errors:?}"
    );
    // Every hop is checked: three allowed hops, then a refused one.
    assert!(
        errors[1].starts_with(&format!(
            "endpoint http://{address}/out/3 was not dialed: redirected to http://127.0.0.2:"
        )) && errors[1].contains("is not in the allow-list"),
        "{errors:?}"
    );
    // Requests: 6 for /hop/5 (5..0), 6 for /hop/6 (6..1), 4 for /out/3 (3..0).
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 16);
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_dying_after_composition_should_fail_only_its_calls() {
    let doomed = DemoProvider::start(&[]);
    let healthy = DemoProvider::start(&[]);
    let hosts = vec![doomed.host(), healthy.host()];
    let text = serde_json::to_string(&json!([
        binding("doomed", "doomed", &doomed.url("/mcp"), &["streams_list"]),
        binding(
            "healthy",
            "healthy",
            &healthy.url("/mcp"),
            &["streams_list"]
        ),
    ]))
    .unwrap();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    drop(doomed);
    let error = composed
        .call_tool("doomed__streams_list", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ToolCallError::Upstream(CallError::Unavailable { .. })
        ),
        "{error:?}"
    );
    let healthy = composed
        .call_tool("healthy__streams_list", None)
        .await
        .unwrap();
    assert_eq!(
        healthy.structured_content.unwrap()["streams"][0]["name"],
        "orders"
    );
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_inputs_should_compose_the_same_way() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let composer = composer(&hosts, &hosts, Limits::default());
    let documents = streamco_documents(provider.address);
    let first = composer.compose(&documents).await;
    let second = composer.compose(&documents).await;
    assert_eq!(
        serde_json::to_value(&first.composition).unwrap(),
        serde_json::to_value(&second.composition).unwrap()
    );
    first.close().await;
    second.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mutating_tools_should_be_listed_and_annotated() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let mut document = binding(
        "ops",
        "streamco",
        &provider.url("/mcp"),
        &["streams_list", "streams_restart"],
    );
    document["spec"]["tools"]["mcpServers"][0]["mutating"] = json!(["streams_restart"]);
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(
            &serde_json::to_string(&json!([document])).unwrap(),
        ))
        .await;
    assert_eq!(composed.composition.mutating, ["streamco__streams_restart"]);
    let restart = composed.tool("streamco__streams_restart").unwrap();
    assert!(restart.mutating);
    assert_eq!(
        restart.annotations.as_ref().unwrap().read_only_hint,
        Some(false)
    );
    assert!(!composed.tool("streamco__streams_list").unwrap().mutating);
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_taking_a_project_argument_should_never_be_exposed() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let text = serde_json::to_string(&json!([binding(
        "sneaky",
        "streamco",
        &provider.url("/mcp"),
        &["streams_list", "streams_by_project"]
    )]))
    .unwrap();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    assert_eq!(
        tool_names(&composed.composition),
        ["streamco__streams_list"]
    );
    let outcome = &composed.composition.bindings[0];
    assert_eq!(outcome.project_arguments, ["streamco/streams_by_project"]);
    assert!(outcome.degraded());
    // Written out here, not by the composer: no exposed schema has a `project` property in
    // any case.
    for tool in &composed.composition.tools {
        let properties = tool
            .input_schema
            .get("properties")
            .and_then(Value::as_object);
        assert!(
            properties.is_none_or(|p| p.keys().all(|k| !k.eq_ignore_ascii_case("project"))),
            "{}: {:?}",
            tool.name,
            tool.input_schema
        );
    }
    composed.close().await;
}

/// The other side: a reviewed binding that says the `project` argument is the provider's own
/// composes the tool with it — for the whole server, or only for the tools it names (another
/// project-taking tool stays withheld, and its binding says how to allow it).
#[tokio::test(flavor = "multi_thread")]
async fn a_project_argument_the_binding_declares_the_providers_own_should_be_exposed() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let endpoint = provider.url("/mcp");
    let tools = ["streams_list", "streams_by_project"];
    let mut whole = binding("whole", "whole", &endpoint, &tools);
    whole["spec"]["tools"]["mcpServers"][0]["providerProjectArgument"] = json!({});
    let mut named = binding("named", "named", &endpoint, &tools);
    named["spec"]["tools"]["mcpServers"][0]["providerProjectArgument"] =
        json!({"tools": ["streams_list"]});
    let text = serde_json::to_string(&json!([whole, named])).unwrap();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    assert_eq!(
        tool_names(&composed.composition),
        [
            "whole__streams_by_project",
            "whole__streams_list",
            "named__streams_list"
        ]
    );
    let exposed = composed
        .tool("whole__streams_by_project")
        .expect("the provider's project tool");
    assert!(
        exposed.input_schema["properties"]
            .as_object()
            .is_some_and(|p| p.keys().any(|k| k.eq_ignore_ascii_case("project"))),
        "{:?}",
        exposed.input_schema
    );
    let (whole, named) = (
        &composed.composition.bindings[0],
        &composed.composition.bindings[1],
    );
    assert!(
        whole.project_arguments.is_empty() && !whole.degraded(),
        "{whole:?}"
    );
    assert_eq!(named.project_arguments, ["named/streams_by_project"]);
    assert!(
        named
            .stable_reasons()
            .iter()
            .any(|r| r.contains("providerProjectArgument")),
        "{named:?}"
    );
    let called = composed
        .call_tool(
            "whole__streams_by_project",
            args(json!({"project": "acme"})),
        )
        .await;
    assert!(called.is_ok(), "{called:?}");
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_whose_name_does_not_resolve_should_degrade_only_its_binding() {
    // `.invalid` never resolves (RFC 6761): the lookup fails, nothing is dialed, and the
    // binding says which endpoint and why; the other binding composes.
    let healthy = DemoProvider::start(&[]);
    let unresolvable = "capstan-no-such-host.invalid";
    let hosts = vec![healthy.host(), unresolvable.to_owned()];
    let text = serde_json::to_string(&json!([
        binding(
            "lost",
            "lost",
            &format!("http://{unresolvable}:8080/mcp"),
            &["streams_list"]
        ),
        binding("good", "good", &healthy.url("/mcp"), &["streams_list"]),
    ]))
    .unwrap();
    let limits = Limits {
        connect_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let composed = tokio::time::timeout(
        Duration::from_secs(60),
        composer(&hosts, &hosts, limits).compose(&documents(&text)),
    )
    .await
    .expect("composing did not finish");
    let composition = composed.composition.clone();
    composed.close().await;
    assert_eq!(tool_names(&composition), ["good__streams_list"]);
    let lost = &composition.bindings[0];
    assert!(lost.degraded());
    let reasons = lost.reasons().join("; ");
    assert!(reasons.contains(unresolvable), "{reasons}");
    assert!(
        lost.upstream_errors
            .iter()
            .chain(&lost.refused)
            .any(|e| e.contains(unresolvable)),
        "{:?} {:?}",
        lost.upstream_errors,
        lost.refused
    );
    assert!(!composition.bindings[1].degraded());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_whose_pin_does_not_match_should_be_neither_exposed_nor_routed() {
    let provider = DemoProvider::start(&[]);
    let hosts = vec![provider.host()];
    let listed = provider.listed_tool("docs_search").await;
    let reviewed = capstan_testkit::pin_oracle(&listed);
    let stale = format!("sha256:{}", "0".repeat(64));
    let with_pin = |pin: &str| {
        let mut document = binding(
            "search",
            "streamco",
            &provider.url("/mcp"),
            &["docs_search", "streams_list"],
        );
        let server = &mut document["spec"]["tools"]["mcpServers"][0];
        server["toolSelector"]["pins"] = json!({ "docs_search": pin });
        server["capabilities"] =
            json!([{ "capabilityId": "cap.web.search", "tool": "docs_search" }]);
        serde_json::to_string(&json!([document])).unwrap()
    };
    let composer = composer(&hosts, &hosts, Limits::default());

    // The reviewed pin: exposed and routed, and the digest is the oracle's.
    let composed = composer.compose(&documents(&with_pin(&reviewed))).await;
    let outcome = &composed.composition.bindings[0];
    assert!(!outcome.degraded(), "{:?}", outcome.reasons());
    assert!(
        outcome
            .definitions
            .iter()
            .any(|d| d.name == "docs_search" && d.digest == reviewed)
    );
    assert!(composed.capability("cap__web_search").is_some());
    composed.close().await;

    // A pin the live definition does not have: withheld from the tools and from the route.
    let composed = composer.compose(&documents(&with_pin(&stale))).await;
    let composition = &composed.composition;
    assert_eq!(tool_names(composition), ["streamco__streams_list"]);
    assert!(composed.capability("cap__web_search").is_none());
    assert_unknown(
        composed
            .call_tool("streamco__docs_search", args(json!({"query": "x"})))
            .await,
        "streamco__docs_search",
    );
    let outcome = &composition.bindings[0];
    assert_eq!(outcome.pin_mismatches.len(), 1);
    assert_eq!(
        (
            outcome.pin_mismatches[0].pinned.as_str(),
            outcome.pin_mismatches[0].live.as_str()
        ),
        (stale.as_str(), reviewed.as_str())
    );
    assert_eq!(outcome.pin_mismatches[0].listed["name"], "docs_search");
    assert_eq!(
        outcome.stable_reasons(),
        [format!(
            "tool streamco/docs_search does not match its pin (pinned {stale}, listed \
             {reviewed}): withheld until its new definition is reviewed and re-pinned \
             (capstanctl pins)"
        )]
    );
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_of_2026_07_28_alone_should_be_composed_and_called_in_its_revision() {
    // It refuses `initialize`: without speaking its revision, the binding would be degraded.
    let echo = capstan_testkit::EchoUpstream::start_only_2026_07_28();
    let hosts = vec![echo.host()];
    let text =
        serde_json::to_string(&json!([binding("modern", "echo", &echo.url(), &["echo"])])).unwrap();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    let outcome = &composed.composition.bindings[0];
    assert!(!outcome.degraded(), "{:?}", outcome.reasons());
    assert_eq!(tool_names(&composed.composition), ["echo__echo"]);
    let result = composed
        .call_tool("echo__echo", args(json!({"text": "in its own revision"})))
        .await
        .unwrap();
    assert_eq!(
        result.content[0].as_text().map(|t| t.text.as_str()),
        Some("in its own revision")
    );
    composed.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn selected_prompts_and_resources_should_be_composed_first_wins_and_the_missing_reported() {
    let server = PythonServer::start();
    let hosts = vec![server.address.to_string()];
    let endpoint = format!("http://{}/mcp", server.address);
    let mut first = binding("first", "streamco", &endpoint, &[]);
    let entry = &mut first["spec"]["tools"]["mcpServers"][0];
    entry["promptSelector"] = json!({"include": ["triage", "no_such_prompt"]});
    entry["promptNames"] = json!("Unprefixed");
    entry["resourceSelector"] = json!({"include": ["streamco://runbooks/lag", "streamco://gone"]});
    entry["resourceUris"] = json!("AsListed");
    let mut second = binding("second", "other", &endpoint, &[]);
    let entry = &mut second["spec"]["tools"]["mcpServers"][0];
    entry["promptSelector"] = json!({"include": ["triage"]});
    entry["promptNames"] = json!("Unprefixed");
    entry["resourceSelector"] =
        json!({"include": ["streamco://runbooks/lag", "streamco://streams/{name}"]});
    let text = serde_json::to_string(&json!([first, second])).unwrap();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    let composition = &composed.composition;
    let prompts: Vec<(&str, &str)> = composition
        .prompts
        .iter()
        .map(|p| (p.name.as_str(), p.binding.as_str()))
        .collect();
    assert_eq!(prompts, [("triage", "first")]);
    let resources: Vec<(&str, &str, bool)> = composition
        .resources
        .iter()
        .map(|r| (r.uri.as_str(), r.binding.as_str(), r.template))
        .collect();
    assert_eq!(
        resources,
        [
            ("streamco://runbooks/lag", "first", false),
            (
                "capstan://second/other/streamco://runbooks/lag",
                "second",
                false
            ),
            (
                "capstan://second/other/streamco://streams/{name}",
                "second",
                true
            ),
        ]
    );
    assert_eq!(
        composition.bindings[0].reasons(),
        [
            "declared prompt or resource streamco/no_such_prompt is not offered by the server",
            "declared prompt or resource streamco/streamco://gone is not offered by the server",
        ]
    );
    assert_eq!(
        composition.bindings[1].reasons(),
        ["prompt or resource triage is already taken by binding first"]
    );
    // The winner's prompt is the first binding's server, reached by its own name.
    let answer = composed
        .get_prompt(json!({"name": "triage", "arguments": {"stream": "orders"}}))
        .await
        .unwrap();
    assert!(answer.to_string().contains("served by python"), "{answer}");
    composed.close().await;
}
