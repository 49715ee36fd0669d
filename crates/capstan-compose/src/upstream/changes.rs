//! What an upstream says about itself outside any call: its lists changed, or one of its
//! resources was updated — noted on one channel per task that its compositions share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    updates: Arc<tokio::sync::broadcast::Sender<ResourceUpdated>>,
}

/// A provider said one of its resources changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceUpdated {
    /// The upstream session it came on (`Upstream::id`).
    pub upstream: u64,
    /// The resource, by the provider's own URI.
    pub uri: String,
}

/// How many resource updates may wait for a task's follower; a follower further behind skips
/// the oldest (an update says "read again", so a later one for the same URI covers it).
const UPDATES_CAPACITY: usize = 64;

impl Default for UpstreamChanges {
    fn default() -> Self {
        Self {
            counter: Arc::new(tokio::sync::watch::channel(0).0),
            stale: Arc::default(),
            updates: Arc::new(tokio::sync::broadcast::channel(UPDATES_CAPACITY).0),
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
    pub(crate) fn for_upstream(&self) -> Self {
        Self {
            counter: self.counter.clone(),
            stale: Arc::default(),
            updates: self.updates.clone(),
        }
    }

    /// Passes on a provider's update of one of its resources (dropped when nobody follows).
    pub(crate) fn updated(&self, update: ResourceUpdated) {
        let _ = self.updates.send(update);
    }

    /// A receiver of the resource updates passed on from now on.
    pub fn resource_updates(&self) -> tokio::sync::broadcast::Receiver<ResourceUpdated> {
        self.updates.subscribe()
    }

    /// Whether a change was noted since the last call (the mark is cleared).
    pub(crate) fn take_stale(&self) -> bool {
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
