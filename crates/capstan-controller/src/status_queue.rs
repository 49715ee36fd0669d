//! A bounded, coalescing queue of desired statuses, drained by exactly one worker.
//!
//! Reconcilers never write status: they [`StatusSender::send`] the status they want, which never
//! blocks. A newer desired status for a key replaces the queued one (coalescing) without losing
//! its place in line. A new key arriving when `capacity` keys are already waiting is dropped and
//! counted — a reconcile blocked on a full queue would stall every object behind it — but its
//! name is kept, once, in the overflow line: as the worker makes room, overflowed keys are
//! handed back on the released channel for a fresh reconcile, whose status then finds a place.
//! A burst larger than the queue (the first sync of a cluster with more objects than the
//! capacity) so converges with about two reconciles per object and no timers; the desired
//! status itself is not kept, since the reconcile computes a newer one. The receiving half is
//! not `Clone`, so one worker drains it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, mpsc};

/// What happened to one [`StatusSender::send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The key was not waiting; it now is, at the back of the line.
    Queued,
    /// The key was waiting; its desired status was replaced in place.
    Coalesced,
    /// The queue held `capacity` other keys; this update was dropped and the key put in the
    /// overflow line.
    Dropped,
}

struct Pending<K, V> {
    values: HashMap<K, V>,
    order: VecDeque<K>,
    overflow: Overflow<K>,
}

/// Keys whose update found the queue full, oldest first, each at most once.
struct Overflow<K> {
    /// The keys in the line; a key forgotten while in line is left in `line` and skipped when
    /// its turn comes.
    members: HashSet<K>,
    line: VecDeque<K>,
    /// Whether a batch was released into an empty queue and no key has been taken since: an
    /// empty queue releases one batch, not one per look.
    released_into_empty: bool,
}

impl<K: Eq + Hash + Clone> Overflow<K> {
    fn push(&mut self, key: K) {
        if self.members.insert(key.clone()) {
            self.line.push_back(key);
        }
    }

    /// Up to `count` keys, oldest first, out of the line.
    fn take(&mut self, count: usize) -> Vec<K> {
        let mut taken = Vec::new();
        while taken.len() < count {
            let Some(key) = self.line.pop_front() else {
                break;
            };
            if self.members.remove(&key) {
                taken.push(key);
            }
        }
        if self.members.is_empty() && self.line.capacity() > 1024 {
            // The burst is over: its capacity (tens of thousands of keys) is not kept.
            self.line = VecDeque::new();
            self.members = HashSet::new();
        } else if self.members.is_empty() {
            self.line.clear();
        }
        taken
    }
}

struct Shared<K, V> {
    pending: Mutex<Pending<K, V>>,
    ready: Notify,
    capacity: usize,
    released: mpsc::UnboundedSender<K>,
}

impl<K, V> Shared<K, V> {
    fn lock(&self) -> MutexGuard<'_, Pending<K, V>> {
        // A poisoned lock means a panic while the map was being changed; the map and the lines
        // are updated together under the lock, so the data is still consistent.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<K: Eq + Hash + Clone, V> Shared<K, V> {
    /// The queue is at most half full: hands overflowed keys back for a reconcile. A take
    /// releases one key (the line stays about half full while the worker drains it, with room
    /// to spare for the keys still on their way back); an empty queue releases half the
    /// capacity at once, once until the next take — so released keys that are slow to return
    /// are never released over again, and the queue never fills from its own overflow.
    fn release(&self, pending: &mut Pending<K, V>, took: bool) {
        let half = self.capacity / 2;
        let waiting = pending.order.len();
        if pending.overflow.members.is_empty() || waiting > half {
            return;
        }
        let count = if took {
            pending.overflow.released_into_empty = false;
            1
        } else if waiting == 0 && !pending.overflow.released_into_empty {
            pending.overflow.released_into_empty = true;
            half.max(1)
        } else {
            return;
        };
        for key in pending.overflow.take(count) {
            // The receiver gone means the controller is stopping; nothing is left to reconcile.
            let _ = self.released.send(key);
        }
    }
}

/// The sending half: cheap to clone, used by every reconciler.
pub struct StatusSender<K, V> {
    shared: Arc<Shared<K, V>>,
}

impl<K, V> Clone for StatusSender<K, V> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// The receiving half: owned by the single status worker.
pub struct StatusReceiver<K, V> {
    shared: Arc<Shared<K, V>>,
}

/// Overflowed keys handed back for a reconcile as the queue makes room.
pub type Released<K> = mpsc::UnboundedReceiver<K>;

