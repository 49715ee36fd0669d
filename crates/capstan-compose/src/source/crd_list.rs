//! The crd source with a URL template: each project's control plane listed with the sidecar's own
//! credential, behind `source/cache.rs` (TTL, the last good answer on failure, capacity). Without a
//! template one watch serves every project instead (`source/crd_watch.rs`).
//!
//! Each project keeps its client between reads, so its connections (and their TLS sessions)
//! outlive one list, and the resourceVersion of its last list of each kind. A later list asks
//! for a state not older than that version: the apiserver answers from its watch cache without
//! a quorum read of etcd, and the answer never goes back in time. Kubernetes has no conditional
//! LIST (no "not modified"), so this is the cheapest list it allows. An apiserver that refuses
//! the version (one behind a balancer whose cache is behind the one that answered before) is
//! asked again for a plain consistent list. What is kept is bounded like the cache in front.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use capstan_api::{CapabilityBinding, RouteQualifier};
use futures::future::BoxFuture;
use kube::Resource;
use kube::api::{Api, ListParams, ObjectList, VersionMatch};
use tracing::{debug, warn};

use crate::source::cache::DEFAULT_CAPACITY;
use crate::source::snapshot::{Document, NamedQualifier, Snapshot};
use crate::source::spec_text::SpecText;
use crate::source::{DocumentSource, SourceError, check_project, documents_of, qualifiers_of};
use capstan_core::control_plane::{ControlPlane, PlaneUrlError};

/// CapabilityBindings and RouteQualifiers listed from the project's control plane with the
/// sidecar's own credential. The plane's `url_template` holds `{project}` (path-escaped on
/// use); without one, the cluster the credential points at is every project's plane.
pub struct CrdSource {
    plane: ControlPlane,
    capacity: usize,
    known: Mutex<HashMap<String, Known>>,
}

/// What a project's reads keep: its client and the version of its last list of each kind.
#[derive(Clone)]
struct Known {
    client: kube::Client,
    bindings: Option<String>,
    qualifiers: Option<String>,
}

