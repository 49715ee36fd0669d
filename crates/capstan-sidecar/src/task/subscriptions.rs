//! The resources a task's client follows: a session's `resources/subscribe`, or the URIs the
//! open listen streams of a task without a session hold, each carried to the upstream that
//! offers it while anyone holds it, and their updates told to the client.

use std::collections::BTreeSet;

use capstan_compose::composer::OfferingError;
use tracing::warn;

use super::outbox::Change;
use super::{Task, lock};

/// The most resources one session may subscribe to at once: a template can name unboundedly
/// many URIs, and each subscription is held for the session's life.
pub const MAX_SUBSCRIPTIONS: usize = 256;

impl Task {
    /// Notes the session's subscription to `uri` (as it named it); false when it already
    /// holds [`MAX_SUBSCRIPTIONS`] others.
    pub fn subscribe(&self, uri: &str) -> bool {
        let mut subscriptions = lock(&self.subscriptions);
        if subscriptions.len() >= MAX_SUBSCRIPTIONS && !subscriptions.contains_key(uri) {
            return false;
        }
        subscriptions.insert(uri.to_owned(), 1);
        true
    }

    /// Forgets the session's subscription to `uri`.
    pub fn unsubscribe(&self, uri: &str) {
        lock(&self.subscriptions).remove(uri);
        self.outbox.forget(uri);
    }

    /// A listen stream holds `uris` (within [`MAX_SUBSCRIPTIONS`] in all): those no other
    /// stream held, to subscribe to upstream.
    pub fn hold(&self, uris: &[String]) -> Vec<String> {
        let mut subscriptions = lock(&self.subscriptions);
        let mut first = Vec::new();
        for uri in uris {
            if let Some(holders) = subscriptions.get_mut(uri) {
                *holders += 1;
            } else if subscriptions.len() < MAX_SUBSCRIPTIONS {
                subscriptions.insert(uri.clone(), 1);
                first.push(uri.clone());
            }
        }
        first
    }

    /// A listen stream lets go of `uris`: those no stream holds any more, to unsubscribe from
    /// upstream.
    pub fn release(&self, uris: &[String]) -> Vec<String> {
        let mut subscriptions = lock(&self.subscriptions);
        let mut last = Vec::new();
        for uri in uris {
            if let Some(holders) = subscriptions.get_mut(uri) {
                *holders -= 1;
                if *holders == 0 {
                    subscriptions.remove(uri);
                    last.push(uri.clone());
                }
            }
        }
        last
    }

    /// Subscribes to (or unsubscribes from, `method`) each of `uris` at its upstream, those
    /// the composition offers; a failure is logged, never the caller's error (a listen stream
    /// stays open; a carried subscription is best effort). Returns the URIs the providers now
    /// follow (or no longer do): a subscription is carried once its provider answered — in
    /// 2026-07-28, once a listen stream naming it was acknowledged.
    pub async fn subscribe_upstream(&self, method: &str, uris: Vec<String>) -> Vec<String> {
        let served = self.served();
        // Together: a 2026-07-28 provider is then asked once for a stream naming them all,
        // not once per URI, each waiting for the last one's acknowledgement.
        let subscriptions = uris.into_iter().map(|uri| {
            let params = serde_json::json!({ "uri": uri });
            let composed = served.composed();
            async move { (composed.subscription(method, params).await, uri) }
        });
        let mut carried = Vec::new();
        for (answer, uri) in futures::future::join_all(subscriptions).await {
            match answer {
                Ok(_) => carried.push(uri),
                Err(OfferingError::UnknownResource { .. } | OfferingError::UnsafeUri { .. }) => {}
                Err(error) => {
                    warn!(project = %self.identity.project, %uri, %error, "{method} at the provider failed");
                }
            }
        }
        carried
    }

    /// The URIs the task's client subscribed to.
    pub fn subscriptions(&self) -> BTreeSet<String> {
        lock(&self.subscriptions).keys().cloned().collect()
    }

    /// Tells the task's client of an update of each of `uris` it subscribed to: through the
    /// session's GET stream, and on every open listen stream that holds it.
    pub fn notify_resource_updated(&self, uris: BTreeSet<String>) {
        let subscribed: Vec<String> = {
            let subscriptions = lock(&self.subscriptions);
            uris.into_iter()
                .filter(|uri| subscriptions.contains_key(uri))
                .collect()
        };
        for uri in subscribed {
            self.tell(Change::Updated(uri));
        }
    }
}
