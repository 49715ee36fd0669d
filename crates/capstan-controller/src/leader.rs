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
//! (found on a real node, docs/architecture.md "Leadership"). Either may win once both are
//! synced.
//!
//! A lease that cannot be reached yet (its namespace missing, RBAC not bound) is retried with
//! a log line naming it, as the caches retry CRDs that are not installed yet.
//!
//! Each replica writes the Lease under a field manager of its own ([`LeaseSettings::field_manager`]).
//! A replica takes a free lease with a server-side apply of `holderIdentity`; the apiserver
//! refuses that apply with a conflict when another manager already owns the field, and that
//! refusal is all that keeps two replicas which both read the lease free from both leading. Under
//! one shared manager the second apply silently overwrote the first, and the first replica,
//! which had already read itself back as holder, kept writing statuses until its next renewal
//! (found on a real node: a binding's writes came from both pods, docs/reliability.md). What a
//! lease cannot prevent remains: a holder whose renewal comes after its lease expired (a
//! stalled process) writes on until that renewal reads the new holder back; its writes are
//! the same server-side applies of the same conditions. Nor is kube-lease-manager's takeover
//! of an expired lease conditioned on what it read (a forced clear, then a take): with two
//! standbys, both can lead until the first one's renewal (docs/reliability.md "Leadership
//! with more than one standby"; the chart runs one standby).

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
}

/// The longest identity whose field manager fits the apiserver's 128 characters.
pub const MAX_IDENTITY_LEN: usize = 128 - LEASE_FIELD_MANAGER_PREFIX.len();

/// [`crate::FIELD_MANAGER`], the status writes' manager, with the lease's suffix.
const LEASE_FIELD_MANAGER_PREFIX: &str = "capstan-controller-lease-";

impl LeaseSettings {
    /// The field manager of this replica's Lease writes: its own, so that the apiserver refuses
    /// one replica's take of a lease another holds (the module's comment says why).
    pub fn field_manager(&self) -> String {
        format!("{LEASE_FIELD_MANAGER_PREFIX}{}", self.identity)
    }

    /// Refuses settings a replica cannot elect with, naming the flag: a grace that is 0 (the
    /// holder would renew only as its lease expires) or not below the duration (it would renew
    /// without pause), and an identity too long for its field manager.
    pub fn check(&self) -> Result<(), LeaseSettingsError> {
        if self.grace_seconds == 0 || self.grace_seconds >= self.duration_seconds {
            return Err(LeaseSettingsError::Grace {
                grace: self.grace_seconds,
                duration: self.duration_seconds,
            });
        }
        // The apiserver takes a field manager of at most 128 bytes, every character printable:
        // a newline carried in from a file-fed variable would fail every Lease write. Printable
        // is held to ASCII here: the apiserver's rule also refuses invisible Unicode (a
        // zero-width space, a direction mark) that std cannot tell apart without Unicode's
        // category tables, and a pod or host name is ASCII anyway.
        let printable = |c: char| c.is_ascii_graphic() || c == ' ';
        if self.identity.is_empty()
            || self.identity.len() > MAX_IDENTITY_LEN
            || !self.identity.chars().all(printable)
        {
            return Err(LeaseSettingsError::Identity {
                identity: self.identity.clone(),
            });
        }
        Ok(())
    }
}

/// Lease settings refused when the controller starts.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LeaseSettingsError {
    /// The grace is not between 1 and the duration.
    #[error(
        "--lease-grace-seconds ({grace}) must be at least 1 and less than \
         --lease-duration-seconds ({duration}): the leader renews its lease that many seconds \
         before it expires"
    )]
    Grace {
        /// The grace asked for.
        grace: u64,
        /// The duration asked for.
        duration: u64,
    },
    /// The identity is empty, too long, or has a character that is not printable ASCII.
    #[error(
        "--identity {identity:?} must have 1 to {MAX_IDENTITY_LEN} characters, each printable \
         ASCII (letters, digits, punctuation, ' '): this replica writes its Lease as \
         the field manager `capstan-controller-lease-<identity>`, which the apiserver takes up \
         to 128 bytes long and printable"
    )]
    Identity {
        /// The identity asked for.
        identity: String,
    },
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
        .with_field_manager(settings.field_manager())
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

    fn settings(identity: &str, duration_seconds: u64, grace_seconds: u64) -> LeaseSettings {
        LeaseSettings {
            name: "capstan".into(),
            namespace: "capstan".into(),
            identity: identity.into(),
            duration_seconds,
            grace_seconds,
        }
    }

    /// Two replicas must write the Lease as two field managers: the apiserver refuses one's
    /// take of a lease the other holds only then (e2e/tests/controller.rs shows the refusal).
    #[test]
    fn each_replica_should_write_its_lease_as_a_field_manager_of_its_own() {
        let a = settings("capstan-7d9f-abcde-1", 15, 5).field_manager();
        let b = settings("capstan-7d9f-fghij-1", 15, 5).field_manager();
        assert_eq!(a, "capstan-controller-lease-capstan-7d9f-abcde-1");
        assert_eq!(b, "capstan-controller-lease-capstan-7d9f-fghij-1");
        assert!(a.starts_with(crate::FIELD_MANAGER));
    }

    #[test]
    fn a_grace_not_between_one_and_the_duration_should_be_refused() {
        for (duration, grace) in [(15, 0), (15, 15), (15, 16), (0, 0), (1, 1)] {
            let refused = settings("replica", duration, grace).check();
            assert_eq!(
                refused,
                Err(LeaseSettingsError::Grace { grace, duration }),
                "duration {duration}, grace {grace}"
            );
            let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                message.contains("--lease-grace-seconds")
                    && message.contains("--lease-duration-seconds"),
                "{message}"
            );
        }
        assert_eq!(settings("replica", 15, 5).check(), Ok(()));
        assert_eq!(settings("replica", 2, 1).check(), Ok(()));
    }

    /// The field manager may be 128 bytes long, every character printable: an identity of 103
    /// makes it exactly that long; a newline, a tab, or an invisible or other non-ASCII
    /// character in it is refused.
    #[test]
    fn an_identity_should_fit_its_field_manager_in_128_characters() {
        assert_eq!(MAX_IDENTITY_LEN, 103);
        let longest = "a".repeat(103);
        assert_eq!(settings(&longest, 15, 5).check(), Ok(()));
        assert_eq!(settings(&longest, 15, 5).field_manager().len(), 128);
        assert_eq!(
            settings("pod a-1", 15, 5).check(),
            Ok(()),
            "a space is printable"
        );
        for identity in [
            String::new(),
            "a".repeat(104),
            "capstan-7d9f-abcde-1\n".to_owned(),
            "capstan\t7d9f".to_owned(),
            "capstan\u{200b}7d9f".to_owned(),
            "capstan-\u{e9}".to_owned(),
            "capstan\u{7f}".to_owned(),
        ] {
            let refused = settings(&identity, 15, 5).check();
            assert_eq!(
                refused,
                Err(LeaseSettingsError::Identity {
                    identity: identity.clone()
                }),
                "{} characters",
                identity.len()
            );
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
