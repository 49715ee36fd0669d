//! How Capstan's watches (the sidecar's crd source, the controller's caches) wait between
//! tries after a list or watch failed — the apiserver restarting, a CRD not served yet.
//!
//! kube's default follows client-go's reflector: 0.8 s doubling to 30 s, and a jitter that
//! adds up to as much again, so once an outage has lasted ~25 s a watch sleeps 30–60 s
//! between tries. After an apiserver restart of that length (a control-plane upgrade; a loaded
//! machine) such a watch stays blind for up to a minute once the apiserver is back: the
//! controller writes no condition and a sidecar serves a stale snapshot that long. Here the
//! pause stops growing at [`LONGEST`], so a watch is back within 10 s of the apiserver. The
//! price is a try every 5–10 s per watch while the apiserver is down (a refused connection),
//! and a fleet's re-lists packed closer once it is back: every sidecar re-lists after a
//! restart either way (0.17–0.22 CPU-s of the apiserver each at 5,000 bindings), within
//! ~10 s here instead of ~60 s.
//! The lists are served from the apiserver's watch cache (`any_semantic`), the jitter spreads
//! them, and API Priority and Fairness answers an excess with 429s, which are retried here.

use std::time::Duration;

use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::ExponentialBackoff;

/// The pause after a first failure.
const FIRST: Duration = Duration::from_millis(500);

/// Where the pause stops doubling. The jitter adds up to as much again: at most 10 s.
const LONGEST: Duration = Duration::from_secs(5);

/// A watch that has gone this long without a failure starts again from [`FIRST`].
const RESET_AFTER: Duration = Duration::from_secs(60);

/// The backoff every Capstan watch uses (`.backoff(watch_backoff())` on a watcher stream).
pub fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(FIRST)
        .with_max_delay(LONGEST)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(exponential.into(), RESET_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pause of a long outage is bounded by twice the cap (the jitter's most), and the
    /// first is short: an apiserver back after any outage is tried again within 10 s.
    #[test]
    fn a_long_outage_should_be_retried_at_least_every_ten_seconds() {
        let mut backoff = watch_backoff();
        let first = backoff.next();
        assert!(
            first.is_some_and(|first| first <= Duration::from_secs(1)),
            "first pause {first:?}"
        );
        let pauses: Vec<Duration> = (0..1_000).map_while(|_| backoff.next()).collect();
        assert_eq!(pauses.len(), 1_000, "the backoff gave up");
        let longest = pauses.iter().max().copied().unwrap_or_default();
        assert!(
            longest <= Duration::from_secs(10),
            "a pause of {longest:?}: a restarted apiserver would wait that long for a watch"
        );
        // The cap is reached: the pauses do grow (a struggling apiserver is not hammered).
        assert!(
            pauses.iter().any(|pause| *pause >= LONGEST),
            "never reached {LONGEST:?}"
        );
    }
}
