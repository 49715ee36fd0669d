//! Composition against real MCP servers on loopback: the demo provider and an independent
//! server written with the Python `mcp` SDK.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use capstan_compose::compose::ToolCallError;
use capstan_compose::upstream::CallError;
use capstan_compose::{Composition, Limits};
use common::*;
use serde_json::{Value, json};

fn tool_names(composition: &Composition) -> Vec<&str> {
    composition.tools.iter().map(|t| t.name.as_str()).collect()
}

fn args(value: Value) -> Option<serde_json::Map<String, Value>> {
    value.as_object().cloned()
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
    assert!(composed.load_skill("nope").await.is_err());
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
        let error = composed.call_tool(name, None).await.unwrap_err();
        assert!(
            matches!(error, ToolCallError::Unknown { .. }),
            "{name}: {error}"
        );
    }
    // The raw upstream name of an allowed tool is not a composed name either.
    assert!(composed.call_tool("streams_list", None).await.is_err());
    let requests = provider.requests().await;
    let calls: Vec<&Value> = requests.iter().filter(|r| r["method"] == "POST").collect();
    assert!(!calls.is_empty());
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
    assert!(
        composed
            .call_tool("streamco__streams_export", None)
            .await
            .is_err()
    );
    composed.close().await;
}

/// Two bindings: `bad` on a faulty provider, `good` on a healthy one.
async fn compose_with_fault(fault: &str, limits: Limits) -> (Composition, Duration) {
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
    let started = Instant::now();
    let composed = composer(&hosts, &hosts, limits)
        .compose(&documents(&text))
        .await;
    let took = started.elapsed();
    let composition = composed.composition.clone();
    composed.close().await;
    (composition, took)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_upstream_should_degrade_only_its_binding_within_the_timeout() {
    let limits = Limits {
        connect_timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    let (composition, took) = compose_with_fault("hang", limits).await;
    assert!(
        took < Duration::from_secs(2) + Duration::from_secs(3),
        "took {took:?}"
    );
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
    let (composition, _) = compose_with_fault("http-500", Limits::default()).await;
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
    let (composition, _) = compose_with_fault("malformed", Limits::default()).await;
    assert_eq!(tool_names(&composition), ["good__streams_list"]);
    assert!(composition.bindings[0].degraded());
    assert!(!composition.bindings[1].degraded());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declared_tool_the_server_lacks_should_be_reported_missing() {
    let (composition, _) = compose_with_fault("drop-tool:streams_get", Limits::default()).await;
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
    let text = serde_json::to_string(&json!([binding(
        "outside",
        "streamco",
        &provider.url("/mcp"),
        &["streams_list"]
    )]))
    .unwrap();
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
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
    assert!(
        composed
            .call_tool("healthy__streams_list", None)
            .await
            .is_ok()
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
    for tool in &composed.composition.tools {
        assert!(!capstan_compose::compose::takes_project(&tool.input_schema));
    }
    composed.close().await;
}
