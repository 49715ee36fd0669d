//! Leadership on a `coordination.k8s.io` Lease: one replica writes, the other keeps its caches
//! warm and takes over when the lease is released or expires.
//!
//! kube-lease-manager holds and renews the lease. Its standby, though, sleeps until the expiry
//! of the lease it last saw, so a lease released by a graceful shutdown would only be taken
//! over when it would have expired anyway. The standby therefore reads the Lease every
//! [`STANDBY_POLL`]: when it shows no holder, the standby's manager is started afresh, and a
//! fresh manager takes a free lease at once. (A GET, not a watch, so the controller's Role
//! needs no list or watch on Leases: get, create and patch are all it uses.)
//!
//! A replica campaigns only once its caches have synced: a pod that has just started must not
//! win a released Lease from a warm standby and leave the writes waiting for its first list
//! (found on a real node, docs/architecture.md "Leadership"). Either may still win once both
//! are synced; both can then write at once.
//!
//! A lease that cannot be reached yet (its namespace missing, RBAC not bound) is retried with
//! a log line naming it, as the caches retry CRDs that are not installed yet.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// How long a manager may take to release the lease when it is stopped. 5 s: a release is one
/// PATCH; past this the standby takes over when the lease expires instead.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Pause before building a manager again after a failure (the apiserver may be restarting,
/// the namespace not created yet).
const RETRY: Duration = Duration::from_secs(2);

/// How often a standby reads the Lease to see whether it was released. 2 s: a released lease
/// is taken over within two seconds, for one GET every two seconds per standby.
pub const STANDBY_POLL: Duration = Duration::from_secs(2);

/// The lease to elect on.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// The Lease's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// This replica's identity, written as the holder.
    pub identity: String,
    /// Seconds the lease stays valid after a renewal.
    pub duration_seconds: u64,
    /// Seconds before expiry the holder renews.
    pub grace_seconds: u64,
    /// The field manager of the lease's writes.
    pub field_manager: String,
}

/// Leadership could not be set up.
#[derive(Debug, Error)]
#[error("lease {namespace}/{name}: {source}")]
pub struct LeaseError {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// What failed.
    #[source]
    pub source: kube_lease_manager::LeaseManagerError,
}

/// Whether this replica leads, kept current by a background task until [`Leadership::stop`].
pub struct Leadership {
    leader: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Leadership {
    /// Starts electing on `settings`' lease, in the background, once `synced` turns true (the
    /// replica's caches have synced): until then, and until the lease can be reached, this
    /// replica is not leader; each failed attempt is logged and retried.
    pub fn start(client: Client, settings: LeaseSettings, synced: watch::Receiver<bool>) -> Self {
        let (tx, leader) = watch::channel(false);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            if campaign_when_synced(synced, stopped.clone()).await {
                elect(client, settings, tx, stopped).await;
            }
        });
        Self { leader, stop, task }
    }

    /// Whether this replica leads now, and every change.
    pub fn leader(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// Gives leadership up: the lease is released (when held) so the standby takes over at
    /// once. Waits for the release at most [`RELEASE_TIMEOUT`] and says whether it finished.
    pub async fn stop(self) -> bool {
        let _ = self.stop.send(true);
        tokio::time::timeout(RELEASE_TIMEOUT, self.task)
            .await
            .is_ok()
    }
}

async fn build(client: &Client, settings: &LeaseSettings) -> Result<LeaseManager, LeaseError> {
    LeaseManagerBuilder::new(client.clone(), &settings.name)
        .with_namespace(&settings.namespace)
        .with_identity(&settings.identity)
        .with_duration(settings.duration_seconds)
        .with_grace(settings.grace_seconds)
        .with_field_manager(settings.field_manager.clone())
        .build()
        .await
        .map_err(|source| LeaseError {
            namespace: settings.namespace.clone(),
            name: settings.name.clone(),
            source,
        })
}

/// Whether a Lease has no holder: released, or never held.
pub fn is_free(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

/// Waits until the caches have synced (true) or leadership is given up first (false).
async fn campaign_when_synced(
    mut synced: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) -> bool {
    tokio::select! {
        _ = stop.wait_for(|stop| *stop) => false,
        result = synced.wait_for(|synced| *synced) => result.is_ok(),
    }
}

/// Why one manager's run ended.
enum Ended {
    /// Leadership was given up.
    Stopped,
    /// The lease is free while this replica waits: start a fresh manager.
    LeaseFreed,
    /// The manager's task ended on its own (an error it gave up on).
    ManagerExited,
}

async fn elect(
    client: Client,
    settings: LeaseSettings,
    tx: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &settings.namespace);
    let mut poll = tokio::time::interval(STANDBY_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let current = match build(&client, &settings).await {
            Ok(manager) => manager,
            Err(error) => {
                warn!(
                    %error,
                    lease = %format!("{}/{}", settings.namespace, settings.name),
                    "leader election cannot reach its Lease (does the namespace exist, and may \
                     this account get, create and patch Leases there?); retrying in 2 s"
                );
                tokio::select! {
                    _ = stop.wait_for(|stop| *stop) => return,
                    () = tokio::time::sleep(RETRY) => continue,
                }
            }
        };
        let (mut held, handle) = current.watch().await;
        let ended = loop {
            let standby = !*held.borrow();
            let mut read_lease = false;
            tokio::select! {
                _ = stop.wait_for(|stop| *stop) => break Ended::Stopped,
                changed = held.changed() => {
                    if changed.is_err() {
                        break Ended::ManagerExited;
                    }
                    tx.send_replace(*held.borrow_and_update());
                }
                _ = poll.tick(), if standby => read_lease = true,
            }
            if read_lease
                && let Ok(Some(lease)) = api.get_opt(&settings.name).await
                && is_free(&lease)
            {
                break Ended::LeaseFreed;
            }
        };
        // Dropping the receiver ends the manager's task, which releases the lease if held.
        drop(held);
        let released = tokio::time::timeout(RELEASE_TIMEOUT, handle).await;
        match ended {
            Ended::Stopped => {
                tx.send_replace(false);
                match released {
                    Ok(Ok(Ok(_))) => info!("lease released"),
                    Ok(Ok(Err(error))) => warn!(%error, "releasing the lease"),
                    Ok(Err(error)) => warn!(%error, "lease task"),
                    Err(_) => warn!(
                        "lease not released within {RELEASE_TIMEOUT:?}; the standby takes over when it expires"
                    ),
                }
                return;
            }
            Ended::LeaseFreed => info!("the lease was released; taking it over"),
            Ended::ManagerExited => {
                tx.send_replace(false);
                warn!("leader election stopped; starting it again");
            }
        }
    }
}

/// Yields once each time this replica becomes leader, so every object is evaluated by the
/// new writer.
pub fn became_leader(leader: watch::Receiver<bool>) -> impl futures::Stream<Item = ()> + Send {
    futures::stream::unfold(leader, |mut leader| async move {
        loop {
            leader.changed().await.ok()?;
            if *leader.borrow_and_update() {
                return Some(((), leader));
            }
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    use super::*;

    fn lease(holder: Option<&str>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_lease_without_a_holder_should_be_free() {
        assert!(is_free(&lease(None)));
        assert!(is_free(&lease(Some(""))));
        assert!(is_free(&Lease::default()));
        assert!(!is_free(&lease(Some("replica-a"))));
    }
}
