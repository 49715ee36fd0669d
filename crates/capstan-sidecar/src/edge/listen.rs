//! `subscriptions/listen` (2026-07-28): a stream of the list changes, and the updates of the
//! resources, its caller asked to hear, served from the caller's task.
//!
//! The stream opens with the acknowledgement of what it will carry — the caller's filter
//! narrowed to what the sidecar tells (every list change, the first [`MAX_SUBSCRIPTIONS`]
//! resources) and what it declares — sent before the task follows those resources at their
//! providers, so a URI its composition does not offer is acknowledged and hears nothing until
//! a composition offers it (docs/mcp-surface.md). An update a provider sent between the two was
//! heard by no one, so each followed resource is told once then, as "read it again". A
//! keep-alive comment goes out every [`SSE_KEEP_ALIVE`]. When the task ends (its time limit,
//! shutdown) the stream ends with the request's result; when the caller leaves, it just ends.
//! Either way the task stops following what only this stream followed. Its place was taken,
//! and is held while the stream lives, by the gate.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use capstan_upstream::trace_context::in_this_request;
use futures::StreamExt as _;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ErrorCode, NotificationMetaObject, RequestId, ServerJsonRpcMessage, ServerNotification,
    ServerResult, SubscriptionFilter, SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams, SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
};
use serde_json::Value;
use tokio::sync::oneshot;

use super::answer::{self, Revision};
use super::methods::handshake::server_config;
use super::session_stream::SSE_KEEP_ALIVE;
use crate::message::{Envelope, Params};
use crate::task::{Listener, MAX_SUBSCRIPTIONS, Task};

/// Serves the `subscriptions/listen` request `message` with `task`, in `revision` (a
/// revision with sessions has no such method: its sessions have their GET stream).
pub(super) async fn serve(task: Arc<Task>, message: Box<Envelope>, revision: Revision) -> Response {
    let Envelope { id, params, .. } = *message;
    let id = id.unwrap_or_default();
    if !revision.modern {
        let error = McpError::new(ErrorCode::METHOD_NOT_FOUND, "subscriptions/listen", None);
        return answer::error(&id, error, revision);
    }
    let params = match params {
        Params::Other(params) => params,
        Params::Absent | Params::Call(_) => Value::Null,
    };
    let requested = match serde_json::from_value::<SubscriptionsListenRequestParams>(params) {
        Ok(params) => params.notifications,
        Err(error) => {
            let error = McpError::invalid_params(error.to_string(), None);
            return answer::error(&id, error, revision);
        }
    };
    let Ok(request_id) = serde_json::from_value::<RequestId>(id.clone()) else {
        let error = McpError::invalid_request("a request id is a string or a number", None);
        return answer::error(&id, error, revision);
    };
    let accepted = accepted(&requested);
    let acknowledgement = acknowledgement(&request_id, &accepted);
    let (listener, events) = Listener::new(request_id.clone(), accepted);
    let (left, gone) = oneshot::channel::<()>();
    let (end, last) = oneshot::channel::<String>();
    tokio::spawn(in_this_request(async move {
        if follow(task, listener, gone).await {
            let _ = end.send(last_result(request_id));
        }
    }));
    // Every change told before the task ended goes out before the request's result.
    let events = futures::stream::unfold(Some((events, last)), |state| async move {
        let (mut events, mut last) = state?;
        tokio::select! {
            biased;
            event = events.next() => Some((event, Some((events, last)))),
            result = &mut last => result.ok().map(|result| (result, None)),
        }
    });
    // The stream holds `left`: dropping it (the caller left) tells `follow`.
    let stream = futures::stream::once(std::future::ready(acknowledgement))
        .chain(events)
        .map(move |event| {
            let _held = &left;
            Ok::<_, Infallible>(Event::default().data(event))
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(SSE_KEEP_ALIVE))
        .into_response()
}

/// What a stream asking `requested` is told it will hear: list changes of tools, prompts and
/// resources, and updates of the first [`MAX_SUBSCRIPTIONS`] resources asked for — of those,
/// what it asked and what the sidecar declares.
fn accepted(requested: &SubscriptionFilter) -> SubscriptionFilter {
    let uris = requested.resource_subscriptions.iter().flatten();
    let told = SubscriptionFilter::builder()
        .tools_list_changed()
        .prompts_list_changed()
        .resources_list_changed()
        .resource_subscriptions(uris.take(MAX_SUBSCRIPTIONS).cloned())
        .build();
    let declared = requested.supported_by(&server_config().capabilities);
    requested.intersection(&told).intersection(&declared)
}

/// The stream's first event: what it will carry, marked with the request's id.
fn acknowledgement(id: &RequestId, accepted: &SubscriptionFilter) -> String {
    let mut acknowledgement = SubscriptionsAcknowledgedNotification::new(
        SubscriptionsAcknowledgedNotificationParams::new(accepted.clone()),
    );
    let mut meta = NotificationMetaObject::new();
    meta.set_subscription_id(id.clone());
    acknowledgement.extensions.insert(meta);
    let message = ServerJsonRpcMessage::notification(
        ServerNotification::SubscriptionsAcknowledgedNotification(acknowledgement),
    );
    serde_json::to_string(&message).unwrap_or_default()
}

/// The request's result, which ends a stream its task ended.
fn last_result(id: RequestId) -> String {
    let mut result = SubscriptionsListenResult::complete(id.clone());
    result.meta.set_server_info(server_config().server_info);
    let message =
        ServerJsonRpcMessage::response(ServerResult::SubscriptionsListenResult(result), id);
    serde_json::to_string(&message).unwrap_or_default()
}

/// Follows what `listener` accepted from `task` until the task ends (true) or the caller
/// leaves (`gone`, false), then stops following what only it followed.
async fn follow(task: Arc<Task>, listener: Listener, gone: oneshot::Receiver<()>) -> bool {
    let mut ended = task.ended();
    let uris = listener
        .accepted()
        .resource_subscriptions
        .clone()
        .unwrap_or_default();
    // A resource the caller may not use is followed as an unknown one is: not at all.
    let uris = task.usable_uris(uris).await;
    let listening = task.listen(listener);
    let first = task.hold(&uris);
    let carried = task.subscribe_upstream("resources/subscribe", first).await;
    task.notify_resource_updated(carried.into_iter().collect());
    let ended_by_task = tokio::select! {
        _ = gone => false,
        _ = ended.changed() => true,
    };
    drop(listening);
    let last = task.release(&uris);
    task.subscribe_upstream("resources/unsubscribe", last).await;
    ended_by_task
}
