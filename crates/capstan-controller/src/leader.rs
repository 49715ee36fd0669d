//! Leadership on a `coordination.k8s.io` Lease: exactly one replica writes statuses at any
//! instant; the others keep their caches warm and take over when the lease is released or has
//! gone unrenewed for its whole duration.
//!
//! The election is written here, after client-go's (`tools/leaderelection`), in [`election`] (the
//! decisions, pure) and [`lease_store`] (the reads and writes). Why not a crate: kube-lease-manager
//! (0.13) is not used because it takes an expired lease by first clearing its holder with a patch
//! that carries no precondition, so with two standbys the later one's clear can land after the
//! earlier one's take and both lead until the first one's renewal; it also judges expiry by
//! comparing the holder's renewTime with its own wall clock. kube-leader-election (0.44) writes
//! merge patches without a precondition and is built on kube 4; kube-coordinate conditions its
//! writes on the resourceVersion but is a release candidate on kube 2. The algorithm is small and
//! well known; owning it keeps every write conditioned and every deadline on this replica's own
//! clock:
//!
//! - every write of the Lease carries the resourceVersion the replica read, so of two replicas
//!   acting on the same Lease exactly one write lands (the other gets 409 and reads again);
//! - a standby takes a held lease only after it has seen the Lease unchanged for the holder's
//!   whole lease duration on its own monotonic clock; a released one (no holder) at once;
//! - a leader renews every [`retry_period`] and leads only until its last successful renewal's
//!   sending plus the renew deadline (duration − grace): one that cannot renew (partitioned,
//!   stalled) stops writing statuses before any standby could take its lease. The status
//!   writer asks [`Term`] at each write, so a replica resumed after a stall writes nothing even
//!   before this task has run again.
//!
//! A replica campaigns only once its caches have synced: a pod that has just started must not
//! win a released Lease from a warm standby and leave the writes waiting for its first list
//! (found on a real node, docs/architecture.md "Leadership"). Either may win once both are
//! synced.
//!
//! A lease that cannot be reached yet (its namespace missing, RBAC not bound) is retried with
//! a log line naming it, as the caches retry CRDs that are not installed yet. Each replica
//! writes the Lease under a field manager of its own ([`LeaseSettings::field_manager`]), so
//! the managed fields say which replica wrote last.
//!
//! What a lease cannot prevent: a status write already sent when the term ends may still land
//! (the writer cuts every write at the term's end, but cannot recall a request in flight), and
//! clocks that run at very different rates eat into the grace.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::{Api, Client};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};

mod election;
mod lease_store;

use election::{Election, Step};
use lease_store::{KubeLeases, LeaseStore, StoreError, Write};

/// How long a stopping replica may take to release the lease. 5 s: a release is one PATCH;
/// past this the standby takes over when the lease has gone unrenewed for its duration.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest pause between two rounds of the election (a leader's renewals, a standby's
/// reads). 2 s: client-go's retry period; a released lease is taken within it, for one GET
/// every two seconds per standby and a GET and a PATCH per leader.
pub const MAX_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// The lease to elect on.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// The Lease's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// This replica's identity, written as the holder.
    pub identity: String,
    /// Seconds a standby waits, having seen the Lease unchanged, before it takes the lease.
    pub duration_seconds: u64,
    /// Seconds between the moment a leader that cannot renew stops writing and the moment a
    /// standby may take its lease: the leader's renew deadline is the duration less this.
    pub grace_seconds: u64,
}

/// The longest identity whose field manager fits the apiserver's 128 characters.
pub const MAX_IDENTITY_LEN: usize = 128 - LEASE_FIELD_MANAGER_PREFIX.len();

/// [`crate::FIELD_MANAGER`], the status writes' manager, with the lease's suffix.
const LEASE_FIELD_MANAGER_PREFIX: &str = "capstan-controller-lease-";

