//! The calls of a session's task being served, by the caller's request id, so that the
//! caller's `notifications/cancelled` can stop one (`edge/tools_call.rs`); and the questions
//! of providers put to the caller, by the id the task gave them, so that the caller's
//! answer reaches the provider that asked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use capstan_upstream::mcp::ClientAsks;
use serde_json::Value;

use tokio::sync::oneshot;

use super::Task;

/// The tables: request id (as JSON text, e.g. `7` or `"abc"`) → how to stop that call; and
/// the id given to a provider's question → where the caller's answer goes.
#[derive(Default)]
pub(super) struct InFlight {
    calls: Mutex<HashMap<String, (u64, oneshot::Sender<()>)>>,
    next_call: AtomicU64,
    asked: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    next_ask: AtomicU64,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, oneshot::Sender<()>)>> {
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Enters the call under `key`, replacing an entry under the same key: its entry's number
    /// and the receiver that fires on cancellation.
    fn track(&self, key: &str) -> (u64, oneshot::Receiver<()>) {
        let entry = self.next_call.fetch_add(1, Ordering::Relaxed);
        let (cancel, cancelled) = oneshot::channel();
        self.lock().insert(key.to_owned(), (entry, cancel));
        (entry, cancelled)
    }

    /// Takes out entry `entry` under `key` — not a newer call's that replaced it.
    fn untrack(&self, key: &str, entry: u64) {
        let mut calls = self.lock();
        if calls.get(key).is_some_and(|(held, _)| *held == entry) {
            calls.remove(key);
        }
    }

    /// Fires the cancellation of the call under `key`; whether one was waiting.
    fn cancel(&self, key: &str) -> bool {
        let cancel = self.lock().remove(key);
        cancel.is_some_and(|(_, cancel)| cancel.send(()).is_ok())
    }

    fn asked(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Value>>> {
        self.asked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A call in the table, taken out again when dropped (answered, cancelled or abandoned).
pub struct TrackedCall {
    task: Arc<Task>,
    key: String,
    entry: u64,
}

impl Drop for TrackedCall {
    fn drop(&mut self) {
        self.task.in_flight.untrack(&self.key, self.entry);
    }
}

impl Task {
    /// Tracks the call with request id `id` of this task: the receiver fires when the caller
    /// cancels it. A second call under an id still in flight replaces the first's entry (the
    /// caller reused an id; its cancellation reaches the newer call), and the first one ending
    /// leaves the newer one's entry in place.
    pub fn track_call(
        self: &Arc<Self>,
        id: &serde_json::Value,
    ) -> (TrackedCall, oneshot::Receiver<()>) {
        let key = id.to_string();
        let (entry, cancelled) = self.in_flight.track(&key);
        let tracked = TrackedCall {
            task: self.clone(),
            key,
            entry,
        };
        (tracked, cancelled)
    }

    /// Stops the call with request id `id`, if this task is serving it in its session; whether
    /// it was.
    pub fn cancel_call(&self, id: &serde_json::Value) -> bool {
        self.in_flight.cancel(&id.to_string())
    }

    /// Puts a provider's question to the caller: the id it goes out with. The caller's
    /// response to that id goes to `answer` ([`Task::answer`]). Questions whose call has ended
    /// (nobody waits for the answer) are forgotten here.
    pub fn ask(&self, answer: oneshot::Sender<Value>) -> String {
        let id = format!(
            "capstan-ask-{}",
            self.in_flight.next_ask.fetch_add(1, Ordering::Relaxed)
        );
        let mut asked = self.in_flight.asked();
        asked.retain(|_, waiting| !waiting.is_closed());
        asked.insert(id.clone(), answer);
        id
    }

    /// Hands the caller's `response` (a JSON-RPC response) to the question with id `id`;
    /// whether one was waiting for it.
    pub fn answer(&self, id: &Value, response: Value) -> bool {
        let Some(id) = id.as_str() else {
            return false;
        };
        let waiting = self.in_flight.asked().remove(id);
        waiting.is_some_and(|waiting| waiting.send(response).is_ok())
    }

    /// What this task's caller can be asked: the capabilities its client declared at
    /// `initialize` (nothing, for a task without a session: the 2026-07-28 revision asks
    /// through `InputRequiredResult` instead).
    pub fn client_asks(&self) -> ClientAsks {
        self.asks.get().copied().unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_older_call_ending_should_leave_a_newer_calls_entry_under_the_same_id() {
        let table = InFlight::default();
        let (first, _first_cancelled) = table.track("7");
        let (_second, mut second_cancelled) = table.track("7");
        table.untrack("7", first);
        assert!(table.cancel("7"), "the newer call's entry was taken out");
        assert!(second_cancelled.try_recv().is_ok());
        assert!(!table.cancel("7"));
    }
}
