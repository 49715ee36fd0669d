//! The crd source without a URL template, kept by a watch instead of re-listed.
//!
//! Without a template every project reads the one cluster the sidecar's credential points at
//! (the control plane is the tenancy boundary), so one watch per kind serves every project:
//! one LIST at start — from the apiserver's watch cache — then events only. Re-listing every
//! binding once per cache TTL would cost the apiserver a LIST of the whole set per pod per
//! minute.
//!
//! What is kept per object is a slim projection: the metadata without managed fields and the
//! spec as the JSON text the apiserver sent. The snapshot every session composes from is
//! built from the stores once per change and shared until the next one.
//!
//! The cache contract of `source/cache.rs` holds: a broken watch keeps serving the last good state
//! (the reflector swaps its store only when a re-list has completed) while it re-lists with
//! backoff, and until the first sync reads answer as an outage, never as "no capabilities".

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use capstan_api::{CapabilityBinding, RouteQualifier};
use futures::StreamExt;
use futures::future::BoxFuture;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::source::counted_body::counting_client;
use crate::source::snapshot::Snapshot;
use crate::source::spec_text::SpecText;
use crate::source::{ProjectDocuments, ReadOutcome};
use crate::source::{check_project, documents_of, qualifiers_of};

/// What the watches did, for the sidecar's metrics.
#[derive(Debug, Default)]
pub struct WatchCounts {
    /// Full lists started (the first, and one after every broken watch).
    pub lists: AtomicU64,
    /// Watch failures (each followed by a re-list after backoff).
    pub failures: AtomicU64,
    /// Objects received, in lists and as events.
    pub events: AtomicU64,
    /// Response bytes read from the apiserver (counted when started with
    /// [`WatchedCluster::connect`]).
    pub bytes: Arc<AtomicU64>,
}

/// One kind's watch: its store, whether it has synced, whether it is healthy now.
struct Kept<K: Resource<DynamicType = ()> + 'static> {
    store: Store<SpecText<K>>,
    synced: AtomicBool,
    healthy: AtomicBool,
}

struct Shared {
    bindings: Kept<CapabilityBinding>,
    qualifiers: Kept<RouteQualifier>,
    /// The version of the stores, bumped on every change to either; its receivers are those
    /// following changes ([`ProjectDocuments::changes`]).
    version: tokio::sync::watch::Sender<u64>,
    /// The snapshot of `version`, built on the first read after a change.
    built: Mutex<Option<(u64, Arc<Snapshot>)>>,
    counts: Arc<WatchCounts>,
    /// Told once both kinds have synced.
    first_sync: tokio::sync::watch::Sender<bool>,
}

/// The crd source of a sidecar without a URL template: CapabilityBindings and RouteQualifiers
/// of the cluster `client` reaches, kept by watches. Stops its watches when dropped.
pub struct WatchedCluster {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for WatchedCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchedCluster")
            .field("version", &*self.shared.version.borrow())
            .finish_non_exhaustive()
    }
}

impl WatchedCluster {
    /// Starts both watches on the cluster `config` reaches, counting the bytes they read.
    pub fn connect(config: kube::Config) -> Result<Self, kube::Error> {
        let bytes = Arc::new(AtomicU64::new(0));
        let client = counting_client(config, bytes.clone())?;
        Ok(Self::start_counting(client, bytes))
    }

    /// Starts both watches with `client` (on the current runtime); bytes are not counted.
    pub fn start(client: kube::Client) -> Self {
        Self::start_counting(client, Arc::default())
    }

    fn start_counting(client: kube::Client, bytes: Arc<AtomicU64>) -> Self {
        let (bindings_writer, qualifiers_writer) = (
            reflector::store::Writer::default(),
            reflector::store::Writer::default(),
        );
        let shared = Arc::new(Shared {
            bindings: Kept {
                store: bindings_writer.as_reader(),
                synced: AtomicBool::new(false),
                healthy: AtomicBool::new(false),
            },
            qualifiers: Kept {
                store: qualifiers_writer.as_reader(),
                synced: AtomicBool::new(false),
                healthy: AtomicBool::new(false),
            },
            version: tokio::sync::watch::channel(0).0,
            built: Mutex::new(None),
            counts: Arc::new(WatchCounts {
                bytes,
                ..WatchCounts::default()
            }),
            first_sync: tokio::sync::watch::channel(false).0,
        });
        let tasks = vec![
            tokio::spawn(keep(
                Api::all(client.clone()),
                bindings_writer,
                shared.clone(),
                |shared| &shared.bindings,
            )),
            tokio::spawn(keep(
                Api::all(client),
                qualifiers_writer,
                shared.clone(),
                |shared| &shared.qualifiers,
            )),
        ];
        Self { shared, tasks }
    }

    /// Whether both kinds have been listed once.
    pub fn synced(&self) -> bool {
        self.shared.bindings.synced.load(Ordering::Acquire)
            && self.shared.qualifiers.synced.load(Ordering::Acquire)
    }

    /// Becomes true once both kinds have been listed once.
    pub fn first_sync(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shared.first_sync.subscribe()
    }

