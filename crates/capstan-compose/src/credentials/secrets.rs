//! Secrets as credentials (docs/upstream-auth.md "Secret"): each Secret a composition uses is
//! watched on its project's plane, in the credentials namespace, by name; every request takes
//! its current value, so a rotated Secret reaches the next request without a new session. A
//! Secret is sent only for a binding and to a host its own annotations name.
//!
//! One watch per (project, Secret), shared by every credential that names it and stopped when
//! the last of them is dropped (the compositions that used it are gone).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use capstan_api::SecretCredential;
use capstan_core::control_plane::ControlPlane;
use capstan_upstream::credential::{Credential, CredentialError, Header, HeaderFuture};
use capstan_upstream::guard::EndpointGuard;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt as _, watcher as watch_secrets};
use tokio::sync::watch;
use tracing::debug;

/// The annotation naming the bindings (comma-separated) a Secret may be used for.
pub const BINDINGS_ANNOTATION: &str = "capabilities.assistant.miloapis.com/bindings";

/// The annotation naming the hosts (comma-separated `host`, `*.suffix`, IPs, CIDRs: the form of
/// the endpoint allow-lists) a Secret may be sent to.
pub const HOSTS_ANNOTATION: &str = "capabilities.assistant.miloapis.com/hosts";

/// How long a request waits for a Secret's first read before it is refused.
pub const FIRST_READ_WAIT: Duration = Duration::from_secs(5);

/// What is known of one Secret.
#[derive(Clone, Debug)]
enum SecretState {
    /// Not read yet.
    Pending,
    /// Read: its data and what its annotations consent to.
    Present(Arc<Present>),
    /// It does not exist.
    Missing,
    /// It could not be read (forbidden, the plane unreachable): why, as a refusal.
    Unreadable(CredentialError),
}

/// A Secret as read.
struct Present {
    data: HashMap<String, Vec<u8>>,
    bindings: Vec<String>,
    /// The hosts it may be sent to; `None` when the annotation is missing or malformed (the
    /// message says which).
    hosts: Result<EndpointGuard, String>,
}

impl std::fmt::Debug for Present {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Present")
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .field("bindings", &self.bindings)
            .finish_non_exhaustive()
    }
}

impl Present {
    fn of(secret: Secret) -> Self {
        let annotations = secret.metadata.annotations.unwrap_or_default();
        let bindings = annotations
            .get(BINDINGS_ANNOTATION)
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|b| !b.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let hosts = match annotations.get(HOSTS_ANNOTATION) {
            None => Err(format!("it has no {HOSTS_ANNOTATION} annotation")),
            Some(list) => EndpointGuard::from_list(list)
                .map_err(|e| format!("its {HOSTS_ANNOTATION} annotation is malformed: {e}")),
        };
        let data = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(key, value)| (key, value.0))
            .collect();
        Self {
            data,
            bindings,
            hosts,
        }
    }
}

/// One watched Secret: its latest state, and the task keeping it (stopped when dropped).
#[derive(Debug)]
struct Watched {
    state: watch::Receiver<SecretState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Secrets watched for credentials, by (project, name).
#[derive(Debug)]
pub struct SecretWatches {
    plane: Option<ControlPlane>,
    namespace: String,
    watched: Mutex<HashMap<(String, String), Weak<Watched>>>,
}

impl SecretWatches {
    /// Watches of Secrets in `namespace` of each project's plane (none without a plane).
    pub fn new(plane: Option<ControlPlane>, namespace: String) -> Self {
        Self {
            plane,
            namespace,
            watched: Mutex::default(),
        }
    }

    /// The credential of `secret` for `binding` of `project`, sent to `url`.
    pub fn credential(
        self: &Arc<Self>,
        project: &str,
        binding: &str,
        url: &str,
        secret: &SecretCredential,
    ) -> Result<SecretCredentialSource, CredentialError> {
        let watched = self.watch(project, &secret.name)?;
        Ok(SecretCredentialSource {
            watched,
            namespace: self.namespace.clone(),
            secret: secret.clone(),
            binding: binding.to_owned(),
            url: url.to_owned(),
            made: Mutex::default(),
        })
    }

    /// The watch of Secret `name` of `project`: the running one, or a new one.
    fn watch(&self, project: &str, name: &str) -> Result<Arc<Watched>, CredentialError> {
        let key = (project.to_owned(), name.to_owned());
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = watched.get(&key).and_then(Weak::upgrade) {
            return Ok(running);
        }
        watched.retain(|_, w| w.strong_count() > 0);
        let plane = self.plane.as_ref().ok_or_else(|| {
            CredentialError::permanent(
                "this sidecar knows no control plane to read Secrets from (set a kubeconfig or \
                 run it in a pod)",
            )
        })?;
        let config = plane.config(project).map_err(|e| {
            CredentialError::permanent(format!("no client for project {project}'s plane: {e}"))
        })?;
        let client = kube::Client::try_from(config).map_err(|e| {
            CredentialError::transient(format!("no client for project {project}'s plane: {e}"))
        })?;
        let (tx, state) = watch::channel(SecretState::Pending);
        let api = kube::Api::<Secret>::namespaced(client, &self.namespace);
        let task = tokio::spawn(follow(api, name.to_owned(), tx));
        let running = Arc::new(Watched { state, task });
        watched.insert(key, Arc::downgrade(&running));
        Ok(running)
    }
}

/// Follows one Secret by name until the watch is dropped, publishing each state. An error
/// after the Secret was read keeps the value (the watch retries with backoff; nothing says the
/// Secret changed); an error before it is what requests are told.
async fn follow(api: kube::Api<Secret>, name: String, tx: watch::Sender<SecretState>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watch_secrets(api, config).default_backoff());
    let mut listed: Option<Secret> = None;
    while let Some(event) = events.next().await {
        let state = match event {
            Ok(Event::Apply(secret)) => SecretState::Present(Arc::new(Present::of(secret))),
            Ok(Event::Delete(_)) => SecretState::Missing,
            Ok(Event::Init) => {
                listed = None;
                continue;
            }
            Ok(Event::InitApply(secret)) => {
                listed = Some(secret);
                continue;
            }
            Ok(Event::InitDone) => match listed.take() {
                Some(secret) => SecretState::Present(Arc::new(Present::of(secret))),
                None => SecretState::Missing,
            },
            Err(error) => {
                debug!(secret = %name, %error, "a Secret's watch failed; retrying");
                if matches!(*tx.borrow(), SecretState::Present(_)) {
                    continue;
                }
                SecretState::Unreadable(unreadable(&error))
            }
        };
        if tx.send(state).is_err() {
            return;
        }
    }
}

