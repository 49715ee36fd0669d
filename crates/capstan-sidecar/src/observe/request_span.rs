//! The span of one request on the socket, after the OpenTelemetry MCP conventions
//! (docs/observability.md): named `{mcp.method.name} {target}`, kind server, with the method,
//! the tool or prompt, the protocol revision, the session (hashed), the JSON-RPC id and the
//! error kind. Its parent is the trace context the caller sent — the `traceparent` header, or
//! the same key in `params._meta`.
//!
//! Spans are at debug level: with the default log filter (`info`) the log lines never carry
//! them, and without a trace exporter they are not created at all, so the hot path pays for
//! them only when traces are on (`capstan-process` telemetry.rs exports them whatever the log
//! filter says). With traces on, a request is sampled or not when it arrives, by the
//! environment's sampler and the caller's parent (`capstan-process` sampling.rs): an
//! unsampled one has no span at all, and its code runs `in_unsampled` (capstan-upstream
//! `trace_context.rs`). What a span carries is only what is recorded here and in
//! `task/call.rs` — never an argument value, a token or knowledge text.

use axum::http::HeaderMap;
use axum::response::Response;
use capstan_api::wire::MCP_PROTOCOL_VERSION;
use capstan_process::{Head, HeadSampler};
use capstan_upstream::trace_context::{
    from_headers, from_meta, hashed_session_id, is_remote_parent,
};
use opentelemetry::trace::SpanContext;
use serde_json::Value;
use tracing::Span;

use crate::message::{Message, PROTOCOL_VERSION_META};
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// How the sidecar traces its requests: with the head sampler when spans are exported.
#[derive(Clone, Debug, Default)]
pub struct RequestTracing {
    heads: Option<HeadSampler>,
}

/// A request's trace: its span (disabled when there is none), and for a request its head
/// sampler left out the context it passes on to providers.
pub struct RequestTrace {
    pub span: Span,
    pub unsampled: Option<SpanContext>,
}

impl RequestTracing {
    /// Requests decided by `heads` (`None`: spans are not exported).
    pub fn new(heads: Option<HeadSampler>) -> Self {
        Self { heads }
    }

    /// The trace of a request with `headers` and, once read, its `message`: the caller's
    /// parent is the `traceparent` header, or else the message's `_meta.traceparent`.
    pub fn begin(&self, headers: &HeaderMap, message: Option<&Message>) -> RequestTrace {
        let Some(heads) = &self.heads else {
            // Nothing is exported: the span exists only for a debug log filter.
            return RequestTrace {
                span: new_span(),
                unsampled: None,
            };
        };
        let mut parent = from_headers(headers);
        if !is_remote_parent(&parent)
            && let Some(message) = message.and_then(Message::single)
        {
            parent = from_meta(message.meta());
        }
        match heads.decide(&parent, "mcp.server") {
            Head::Sampled(context) => {
                let span = new_span();
                let _ = span.set_parent(context);
                RequestTrace {
                    span,
                    unsampled: None,
                }
            }
            Head::Unsampled(passed) => RequestTrace {
                span: Span::none(),
                unsampled: Some(passed),
            },
        }
    }
}

/// A request's span, with every field it may record.
fn new_span() -> Span {
    tracing::debug_span!(
        "mcp.server",
        otel.name = Empty,
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method.name = Empty,
        mcp.protocol.version = Empty,
        mcp.session.id = Empty,
        jsonrpc.request.id = Empty,
        gen_ai.operation.name = Empty,
        gen_ai.tool.name = Empty,
        gen_ai.prompt.name = Empty,
        network.transport = "unix",
        network.protocol.name = "http",
        http.response.status_code = Empty,
        error.type = Empty,
        capstan.provider = Empty,
        capstan.capability = Empty,
        capstan.authorization = Empty,
        capstan.limit = Empty,
    )
}

/// Records what the request is: an MCP message (`message`) or a read of `path`; `session` is
/// the session id it names.
pub fn describe(
    span: &Span,
    method: &str,
    path: &str,
    headers: &HeaderMap,
    message: Option<&Message>,
    session: Option<&str>,
) {
    if span.is_disabled() {
        return;
    }
    if let Some(session) = session {
        span.record("mcp.session.id", hashed_session_id(session));
    }
    let Some(message) = message.and_then(Message::single) else {
        span.record("otel.name", format!("{method} {}", bounded(path)));
        return;
    };
    let mcp_method = bounded(message.method().unwrap_or("response"));
    span.record("mcp.method.name", mcp_method);
    match &message.id {
        Some(Value::String(id)) => span.record("jsonrpc.request.id", bounded(id)),
        Some(Value::Number(id)) => span.record("jsonrpc.request.id", id.to_string()),
        _ => span,
    };
    let version = headers
        .get(MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .or_else(|| message.meta_str(PROTOCOL_VERSION_META))
        .or_else(|| message.param("protocolVersion"));
    if let Some(version) = version {
        span.record("mcp.protocol.version", bounded(version));
    }
    let target = match mcp_method {
        "tools/call" => {
            span.record("gen_ai.operation.name", "execute_tool");
            message.param("name").map(bounded).inspect(|tool| {
                span.record("gen_ai.tool.name", *tool);
            })
        }
        "prompts/get" => message.param("name").map(bounded).inspect(|prompt| {
            span.record("gen_ai.prompt.name", *prompt);
        }),
        _ => None,
    };
    span.record(
        "otel.name",
        match target {
            Some(target) => format!("{mcp_method} {target}"),
            None => mcp_method.to_owned(),
        },
    );
}

/// The longest caller-chosen text a span carries (a method, a tool or prompt name, a request
/// id, a revision): the caller writes them, and a hostile one could otherwise send megabytes
/// to every collector the spans go to.
const MAX_CALLER_TEXT: usize = 256;

/// `text` cut to [`MAX_CALLER_TEXT`] bytes, on a character boundary.
fn bounded(text: &str) -> &str {
    let mut end = text.len().min(MAX_CALLER_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Records the answer's status; an HTTP refusal is the error, named by its status as the HTTP
/// conventions name it.
pub fn answered(span: &Span, response: &Response) {
    if span.is_disabled() {
        return;
    }
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_client_error() || status.is_server_error() {
        span.record("otel.status_code", "error");
        span.record("error.type", status.as_str());
    }
}

/// Records on the current request's span that it failed as `kind` (a Capstan error kind, e.g.
/// `upstream_timeout`, or a JSON-RPC error code).
pub fn failed(kind: &str) {
    let span = Span::current();
    span.record("otel.status_code", "error");
    span.record("error.type", kind);
}

/// Records on the current request's span what a tool call's authorization and its provider's
/// limits decided (the same words as its audit line, docs/audit.md).
pub fn decided(authorization: &str, limit: &str) {
    let span = Span::current();
    span.record("capstan.authorization", authorization);
    span.record("capstan.limit", limit);
}

/// Records on the current request's span the provider that served it and the routed
/// capability it served, if any.
pub fn served_by(provider: &str, capability: Option<&str>) {
    let span = Span::current();
    span.record("capstan.provider", provider);
    if let Some(capability) = capability {
        span.record("capstan.capability", capability);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_text_should_be_cut_on_a_character_boundary() {
        assert_eq!(bounded("tools/call"), "tools/call");
        let long = "é".repeat(300);
        let cut = bounded(&long);
        assert_eq!(cut.len(), 256);
        assert_eq!(cut.chars().count(), 128);
        let odd = format!("a{}", "é".repeat(300));
        assert_eq!(bounded(&odd).len(), 255);
    }
}
