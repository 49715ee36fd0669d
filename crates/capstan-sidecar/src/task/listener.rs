//! A `subscriptions/listen` stream as the task holds it (`edge/listen.rs` serves the stream):
//! the request that opened it, what its caller was told it will hear, and the channel its
//! events leave on. A change goes out only if the stream accepted it, marked with the
//! stream's request id (`io.modelcontextprotocol/subscriptionId`), as the 2026-07-28 revision
//! asks.

use std::sync::Arc;

use rmcp::model::{
    GetMeta as _, PromptListChangedNotification, RequestId, ResourceListChangedNotification,
    ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerJsonRpcMessage,
    ServerNotification, SubscriptionFilter, ToolListChangedNotification,
};
use tokio::sync::mpsc;

use super::outbox::Change;

/// How many events a listen stream holds for a client slow to read before the task waits on
/// it (a change only says "list again", so a few are all a stream ever needs).
const EVENTS: usize = 64;

/// One open `subscriptions/listen` stream.
#[derive(Clone, Debug)]
pub struct Listener {
    id: RequestId,
    accepted: Arc<SubscriptionFilter>,
    events: mpsc::Sender<String>,
}

/// Why a change did not go out on a stream.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unsent {
    /// The stream did not ask for it.
    NotAccepted,
    /// The stream is gone.
    Gone,
}

impl Listener {
    /// A stream opened by request `id` that accepted `accepted`, and the receiving end of its
    /// events (each a JSON-RPC message, as text).
    pub fn new(id: RequestId, accepted: SubscriptionFilter) -> (Self, mpsc::Receiver<String>) {
        let (events, received) = mpsc::channel(EVENTS);
        let listener = Self {
            id,
            accepted: Arc::new(accepted),
            events,
        };
        (listener, received)
    }

    /// What the stream's caller was told it will hear.
    pub fn accepted(&self) -> &SubscriptionFilter {
        &self.accepted
    }

    /// Sends `change` on the stream, if it accepted it.
    pub(super) async fn send(&self, change: &Change) -> Result<(), Unsent> {
        let accepted = &self.accepted;
        let (asked, mut notification) = match change {
            Change::ToolList => (
                accepted.tools_list_changed == Some(true),
                ServerNotification::from(ToolListChangedNotification::default()),
            ),
            Change::PromptList => (
                accepted.prompts_list_changed == Some(true),
                PromptListChangedNotification::default().into(),
            ),
            Change::ResourceList => (
                accepted.resources_list_changed == Some(true),
                ResourceListChangedNotification::default().into(),
            ),
            Change::Updated(uri) => (
                accepted
                    .resource_subscriptions
                    .as_ref()
                    .is_some_and(|uris| uris.contains(uri)),
                ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(
                    uri.clone(),
                ))
                .into(),
            ),
        };
        if !asked {
            return Err(Unsent::NotAccepted);
        }
        notification
            .get_meta_mut()
            .set_subscription_id(self.id.clone());
        let message = ServerJsonRpcMessage::notification(notification);
        let text = serde_json::to_string(&message).unwrap_or_default();
        self.events.send(text).await.map_err(|_| Unsent::Gone)
    }

    /// Sends the stream's last message (the request's result) and lets the stream end once
    /// every other holder of it has let go.
    pub async fn send_last(self, message: String) {
        let _ = self.events.send(message).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn listener(accepted: SubscriptionFilter) -> (Listener, mpsc::Receiver<String>) {
        Listener::new(RequestId::Number(7), accepted)
    }

    /// A stream hears only what it accepted, each change marked with its request's id; a
    /// stream whose caller left is gone.
    #[tokio::test]
    async fn a_stream_should_hear_what_it_accepted_marked_as_its_own() {
        let accepted = SubscriptionFilter::builder()
            .tools_list_changed()
            .resource_subscriptions(["file:///a".to_owned()])
            .build();
        let (listener, mut events) = listener(accepted);
        assert_eq!(
            listener.send(&Change::PromptList).await,
            Err(Unsent::NotAccepted)
        );
        let other = Change::Updated("file:///b".to_owned());
        assert_eq!(listener.send(&other).await, Err(Unsent::NotAccepted));
        listener.send(&Change::ToolList).await.unwrap();
        listener
            .send(&Change::Updated("file:///a".to_owned()))
            .await
            .unwrap();
        let told: Vec<Value> = [events.recv().await, events.recv().await]
            .into_iter()
            .map(|event| serde_json::from_str(&event.unwrap()).unwrap())
            .collect();
        assert_eq!(told[0]["method"], "notifications/tools/list_changed");
        assert_eq!(told[1]["method"], "notifications/resources/updated");
        assert_eq!(told[1]["params"]["uri"], "file:///a");
        for message in &told {
            assert_eq!(message["jsonrpc"], "2.0");
            assert_eq!(
                message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
                7
            );
        }
        assert!(events.try_recv().is_err(), "nothing else was told");
        drop(events);
        assert_eq!(listener.send(&Change::ToolList).await, Err(Unsent::Gone));
    }
}
