//! The span of each request a task sends a provider (`mcp/call.rs`): kind client, after
//! the OpenTelemetry MCP conventions (docs/observability.md); the request carries its context
//! (`trace_context.rs`). At debug level like the request's own span in the sidecar: without a
//! trace exporter, and with the default log filter, it is never created.

use tracing::field::Empty;
use tracing::{Span, debug_span};

use crate::trace_context::span_unless_unsampled;

/// The span of one request to the server (kind client, after the MCP conventions); its
/// context goes with the request (`trace_context.rs`). At debug level, like the request's
/// own span (the sidecar's `request_span.rs` says why).
pub(super) fn client_span(server: &str, url: &url::Url, method: &str, tool: Option<&str>) -> Span {
    let span = span_unless_unsampled(|| {
        debug_span!(
            "mcp.client",
            otel.name = Empty,
            otel.kind = "client",
            otel.status_code = Empty,
            mcp.method.name = method,
            gen_ai.operation.name = (method == "tools/call").then_some("execute_tool"),
            gen_ai.tool.name = tool,
            server.address = Empty,
            server.port = Empty,
            capstan.provider = %server,
            error.type = Empty,
        )
    });
    if !span.is_disabled() {
        span.record(
            "otel.name",
            match tool {
                Some(tool) => format!("{method} {tool}"),
                None => method.to_owned(),
            },
        );
        if let Some(host) = url.host_str() {
            span.record("server.address", host);
        }
        if let Some(port) = url.port_or_known_default() {
            span.record("server.port", port);
        }
    }
    span
}

/// Records on `span` that its request failed as `kind`.
pub(super) fn failed(span: &Span, kind: &str) {
    span.record("otel.status_code", "error");
    span.record("error.type", kind);
}
