//! The demo provider as a process: started on a free port, read back through its debug routes
//! and driven through its fault switches.

use std::net::SocketAddr;
use std::process::{Child, Command};

use serde_json::Value;

use crate::http_client::client;
use crate::spawned::spawn_listening;
use crate::workspace::binary;

/// A running demo provider on a free loopback port; stopped on drop.
pub struct DemoProvider {
    child: Child,
    /// Where it listens.
    pub address: SocketAddr,
}

impl DemoProvider {
    /// Starts the demo provider on a free loopback port with the given faults.
    pub fn start(faults: &[&str]) -> Self {
        Self::start_on("127.0.0.1:0", faults, &[])
    }

    /// Starts the demo provider on `listen` (port 0 picks one) with the given faults,
    /// accepting MCP requests addressed to `allowed_hosts` too.
    pub fn start_on(listen: &str, faults: &[&str], allowed_hosts: &[&str]) -> Self {
        let mut command = Command::new(binary("demo-provider"));
        command
            .args(["--listen", listen])
            .env_remove("DEMO_PROVIDER_FAULTS")
            .env_remove("DEMO_PROVIDER_ALLOWED_HOSTS");
        for fault in faults {
            command.args(["--fault", fault]);
        }
        for host in allowed_hosts {
            command.args(["--allowed-host", host]);
        }
        let (child, address) = spawn_listening(command, "demo-provider");
        Self { child, address }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A URL on the provider.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// `host:port`, as an allow-list entry.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    /// Every request the provider received: method, path, headers.
    pub async fn requests(&self) -> Vec<Value> {
        let response = client()
            .get(self.url("/debug/requests"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("reading the provider's requests: {e}"));
        response
            .json()
            .await
            .unwrap_or_else(|e| panic!("decoding the provider's requests: {e}"))
    }

    /// How many `method` requests (POST, GET, DELETE) the provider received on `/mcp`.
    pub async fn mcp_requests(&self, method: &str) -> usize {
        self.requests()
            .await
            .iter()
            .filter(|r| r["method"] == method && r["path"] == "/mcp")
            .count()
    }

    /// How many times the provider was asked for its runbook (`/runbooks/lag.md`, the demo
    /// skill's body).
    pub async fn runbook_requests(&self) -> usize {
        self.requests()
            .await
            .iter()
            .filter(|r| r["path"] == "/runbooks/lag.md")
            .count()
    }

    /// The runbook as the provider serves it now, read with a plain HTTP GET (counted among
    /// [`Self::runbook_requests`]).
    pub async fn runbook(&self) -> String {
        client()
            .get(self.url("/runbooks/lag.md"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("reading the runbook: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("reading the runbook: {e}"))
    }

    /// The tools named by the `tools/call` requests the provider received, in order.
    pub async fn tool_calls(&self) -> Vec<String> {
        self.requests()
            .await
            .iter()
            .filter_map(|r| r["rpc"].as_array())
            .flatten()
            .filter_map(|m| m["tool"].as_str().map(str::to_owned))
            .collect()
    }

    /// The tools the provider lists now, as raw JSON, read with plain JSON-RPC over HTTP
    /// (initialize, tools/list, DELETE): no MCP client library, so a test's oracle does not
    /// share code with what it checks. Adds its requests to the provider's record.
    pub async fn listed_tools(&self) -> Vec<Value> {
        let url = self.url("/mcp");
        let post = |body: Value, session: Option<String>| {
            let mut request = client()
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-11-25")
                .json(&body);
            if let Some(session) = session {
                request = request.header("mcp-session-id", session);
            }
            request.send()
        };
        let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "oracle", "version": "1"}}});
        let response = post(initialize, None)
            .await
            .unwrap_or_else(|e| panic!("initialize: {e}"));
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let _ = response.text().await;
        let initialized =
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let _ = post(initialized, session.clone()).await;
        let list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let text = post(list, session.clone())
            .await
            .unwrap_or_else(|e| panic!("tools/list: {e}"))
            .text()
            .await
            .unwrap_or_default();
        if let Some(session) = session {
            let _ = client()
                .delete(&url)
                .header("mcp-session-id", session)
                .send()
                .await;
        }
        // The answer is JSON or one SSE event whose data is the JSON-RPC response.
        let answer: Value = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| serde_json::from_str(data.trim()).ok())
            .or_else(|| serde_json::from_str(&text).ok())
            .unwrap_or_else(|| panic!("tools/list answered {text:?}"));
        answer["result"]["tools"]
            .as_array()
            .cloned()
            .unwrap_or_else(|| panic!("tools/list answered {answer}"))
    }

    /// The tool `name` as the provider lists it now ([`DemoProvider::listed_tools`]).
    pub async fn listed_tool(&self, name: &str) -> Value {
        self.listed_tools()
            .await
            .into_iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("the provider lists no tool {name}"))
    }

    /// Sends `notifications/tools/list_changed` to every session opened while the
    /// `list-changed` switch was set; returns how many sessions were told.
    pub async fn notify_list_changed(&self) -> u64 {
        let answer: Value = client()
            .post(self.url("/debug/list-changed"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("asking for a list change: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("reading the list change answer: {e}"));
        answer["told"].as_u64().unwrap_or(0)
    }

    /// Replaces the provider's faults.
    pub async fn set_faults(&self, faults: &[&str]) {
        let body = serde_json::to_string(faults).unwrap_or_default();
        let response = client()
            .put(self.url("/debug/faults"))
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("setting faults: {e}"));
        assert!(
            response.status().is_success(),
            "setting faults: {}",
            response.status()
        );
    }

    /// Stops the provider now (as if it died).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for DemoProvider {
    fn drop(&mut self) {
        self.kill();
    }
}
