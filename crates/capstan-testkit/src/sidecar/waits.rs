//! Waiting on a running sidecar, and reading its metrics and its providers' counters.

use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::model::ClientConfig;
use rmcp::service::RunningService;
use serde_json::Value;

use crate::{DemoProvider, client};

/// Reads the sidecar's `/metrics` at `address`.
pub async fn metrics(address: &str) -> String {
    client()
        .get(format!("http://{address}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A free TCP address on loopback for the sidecar's metrics.
pub fn free_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// How long a condition may take to hold before a test fails: generous, because the machine
/// may be busy; tests assert outcomes, not speed.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `probe` until it yields a value, failing the test with `what` after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "not within {PATIENCE:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The names `tools/list` shows in `session`, in order.
pub async fn tool_names(session: &RunningService<RoleClient, ClientConfig>) -> Vec<String> {
    session
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect()
}

/// Asserts that `session` neither lists `name` nor lets it be called: the call is refused as
/// for a tool that does not exist.
pub async fn assert_not_offered(
    session: &RunningService<RoleClient, ClientConfig>,
    name: &str,
    arguments: Value,
) {
    let names = tool_names(session).await;
    assert!(
        !names.iter().any(|n| n == name),
        "{name} is listed: {names:?}"
    );
    let refused = session
        .call_tool(call(name, arguments))
        .await
        .expect_err("an unknown tool's call is refused");
    assert!(refused.to_string().contains("no tool named"), "{refused}");
}

/// Arguments as an MCP argument object.
pub fn args(value: Value) -> Option<serde_json::Map<String, Value>> {
    value.as_object().cloned()
}

/// A `tools/call` of `name` with `arguments`.
pub fn call(name: &str, arguments: Value) -> rmcp::model::CallToolRequestParams {
    let mut params = rmcp::model::CallToolRequestParams::new(name.to_owned());
    params.arguments = args(arguments);
    params
}

/// The upstream sessions the provider saw closed (DELETE on /mcp).
pub async fn upstream_deletes(provider: &DemoProvider) -> usize {
    provider.mcp_requests("DELETE").await
}

/// How many JSON-RPC messages of `method` the provider received.
pub async fn provider_messages(provider: &DemoProvider, method: &str) -> usize {
    provider
        .requests()
        .await
        .iter()
        .flat_map(|r| r["rpc"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["method"] == method)
        .count()
}

/// The resident memory of process `pid`, in KiB (0 when it cannot be read).
pub fn rss_kib(pid: u32) -> f64 {
    crate::proc_status_kib(pid, "VmRSS:").unwrap_or(0.0)
}

pub use crate::{cpu_seconds, cpu_time};
