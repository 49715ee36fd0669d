//! `tools/call` on an open session, answered in the request's own task.
//!
//! rmcp's Streamable HTTP server hands every request through its session manager, the
//! session's worker, the service loop and a handler task, and streams the answer back as SSE
//! through the same hops. For the hot path of a sidecar — a tool call inside a session
//! whose identity the middleware has just checked — those hand-offs cost more than the
//! forwarding itself (the sidecar benchmark's profile: context switches and channel hops
//! were most of the sidecar's own time). So a single `tools/call` request with a live task is
//! served here with the same `Task::call` the rmcp handler uses, and answered with an
//! `application/json` body, which Streamable HTTP allows for any POST. Everything else —
//! `initialize`, `tools/list`, notifications, batches, GET streams, DELETE — goes to rmcp.
//!
//! What this path does not do: `notifications/cancelled` does not stop a call served here
//! (the per-call upstream timeout still bounds it), and no progress notifications are sent
//! (the sidecar sends none on either path).

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use capstan_api::wire::{MCP_METHOD, MCP_PROTOCOL_VERSION};
use rmcp::ErrorData as McpError;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::identity::Identity;
use crate::mcp::SUPPORTED_VERSIONS;
use crate::middleware::{Message, SessionTask};

/// The middleware: serves `tools/call` of a live session, passes everything else on.
pub async fn tools_call(mut request: Request, next: Next) -> Response {
    let is_call = request
        .extensions()
        .get::<Message>()
        .is_some_and(|Message(message)| {
            message.get("method").and_then(Value::as_str) == Some("tools/call")
                && message
                    .get("id")
                    .is_some_and(|id| id.is_string() || id.is_number())
        });
    if !is_call || request.extensions().get::<SessionTask>().is_none() {
        return next.run(request).await;
    }
    if let Some(refused) = header_mismatch(&request) {
        return refused;
    }
    let (Some(Message(mut message)), Some(SessionTask(task))) = (
        request.extensions_mut().remove::<Message>(),
        request.extensions_mut().remove::<SessionTask>(),
    ) else {
        return next.run(request).await;
    };
    let id = message["id"].take();
    let params = message
        .get_mut("params")
        .map(Value::take)
        .unwrap_or(Value::Null);
    let caller = request.extensions().get::<Identity>();
    let answer = match serde_json::from_value::<CallToolRequestParams>(params) {
        Ok(params) => task.call(caller, params).await,
        Err(error) => Err(McpError::invalid_params(
            format!("tools/call params: {error}"),
            None,
        )),
    };
    let body = match answer {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
    };
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        serde_json::to_vec(&body).unwrap_or_default(),
    )
        .into_response()
}

/// The checks rmcp makes on a request's protocol headers, made here for the calls it does not
/// see: a `MCP-Protocol-Version` the sidecar does not speak, or an `Mcp-Method` header that
/// contradicts the body, is refused with 400.
fn header_mismatch(request: &Request) -> Option<Response> {
    let headers = request.headers();
    if let Some(version) = headers.get(MCP_PROTOCOL_VERSION) {
        let known = version
            .to_str()
            .is_ok_and(|v| SUPPORTED_VERSIONS.iter().any(|s| s.as_str() == v));
        if !known {
            return Some(bad_request(
                "unsupported MCP-Protocol-Version: use the revision negotiated at initialize",
            ));
        }
    }
    if let Some(method) = headers.get(MCP_METHOD)
        && method.as_bytes() != b"tools/call"
    {
        return Some(bad_request(
            "the Mcp-Method header does not match the request's method",
        ));
    }
    None
}

fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({
            "jsonrpc": "2.0", "id": null,
            "error": { "code": -32600, "message": message }
        })),
    )
        .into_response()
}