    /// What the watches did so far (kept current; for metrics).
    pub fn counts(&self) -> Arc<WatchCounts> {
        self.shared.counts.clone()
    }

    /// The snapshot of the stores as they are, built once per change.
    fn snapshot(&self) -> Arc<Snapshot> {
        let shared = &self.shared;
        let version = *shared.version.borrow();
        if let Ok(built) = shared.built.lock()
            && let Some((at, snapshot)) = built.as_ref()
            && *at == version
        {
            return snapshot.clone();
        }
        let bindings = shared.bindings.store.state();
        let documents = documents_of(bindings.iter().map(|o| (&o.metadata, o.spec())))
            .unwrap_or_else(|error| {
                warn!(%error, "watched CapabilityBindings could not be read");
                Vec::new()
            });
        // Qualifiers that cannot be read are not "no qualifiers": routed calls are refused
        // until they can be (the providers' own tools are unaffected).
        let (qualifiers, qualifiers_error) = if shared.qualifiers.synced.load(Ordering::Acquire) {
            let qualifiers = shared.qualifiers.store.state();
            match qualifiers_of(qualifiers.iter().map(|o| (&o.metadata, o.spec()))) {
                Ok(qualifiers) => (qualifiers, None),
                Err(error) => (Vec::new(), Some(error.to_string())),
            }
        } else {
            (
                Vec::new(),
                Some("RouteQualifiers have not been read yet".to_owned()),
            )
        };
        let snapshot = Arc::new(Snapshot {
            documents,
            qualifiers,
            qualifiers_error,
        });
        if let Ok(mut built) = shared.built.lock() {
            *built = Some((version, snapshot.clone()));
        }
        snapshot
    }
}

impl Drop for WatchedCluster {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl ProjectDocuments for WatchedCluster {
    fn read<'a>(&'a self, project: &'a str) -> BoxFuture<'a, (Arc<Snapshot>, ReadOutcome)> {
        Box::pin(async move {
            if let Err(error) = check_project("crd", project) {
                warn!(%error, "capability documents unavailable; composing built-ins only");
                return (Arc::new(Snapshot::default()), ReadOutcome::Error);
            }
            if !self.shared.bindings.synced.load(Ordering::Acquire) {
                warn!(
                    project,
                    "CapabilityBindings have not been read yet; composing built-ins only"
                );
                return (Arc::new(Snapshot::default()), ReadOutcome::Error);
            }
            let snapshot = self.snapshot();
            let outcome = if !self.shared.bindings.healthy.load(Ordering::Acquire) {
                ReadOutcome::StaleServed
            } else if snapshot.is_empty() {
                ReadOutcome::Empty
            } else {
                ReadOutcome::Hit
            };
            (snapshot, outcome)
        })
    }

    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.shared.version.subscribe())
    }
}

impl Shared {
    /// Notes a change of either store: the next read builds a new snapshot, and those
    /// following changes are told.
    fn bump(&self) {
        self.version.send_modify(|version| *version += 1);
    }
}

/// Runs one kind's reflector for as long as the source lives, noting syncs, health and
/// changes in `shared`.
async fn keep<K>(
    api: Api<SpecText<K>>,
    writer: reflector::store::Writer<SpecText<K>>,
    shared: Arc<Shared>,
    kept: fn(&Shared) -> &Kept<K>,
) where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let config = watcher::Config::default().any_semantic();
    let events = reflector::reflector(
        writer,
        watcher(api, config).modify(|object: &mut SpecText<K>| {
            object.metadata.managed_fields = None;
        }),
    )
    .backoff(super::watch_backoff::watch_backoff());
    let mut events = std::pin::pin!(events);
    let kind = K::kind(&());
    while let Some(event) = events.next().await {
        let this = kept(&shared);
        match event {
            Ok(watcher::Event::Init) => {
                shared.counts.lists.fetch_add(1, Ordering::Relaxed);
            }
            Ok(watcher::Event::InitApply(_)) => {
                shared.counts.events.fetch_add(1, Ordering::Relaxed);
            }
            Ok(watcher::Event::InitDone) => {
                this.healthy.store(true, Ordering::Release);
                // Synced before the bump: any read that sees the new version sees the kind
                // as read. The other way round, a read in the instant between built "not read
                // yet" under the new version, and that snapshot was served until the next
                // change of either kind (routed calls refused as if the qualifiers were
                // unreadable). No test reaches that instant; the order is the whole fix.
                let first = !this.synced.swap(true, Ordering::AcqRel);
                shared.bump();
                if first {
                    info!(%kind, count = this.store.len(), "first sync");
                }
                if shared.bindings.synced.load(Ordering::Acquire)
                    && shared.qualifiers.synced.load(Ordering::Acquire)
                {
                    shared.first_sync.send_replace(true);
                }
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                this.healthy.store(true, Ordering::Release);
                shared.counts.events.fetch_add(1, Ordering::Relaxed);
                shared.bump();
            }
            Err(error) => {
                if this.healthy.swap(false, Ordering::AcqRel) {
                    warn!(%kind, %error, "watch failed; serving the last good state while it re-lists");
                }
                shared.counts.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