impl std::fmt::Debug for CrdSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdSource")
            .field("plane", &self.plane)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl CrdSource {
    /// A source using `config`'s credential, against `url_template` when given.
    pub fn new(config: kube::Config, url_template: Option<String>) -> Self {
        Self::from_plane(ControlPlane::new(config, url_template))
    }

    /// A source reading each project's plane with the sidecar's own credential, keeping what
    /// it knows of at most [`DEFAULT_CAPACITY`] projects.
    pub fn from_plane(plane: ControlPlane) -> Self {
        Self {
            plane,
            capacity: DEFAULT_CAPACITY,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps what it knows of at most `capacity` projects (at least one): the capacity of the
    /// cache in front of it.
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// What `project`'s reads kept, or a new client for its plane.
    fn known(&self, project: &str) -> Result<Known, ClientError> {
        if let Some(known) = self.known.lock().ok().and_then(|k| k.get(project).cloned()) {
            return Ok(known);
        }
        let mut config = self.plane.config(project).map_err(ClientError::Plane)?;
        // No retries inside a read: the cache in front is this source's retry policy (the
        // last good answer now, another list on the next read). kube's own would repeat a
        // throttled or refused list up to 15 times with the server's delays while the
        // session that asked waits.
        config.default_retry = false;
        Ok(Known {
            client: kube::Client::try_from(config).map_err(ClientError::Client)?,
            bindings: None,
            qualifiers: None,
        })
    }

    /// Keeps `known` for `project`'s next read, forgetting another project's when full (that
    /// project's next list is a consistent one, with a new client).
    fn keep(&self, project: &str, known: Known) {
        let Ok(mut all) = self.known.lock() else {
            return;
        };
        if all.len() >= self.capacity
            && !all.contains_key(project)
            && let Some(other) = all.keys().next().cloned()
        {
            all.remove(&other);
        }
        all.insert(project.to_owned(), known);
    }
}

/// Why no client could be made for a project's plane.
#[derive(Debug, thiserror::Error)]
enum ClientError {
    /// The plane's URL template gives no URL for the project.
    #[error(transparent)]
    Plane(PlaneUrlError),
    /// kube could not build a client from the configuration.
    #[error(transparent)]
    Client(kube::Error),
}

/// The longest this source waits on an apiserver's "retry after" before its one retry.
const MOST_RETRY_AFTER: Duration = Duration::from_secs(1);

/// All objects of kind `K`, not older than `since` when given (from the watch cache), with
/// the list's resourceVersion. A version the apiserver refuses falls back to a consistent
/// list; throttling is handled the same way for either (`list_once_more_if_throttled`).
async fn list<K>(
    client: kube::Client,
    since: Option<&str>,
) -> Result<ObjectList<SpecText<K>>, kube::Error>
where
    K: Resource<DynamicType = ()> + 'static,
    K::Scope: Send,
{
    let api: Api<SpecText<K>> = Api::all(client);
    if let Some(version) = since {
        let params = ListParams::default()
            .at(version)
            .matching(VersionMatch::NotOlderThan);
        match list_once_more_if_throttled(&api, &params).await {
            Ok(list) => return Ok(list),
            // The apiserver answered but would not serve that version: ask for the current
            // state instead. A transport failure or throttling is not retried here (the
            // cache serves stale).
            Err(kube::Error::Api(status)) if status.code != THROTTLED => {
                debug!(kind = %K::kind(&()), version, %status, "list from a known version refused; listing consistently");
            }
            Err(error) => return Err(error),
        }
    }
    list_once_more_if_throttled(&api, &ListParams::default()).await
}

/// "Too many requests": also what a CRD whose storage is still initializing answers.
const THROTTLED: u16 = 429;

/// One list; a throttled one is tried once more after the server's delay, at most
/// [`MOST_RETRY_AFTER`]. Anything else is the cache's to handle.
async fn list_once_more_if_throttled<K>(
    api: &Api<SpecText<K>>,
    params: &ListParams,
) -> Result<ObjectList<SpecText<K>>, kube::Error>
where
    K: Resource<DynamicType = ()> + 'static,
{
    match api.list(params).await {
        Err(kube::Error::Api(status)) if status.code == THROTTLED => {
            let asked = status.details.as_ref().map_or(0, |d| d.retry_after_seconds);
            tokio::time::sleep(Duration::from_secs(asked.into()).min(MOST_RETRY_AFTER)).await;
            api.list(params).await
        }
        answer => answer,
    }
}

impl DocumentSource for CrdSource {
    fn documents<'a>(&'a self, project: &'a str) -> BoxFuture<'a, Result<Snapshot, SourceError>> {
        Box::pin(async move {
            check_project("crd", project)?;
            let error = |message: String| SourceError::new("crd", project, message);
            let mut known = self.known(project).map_err(|e| error(e.to_string()))?;
            let (bindings, qualifiers) = futures::join!(
                list::<CapabilityBinding>(known.client.clone(), known.bindings.as_deref()),
                list::<RouteQualifier>(known.client.clone(), known.qualifiers.as_deref()),
            );
            let bindings =
                bindings.map_err(|e| error(format!("listing CapabilityBindings: {e}")))?;
            known.bindings = bindings.metadata.resource_version.clone();
            // The control plane is the tenancy boundary: no namespace check applies here.
            let documents: Vec<Document> =
                documents_of(bindings.items.iter().map(|o| (&o.metadata, o.spec())))
                    .map_err(|e| error(e.to_string()))?;
            // Qualifiers that cannot be read are not "no qualifiers": routed calls are refused
            // until they can be (the providers' own tools are unaffected).
            let (qualifiers, qualifiers_error): (Vec<NamedQualifier>, _) = match qualifiers
                .map_err(|e| format!("listing RouteQualifiers: {e}"))
                .and_then(|list| {
                    known.qualifiers = list.metadata.resource_version.clone();
                    qualifiers_of(list.items.iter().map(|o| (&o.metadata, o.spec())))
                        .map_err(|e| e.to_string())
                }) {
                Ok(qualifiers) => (qualifiers, None),
                Err(message) => {
                    warn!(project, error = %message, "route qualifiers unavailable; routed calls refused");
                    (Vec::new(), Some(message))
                }
            };
            self.keep(project, known);
            Ok(Snapshot {
                documents,
                qualifiers,
                qualifiers_error,
            })
        })
    }
}