impl LeaseSettings {
    /// The field manager of this replica's Lease writes: its own, so the Lease's managed fields
    /// say which replica wrote it last (and a server-side apply by another replica conflicts).
    pub fn field_manager(&self) -> String {
        format!("{LEASE_FIELD_MANAGER_PREFIX}{}", self.identity)
    }

    /// Refuses settings a replica cannot elect with, naming the flag: a grace that is 0 (a
    /// leader that cannot renew would write until the very moment a standby may take over) or
    /// not below the duration (it would have no time to renew in), and an identity too long for
    /// its field manager.
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
         --lease-duration-seconds ({duration}): a leader that cannot renew stops writing that \
         many seconds before a standby may take its lease"
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

/// Until when this replica may act as leader, on its own monotonic clock: what the status
/// writer asks before every write (a flag set by the election task could be stale after a
/// stall; the clock cannot).
#[derive(Clone, Debug, Default)]
pub struct Term(Arc<Mutex<Option<Instant>>>);

impl Term {
    /// The end of the term, if this replica leads now. A poisoned lock reads as not leading.
    pub fn until(&self) -> Option<Instant> {
        let until = self.0.lock().map(|until| *until).unwrap_or(None);
        until.filter(|until| Instant::now() < *until)
    }

    fn set(&self, until: Option<Instant>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = until;
    }
}

/// What the rest of the controller reads of the election: the term, and a flag that changes
/// when leadership is gained or lost.
struct Publish {
    term: Term,
    flag: watch::Sender<bool>,
}

impl Publish {
    fn set(&self, until: Option<Instant>) {
        self.term.set(until);
        let leads = until.is_some();
        self.flag
            .send_if_modified(|flag| std::mem::replace(flag, leads) != leads);
    }
}

/// The election's pace, from the settings.
#[derive(Clone, Debug)]
struct Timing {
    identity: String,
    duration: Duration,
    renew_deadline: Duration,
    retry: Duration,
}

impl Timing {
    fn of(settings: &LeaseSettings) -> Self {
        let duration = Duration::from_secs(settings.duration_seconds);
        let renew_deadline = Duration::from_secs(
            settings
                .duration_seconds
                .saturating_sub(settings.grace_seconds),
        );
        Self {
            identity: settings.identity.clone(),
            duration,
            renew_deadline,
            retry: retry_period(renew_deadline),
        }
    }
}

/// The pause between two rounds: a third of the renew deadline (a leader gets three tries
/// before its term ends), at most [`MAX_RETRY_PERIOD`], at least 100 ms.
pub fn retry_period(renew_deadline: Duration) -> Duration {
    (renew_deadline / 3).clamp(Duration::from_millis(100), MAX_RETRY_PERIOD)
}

/// Whether this replica leads, kept current by a background task until [`Leadership::stop`].
pub struct Leadership {
    leader: watch::Receiver<bool>,
    term: Term,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Leadership {
    /// Starts electing on `settings`' lease, in the background, once `synced` turns true (the
    /// replica's caches have synced): until then, and until the lease can be reached, this
    /// replica is not leader; each failed attempt is logged and retried.
    pub fn start(client: Client, settings: LeaseSettings, synced: watch::Receiver<bool>) -> Self {
        let store = KubeLeases {
            api: Api::namespaced(client, &settings.namespace),
            name: settings.name.clone(),
            identity: settings.identity.clone(),
            duration_seconds: i32::try_from(settings.duration_seconds).unwrap_or(i32::MAX),
            field_manager: settings.field_manager(),
        };
        let lease = format!("{}/{}", settings.namespace, settings.name);
        Self::start_on(store, Timing::of(&settings), lease, synced)
    }

    fn start_on(
        store: impl LeaseStore,
        timing: Timing,
        lease: String,
        synced: watch::Receiver<bool>,
    ) -> Self {
        let (flag, leader) = watch::channel(false);
        let term = Term::default();
        let publish = Publish {
            term: term.clone(),
            flag,
        };
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            if campaign_when_synced(synced, stopped.clone()).await {
                campaign(store, timing, lease, publish, stopped).await;
            }
        });
        Self {
            leader,
            term,
            stop,
            task,
        }
    }

