//! One question in flight per key: concurrent askers of the same (caller, question) wait for
//! the one review asked, so a caller opening many sessions at once asks each question once.
//! Hand-written around tokio's `OnceCell`: the keyed map and its clean-up are a few lines, and
//! no well-kept crate offers exactly this on tokio without pulling in a runtime of its own.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

/// Questions in flight, by key.
pub struct Flights<K, V> {
    flying: Mutex<HashMap<K, Arc<OnceCell<V>>>>,
}

impl<K, V> Default for Flights<K, V> {
    fn default() -> Self {
        Self {
            flying: Mutex::default(),
        }
    }
}

impl<K: Clone + Eq + Hash, V: Clone> Flights<K, V> {
    /// The answer to `key`: `ask`'s, or — when another asker of `key` is in flight — the one
    /// it gets. A failed ask leaves nothing behind: the next asker asks again.
    pub async fn once<E, F, Fut>(&self, key: &K, ask: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let cell = {
            let mut flying = self
                .flying
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            flying.entry(key.clone()).or_default().clone()
        };
        let answer = cell.get_or_try_init(ask).await.cloned();
        let mut flying = self
            .flying
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The first to finish takes the entry away (later askers are served by the cache);
        // an entry another flight put in its place stays.
        if flying.get(key).is_some_and(|held| Arc::ptr_eq(held, &cell)) {
            flying.remove(key);
        }
        answer
    }

    /// Keys in flight now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.flying.lock().map(|f| f.len()).unwrap_or(0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Ten askers of one key at once cost one ask and get its answer; another key is asked
    /// apart; nothing stays in flight after.
    #[tokio::test]
    async fn concurrent_askers_of_one_key_should_share_one_ask() {
        let flights: Flights<&str, u32> = Flights::default();
        let asked = AtomicUsize::new(0);
        let ask = |answer: u32| {
            let asked = &asked;
            move || async move {
                asked.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                Ok::<_, ()>(answer)
            }
        };
        let same = (0..10).map(|_| flights.once(&"a", ask(7)));
        let answers = futures::future::join_all(same).await;
        assert!(answers.iter().all(|a| *a == Ok(7)), "{answers:?}");
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        assert_eq!(flights.once(&"b", ask(8)).await, Ok(8));
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        assert_eq!(flights.len(), 0);
    }

    /// A failed ask is not an answer: the next asker asks again.
    #[tokio::test]
    async fn a_failed_ask_should_be_asked_again() {
        let flights: Flights<&str, u32> = Flights::default();
        assert_eq!(
            flights.once(&"a", || async { Err("down") }).await,
            Err("down")
        );
        assert_eq!(
            flights.once(&"a", || async { Ok::<_, &str>(1) }).await,
            Ok(1)
        );
        assert_eq!(flights.len(), 0);
    }
}
