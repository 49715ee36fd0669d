//! One copy of what many tasks hold alike.
//!
//! Every session of a project composes the same upstreams' lists and serves the same tools; a copy
//! of them parsed and kept by each task would be most of a task's memory at 1,000 open sessions. An
//! [`Interned`] table hands out one `Arc` per content digest, so a task keeps only its own state;
//! the table holds each value weakly (it lives as long as a task holds it), and forgets dead
//! entries as it grows. A hash map of weak references is all it is — the interning crates keep
//! values for the process's life or intern only strings — so it is written here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use sha2::{Digest as _, Sha256};

/// A table of shared values, each under the digest of its content.
pub struct Interned<T> {
    table: Mutex<Table<T>>,
}

struct Table<T> {
    values: HashMap<[u8; 32], Weak<T>>,
    /// Past this many entries the dead ones are forgotten (then it is twice the live ones).
    sweep_at: usize,
}

impl<T> Default for Interned<T> {
    fn default() -> Self {
        Self {
            table: Mutex::new(Table {
                values: HashMap::new(),
                sweep_at: 64,
            }),
        }
    }
}

impl<T> Interned<T> {
    /// The value under `key` some task still holds, or `make()`'s, kept under it from now on.
    /// `key` must name the content whole: two values under one key are taken to be equal.
    pub fn share(&self, key: [u8; 32], make: impl FnOnce() -> T) -> Arc<T> {
        if let Some(shared) = self.table().values.get(&key).and_then(Weak::upgrade) {
            return shared;
        }
        // Made outside the lock (compiling validators takes a while, and other projects'
        // tasks start meanwhile); of two tasks that made the same at once, the first kept wins.
        let made = Arc::new(make());
        let mut table = self.table();
        if let Some(shared) = table.values.get(&key).and_then(Weak::upgrade) {
            return shared;
        }
        if table.values.len() >= table.sweep_at {
            table.values.retain(|_, value| value.strong_count() > 0);
            table.sweep_at = (table.values.len() * 2).max(64);
        }
        table.values.insert(key, Arc::downgrade(&made));
        made
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table<T>> {
        // Only whole entries are ever written under the lock: a poisoned table is still whole.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many entries the table holds (live or not yet forgotten).
    pub fn len(&self) -> usize {
        self.table().values.len()
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The digest of `parts`, each length-prefixed so no two different lists of parts agree.
pub fn content_key<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut digest = Sha256::new();
    for part in parts {
        digest.update((part.len() as u64).to_le_bytes());
        digest.update(part);
    }
    digest.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_content_should_be_one_value_while_held_and_made_again_after() {
        let table = Interned::<String>::default();
        let key = content_key([b"a".as_slice()]);
        let first = table.share(key, || "a".to_owned());
        let mut made = false;
        let second = table.share(key, || {
            made = true;
            "a".to_owned()
        });
        assert!(Arc::ptr_eq(&first, &second));
        assert!(!made, "a value still held was made again");
        drop((first, second));
        let third = table.share(key, || {
            made = true;
            "a".to_owned()
        });
        assert!(made, "a value nobody held was handed out");
        assert_eq!(*third, "a");
    }

    #[test]
    fn other_content_should_get_its_own_value_and_dead_entries_be_forgotten() {
        let table = Interned::<usize>::default();
        let kept = table.share(content_key([b"kept".as_slice()]), || 0);
        for n in 1..1_000usize {
            let bytes = n.to_le_bytes();
            let value = table.share(content_key([bytes.as_slice()]), || n);
            assert_eq!(*value, n);
        }
        assert!(
            table.len() <= 128,
            "{} entries for 1 live value",
            table.len()
        );
        assert_eq!(*table.share(content_key([b"kept".as_slice()]), || 7), 0);
        drop(kept);
    }

    #[test]
    fn parts_should_not_run_into_each_other() {
        assert_ne!(
            content_key([b"ab".as_slice(), b"c".as_slice()]),
            content_key([b"a".as_slice(), b"bc".as_slice()])
        );
    }
}
