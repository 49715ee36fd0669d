//! The election's decisions, without I/O: what a replica does with the Lease it has just read,
//! and until when it may act as leader — judged on its own monotonic clock, never by comparing
//! the timestamps another machine wrote with this one's.
//!
//! The rules are client-go's (`tools/leaderelection`):
//! - every write is conditioned on the resourceVersion the replica read, so of two replicas
//!   acting on the same Lease exactly one write lands;
//! - a standby takes a lease another holds only once it has seen that Lease unchanged (the same
//!   resourceVersion) for the holder's whole lease duration, on its own clock;
//! - a leader leads until its last successful renewal's *sending* plus the renew deadline (the
//!   lease duration less the grace), so it stops before any standby could take the lease: a
//!   standby reads the renewal only after it landed, and waits a whole duration from then.

use std::time::Duration;

use tokio::time::Instant;

/// What the election reads of a Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The Lease's resourceVersion: every write changes it, and every write of the election
    /// is conditioned on the one it read.
    pub version: String,
    /// Its holder; an empty holder is none (a released lease).
    pub holder: Option<String>,
    /// The lease duration its holder wrote (`leaseDurationSeconds`), if any.
    pub duration: Option<Duration>,
    /// How many times the lease changed hands (`leaseTransitions`).
    pub transitions: i32,
}

/// What to do with the Lease as just read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// There is no Lease: create it naming this replica (refused if another creates it first).
    Create,
    /// Write the Lease naming this replica, conditioned on `version`: a renewal of this
    /// replica's own lease, or (`take`) a take-over of a released or expired one.
    Write {
        /// The resourceVersion read, the write's precondition.
        version: String,
        /// Whether the lease changes hands (a new acquire time, one more transition).
        take: bool,
    },
    /// Another replica holds a lease this one has not yet seen unchanged for its whole
    /// duration: read it again later.
    Wait,
}

/// The Lease as last read, and when this replica first saw that version of it.
#[derive(Debug)]
struct Observed {
    record: Record,
    since: Instant,
}

/// One replica's view of the election.
#[derive(Debug)]
pub struct Election {
    identity: String,
    duration: Duration,
    renew_deadline: Duration,
    observed: Option<Observed>,
    leading_until: Option<Instant>,
}

impl Election {
    /// A replica named `identity` that writes leases of `duration` and leads at most
    /// `renew_deadline` past its last successful renewal (less than `duration`: the margin
    /// keeps it from leading once a standby may take over).
    pub fn new(identity: impl Into<String>, duration: Duration, renew_deadline: Duration) -> Self {
        Self {
            identity: identity.into(),
            duration,
            renew_deadline,
            observed: None,
            leading_until: None,
        }
    }

    /// Decides what to do with the Lease as read at `now` (`None`: there is none).
    pub fn observe(&mut self, lease: Option<Record>, now: Instant) -> Step {
        let Some(record) = lease else {
            // A Lease deleted under a leader names nobody: it leads no more.
            self.observed = None;
            self.leading_until = None;
            return Step::Create;
        };
        let since = match &self.observed {
            Some(observed) if observed.record.version == record.version => observed.since,
            _ => now,
        };
        let version = record.version.clone();
        let step = match record.holder.as_deref() {
            Some(holder) if holder == self.identity => Step::Write {
                version,
                take: false,
            },
            None => {
                self.leading_until = None;
                Step::Write {
                    version,
                    take: true,
                }
            }
            Some(_) => {
                // Another holds it now, whatever this replica's term said.
                self.leading_until = None;
                let duration = record.duration.unwrap_or(self.duration);
                if now.saturating_duration_since(since) >= duration {
                    Step::Write {
                        version,
                        take: true,
                    }
                } else {
                    Step::Wait
                }
            }
        };
        self.observed = Some(Observed { record, since });
        step
    }

    /// The Lease as this replica's write left it (the apiserver's answer, read at `now`), the
    /// write having been sent at `sent`: this replica leads until `sent` + the renew deadline.
    pub fn written(&mut self, record: Record, sent: Instant, now: Instant) {
        let ours = record.holder.as_deref() == Some(self.identity.as_str());
        self.observed = Some(Observed { record, since: now });
        self.leading_until = ours.then(|| sent + self.renew_deadline);
    }

