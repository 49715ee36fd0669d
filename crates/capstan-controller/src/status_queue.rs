//! A bounded, coalescing queue of desired statuses, drained by exactly one worker.
//!
//! Reconcilers never write status: they [`StatusSender::send`] the status they want, which never
//! blocks. A newer desired status for a key replaces the queued one (coalescing) without losing
//! its place in line; a new key arriving when `capacity` keys are already waiting is dropped and
//! counted, since a lost status update is cosmetic and the periodic resync sends it again, while
//! a reconcile blocked on a full queue would stall every object behind it. The receiving half
//! is not `Clone`, so one worker drains it.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

/// What happened to one [`StatusSender::send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The key was not waiting; it now is, at the back of the line.
    Queued,
    /// The key was waiting; its desired status was replaced in place.
    Coalesced,
    /// The queue held `capacity` other keys; this update was dropped.
    Dropped,
}

struct Pending<K, V> {
    values: HashMap<K, V>,
    order: VecDeque<K>,
    drained: DrainRate,
}

/// Keys taken in one measurement of the drain rate.
const RATE_WINDOW: u32 = 256;

/// A pause between two takes longer than this ends a window unmeasured: the rate is the
/// worker's while it is busy, not the arrival rate of an idle queue.
const IDLE_GAP: Duration = Duration::from_secs(1);

/// How fast the worker takes keys while it is busy: measured over windows of `RATE_WINDOW`
/// takes with no pause longer than `IDLE_GAP` between them, each window averaged with the last
/// estimate. Idle time never counts: an estimate from a quiet hour would put the retries of
/// the next burst's dropped objects off until the resync.
#[derive(Default)]
struct DrainRate {
    /// The current window: when its first key was taken, when its last, and how many.
    window: Option<(Instant, Instant, u32)>,
    per_second: Option<f64>,
}

impl DrainRate {
    fn took_one(&mut self) {
        let now = Instant::now();
        let window = match self.window {
            Some((started, last, taken)) if now.duration_since(last) <= IDLE_GAP => {
                (started, now, taken + 1)
            }
            _ => (now, now, 1),
        };
        let (started, _, taken) = window;
        let seconds = now.duration_since(started).as_secs_f64();
        if taken < RATE_WINDOW || seconds <= 0.0 {
            self.window = Some(window);
            return;
        }
        // `taken` keys over the time between the first and the last: `taken - 1` intervals.
        let measured = f64::from(taken - 1) / seconds;
        self.per_second = Some(self.per_second.map_or(measured, |r| (r + measured) / 2.0));
        self.window = None;
    }
}

struct Shared<K, V> {
    pending: Mutex<Pending<K, V>>,
    ready: Notify,
    capacity: usize,
}

impl<K, V> Shared<K, V> {
    fn lock(&self) -> MutexGuard<'_, Pending<K, V>> {
        // A poisoned lock means a panic while the map was being changed; the map and the line
        // are updated together under the lock, so the data is still consistent.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// A queue holding at most `capacity` waiting keys.
pub fn status_queue<K, V>(capacity: usize) -> (StatusSender<K, V>, StatusReceiver<K, V>) {
    let shared = Arc::new(Shared {
        pending: Mutex::new(Pending {
            values: HashMap::new(),
            order: VecDeque::new(),
            drained: DrainRate::default(),
        }),
        ready: Notify::new(),
        capacity,
    });
    (
        StatusSender {
            shared: shared.clone(),
        },
        StatusReceiver { shared },
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
            return Sent::Dropped;
        }
        pending.order.push_back(key.clone());
        pending.values.insert(key, value);
        drop(pending);
        self.shared.ready.notify_one();
        Sent::Queued
    }

    /// How many keys are waiting.
    pub fn len(&self) -> usize {
        self.shared.lock().order.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long the keys waiting now will take to be taken at the rate the worker has been
    /// taking them; `None` before a rate was measured.
    pub fn time_to_drain(&self) -> Option<Duration> {
        let pending = self.shared.lock();
        let per_second = pending.drained.per_second?;
        Some(Duration::from_secs_f64(
            pending.order.len() as f64 / per_second,
        ))
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

    /// The key waiting longest, if any, without waiting.
    pub fn try_recv(&mut self) -> Option<(K, V)> {
        let mut pending = self.shared.lock();
        let key = pending.order.pop_front()?;
        let value = pending.values.remove(&key)?;
        pending.drained.took_one();
        Some((key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_should_coalesce_updates_for_one_key_keeping_its_place() {
        let (tx, mut rx) = status_queue(8);
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
        let (tx, mut rx) = status_queue(2);
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
        let (tx, mut rx) = status_queue(1);
        tx.send("a", 1);
        assert_eq!(rx.try_recv(), Some(("a", 1)));
        assert_eq!(tx.send("a", 2), Sent::Queued);
        assert_eq!(rx.try_recv(), Some(("a", 2)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_time_to_drain_should_follow_the_rate_keys_are_taken_at() {
        let (tx, mut rx) = status_queue::<u32, ()>(4096);
        assert_eq!(tx.time_to_drain(), None, "no rate before any key was taken");
        // 512 keys taken at 100 a second, 1,000 left waiting: 10 s to drain.
        for key in 0..1512 {
            tx.send(key, ());
        }
        for _ in 0..512 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            rx.try_recv();
        }
        let drain = tx.time_to_drain().map(|d| d.as_secs_f64());
        assert!(
            drain.is_some_and(|d| (9.5..=10.5).contains(&d)),
            "{drain:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_should_never_slow_the_measured_rate() {
        let (tx, mut rx) = status_queue::<u32, ()>(4096);
        for key in 0..1512 {
            tx.send(key, ());
        }
        // 512 keys taken a minute apart — an idle queue, not a slow worker — then 256 at
        // 100 a second.
        for _ in 0..512 {
            tokio::time::sleep(Duration::from_secs(60)).await;
            rx.try_recv();
        }
        assert_eq!(tx.time_to_drain(), None, "an idle queue measured no rate");
        for _ in 0..256 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            rx.try_recv();
        }
        // 744 waiting at 100 a second.
        let drain = tx.time_to_drain().map(|d| d.as_secs_f64());
        assert!(drain.is_some_and(|d| (7.0..=7.9).contains(&d)), "{drain:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn receiver_should_wait_for_a_send_and_wake_on_it() {
        let (tx, mut rx) = status_queue::<&str, u32>(4);
        let worker = tokio::spawn(async move { rx.recv().await });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!worker.is_finished(), "recv returned with nothing queued");
        tx.send("a", 7);
        assert_eq!(worker.await.ok(), Some(("a", 7)));
    }

    #[tokio::test(start_paused = true)]
    async fn sends_while_the_worker_is_busy_should_coalesce_into_one_receive() {
        let (tx, mut rx) = status_queue::<&str, u32>(4);
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
