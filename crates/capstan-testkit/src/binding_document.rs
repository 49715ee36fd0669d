//! The capability document the composer's and the sidecar's tests build their bindings from.

use serde_json::Value;

/// A capability document (a CapabilityBinding's shape) named `name`, with one MCP server
/// `server` at `endpoint` allowing `include`. Shared by the composer's and the sidecar's tests
/// and benches.
pub fn binding_document(name: &str, server: &str, endpoint: &str, include: &[&str]) -> Value {
    serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "serviceRef": { "name": name },
            "serviceName": format!("{name}.example"),
            "serviceAgentRef": { "name": format!("{name}-agent") },
            "configurationVersion": "v1",
            "tools": { "mcpServers": [{
                "name": server,
                "endpoint": endpoint,
                "toolSelector": { "include": include },
            }]}
        }
    })
}
