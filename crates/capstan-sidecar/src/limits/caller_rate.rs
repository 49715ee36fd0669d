//! One caller's allowance of a built-in tool (`find_tools`, `report_capability_gap`): so many
//! calls a minute or an hour per caller, by the caller's digest (project and token), on the
//! same limiter as the providers' servers (governor's GCRA: the whole allowance may be spent at
//! once, then it refills evenly).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota};

use super::Caller;

/// Checks between sheddings of callers whose allowance is whole again.
const SHED_EVERY: u32 = 1024;

/// A per-caller allowance.
pub struct CallerRate {
    limiter: DefaultKeyedRateLimiter<Caller>,
    checks: AtomicU32,
}

impl CallerRate {
    /// `calls` a minute per caller; `None` for 0 (no limit).
    pub fn per_minute(calls: u32) -> Option<Self> {
        NonZeroU32::new(calls).map(|n| Self::with(Quota::per_minute(n)))
    }

    /// `calls` an hour per caller; `None` for 0 (no limit).
    pub fn per_hour(calls: u32) -> Option<Self> {
        NonZeroU32::new(calls).map(|n| Self::with(Quota::per_hour(n)))
    }

    fn with(quota: Quota) -> Self {
        Self {
            limiter: DefaultKeyedRateLimiter::keyed(quota),
            checks: AtomicU32::new(0),
        }
    }

    /// Spends one call of `caller`'s allowance, or says how long until it has one.
    pub fn check(&self, caller: &Caller) -> Result<(), Duration> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SHED_EVERY == SHED_EVERY - 1 {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
        }
        self.limiter
            .check_key(caller)
            .map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_should_spend_its_own_allowance_only() {
        let rate = CallerRate::per_minute(2).expect("a limit");
        let (alice, bob) = ([1; 32], [2; 32]);
        assert!(rate.check(&alice).is_ok() && rate.check(&alice).is_ok());
        let wait = rate.check(&alice).expect_err("over");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert!(rate.check(&bob).is_ok());
        assert!(CallerRate::per_hour(0).is_none());
    }
}