/// A queue holding at most `capacity` waiting keys, and the channel its overflowed keys come
/// back on.
pub fn status_queue<K, V>(
    capacity: usize,
) -> (StatusSender<K, V>, StatusReceiver<K, V>, Released<K>) {
    let (released, released_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        pending: Mutex::new(Pending {
            values: HashMap::new(),
            order: VecDeque::new(),
            overflow: Overflow {
                members: HashSet::new(),
                line: VecDeque::new(),
                released_into_empty: false,
            },
        }),
        ready: Notify::new(),
        capacity,
        released,
    });
    (
        StatusSender {
            shared: shared.clone(),
        },
        StatusReceiver { shared },
        released_rx,
    )
}

impl<K: Eq + Hash + Clone, V> StatusSender<K, V> {
    /// Queues `value` as the desired status of `key`. Never blocks.
    pub fn send(&self, key: K, value: V) -> Sent {
        let mut pending = self.shared.lock();
        if let Some(slot) = pending.values.get_mut(&key) {
            *slot = value;
            return Sent::Coalesced;
        }
        if pending.order.len() >= self.shared.capacity {
            pending.overflow.push(key);
            return Sent::Dropped;
        }
        pending.order.push_back(key.clone());
        pending.values.insert(key, value);
        drop(pending);
        self.shared.ready.notify_one();
        Sent::Queued
    }

    /// Takes `key` out of the overflow line (its object is gone). A queued status of it stays:
    /// the worker finds the object gone and skips it.
    pub fn forget(&self, key: &K) {
        self.shared.lock().overflow.members.remove(key);
    }

    /// How many keys are waiting.
    pub fn len(&self) -> usize {
        self.shared.lock().order.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many overflowed keys wait for room.
    pub fn overflowed(&self) -> usize {
        self.shared.lock().overflow.members.len()
    }
}

impl<K: Eq + Hash + Clone, V> StatusReceiver<K, V> {
    /// The key waiting longest and its latest desired status; waits while none is waiting.
    pub async fn recv(&mut self) -> (K, V) {
        let shared = self.shared.clone();
        loop {
            // Register interest before looking, so a send between the look and the wait is not
            // missed.
            let notified = shared.ready.notified();
            if let Some(next) = self.try_recv() {
                return next;
            }
            notified.await;
        }
    }

