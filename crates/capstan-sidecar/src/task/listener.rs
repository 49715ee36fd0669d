//! A `subscriptions/listen` stream as the task holds it (`edge/listen.rs` serves the stream):
//! the request that opened it, what its caller was told it will hear, and the outbox its
//! events wait in. A change goes out only if the stream accepted it, marked with the stream's
//! request id (`io.modelcontextprotocol/subscriptionId`), as the 2026-07-28 revision asks.
//!
//! Each stream has an outbox of its own, with the session outbox's rule (`task/outbox.rs`): a
//! change already waiting is not kept twice, so what waits is bounded by what a stream can be
//! told and telling it never waits — a caller that does not read its stream holds up nothing
//! of its task, not even its own other streams.

use std::sync::Arc;

use rmcp::model::{
    GetMeta as _, PromptListChangedNotification, RequestId, ResourceListChangedNotification,
    ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerJsonRpcMessage,
    ServerNotification, SubscriptionFilter, ToolListChangedNotification,
};

use super::outbox::{Change, Outbox, SessionStream};

/// One open `subscriptions/listen` stream.
#[derive(Clone)]
pub struct Listener {
    accepted: Arc<SubscriptionFilter>,
    outbox: Arc<Outbox>,
}

/// The events of one listen stream, as its caller is to read them.
pub struct Events {
    id: RequestId,
    waiting: SessionStream,
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
    /// A stream opened by request `id` that accepted `accepted`, and its events.
    pub fn new(id: RequestId, accepted: SubscriptionFilter) -> (Self, Events) {
        let outbox = Arc::new(Outbox::default());
        let waiting = outbox.open();
        let listener = Self {
            accepted: Arc::new(accepted),
            outbox,
        };
        (listener, Events { id, waiting })
    }

    /// What the stream's caller was told it will hear.
    pub fn accepted(&self) -> &SubscriptionFilter {
        &self.accepted
    }

    /// Keeps `change` for the stream, if it accepted it; never waits.
    pub(super) fn send(&self, change: &Change) -> Result<(), Unsent> {
        let accepted = &self.accepted;
        let asked = match change {
            Change::ToolList => accepted.tools_list_changed == Some(true),
            Change::PromptList => accepted.prompts_list_changed == Some(true),
            Change::ResourceList => accepted.resources_list_changed == Some(true),
            Change::Updated(uri) => accepted
                .resource_subscriptions
                .as_ref()
                .is_some_and(|uris| uris.contains(uri)),
        };
        if !asked {
            return Err(Unsent::NotAccepted);
        }
        if self.outbox.note(change.clone()) {
            Ok(())
        } else {
            Err(Unsent::Gone)
        }
    }
}

impl Events {
    /// The stream's next event (a JSON-RPC notification, as text); waits until there is one.
    pub async fn next(&mut self) -> String {
        let change = self.waiting.next_change().await;
        let mut notification = match change {
            Change::ToolList => ServerNotification::from(ToolListChangedNotification::default()),
            Change::PromptList => PromptListChangedNotification::default().into(),
            Change::ResourceList => ResourceListChangedNotification::default().into(),
            Change::Updated(uri) => {
                ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(uri)).into()
            }
        };
        notification
            .get_meta_mut()
            .set_subscription_id(self.id.clone());
        let message = ServerJsonRpcMessage::notification(notification);
        serde_json::to_string(&message).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn listener(accepted: SubscriptionFilter) -> (Listener, Events) {
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
        assert_eq!(listener.send(&Change::PromptList), Err(Unsent::NotAccepted));
        let other = Change::Updated("file:///b".to_owned());
        assert_eq!(listener.send(&other), Err(Unsent::NotAccepted));
        listener.send(&Change::ToolList).unwrap();
        listener
            .send(&Change::Updated("file:///a".to_owned()))
            .unwrap();
        let told: Vec<Value> = [events.next().await, events.next().await]
            .into_iter()
            .map(|event| serde_json::from_str(&event).unwrap())
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
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), events.next())
                .await
                .is_err(),
            "nothing else was told"
        );
        drop(events);
        assert_eq!(listener.send(&Change::ToolList), Err(Unsent::Gone));
    }

    /// A stream nobody reads never makes its task wait: told far more changes than any
    /// channel would hold, each send returns at once, and what the stream then reads is each
    /// change once, in the order first told.
    #[tokio::test]
    async fn a_stream_nobody_reads_should_never_make_its_task_wait() {
        let accepted = SubscriptionFilter::builder()
            .tools_list_changed()
            .resources_list_changed()
            .build();
        let (listener, mut events) = listener(accepted);
        for _ in 0..10_000 {
            listener.send(&Change::ToolList).unwrap();
            listener.send(&Change::ResourceList).unwrap();
        }
        let first: Value = serde_json::from_str(&events.next().await).unwrap();
        let second: Value = serde_json::from_str(&events.next().await).unwrap();
        assert_eq!(first["method"], "notifications/tools/list_changed");
        assert_eq!(second["method"], "notifications/resources/list_changed");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), events.next())
                .await
                .is_err(),
            "each change waited once"
        );
    }
}
