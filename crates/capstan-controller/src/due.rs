//! The bindings due for a reconcile: each name once, handed to kube-runtime's `Controller` a
//! few at a time.
//!
//! The Controller's scheduler keeps every trigger it is given until it runs — an `ObjectRef`
//! with its resource version and uid, in a delay queue and two maps, ~1 KB each — and the
//! first list of a cluster triggers every binding at once, far faster than reconciles run.
//! With 50,000 bindings those triggers would be most of the controller's peak memory. Every
//! trigger (a watch event, the resync walk, the status queue's overflow, a probe's finding,
//! gaining leadership) marks the name here instead; a name marked again while it waits is one
//! reconcile, and one marked while its reconcile runs is reconciled once more after it. The
//! Controller is handed at most `limit` names at a time, and each result it reports frees a
//! place.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use crate::cached::CachedBinding;

/// Names due for a reconcile, and those handed to the Controller.
pub(crate) struct Due {
    queue: Mutex<Queue>,
    ready: Notify,
    limit: usize,
}

#[derive(Default)]
struct Queue {
    /// Waiting, each once, oldest first; `waiting` is the same names for lookup.
    order: VecDeque<Arc<str>>,
    waiting: HashSet<Arc<str>>,
    /// Handed to the Controller, no result seen yet.
    handed: HashSet<Arc<str>>,
    /// Handed, and marked again since: due once more when the result comes.
    again: HashSet<Arc<str>>,
}

impl Queue {
    fn mark(&mut self, name: &str) -> bool {
        if self.handed.contains(name) {
            if !self.again.contains(name) {
                self.again.insert(name.into());
            }
            return false;
        }
        if self.waiting.contains(name) {
            return false;
        }
        let name: Arc<str> = name.into();
        self.waiting.insert(name.clone());
        self.order.push_back(name);
        true
    }
}

impl Due {
    /// At most `limit` names (at least one) handed to the Controller at a time.
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::default(),
            ready: Notify::new(),
            limit: limit.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The sets are changed together under the lock; a panic elsewhere leaves them whole.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Binding `name` is due for a reconcile.
    pub(crate) fn mark(&self, name: &str) {
        if self.lock().mark(name) {
            self.ready.notify_one();
        }
    }

    /// The Controller reported a result for `name` (reconciled, failed, or gone): its place is
    /// free, and it is due again if it was marked meanwhile. A result for a name not handed
    /// (the Controller's own requeue after an error) changes nothing.
    pub(crate) fn done(&self, name: &str) {
        let mut queue = self.lock();
        if !queue.handed.remove(name) {
            return;
        }
        if queue.again.remove(name) {
            queue.mark(name);
        }
        drop(queue);
        self.ready.notify_one();
    }

    /// How many names wait, not yet handed.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// The next name to hand, if a place is free.
    fn take(&self) -> Option<Arc<str>> {
        let mut queue = self.lock();
        if queue.handed.len() >= self.limit {
            return None;
        }
        let name = queue.order.pop_front()?;
        queue.waiting.remove(&name);
        if queue.order.is_empty() && queue.order.capacity() > 1024 {
            // A burst (the first list, gaining leadership) is over: its capacity is not kept;
            // the walk's few names a tick reuse a small one.
            queue.order = VecDeque::new();
            queue.waiting = HashSet::new();
        }
        queue.handed.insert(name.clone());
        Some(name)
    }

    /// The names to reconcile, for the Controller's `reconcile_on`: one whenever a place is
    /// free and a name waits.
    pub(crate) fn stream(self: Arc<Self>) -> BoxStream<'static, ObjectRef<CachedBinding>> {
        futures::stream::unfold(self, |due| async move {
            loop {
                // Interest registered before looking, so a mark or result between the look and
                // the wait is not missed.
                let ready = due.ready.notified();
                if let Some(name) = due.take() {
                    drop(ready);
                    return Some((ObjectRef::new(&name), due));
                }
                ready.await;
            }
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names `due` hands now, without waiting.
    fn handed(due: &Arc<Due>) -> Vec<String> {
        std::iter::from_fn(|| due.take().map(|name| name.to_string())).collect()
    }

    #[test]
    fn at_most_the_limit_should_be_handed_and_each_result_should_free_a_place() {
        let due = Due::new(2);
        for name in ["a", "b", "c", "d"] {
            due.mark(name);
        }
        assert_eq!(handed(&due), ["a", "b"]);
        assert_eq!(due.waiting(), 2);
        due.done("a");
        assert_eq!(handed(&due), ["c"]);
        due.done("b");
        due.done("c");
        assert_eq!(handed(&due), ["d"]);
        assert_eq!(due.waiting(), 0);
    }

    #[test]
    fn a_name_marked_while_it_waits_should_be_reconciled_once() {
        let due = Due::new(8);
        for name in ["a", "b", "a", "a", "b"] {
            due.mark(name);
        }
        assert_eq!(handed(&due), ["a", "b"]);
    }

    #[test]
    fn a_name_marked_while_its_reconcile_runs_should_be_handed_again_after_its_result() {
        let due = Due::new(8);
        due.mark("a");
        assert_eq!(handed(&due), ["a"]);
        // Marked twice while running: never handed twice at once, handed once more after.
        due.mark("a");
        due.mark("a");
        assert_eq!(handed(&due), Vec::<String>::new());
        due.done("a");
        assert_eq!(handed(&due), ["a"]);
        due.done("a");
        assert_eq!(handed(&due), Vec::<String>::new());
    }

    #[test]
    fn a_result_for_a_name_never_handed_should_free_no_place() {
        let due = Due::new(1);
        due.mark("a");
        due.mark("b");
        assert_eq!(handed(&due), ["a"]);
        // The Controller's own requeue of "z" after an error reports a result too.
        due.done("z");
        assert_eq!(handed(&due), Vec::<String>::new());
        due.done("a");
        assert_eq!(handed(&due), ["b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_should_wait_for_a_place_and_wake_on_a_result() {
        let due = Due::new(1);
        due.mark("a");
        due.mark("b");
        let mut names = due.clone().stream();
        assert_eq!(names.next().await.map(|r| r.name), Some("a".to_owned()));
        let next = tokio::spawn(async move { names.next().await.map(|r| r.name) });
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        assert!(
            !next.is_finished(),
            "a second name handed while the first runs"
        );
        due.done("a");
        assert_eq!(next.await.ok().flatten(), Some("b".to_owned()));
    }
}