    /// How many keys are waiting.
    pub fn len(&self) -> usize {
        self.shared.lock().order.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many overflowed keys wait for room.
    pub fn overflowed(&self) -> usize {
        self.shared.lock().overflow.members.len()
    }

    /// The key waiting longest, if any, without waiting. Makes room for overflowed keys (see
    /// `Shared::release`).
    pub fn try_recv(&mut self) -> Option<(K, V)> {
        let mut pending = self.shared.lock();
        let Some(key) = pending.order.pop_front() else {
            self.shared.release(&mut pending, false);
            return None;
        };
        let value = pending.values.remove(&key)?;
        self.shared.release(&mut pending, true);
        Some((key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_should_coalesce_updates_for_one_key_keeping_its_place() {
        let (tx, mut rx, _released) = status_queue(8);
        assert_eq!(tx.send("a", 1), Sent::Queued);
        assert_eq!(tx.send("b", 1), Sent::Queued);
        assert_eq!(tx.send("a", 2), Sent::Coalesced);
        assert_eq!(tx.send("a", 3), Sent::Coalesced);
        assert_eq!(rx.try_recv(), Some(("a", 3)));
        assert_eq!(rx.try_recv(), Some(("b", 1)));
        assert_eq!(rx.try_recv(), None);
    }

    #[test]
    fn full_queue_should_drop_new_keys_but_still_coalesce_waiting_ones() {
        let (tx, mut rx, _released) = status_queue(2);
        assert_eq!(tx.send("a", 1), Sent::Queued);
        assert_eq!(tx.send("b", 1), Sent::Queued);
        assert_eq!(tx.send("c", 1), Sent::Dropped);
        assert_eq!(tx.send("b", 2), Sent::Coalesced);
        assert_eq!(tx.len(), 2);
        assert_eq!(rx.try_recv(), Some(("a", 1)));
        assert_eq!(tx.send("c", 2), Sent::Queued);
        assert_eq!(rx.try_recv(), Some(("b", 2)));
        assert_eq!(rx.try_recv(), Some(("c", 2)));
    }

    #[test]
    fn a_key_should_be_queued_again_after_it_was_taken() {
        let (tx, mut rx, _released) = status_queue(1);
        tx.send("a", 1);
        assert_eq!(rx.try_recv(), Some(("a", 1)));
        assert_eq!(tx.send("a", 2), Sent::Queued);
        assert_eq!(rx.try_recv(), Some(("a", 2)));
    }

    /// Everything `released` holds now, without waiting.
    fn drain(released: &mut Released<u32>) -> Vec<u32> {
        std::iter::from_fn(|| released.try_recv().ok()).collect()
    }

    #[test]
    fn a_dropped_key_should_come_back_once_when_the_queue_is_half_empty() {
        let (tx, mut rx, mut released) = status_queue::<u32, ()>(4);
        for key in 0..4 {
            assert_eq!(tx.send(key, ()), Sent::Queued);
        }
        // Ten updates of six keys dropped: each key is kept once.
        for key in (4..10).chain(4..8) {
            assert_eq!(tx.send(key, ()), Sent::Dropped);
        }
        assert_eq!(tx.overflowed(), 6);
        assert_eq!(rx.try_recv(), Some((0, ())));
        assert_eq!(
            drain(&mut released),
            Vec::<u32>::new(),
            "3 of 4 waiting: no room yet"
        );
        // At half (2 of 4) and below, each take hands back the oldest overflowed key.
        assert_eq!(rx.try_recv(), Some((1, ())));
        assert_eq!(drain(&mut released), vec![4]);
        assert_eq!(rx.try_recv(), Some((2, ())));
        assert_eq!(rx.try_recv(), Some((3, ())));
        assert_eq!(drain(&mut released), vec![5, 6]);
        assert_eq!(tx.overflowed(), 3);
    }

    #[test]
    fn an_empty_queue_should_release_one_batch_until_a_key_is_taken() {
        let (tx, mut rx, mut released) = status_queue::<u32, ()>(4);
        for key in 0..10 {
            tx.send(key, ());
        }
        while rx.try_recv().is_some() {}
        // Three takes at or below half released 4, 5 and 6; the empty look released half the
        // capacity more.
        assert_eq!(drain(&mut released), vec![4, 5, 6, 7, 8]);
        // Released keys slow to come back are not released again, however often the worker
        // looks.
        for _ in 0..5 {
            assert_eq!(rx.try_recv(), None);
        }
        assert_eq!(drain(&mut released), Vec::<u32>::new());
        assert_eq!(tx.overflowed(), 1);
        // One comes back and is taken: the line moves on.
        assert_eq!(tx.send(6, ()), Sent::Queued);
        assert_eq!(rx.try_recv(), Some((6, ())));
        assert_eq!(drain(&mut released), vec![9]);
        assert_eq!(tx.overflowed(), 0);
    }

    #[test]
    fn a_forgotten_key_should_never_come_back() {
        let (tx, mut rx, mut released) = status_queue::<u32, ()>(1);
        tx.send(0, ());
        for key in 1..4 {
            assert_eq!(tx.send(key, ()), Sent::Dropped);
        }
        tx.forget(&1);
        assert_eq!(tx.overflowed(), 2);
        assert_eq!(rx.try_recv(), Some((0, ())));
        assert_eq!(rx.try_recv(), None);
        assert_eq!(drain(&mut released), vec![2, 3]);
        // Dropped again after it was forgotten: back in line, once.
        assert_eq!(tx.send(9, ()), Sent::Queued);
        assert_eq!(tx.send(1, ()), Sent::Dropped);
        assert_eq!(tx.send(1, ()), Sent::Dropped);
        assert_eq!(rx.try_recv(), Some((9, ())));
        assert_eq!(drain(&mut released), vec![1]);
        assert_eq!(tx.overflowed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn receiver_should_wait_for_a_send_and_wake_on_it() {
        let (tx, mut rx, _released) = status_queue::<&str, u32>(4);
        let worker = tokio::spawn(async move { rx.recv().await });
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        assert!(!worker.is_finished(), "recv returned with nothing queued");
        tx.send("a", 7);
        assert_eq!(worker.await.ok(), Some(("a", 7)));
    }

    #[tokio::test(start_paused = true)]
    async fn sends_while_the_worker_is_busy_should_coalesce_into_one_receive() {
        let (tx, mut rx, _released) = status_queue::<&str, u32>(4);
        tx.send("a", 1);
        assert_eq!(rx.recv().await, ("a", 1));
        // The worker is "writing"; three updates for the same key arrive meanwhile.
        for value in 2..=4 {
            tx.send("a", value);
        }
        assert_eq!(rx.recv().await, ("a", 4));
        assert!(rx.try_recv().is_none());
    }
}