/// Why a Secret could not be read, in words that say what to fix: forbidden needs someone to
/// grant it; anything else may pass.
fn unreadable(error: &watcher::Error) -> CredentialError {
    let forbidden = matches!(
        error,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
            | watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if status.code == 403
    );
    if forbidden {
        CredentialError::permanent(
            "the sidecar may not read it: grant its ServiceAccount get, list and watch on this \
             Secret by name (the chart's credentials.secrets)",
        )
    } else {
        CredentialError::transient(format!("it could not be read: {error}"))
    }
}

/// A Secret's key, sent in a header, for one binding's endpoint.
#[derive(Debug)]
pub struct SecretCredentialSource {
    watched: Arc<Watched>,
    namespace: String,
    secret: SecretCredential,
    binding: String,
    url: String,
    /// The header last made, and the read of the Secret it was made from: every request until
    /// the Secret changes sends it again without checking the consent and building the header
    /// anew (a URL parsed, a value formatted and validated: several µs a call).
    made: Mutex<Option<(Arc<Present>, Header)>>,
}

impl SecretCredentialSource {
    /// The header from `state`, or why the Secret may not be sent.
    fn header_of(&self, state: &SecretState) -> Result<Header, CredentialError> {
        let value = self.value_of(state)?;
        Header::new(
            self.secret.header_name(),
            self.secret.value_prefix(),
            &value,
        )
        .map_err(|e| {
            CredentialError::permanent(format!(
                "Secret {}/{}'s key {}: {e}",
                self.namespace, self.secret.name, self.secret.key
            ))
        })
    }

    /// The Secret's value now (a client secret, sent in no header of the binding's choosing),
    /// or why it may not be used.
    pub async fn value(&self) -> Result<String, CredentialError> {
        let state = self.current().await;
        self.value_of(&state)
    }

    /// The Secret's state, waiting up to [`FIRST_READ_WAIT`] for its first read.
    async fn current(&self) -> SecretState {
        let mut state = self.watched.state.clone();
        if matches!(*state.borrow(), SecretState::Pending) {
            let _ = tokio::time::timeout(
                FIRST_READ_WAIT,
                state.wait_for(|s| !matches!(s, SecretState::Pending)),
            )
            .await;
        }
        state.borrow().clone()
    }

    /// The value from `state`, or why the Secret may not be used.
    fn value_of(&self, state: &SecretState) -> Result<String, CredentialError> {
        let name = format!("Secret {}/{}", self.namespace, self.secret.name);
        let present = match state {
            SecretState::Present(present) => present,
            SecretState::Pending => {
                return Err(CredentialError::transient(format!(
                    "{name} was not read within {FIRST_READ_WAIT:?}"
                )));
            }
            SecretState::Missing => {
                return Err(CredentialError::permanent(format!(
                    "{name} does not exist: create it with the key {} and the annotations \
                     {BINDINGS_ANNOTATION} and {HOSTS_ANNOTATION} naming this binding and host",
                    self.secret.key
                )));
            }
            SecretState::Unreadable(why) => return Err(why.clone().within(&name)),
        };
        if !present.bindings.contains(&self.binding) {
            return Err(CredentialError::permanent(format!(
                "{name} does not name binding {} in its {BINDINGS_ANNOTATION} annotation: only \
                 its owner can let a binding use it",
                self.binding
            )));
        }
        match &present.hosts {
            Err(why) => {
                return Err(CredentialError::permanent(format!(
                    "{name} may be sent nowhere: {why}"
                )));
            }
            Ok(hosts) if hosts.check(&self.url).is_err() => {
                return Err(CredentialError::permanent(format!(
                    "{name} does not name the host of {} in its {HOSTS_ANNOTATION} annotation: \
                     only its owner can let it be sent there",
                    self.url
                )));
            }
            Ok(_) => {}
        }
        let value = present.data.get(&self.secret.key).ok_or_else(|| {
            CredentialError::permanent(format!("{name} has no key {}", self.secret.key))
        })?;
        let value = std::str::from_utf8(value).map_err(|_| {
            CredentialError::permanent(format!(
                "{name}'s key {} is not text that can be sent",
                self.secret.key
            ))
        })?;
        Ok(value.trim_end_matches(['\r', '\n']).to_owned())
    }
}

impl Credential for SecretCredentialSource {
    fn header(&self) -> HeaderFuture<'_> {
        Box::pin(async move {
            let current = self.current().await;
            let SecretState::Present(read) = &current else {
                return self.header_of(&current);
            };
            let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((from, header)) = made.as_ref()
                && Arc::ptr_eq(from, read)
            {
                return Ok(header.clone());
            }
            let header = self.header_of(&current)?;
            *made = Some((read.clone(), header.clone()));
            Ok(header)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
