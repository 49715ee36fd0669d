//! The transport-level faults of `/mcp` (`hang`, `hang-calls`, `slow-calls:<ms>`, `slow-drip`,
//! `drip-calls:<ms>`, `http-500`, `malformed`), applied by the middleware that first records
//! every request.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::recording::{MAX_RECORDED_BODY, Recorded, read_rpc};
use crate::streamco::Shared;

/// Records every request; applies the transport-level faults to `/mcp`.
pub(crate) async fn record_and_fault(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let is_mcp = parts.uri.path().starts_with("/mcp");
    let (body, rpc) = if is_mcp && parts.method == Method::POST {
        match read_rpc(body).await {
            Some(read) => read,
            None => return (StatusCode::PAYLOAD_TOO_LARGE, "body too large\n").into_response(),
        }
    } else {
        (body, Vec::new())
    };
    let calls_a_tool = rpc.iter().any(|m| m.tool.is_some());
    shared.record(Recorded::new(&parts, rpc));
    let request = Request::from_parts(parts, body);
    if !is_mcp {
        return next.run(request).await;
    }
    apply_faults(&shared, calls_a_tool, request, next).await
}

/// Answers an MCP `request` as the faults set now shape it, in this order: held forever
/// (`hang`, or `hang-calls` for a request that calls a tool), delayed (`slow-calls`), sent
/// slowly (`slow-drip`, or `drip-calls` for a request that calls a tool), or answered in the
/// server's place (`http-500`, `malformed`).
async fn apply_faults(
    shared: &Shared,
    calls_a_tool: bool,
    request: Request,
    next: Next,
) -> Response {
    if shared.has("hang") || (calls_a_tool && shared.has("hang-calls")) {
        std::future::pending::<()>().await;
    }
    if calls_a_tool && let Some(delay) = slow_calls(shared) {
        tokio::time::sleep(delay).await;
    }
    if shared.has("slow-drip") {
        return drip(next.run(request).await, SLOW_DRIP).await;
    }
    if calls_a_tool && let Some(every) = fault_ms(shared, "drip-calls:") {
        return drip(next.run(request).await, every).await;
    }
    if let Some(injected) = injected_answer(shared) {
        return injected;
    }
    next.run(request).await
}

/// How long `slow-calls:<ms>` holds a request that calls a tool, if it is set.
fn slow_calls(shared: &Shared) -> Option<Duration> {
    fault_ms(shared, "slow-calls:")
}

/// The milliseconds of a fault set as `<prefix><ms>`, if it is set.
fn fault_ms(shared: &Shared, prefix: &str) -> Option<Duration> {
    shared
        .faults()
        .iter()
        .find_map(|f| f.strip_prefix(prefix)?.parse::<u64>().ok())
        .map(Duration::from_millis)
}

/// How often `slow-drip` and `slow-runbook` send a byte.
pub(crate) const SLOW_DRIP: Duration = Duration::from_millis(200);

/// `response` with its body sent one byte `every` so long (`slow-drip`, `slow-runbook`,
/// `drip-calls:<ms>`: a provider streaming its answer slowly).
pub(crate) async fn drip(response: Response, every: Duration) -> Response {
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_RECORDED_BODY)
        .await
        .unwrap_or_default();
    let drip = futures::stream::unfold(0usize, move |at| {
        let bytes = bytes.clone();
        async move {
            if at >= bytes.len() {
                return None;
            }
            tokio::time::sleep(every).await;
            Some((
                Ok::<_, std::convert::Infallible>(bytes.slice(at..at + 1)),
                at + 1,
            ))
        }
    });
    Response::from_parts(parts, Body::from_stream(drip))
}

/// The answer `http-500` or `malformed` gives in the server's place, if either is set.
fn injected_answer(shared: &Shared) -> Option<Response> {
    if shared.has("http-500") {
        return Some((StatusCode::INTERNAL_SERVER_ERROR, "injected fault\n").into_response());
    }
    if shared.has("malformed") {
        return Some(
            Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from("{\"jsonrpc\": \"2.0\", \"id\": oops"))
                .unwrap_or_default(),
        );
    }
    None
}