    /// Whether this replica leads now, and every change.
    pub fn leader(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// The term this replica leads for, read at the moment of each status write.
    pub fn term(&self) -> Term {
        self.term.clone()
    }

    /// Gives leadership up: statuses stop at once, then the lease is released (when held) so a
    /// standby takes over within its retry period. Waits for the release at most
    /// [`RELEASE_TIMEOUT`] and says whether it finished.
    pub async fn stop(self) -> bool {
        let _ = self.stop.send(true);
        tokio::time::timeout(RELEASE_TIMEOUT, self.task)
            .await
            .is_ok()
    }
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

/// The election's rounds until `stop`, then the release.
async fn campaign(
    store: impl LeaseStore,
    timing: Timing,
    lease: String,
    publish: Publish,
    mut stop: watch::Receiver<bool>,
) {
    let mut election = Election::new(
        timing.identity.clone(),
        timing.duration,
        timing.renew_deadline,
    );
    loop {
        let round = Instant::now();
        // A round the apiserver does not answer is cut at the end of the term (or a renew
        // deadline from now when not leading): the flag must say the term is over when it is
        // (a write cut short may still have landed; the next round reads it).
        let limit = round + timing.renew_deadline;
        let cut = election
            .leading_until(round)
            .map_or(limit, |until| until.min(limit));
        let elected = elect_once(&store, &mut election, &lease);
        if tokio::time::timeout_at(cut, elected).await.is_err() {
            warn!(%lease, "the apiserver did not answer the election's round in time");
        }
        let until = election.leading_until(Instant::now());
        publish.set(until);
        // Wake at the end of the term too, to say at once that this replica leads no more.
        let next = round + timing.retry;
        let wake = until.map_or(next, |until| until.min(next));
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            () = tokio::time::sleep_until(wake) => {}
        }
    }
    // Statuses stop before the lease is given up, never after.
    publish.set(None);
    election.resign();
    if let Some(version) = election.held_version().map(str::to_owned) {
        match store.write(&version, Write::Release).await {
            Ok(_) => info!(%lease, "lease released"),
            Err(error) => warn!(
                %lease, %error,
                "lease not released; a standby takes it over once it has gone unrenewed for its duration"
            ),
        }
    }
}

/// One round: read the Lease, and write it if the election says so. A write refused because
/// another landed first is followed by one more read at once (it may show this replica's own
/// lease under a new version, or another holder to step down for).
async fn elect_once(store: &impl LeaseStore, election: &mut Election, lease: &str) {
    for _ in 0..2 {
        let step = match store.get().await {
            Ok(read) => election.observe(read, Instant::now()),
            Err(error) => return unreachable(lease, &error),
        };
        let sent = Instant::now();
        let (written, take) = match step {
            Step::Wait => return,
            Step::Create => (store.create().await, true),
            Step::Write { version, take } => {
                let write = if take {
                    Write::Take {
                        transitions: election.transitions().saturating_add(1),
                    }
                } else {
                    Write::Renew
                };
                (store.write(&version, write).await, take)
            }
        };
        match written {
            Ok(record) => {
                election.written(record, sent, Instant::now());
                if take {
                    info!(%lease, "took the lease");
                }
                return;
            }
            Err(StoreError::Conflict) => {}
            Err(error) => return unreachable(lease, &error),
        }
    }
}

fn unreachable(lease: &str, error: &StoreError) {
    warn!(
        %lease, %error,
        "leader election cannot reach its Lease (does the namespace exist, and may this account \
         get, create and patch Leases there?); retrying"
    );
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
mod replicas;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

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
    fn a_lease_without_a_holder_should_read_as_free() {
        let free = |lease: &Lease| lease_store::record(lease).holder.is_none();
        assert!(free(&lease(None)));
        assert!(free(&lease(Some(""))));
        assert!(free(&Lease::default()));
        assert!(!free(&lease(Some("replica-a"))));
    }
}