    /// This replica gave the lease up (or is about to): it leads no more.
    pub fn resign(&mut self) {
        self.leading_until = None;
    }

    /// Until when this replica may act as leader, if it leads at `now`.
    pub fn leading_until(&self, now: Instant) -> Option<Instant> {
        self.leading_until.filter(|until| now < *until)
    }

    /// The resourceVersion of the Lease as last read, when it names this replica: the
    /// precondition of a release.
    pub fn held_version(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .filter(|o| o.record.holder.as_deref() == Some(self.identity.as_str()))
            .map(|o| o.record.version.as_str())
    }

    /// The transitions of the Lease as last read (a take writes one more).
    pub fn transitions(&self) -> i32 {
        self.observed.as_ref().map_or(0, |o| o.record.transitions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATION: Duration = Duration::from_secs(15);
    const DEADLINE: Duration = Duration::from_secs(10);

    fn record(version: &str, holder: Option<&str>) -> Record {
        Record {
            version: version.into(),
            holder: holder.map(str::to_owned),
            duration: Some(DURATION),
            transitions: 3,
        }
    }

    fn take(version: &str) -> Step {
        Step::Write {
            version: version.into(),
            take: true,
        }
    }

    fn renew(version: &str) -> Step {
        Step::Write {
            version: version.into(),
            take: false,
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_missing_lease_should_be_created() {
        let mut election = Election::new("b", DURATION, DEADLINE);
        assert_eq!(election.observe(None, Instant::now()), Step::Create);
    }

    #[test]
    fn a_released_lease_should_be_taken_at_once_on_the_version_read() {
        let mut election = Election::new("b", DURATION, DEADLINE);
        let step = election.observe(Some(record("7", None)), Instant::now());
        assert_eq!(step, take("7"));
    }

    /// Expiry is judged by how long this replica has seen the same version, never by the
    /// renewTime another machine's clock wrote.
    #[test]
    fn a_held_lease_should_be_taken_only_after_a_whole_duration_unchanged_on_this_clock() {
        let t0 = Instant::now();
        let mut election = Election::new("b", DURATION, DEADLINE);
        assert_eq!(
            election.observe(Some(record("7", Some("a"))), t0),
            Step::Wait
        );
        let almost = t0 + DURATION - Duration::from_millis(1);
        assert_eq!(
            election.observe(Some(record("7", Some("a"))), almost),
            Step::Wait
        );
        assert_eq!(
            election.observe(Some(record("7", Some("a"))), t0 + DURATION),
            take("7")
        );
    }

    #[test]
    fn a_renewal_seen_should_start_the_wait_again() {
        let t0 = Instant::now();
        let mut election = Election::new("b", DURATION, DEADLINE);
        election.observe(Some(record("7", Some("a"))), t0);
        assert_eq!(
            election.observe(Some(record("8", Some("a"))), t0 + secs(14)),
            Step::Wait
        );
        assert_eq!(
            election.observe(Some(record("8", Some("a"))), t0 + secs(28)),
            Step::Wait,
            "14 s after the renewal was first seen"
        );
        assert_eq!(
            election.observe(Some(record("8", Some("a"))), t0 + secs(29)),
            take("8")
        );
    }

    /// The holder's own duration is the promise it made: a standby configured longer or
    /// shorter waits what the holder wrote.
    #[test]
    fn the_wait_should_be_the_duration_the_holder_wrote() {
        let t0 = Instant::now();
        let mut election = Election::new("b", DURATION, DEADLINE);
        let short = Record {
            duration: Some(secs(4)),
            ..record("7", Some("a"))
        };
        election.observe(Some(short.clone()), t0);
        assert_eq!(election.observe(Some(short), t0 + secs(4)), take("7"));
        let mut election = Election::new("b", DURATION, DEADLINE);
        let unsaid = Record {
            duration: None,
            ..record("9", Some("a"))
        };
        election.observe(Some(unsaid.clone()), t0);
        assert_eq!(
            election.observe(Some(unsaid.clone()), t0 + secs(14)),
            Step::Wait
        );
        assert_eq!(election.observe(Some(unsaid), t0 + DURATION), take("9"));
    }

    #[test]
    fn a_leader_should_renew_on_the_version_read_and_lead_until_the_send_plus_the_deadline() {
        let t0 = Instant::now();
        let mut election = Election::new("a", DURATION, DEADLINE);
        assert_eq!(election.observe(Some(record("7", None)), t0), take("7"));
        assert_eq!(
            election.leading_until(t0),
            None,
            "not before the write lands"
        );
        let sent = t0 + Duration::from_millis(5);
        election.written(
            record("8", Some("a")),
            sent,
            sent + Duration::from_millis(40),
        );
        assert_eq!(election.leading_until(t0 + secs(1)), Some(sent + DEADLINE));
        assert_eq!(election.held_version(), Some("8"));
        assert_eq!(
            election.observe(Some(record("8", Some("a"))), t0 + secs(2)),
            renew("8")
        );
    }

    /// A leader whose renewals fail leads no longer than the deadline after its last good
    /// one was sent — and a standby that read that renewal cannot take over before the whole
    /// duration has passed: the margin between the two is the grace.
    #[test]
    fn a_leader_that_cannot_renew_should_stop_before_a_standby_may_take_over() {
        let t0 = Instant::now();
        let mut leader = Election::new("a", DURATION, DEADLINE);
        let mut standby = Election::new("b", DURATION, DEADLINE);
        leader.written(record("8", Some("a")), t0, t0);
        // The standby reads the renewal as early as it can: the moment it was sent.
        assert_eq!(
            standby.observe(Some(record("8", Some("a"))), t0),
            Step::Wait
        );
        let last_lead = t0 + DEADLINE - Duration::from_millis(1);
        assert!(leader.leading_until(last_lead).is_some());
        assert_eq!(leader.leading_until(t0 + DEADLINE), None);
        assert_eq!(
            standby.observe(Some(record("8", Some("a"))), last_lead),
            Step::Wait
        );
        let first_take = t0 + DURATION;
        assert_eq!(
            standby.observe(Some(record("8", Some("a"))), first_take),
            take("8")
        );
        assert!(first_take - (t0 + DEADLINE) == DURATION - DEADLINE);
    }

    #[test]
    fn a_leader_that_reads_another_holder_should_stop_at_once() {
        let t0 = Instant::now();
        let mut election = Election::new("a", DURATION, DEADLINE);
        election.written(record("8", Some("a")), t0, t0);
        assert_eq!(
            election.observe(Some(record("9", Some("b"))), t0 + secs(1)),
            Step::Wait
        );
        assert_eq!(election.leading_until(t0 + secs(1)), None);
        assert_eq!(election.held_version(), None, "nothing of ours to release");
    }

    #[test]
    fn a_deleted_lease_should_end_the_term() {
        let t0 = Instant::now();
        let mut election = Election::new("a", DURATION, DEADLINE);
        election.written(record("8", Some("a")), t0, t0);
        assert_eq!(election.observe(None, t0 + secs(1)), Step::Create);
        assert_eq!(election.leading_until(t0 + secs(1)), None);
    }

    /// A replica whose term ran out (it was stalled) while nobody took its lease may renew
    /// it: the write is conditioned on the version read, so it lands only if nobody wrote.
    #[test]
    fn a_lapsed_leader_still_named_should_renew_on_the_version_read() {
        let t0 = Instant::now();
        let mut election = Election::new("a", DURATION, DEADLINE);
        election.written(record("8", Some("a")), t0, t0);
        let later = t0 + secs(30);
        assert_eq!(election.leading_until(later), None);
        assert_eq!(
            election.observe(Some(record("8", Some("a"))), later),
            renew("8")
        );
    }

    #[test]
    fn an_answer_naming_another_should_not_start_a_term() {
        let t0 = Instant::now();
        let mut election = Election::new("a", DURATION, DEADLINE);
        election.written(record("9", Some("b")), t0, t0);
        assert_eq!(election.leading_until(t0), None);
        election.written(record("10", Some("a")), t0, t0);
        election.resign();
        assert_eq!(election.leading_until(t0), None);
        assert_eq!(election.transitions(), 3);
    }
}
