//! The calls of a task the fast path is serving, by the caller's request id, so that the
//! caller's `notifications/cancelled` can stop one (`call_fast_path.rs`). rmcp keeps its own
//! table for the requests it serves; the fast path answers requests rmcp never sees.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::Task;

/// The table: request id (as JSON text, e.g. `7` or `"abc"`) → how to stop that call.
#[derive(Default)]
pub(super) struct InFlight(Mutex<HashMap<String, oneshot::Sender<()>>>);

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<()>>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A call in the table, taken out again when dropped (answered, cancelled or abandoned).
pub struct TrackedCall {
    task: Arc<Task>,
    key: String,
}

impl Drop for TrackedCall {
    fn drop(&mut self) {
        self.task.in_flight.lock().remove(&self.key);
    }
}

impl Task {
    /// Tracks the call with request id `id` of this task: the receiver fires when the caller
    /// cancels it. A second call under an id still in flight replaces the first's entry (the
    /// caller reused an id; its cancellation reaches the newer call).
    pub fn track_call(
        self: &Arc<Self>,
        id: &serde_json::Value,
    ) -> (TrackedCall, oneshot::Receiver<()>) {
        let key = id.to_string();
        let (cancel, cancelled) = oneshot::channel();
        self.in_flight.lock().insert(key.clone(), cancel);
        let tracked = TrackedCall {
            task: self.clone(),
            key,
        };
        (tracked, cancelled)
    }

    /// Stops the call with request id `id`, if this task is serving it on the fast path;
    /// whether it was.
    pub fn cancel_call(&self, id: &serde_json::Value) -> bool {
        let cancel = self.in_flight.lock().remove(&id.to_string());
        cancel.is_some_and(|cancel| cancel.send(()).is_ok())
    }
}
