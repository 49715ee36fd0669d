//! `find_tools` through a real sidecar and the rmcp client (docs/tool-search.md): offered
//! above the sidecar's threshold only; answering among the tools the caller may call, best
//! first, with what calling each takes; saying plainly when no tool fits; a tool the binding's
//! allow-list leaves out never found; bad arguments refused naming the field. The independent
//! SDK clients, both revisions and the corpus behind several bindings are the e2e suite's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_testkit::sidecar::*;
use rmcp::RoleClient;
use rmcp::model::ClientConfig;
use rmcp::service::RunningService;
use serde_json::{Value, json};

type Session = RunningService<RoleClient, ClientConfig>;

const SEARCH_ALWAYS: &[(&str, &str)] = &[("CAPSTAN_TOOL_SEARCH_MIN_TOOLS", "0")];

async fn search(session: &Session, arguments: Value) -> rmcp::model::CallToolResult {
    session
        .call_tool(call("find_tools", arguments))
        .await
        .unwrap()
}

fn found(result: &rmcp::model::CallToolResult) -> Vec<String> {
    let answer = result.structured_content.as_ref().unwrap();
    answer["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn find_tools_should_answer_with_the_tool_that_does_the_need() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], SEARCH_ALWAYS);
    let session = sidecar.session("demo-project", None).await;
    assert!(
        tool_names(&session)
            .await
            .contains(&"find_tools".to_owned())
    );

    let result = search(
        &session,
        json!({"need": "Diagnose the orders-to-warehouse pipeline: where does lag build up?"}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let answer = result.structured_content.clone().unwrap();
    assert_eq!(answer["match"], "good", "{answer}");
    let best = &answer["tools"][0];
    assert_eq!(best["name"], "streamco__pipeline_diagnose", "{answer}");
    // What calling it takes, and whose it is.
    assert_eq!(best["inputSchema"]["type"], "object", "{best}");
    assert!(
        best["binding"].is_string() && best["service"].is_string(),
        "{best}"
    );
    assert!(found(&result).len() <= 5);
    // The text block carries the same answer for a client that reads only text.
    let text = result.content[0].as_text().unwrap().text.clone();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), answer);

    let result = search(
        &session,
        json!({"need": "which streams lag behind?", "limit": 1}),
    )
    .await;
    assert_eq!(found(&result), ["streamco__streams_list"], "{result:?}");
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn find_tools_should_say_when_no_tool_fits_and_never_find_a_tool_left_out() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], SEARCH_ALWAYS);
    let session = sidecar.session("demo-project", None).await;

    let result = search(
        &session,
        json!({"need": "Book me a flight from Lisbon to Berlin"}),
    )
    .await;
    let answer = result.structured_content.unwrap();
    assert_eq!(answer["match"], "none", "{answer}");
    assert!(
        answer["note"]
            .as_str()
            .unwrap()
            .contains("No tool serves this need")
    );

    // The provider serves `streams_export` and `streams_restart`; the binding's allow-list
    // leaves them out. Asked for in their own words, they are not found.
    for (tool, need) in [
        ("streams_export", "Export every stream's configuration"),
        ("streams_restart", "Restart a stream's consumers"),
    ] {
        assert!(provider.listed_tool(tool).await.is_object());
        let result = search(&session, json!({"need": need, "limit": 20})).await;
        let names = found(&result);
        assert!(names.iter().all(|n| !n.contains(tool)), "{names:?}");
    }
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn find_tools_should_refuse_bad_arguments_naming_the_field() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], SEARCH_ALWAYS);
    let session = sidecar.session("demo-project", None).await;
    let long = "x".repeat(1025);
    for (arguments, field) in [
        (json!({}), "need"),
        (json!({"need": "  "}), "need"),
        (json!({"need": long}), "need"),
        (json!({"need": "list streams", "limit": 0}), "limit"),
        (json!({"need": "list streams", "limit": 21}), "limit"),
        (
            json!({"need": "list streams", "project": "other"}),
            "project",
        ),
    ] {
        let result = search(&session, arguments.clone()).await;
        assert_eq!(result.is_error, Some(true), "{arguments}");
        let error = &result.structured_content.unwrap()["error"];
        assert_eq!(
            (&error["kind"], &error["field"]),
            (&json!("invalid_input"), &json!(field)),
            "{arguments}: {error}"
        );
    }
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn find_tools_should_not_be_offered_below_the_threshold() {
    let provider = DemoProvider::start(&[]);
    // The default threshold is above the StreamCo fixture's handful of tools.
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    assert_not_offered(&session, "find_tools", json!({"need": "list streams"})).await;
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_composition_view_should_name_the_built_in_tools_the_callers_list_shows() {
    let provider = DemoProvider::start(&[]);
    let identity = [
        (PROJECT_HEADER, "demo-project"),
        ("authorization", "Bearer viewer"),
    ];
    let built_ins = |sidecar: &Sidecar| {
        let (code, body, _) = sidecar.curl("GET", "/v1/composition", &identity, None);
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["builtins"].clone()
    };
    // At the default threshold and without a sink for reports: the skill loader alone.
    let quiet = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    assert_eq!(built_ins(&quiet), json!(["load_skill"]));

    // Search offered and reports on (the fixture names a reporting project): the view, made
    // without a session, names what the caller's tools/list then holds beside the providers'
    // (namespaced) tools — and, from the caller's live session, the same.
    let sink = temp_dir("built-ins").join("gaps.jsonl");
    let mut env = SEARCH_ALWAYS.to_vec();
    env.push(("CAPSTAN_GAP_SINK", sink.to_str().unwrap()));
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &env);
    let viewed = built_ins(&sidecar);
    let session = sidecar.session("demo-project", Some("viewer")).await;
    let listed: Vec<String> = tool_names(&session)
        .await
        .into_iter()
        .filter(|name| !name.contains("__"))
        .collect();
    assert_eq!(
        listed,
        ["load_skill", "find_tools", "report_capability_gap"],
        "{listed:?}"
    );
    assert_eq!(viewed, json!(listed));
    assert_eq!(built_ins(&sidecar), json!(listed));
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn above_the_threshold_the_list_should_leave_the_tools_to_search_and_keep_them_callable() {
    let provider = DemoProvider::start(&[]);
    let env = [("CAPSTAN_TOOL_SEARCH_THRESHOLD", "2")];
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &env);
    let session = sidecar.session("demo-project", None).await;
    // The fixture composes three provider tools: over the threshold, none is listed; the
    // built-in tools and find_tools are.
    let names = tool_names(&session).await;
    assert!(names.contains(&"find_tools".to_owned()), "{names:?}");
    assert!(names.contains(&"load_skill".to_owned()), "{names:?}");
    assert!(
        names.iter().all(|n| !n.starts_with("streamco__")),
        "{names:?}"
    );
    let instructions = session.peer_info().unwrap().instructions.clone().unwrap();
    assert!(instructions.contains("## Finding tools"), "{instructions}");
    assert!(instructions.contains("find_tools"), "{instructions}");

    // Found, and called by its name without being listed.
    let result = search(&session, json!({"need": "get the orders stream"})).await;
    assert_eq!(found(&result)[0], "streamco__streams_get", "{result:?}");
    let before = provider.tool_calls().await.len();
    let result = session
        .call_tool(call("streamco__streams_get", json!({"name": "orders"})))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let calls = provider.tool_calls().await;
    assert_eq!(calls.len(), before + 1);
    assert_eq!(calls.last().unwrap(), "streams_get");
    session.cancel().await.unwrap();

    // At the default threshold the same composition is listed whole, without the paragraph.
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    assert!(
        tool_names(&session)
            .await
            .contains(&"streamco__streams_get".to_owned())
    );
    let instructions = session
        .peer_info()
        .unwrap()
        .instructions
        .clone()
        .unwrap_or_default();
    assert!(!instructions.contains("## Finding tools"), "{instructions}");
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_without_a_session_should_get_the_same_answers() {
    let provider = DemoProvider::start(&[]);
    let env = [("CAPSTAN_TOOL_SEARCH_THRESHOLD", "2")];
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &env);
    let session = sidecar.session("demo-project", None).await;
    let modern = sidecar.modern_client("demo-project", None).await;
    // The 2026-07-28 revision: the same short list, the same instructions.
    assert_eq!(tool_names(&modern).await, tool_names(&session).await);
    let instructions = modern.peer_info().unwrap().instructions.clone().unwrap();
    assert!(instructions.contains("## Finding tools"), "{instructions}");
    for need in [
        "which streams lag behind?",
        "Diagnose the orders-to-warehouse pipeline",
        "Book me a flight",
    ] {
        let arguments = json!({"need": need, "limit": 3});
        let (a, b) = (
            search(&session, arguments.clone()).await,
            search(&modern, arguments).await,
        );
        assert_eq!(a.structured_content, b.structured_content, "{need}");
    }
    // A tool found is called by its name without a session, as with one.
    let result = modern
        .call_tool(call("streamco__streams_list", json!({})))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    session.cancel().await.unwrap();
    modern.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_should_be_held_to_its_searches_a_minute_and_another_caller_not() {
    let provider = DemoProvider::start(&[]);
    let env = [
        ("CAPSTAN_TOOL_SEARCH_MIN_TOOLS", "0"),
        ("CAPSTAN_TOOL_SEARCH_CALLS_PER_MINUTE", "2"),
    ];
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &env);
    let alice = sidecar.session("demo-project", Some("alice-token")).await;
    let need = json!({"need": "which streams lag behind?"});
    for _ in 0..2 {
        assert_ne!(search(&alice, need.clone()).await.is_error, Some(true));
    }
    let refused = search(&alice, need.clone()).await;
    assert_eq!(refused.is_error, Some(true));
    let error = &refused.structured_content.unwrap()["error"];
    assert_eq!(error["kind"], "rate_limited", "{error}");
    assert!(error["retryAfterMs"].as_u64().unwrap() > 0, "{error}");
    // Another caller (another token) has its own allowance; a second session of Alice's does
    // not.
    let bob = sidecar.session("demo-project", Some("bob-token")).await;
    assert_ne!(search(&bob, need.clone()).await.is_error, Some(true));
    let again = sidecar.session("demo-project", Some("alice-token")).await;
    assert_eq!(search(&again, need).await.is_error, Some(true));
    for session in [alice, bob, again] {
        session.cancel().await.unwrap();
    }
}
