//! The demo provider as the composer's and the sidecar's tests use it: it starts on a free
//! port, serves its knowledge, records what it is asked, and reports its faults. (Being an
//! integration test of this package also makes `cargo test --workspace` build the binary with
//! the tests' feature set, which `capstan_testkit::binary` relies on.)

#![allow(clippy::unwrap_used)]

use capstan_testkit::DemoProvider;

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_provider_should_serve_knowledge_and_record_requests() {
    let provider = DemoProvider::start(&[]);
    let client = capstan_testkit::client();
    let knowledge = client
        .get(provider.url("/llms-full.txt"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(knowledge.starts_with("# StreamCo streaming"), "{knowledge}");
    let requests = provider.requests().await;
    assert!(
        requests.iter().any(|r| r["path"] == "/llms-full.txt"),
        "{requests:?}"
    );
    assert_eq!(provider.tool_calls().await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_500_fault_should_answer_mcp_requests_with_500() {
    let provider = DemoProvider::start(&["http-500"]);
    let answer = capstan_testkit::client()
        .post(provider.url("/mcp"))
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 500);
}
