//! A tool call served through rmcp's handler (the 2026-07-28 revision): what the provider says
//! about the call reaches the caller through the session's peer while it runs.

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, ServerRequest};
use rmcp::service::{Peer, RequestContext, RoleServer, ServiceError};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use capstan_compose::ToCaller;

/// Runs `call`, sending what the provider says about it to the caller through the session's
/// peer as it comes; `None` when the caller cancelled it (rmcp cancels the request's token;
/// dropping the call gives it up at the provider too, capstan-upstream `mcp/call.rs`). A question of the
/// provider's is asked alongside, so that the call's own time limit still applies.
pub(super) async fn relaying(
    call: impl Future<Output = Result<CallToolResponse, McpError>>,
    mut relayed: tokio::sync::mpsc::Receiver<ToCaller>,
    context: &RequestContext<RoleServer>,
) -> Option<Result<CallToolResponse, McpError>> {
    tokio::pin!(call);
    let mut asking = FuturesUnordered::new();
    let answer = loop {
        tokio::select! {
            answer = &mut call => break answer,
            () = context.ct.cancelled() => return None,
            Some(message) = relayed.recv() => match message {
                ToCaller::Notification(notification) => {
                    let _ = context.peer.send_notification(notification).await;
                }
                ToCaller::Request { request, answer } => {
                    asking.push(ask_peer(&context.peer, request, answer));
                }
            },
            Some(()) = asking.next(), if !asking.is_empty() => {}
        }
    };
    while let Ok(ToCaller::Notification(notification)) = relayed.try_recv() {
        let _ = context.peer.send_notification(notification).await;
    }
    Some(answer)
}

/// Asks the caller a provider's question through the session's peer; its response goes to
/// `answer`.
async fn ask_peer(peer: &Peer<RoleServer>, request: ServerRequest, answer: oneshot::Sender<Value>) {
    let response = match peer.send_request(request).await {
        Ok(result) => json!({ "result": result }),
        Err(ServiceError::McpError(error)) => json!({ "error": error }),
        Err(other) => json!({ "error": { "code": -32603, "message": other.to_string() } }),
    };
    let _ = answer.send(response);
}
