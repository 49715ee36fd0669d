//! What a session's GET streams have yet to send (`edge/session_stream.rs`), and, one outbox
//! each, what a `subscriptions/listen` stream has yet to send (`task/listener.rs`).
//!
//! A notification here only says "list again" or "read this resource again", so what waits for a
//! client slow to read is kept once: a change noted while the same one still waits is the one
//! already waiting. That bounds the outbox by what a session can be told — the three list changes
//! and one update per subscription (`MAX_SUBSCRIPTIONS`) — so nothing is ever dropped for want of
//! room, and the session's refresh (`composition/refresh.rs`) never waits on a client slow to read
//! its GET stream. What waits while no stream is open is not kept: a stream replays nothing
//! (docs/mcp-surface.md), and a client re-lists when it opens one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::Notify;

use super::lock;

/// One change to tell a session of (its GET streams, its listen streams).
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) enum Change {
    ToolList,
    PromptList,
    ResourceList,
    /// An update of the resource the session subscribed to by this URI.
    Updated(String),
}

impl Change {
    /// The JSON-RPC notification that tells it.
    fn message(&self) -> Value {
        let method = match self {
            Self::ToolList => "notifications/tools/list_changed",
            Self::PromptList => "notifications/prompts/list_changed",
            Self::ResourceList => "notifications/resources/list_changed",
            Self::Updated(uri) => {
                return json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": { "uri": uri },
                });
            }
        };
        json!({ "jsonrpc": "2.0", "method": method })
    }
}

#[derive(Default)]
struct Waiting {
    /// The changes not yet sent, oldest first, each once.
    changes: VecDeque<Change>,
    /// The session's GET streams open now.
    streams: usize,
}

/// The session's outbox, shared by its GET streams; each change goes out on one of them.
#[derive(Default)]
pub(super) struct Outbox {
    waiting: Mutex<Waiting>,
    ready: Notify,
}

impl Outbox {
    /// Notes `change` for the outbox's streams, unless it already waits; false (and nothing
    /// kept) when no stream is open.
    pub(super) fn note(&self, change: Change) -> bool {
        {
            let mut waiting = lock(&self.waiting);
            if waiting.streams == 0 {
                return false;
            }
            if waiting.changes.contains(&change) {
                return true;
            }
            waiting.changes.push_back(change);
        }
        self.ready.notify_one();
        true
    }

    /// Drops a waiting update of `uri` (the session unsubscribed from it).
    pub(super) fn forget(&self, uri: &str) {
        lock(&self.waiting)
            .changes
            .retain(|change| !matches!(change, Change::Updated(waiting) if waiting == uri));
    }

    /// The oldest change waiting.
    fn take(&self) -> Option<Change> {
        lock(&self.waiting).changes.pop_front()
    }

    /// Opens a stream on the outbox.
    pub(super) fn open(self: &Arc<Self>) -> SessionStream {
        lock(&self.waiting).streams += 1;
        SessionStream(self.clone())
    }
}

/// One GET stream of a session: the messages to send on it, as they come. It holds the
/// outbox, not the task, so an open stream never keeps an ended task alive.
pub struct SessionStream(Arc<Outbox>);

impl SessionStream {
    /// The next message for the session; waits until there is one.
    pub async fn next(&mut self) -> Value {
        self.next_change().await.message()
    }

    /// The next change waiting; waits until there is one.
    pub(super) async fn next_change(&mut self) -> Change {
        loop {
            let ready = self.0.ready.notified();
            tokio::pin!(ready);
            // Registered before looking, so a change noted in between still wakes this stream.
            ready.as_mut().enable();
            if let Some(change) = self.0.take() {
                // Another stream may be waiting while more is left: let it take some too.
                self.0.ready.notify_one();
                return change;
            }
            ready.await;
        }
    }
}

impl Drop for SessionStream {
    fn drop(&mut self) {
        let mut waiting = lock(&self.0.waiting);
        waiting.streams -= 1;
        if waiting.streams == 0 {
            waiting.changes.clear();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn updated(uri: &str) -> Change {
        Change::Updated(uri.to_owned())
    }

    #[tokio::test]
    async fn a_change_already_waiting_should_be_told_once_and_others_in_the_order_noted() {
        let outbox = Arc::new(Outbox::default());
        let mut stream = outbox.open();
        for change in [
            updated("a"),
            updated("b"),
            updated("a"),
            Change::ToolList,
            updated("b"),
        ] {
            outbox.note(change);
        }
        let mut told = Vec::new();
        for _ in 0..3 {
            told.push(stream.next().await);
        }
        assert_eq!(
            told,
            [
                updated("a").message(),
                updated("b").message(),
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
            ]
        );
        assert_eq!(outbox.take(), None);
        // Once told, the same change is news again.
        outbox.note(updated("a"));
        assert_eq!(stream.next().await, updated("a").message());
    }

    #[tokio::test]
    async fn nothing_should_wait_without_a_stream_nor_after_unsubscribing() {
        let outbox = Arc::new(Outbox::default());
        outbox.note(Change::ToolList);
        let mut stream = outbox.open();
        outbox.note(updated("gone"));
        outbox.note(updated("kept"));
        outbox.forget("gone");
        assert_eq!(stream.next().await, updated("kept").message());
        outbox.note(Change::PromptList);
        drop(stream);
        let _stream = outbox.open();
        assert_eq!(outbox.take(), None);
    }

    #[tokio::test]
    async fn a_stream_waiting_should_be_woken_by_a_change() {
        let outbox = Arc::new(Outbox::default());
        let mut stream = outbox.open();
        let waiting = tokio::spawn(async move { stream.next().await });
        tokio::task::yield_now().await;
        outbox.note(Change::ResourceList);
        let told = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("the waiting stream was never woken")
            .unwrap();
        assert_eq!(told["method"], "notifications/resources/list_changed");
    }
}
