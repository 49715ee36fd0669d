//! What an upstream says about itself outside any call: its lists changed, or one of its
//! resources was updated — noted on one channel per task that its compositions share.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// Notes that an upstream's lists changed (tools, prompts, resources), and passes on its
/// `notifications/resources/updated`. A composition holds one channel its upstreams share,
/// which the sidecar follows to compose again (`Composed::upstream_changes`) and to tell
/// subscribers of an update (`Composed::resource_updates`); each upstream's own handle also
/// marks that upstream as stale, so composing again re-lists only the upstreams that said a
/// list changed.
#[derive(Clone, Debug)]
pub struct UpstreamChanges {
    counter: Arc<tokio::sync::watch::Sender<u64>>,
    stale: Arc<AtomicBool>,
    updates: Arc<Updates>,
}

/// A provider said one of its resources changed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceUpdated {
    /// The upstream session it came on (`Upstream::id`).
    pub upstream: u64,
    /// The resource, by the provider's own URI.
    pub uri: String,
}

/// The resource updates waiting for a task's follower, coalesced: an update says "read it
/// again", so one waiting for a URI covers every later one for it, and a provider sending the
/// same update in a loop costs the caller one notification per time the follower looks. What
/// would hold more than [`WAITING_MAX`] URIs or [`WAITING_MAX_BYTES`] is kept as "any of them"
/// ([`Updated::Any`]): the follower then tells every subscription, so nothing is lost and a
/// provider inventing URIs cannot grow what is held.
#[derive(Debug, Default)]
struct Updates {
    waiting: Mutex<Waiting>,
    /// Moves with every update noted.
    signal: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Waiting {
    updates: HashSet<ResourceUpdated>,
    bytes: usize,
    overflowed: bool,
}

/// What the resource updates waiting for a follower amount to.
#[derive(Debug, PartialEq, Eq)]
pub enum Updated {
    /// These resources, each once.
    Resources(Vec<ResourceUpdated>),
    /// More than could be held: any resource may have changed.
    Any,
}

/// The most distinct updates held for a follower, and the most bytes of their URIs.
const WAITING_MAX: usize = 256;
const WAITING_MAX_BYTES: usize = 256 * 1024;

impl Updates {
    /// What waits, whole even if a holder panicked (only whole values are written).
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn note(&self, update: ResourceUpdated) {
        {
            let mut waiting = self.waiting();
            if !waiting.overflowed && !waiting.updates.contains(&update) {
                let bytes = waiting.bytes + update.uri.len();
                if waiting.updates.len() >= WAITING_MAX || bytes > WAITING_MAX_BYTES {
                    *waiting = Waiting {
                        overflowed: true,
                        ..Waiting::default()
                    };
                } else {
                    waiting.bytes = bytes;
                    waiting.updates.insert(update);
                }
            }
        }
        self.signal
            .send_modify(|noted| *noted = noted.wrapping_add(1));
    }

    /// Anything may have been updated (what was said was not all heard).
    fn any(&self) {
        *self.waiting() = Waiting {
            overflowed: true,
            ..Waiting::default()
        };
        self.signal
            .send_modify(|noted| *noted = noted.wrapping_add(1));
    }

    fn take(&self) -> Updated {
        let taken = std::mem::take(&mut *self.waiting());
        if taken.overflowed {
            Updated::Any
        } else {
            Updated::Resources(taken.updates.into_iter().collect())
        }
    }
}

impl Default for UpstreamChanges {
    fn default() -> Self {
        Self {
            counter: Arc::new(tokio::sync::watch::channel(0).0),
            stale: Arc::default(),
            updates: Arc::default(),
        }
    }
}

impl UpstreamChanges {
    /// Notes one change.
    pub(crate) fn note(&self) {
        self.stale.store(true, Ordering::Release);
        self.counter
            .send_modify(|changes| *changes = changes.wrapping_add(1));
    }

    /// A receiver whose value moves with every change noted from now on.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.counter.subscribe()
    }

    /// A handle for one upstream: the same channel, a stale mark of its own.
    pub fn for_upstream(&self) -> Self {
        Self {
            counter: self.counter.clone(),
            stale: Arc::default(),
            updates: self.updates.clone(),
        }
    }

