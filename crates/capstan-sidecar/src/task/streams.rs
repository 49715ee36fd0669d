//! How a task tells its client: the session's GET streams (one outbox, `task/outbox.rs`), the
//! `subscriptions/listen` streams of a task without a session (an outbox each,
//! `task/listener.rs`), and the count of open streams the gate caps. Nothing here waits on a
//! client slow to read.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tracing::debug;

use super::listener::{Listener, Unsent};
use super::outbox::{Change, SessionStream};
use super::{Task, lock};
use crate::caller::admission::Full;

/// An open `subscriptions/listen` stream of a task ([`Task::listen`]); forgotten on drop.
pub struct Listening<'a> {
    task: &'a Task,
    id: u64,
}

/// One stream a task holds open, counted against its cap; given back on drop.
pub struct OpenStream(Arc<AtomicUsize>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.task.forget_listener(self.id);
    }
}

impl Task {
    /// Opens a GET stream of the session: the messages for the session from now on, until the
    /// task ends or the client leaves. A session may hold several (its streams' cap,
    /// `caller/admission.rs`); each message goes on one of them.
    pub fn open_session_stream(&self) -> SessionStream {
        self.outbox.open()
    }

    /// Tells the task's client that its tools changed: on the session's GET stream, and on
    /// every open `subscriptions/listen` stream (a stream that is gone is dropped).
    pub fn notify_tool_list_changed(&self) {
        self.tell(Change::ToolList);
    }

    /// Tells the task's client of `change`: on the session's GET streams (its outbox), and on
    /// every open `subscriptions/listen` stream (each its own outbox). Nothing here waits on a
    /// client slow to read: an outbox keeps each change once.
    pub(super) fn tell(&self, change: Change) {
        self.outbox.note(change.clone());
        self.tell_listeners(&change);
    }

    /// Tells every open `subscriptions/listen` stream that asked for it of `change`; a stream
    /// that did not ask is skipped, a stream that is gone is dropped.
    fn tell_listeners(&self, change: &Change) {
        lock(&self.listeners).retain(|(_, listener)| match listener.send(change) {
            Ok(()) | Err(Unsent::NotAccepted) => true,
            Err(Unsent::Gone) => {
                debug!(project = %self.identity.project, "a listen stream is gone");
                false
            }
        });
    }

    /// Tells the task's client that its prompts or its resources changed: on the session's
    /// GET stream, and on every open `subscriptions/listen` stream that asked for it.
    pub fn notify_offerings_changed(&self, prompts: bool, resources: bool) {
        if prompts {
            self.tell(Change::PromptList);
        }
        if resources {
            self.tell(Change::ResourceList);
        }
    }

    /// A stream of this task opens, if fewer than `max` are open: the guard counts it until
    /// dropped.
    pub fn open_stream(&self, max: usize) -> Result<OpenStream, Full> {
        let opened = self
            .streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            });
        match opened {
            Ok(_) => Ok(OpenStream(self.streams.clone())),
            Err(_) => Err(Full::Streams { max }),
        }
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.streams.load(Ordering::Acquire)
    }

    /// Follows `listener` (an open `subscriptions/listen` stream, counted by the gate) until
    /// the returned guard is dropped. The stream does not make the task busy: how long an open
    /// stream keeps a task is the task registry's rule (`tasks.rs`), never forever.
    pub fn listen(&self, listener: Listener) -> Listening<'_> {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        lock(&self.listeners).push((id, listener));
        Listening { task: self, id }
    }

    fn forget_listener(&self, id: u64) {
        lock(&self.listeners).retain(|(kept, _)| *kept != id);
    }
}
