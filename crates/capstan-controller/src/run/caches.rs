//! The controller's watch caches of bindings and qualifiers, trimmed of what it never reads,
//! and the replica's readiness once both have synced.

use std::hash::Hash;

use capstan_process::Readiness;
use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::info;

use crate::cached::{CachedBinding, CachedQualifier};
use crate::metrics::Metrics;
use crate::reconcile::Context;
use crate::status::{DesiredStatus, Kind, ObjectKey};
use crate::status_queue::StatusSender;
use crate::triggers::named_for_reconcile;

/// A watch cache: its event stream, its store, and a channel that turns true at its first full
/// sync (InitDone) — a store's own readiness future wakes only its latest waiter, and the
/// Controller already waits on it.
pub(super) struct WatchCache<S, K: Lookup + 'static>
where
    K::DynamicType: Hash + Eq,
{
    pub(super) events: S,
    pub(super) store: Store<K>,
    pub(super) synced: watch::Receiver<bool>,
}

/// The CapabilityBinding cache, whose stream of changed bindings drives the binding
/// controller. A deleted binding frees the names it held in the probe at once and leaves the
/// status queue's overflow (no reconcile follows a delete).
///
/// A (re-)list's bindings are named when it ends, not as they arrive: until then the store
/// still holds the previous list (the reflector swaps it in at `InitDone`), so a reconcile
/// started by a listed binding read the binding as it was before the watch broke — or found
/// none, for one created meanwhile, and dropped it until the resync walk came by.
pub(super) fn watch_bindings(
    ctx: &Context,
    config: watcher::Config,
) -> WatchCache<
    impl Stream<Item = Result<ObjectRef<CachedBinding>, watcher::Error>> + Send + 'static,
    CachedBinding,
> {
    let (probe, queue) = (ctx.probe.clone(), ctx.queue.clone());
    let (changes, store, synced) =
        reflected(&ctx.client, config, move |binding: &CachedBinding| {
            let name = binding.name_any();
            if let Some(prober) = &probe {
                prober.forget(&name);
            }
            queue.forget(&ObjectKey {
                kind: Kind::Binding,
                name,
            });
        });
    let events = changes.flat_map(named_for_reconcile(store.clone()));
    WatchCache {
        events,
        store,
        synced,
    }
}

/// The RouteQualifier cache, whose events the qualifier loop follows. A deleted qualifier
/// leaves the status queue's overflow.
pub(super) fn watch_qualifiers(
    client: &Client,
    config: watcher::Config,
    queue: StatusSender<ObjectKey, DesiredStatus>,
) -> WatchCache<
    impl Stream<Item = Result<watcher::Event<CachedQualifier>, watcher::Error>> + Send + 'static,
    CachedQualifier,
> {
    let (events, store, synced) = reflected(client, config, move |qualifier: &CachedQualifier| {
        queue.forget(&ObjectKey {
            kind: Kind::Qualifier,
            name: qualifier.name_any(),
        });
    });
    WatchCache {
        events,
        store,
        synced,
    }
}

/// A reflected watch of every `K`, trimmed for the cache and retried with the sources'
/// backoff: its events, its store, and a channel that turns true at its first full sync.
/// `deleted` is told of each object the watch sees deleted.
fn reflected<K>(
    client: &Client,
    config: watcher::Config,
    deleted: impl Fn(&K) + Send + 'static,
) -> (
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    Store<K>,
    watch::Receiver<bool>,
)
where
    K: Resource + Lookup + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    <K as Resource>::DynamicType: Default,
    <K as Lookup>::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::default();
    let store: Store<K> = writer.as_reader();
    let api: Api<K> = Api::all(client.clone());
    let (synced_tx, synced) = watch::channel(false);
    let events = reflector::reflector(writer, watcher(api, config).modify(trim_for_cache))
        .backoff(capstan_compose::source::watch_backoff())
        .inspect(move |event| match event {
            Ok(watcher::Event::InitDone) => {
                let _ = synced_tx.send(true);
            }
            Ok(watcher::Event::Delete(object)) => deleted(object),
            _ => {}
        });
    (events, store, synced)
}

/// What turns true when both caches have synced.
pub(super) struct Ready {
    /// `/readyz`.
    pub(super) readiness: Readiness,
    /// The election and the qualifier loop.
    pub(super) synced: watch::Sender<bool>,
}

/// Marks the replica ready once both caches have synced, and sends `true` on its channel (the
/// election campaigns from then on); returns a receiver of it, for the qualifier loop.
pub(super) fn spawn_readiness(
    ready: Ready,
    mut bindings: watch::Receiver<bool>,
    mut qualifiers: watch::Receiver<bool>,
    metrics: Metrics,
) -> watch::Receiver<bool> {
    let Ready { readiness, synced } = ready;
    let receiver = synced.subscribe();
    tokio::spawn(async move {
        if bindings.wait_for(|s| *s).await.is_ok() && qualifiers.wait_for(|s| *s).await.is_ok() {
            metrics.caches_synced.set(1);
            readiness.set_ready();
            synced.send_replace(true);
            info!("caches synced; ready");
        }
    });
    receiver
}

/// Drops what the controller never reads before an object enters the cache: managed fields
/// and the last-applied annotation are often larger than the spec itself.
fn trim_for_cache<K: Resource>(object: &mut K) {
    let metadata = object.meta_mut();
    metadata.managed_fields = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}