    /// Passes on a provider's update of one of its resources: it waits, coalesced, until the
    /// follower takes it ([`Self::take_updates`]).
    pub(crate) fn updated(&self, update: ResourceUpdated) {
        self.updates.note(update);
    }

    /// Notes that what the upstream said may not all have been heard (its stream was reopened
    /// after it ended): its lists may have changed and any resource may have been updated.
    pub(crate) fn missed(&self) {
        self.note();
        self.updates.any();
    }

    /// A receiver whose value moves with every resource update noted from now on.
    pub fn resource_updates(&self) -> tokio::sync::watch::Receiver<u64> {
        self.updates.signal.subscribe()
    }

    /// The resource updates noted since the last call, each once (one follower takes them).
    pub fn take_updates(&self) -> Updated {
        self.updates.take()
    }

    /// Whether a change was noted since the last call (the mark is cleared).
    pub fn take_stale(&self) -> bool {
        self.stale.swap(false, Ordering::AcqRel)
    }

    /// Whether `other` notes on the same channel.
    pub fn same_channel(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.counter, &other.counter)
    }
}

/// Whether a JSON-RPC message says a list changed: tools, prompts or resources (a composition
/// re-lists every kind it selected from that upstream).
pub(super) fn is_list_changed(message: &Value) -> bool {
    message.get("id").is_none()
        && matches!(
            message["method"].as_str(),
            Some(
                "notifications/tools/list_changed"
                    | "notifications/prompts/list_changed"
                    | "notifications/resources/list_changed"
            )
        )
}

/// The URI of a `notifications/resources/updated`.
pub(super) fn updated_uri(message: &Value) -> Option<&str> {
    if message.get("id").is_some() || message["method"] != "notifications/resources/updated" {
        return None;
    }
    message["params"]["uri"].as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(upstream: u64, uri: &str) -> ResourceUpdated {
        ResourceUpdated {
            upstream,
            uri: uri.to_owned(),
        }
    }

    fn taken(changes: &UpstreamChanges) -> Vec<ResourceUpdated> {
        match changes.take_updates() {
            Updated::Resources(mut updates) => {
                updates.sort_by(|a, b| (a.upstream, &a.uri).cmp(&(b.upstream, &b.uri)));
                updates
            }
            Updated::Any => panic!("overflowed"),
        }
    }

    #[test]
    fn repeated_updates_should_wait_once_and_none_be_lost_between_them() {
        let changes = UpstreamChanges::default();
        let mut signal = changes.resource_updates();
        for _ in 0..1_000 {
            changes.for_upstream().updated(update(1, "a://x"));
        }
        changes.updated(update(1, "a://y"));
        changes.updated(update(2, "a://x"));
        for _ in 0..1_000 {
            changes.updated(update(1, "a://x"));
        }
        assert_eq!(signal.has_changed().ok(), Some(true));
        signal.mark_unchanged();
        assert_eq!(
            taken(&changes),
            [update(1, "a://x"), update(1, "a://y"), update(2, "a://x")]
        );
        assert_eq!(taken(&changes), []);
        changes.updated(update(1, "a://x"));
        assert_eq!(signal.has_changed().ok(), Some(true));
        assert_eq!(taken(&changes), [update(1, "a://x")]);
    }

    #[test]
    fn more_updates_than_can_be_held_should_read_as_any() {
        let changes = UpstreamChanges::default();
        for n in 0..=WAITING_MAX {
            changes.updated(update(1, &format!("a://{n}")));
        }
        assert_eq!(changes.take_updates(), Updated::Any);
        // Once taken, updates are held one by one again.
        changes.updated(update(1, "a://x"));
        assert_eq!(taken(&changes), [update(1, "a://x")]);
        // Bytes count too: two long URIs fit, a third does not.
        let long = "a".repeat(WAITING_MAX_BYTES / 2 - 1);
        changes.updated(update(1, &long));
        changes.updated(update(2, &long));
        assert!(matches!(changes.take_updates(), Updated::Resources(u) if u.len() == 2));
        for upstream in 0..3 {
            changes.updated(update(upstream, &long));
        }
        assert_eq!(changes.take_updates(), Updated::Any);
    }
}
