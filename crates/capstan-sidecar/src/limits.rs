//! Call limits: how many calls a provider's MCP server takes from this sidecar — per caller in
//! a minute, per caller at once, and from every caller together in a minute (docs/limits.md).
//! A call over a limit is refused before it reaches the server; a call admitted holds its
//! place among the caller's running calls until its [`Admitted`] drops.
//!
//! Each sidecar counts its own calls: a server behind N assistant pods takes up to N times
//! its limits. A shared count would need state shared between sidecars, which none has.

pub mod caller_rate;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use capstan_api::CallLimits;
use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota};
use tracing::warn;

#[cfg(test)]
mod tests;

/// Who a limit counts: the digest of project and token a task is keyed by
/// (`caller/identity.rs`, `Identity::fingerprint`).
pub type Caller = [u8; 32];

/// How often idle limiter state is shed; a per-minute bucket left alone this long is full
/// again, so shedding it changes no decision.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The platform's say over every binding's limits: defaults where a server declares none, and
/// ceilings no declaration exceeds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlatformLimits {
    /// Each limit a server that declares none gets; none: unlimited.
    pub defaults: CallLimits,
    /// The most any server gets of each limit, declared or default; none: no ceiling.
    pub ceilings: CallLimits,
}

impl PlatformLimits {
    /// The limits that apply to a server declaring `declared`: each the binding's, else the
    /// platform's default, never above the platform's ceiling.
    pub fn effective(&self, declared: Option<&CallLimits>) -> CallLimits {
        let declared = declared.copied().unwrap_or_default();
        let pick = |declared: Option<u32>, default: Option<u32>, ceiling: Option<u32>| match (
            declared.or(default),
            ceiling,
        ) {
            (Some(value), Some(ceiling)) => Some(value.min(ceiling)),
            (None, ceiling) => ceiling,
            (value, None) => value,
        };
        CallLimits {
            calls_per_minute_per_caller: pick(
                declared.calls_per_minute_per_caller,
                self.defaults.calls_per_minute_per_caller,
                self.ceilings.calls_per_minute_per_caller,
            ),
            concurrent_calls_per_caller: pick(
                declared.concurrent_calls_per_caller,
                self.defaults.concurrent_calls_per_caller,
                self.ceilings.concurrent_calls_per_caller,
            ),
            calls_per_minute: pick(
                declared.calls_per_minute,
                self.defaults.calls_per_minute,
                self.ceilings.calls_per_minute,
            ),
        }
    }

    /// Whether a declared value was lowered to a ceiling: said at composition, so a provider
    /// learns its limit is not the one it wrote.
    pub fn clamped(&self, declared: &CallLimits) -> Vec<(&'static str, u32, u32)> {
        let over = |name, declared: Option<u32>, ceiling: Option<u32>| match (declared, ceiling) {
            (Some(declared), Some(ceiling)) if declared > ceiling => {
                Some((name, declared, ceiling))
            }
            _ => None,
        };
        [
            over(
                "callsPerMinutePerCaller",
                declared.calls_per_minute_per_caller,
                self.ceilings.calls_per_minute_per_caller,
            ),
            over(
                "concurrentCallsPerCaller",
                declared.concurrent_calls_per_caller,
                self.ceilings.concurrent_calls_per_caller,
            ),
            over(
                "callsPerMinute",
                declared.calls_per_minute,
                self.ceilings.calls_per_minute,
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// Which limit refused a call: the `code` of its `rate_limited` error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `callsPerMinutePerCaller`.
    CallsPerMinutePerCaller,
    /// `concurrentCallsPerCaller`.
    ConcurrentCallsPerCaller,
    /// `callsPerMinute`, the server's total.
    CallsPerMinute,
}

impl Limit {
    /// The limit as errors and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CallsPerMinutePerCaller => "calls_per_minute_per_caller",
            Self::ConcurrentCallsPerCaller => "concurrent_calls_per_caller",
            Self::CallsPerMinute => "calls_per_minute",
        }
    }
}

/// A call refused by a limit: which, its value, and when a retry may pass (none for a
/// concurrency cap: when one of the caller's running calls ends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limited {
    /// The limit reached.
    pub limit: Limit,
    /// Its value.
    pub value: u32,
    /// The wait before a call may pass this limit again.
    pub retry_after: Option<Duration>,
}

impl Limited {
    /// What the caller is told: the limit, the server, and what to do next.
    pub fn message(&self, binding: &str, server: &str) -> String {
        let value = self.value;
        let (what, next) = match self.limit {
            Limit::CallsPerMinutePerCaller => (
                format!("{value} calls a minute from one caller"),
                "call again after retryAfterMs",
            ),
            Limit::ConcurrentCallsPerCaller => (
                format!("{value} calls running at once for one caller"),
                "call again once one of your running calls has finished",
            ),
            Limit::CallsPerMinute => (
                format!("{value} calls a minute from every caller together"),
                "call again after retryAfterMs",
            ),
        };
        format!(
            "the MCP server {server} of binding {binding} takes {what} (its limit {}); the call \
             did not reach it: {next}",
            self.limit.as_str()
        )
    }
}

/// Where the limits of one server are kept.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ServerKey {
    project: String,
    binding: String,
    server: String,
}

/// The limiters of one server under one set of effective limits.
struct Gate {
    limits: CallLimits,
    per_caller: Option<DefaultKeyedRateLimiter<Caller>>,
    total: Option<DefaultDirectRateLimiter>,
    /// Calls running per caller, only with a concurrency cap; a caller with none is removed.
    running: Mutex<HashMap<Caller, u32>>,
    /// When a call last asked to pass, for shedding idle gates.
    last_used: Mutex<Instant>,
}

impl Gate {
    fn new(limits: CallLimits, now: Instant) -> Self {
        let quota =
            |per_minute: Option<u32>| per_minute.and_then(NonZeroU32::new).map(Quota::per_minute);
        Self {
            limits,
            per_caller: quota(limits.calls_per_minute_per_caller)
                .map(DefaultKeyedRateLimiter::keyed),
            total: quota(limits.calls_per_minute).map(DefaultDirectRateLimiter::direct),
            running: Mutex::default(),
            last_used: Mutex::new(now),
        }
    }

    /// Lets one call of `caller` pass, or says which limit refuses it. The concurrency cap is
    /// asked first, as it spends nothing; then the caller's own rate, then the server's total,
    /// so a caller over its own limit never spends a cell of the total that others share.
    fn pass(self: &Arc<Self>, caller: Caller) -> Result<Admitted, Limited> {
        *lock(&self.last_used) = Instant::now();
        let mut admitted = Admitted {
            running: None,
            caller,
            gated: true,
        };
        if let Some(cap) = self.limits.concurrent_calls_per_caller {
            let mut running = lock(&self.running);
            let count = running.entry(caller).or_default();
            if *count >= cap {
                return Err(Limited {
                    limit: Limit::ConcurrentCallsPerCaller,
                    value: cap,
                    retry_after: None,
                });
            }
            *count += 1;
            admitted.running = Some(Arc::clone(self));
        }
        if let Some(limiter) = &self.per_caller
            && let Err(not_until) = limiter.check_key(&caller)
        {
            return Err(Limited {
                limit: Limit::CallsPerMinutePerCaller,
                value: self.limits.calls_per_minute_per_caller.unwrap_or_default(),
                retry_after: Some(not_until.wait_time_from(limiter.clock().now())),
            });
        }
        if let Some(limiter) = &self.total
            && let Err(not_until) = limiter.check()
        {
            return Err(Limited {
                limit: Limit::CallsPerMinute,
                value: self.limits.calls_per_minute.unwrap_or_default(),
                retry_after: Some(not_until.wait_time_from(limiter.clock().now())),
            });
        }
        Ok(admitted)
    }

    /// Whether nothing here would change a decision: no call running, and idle for a full
    /// minute, so every bucket is full again.
    fn idle(self: &Arc<Self>, now: Instant) -> bool {
        Arc::strong_count(self) == 1 && now.duration_since(*lock(&self.last_used)) >= SWEEP_EVERY
    }
}

/// A call allowed through its server's limits; dropping it ends the call's place among the
/// caller's running calls.
#[must_use = "the call holds its place among the caller's running calls while this lives"]
pub struct Admitted {
    running: Option<Arc<Gate>>,
    caller: Caller,
    /// Whether any limit applied to the call.
    gated: bool,
}

impl Admitted {
    /// Whether any limit applied: false for a server without limits.
    pub fn gated(&self) -> bool {
        self.gated
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let Some(gate) = self.running.take() else {
            return;
        };
        let mut running = lock(&gate.running);
        if let Some(count) = running.get_mut(&self.caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                running.remove(&self.caller);
            }
        }
    }
}

/// The sidecar's call limits: one gate per (project, binding, server) with limits, made on
/// the first call and replaced when the server's effective limits change.
pub struct CallGates {
    platform: PlatformLimits,
    gates: Mutex<Gates>,
}

struct Gates {
    by_server: HashMap<ServerKey, Arc<Gate>>,
    next_sweep: Instant,
}

impl CallGates {
    /// Gates under the platform's defaults and ceilings.
    pub fn new(platform: PlatformLimits) -> Self {
        Self {
            platform,
            gates: Mutex::new(Gates {
                by_server: HashMap::new(),
                next_sweep: Instant::now() + SWEEP_EVERY,
            }),
        }
    }

    /// Lets one call of `caller` to `server` of `binding` in `project` pass the limits that
    /// apply to it (`declared` by the binding, under the platform's), or says which refuses it.
    pub fn admit(
        &self,
        project: &str,
        binding: &str,
        server: &str,
        declared: Option<&CallLimits>,
        caller: Caller,
    ) -> Result<Admitted, Limited> {
        let limits = self.platform.effective(declared);
        if limits == CallLimits::default() {
            return Ok(Admitted {
                running: None,
                caller,
                gated: false,
            });
        }
        let gate = {
            let now = Instant::now();
            let mut gates = lock(&self.gates);
            if now >= gates.next_sweep {
                gates.sweep(now);
            }
            let key = ServerKey {
                project: project.to_owned(),
                binding: binding.to_owned(),
                server: server.to_owned(),
            };
            let gate = match gates.by_server.entry(key) {
                Entry::Occupied(held) if held.get().limits == limits => held.into_mut(),
                // New limits start afresh; calls running under the old gate release their
                // places there.
                entry => {
                    self.say_clamped(binding, server, declared);
                    let gate = Arc::new(Gate::new(limits, now));
                    match entry {
                        Entry::Occupied(mut held) => {
                            held.insert(gate);
                            held.into_mut()
                        }
                        Entry::Vacant(place) => place.insert(gate),
                    }
                }
            };
            Arc::clone(gate)
        };
        gate.pass(caller)
    }

    /// Logs each declared limit the platform's ceiling lowered, once per new gate: the
    /// provider's team learns the limit in force is not the one it wrote.
    fn say_clamped(&self, binding: &str, server: &str, declared: Option<&CallLimits>) {
        for (limit, declared, ceiling) in declared
            .map(|d| self.platform.clamped(d))
            .unwrap_or_default()
        {
            warn!(
                binding,
                server,
                limit,
                declared,
                ceiling,
                "a binding's call limit is above the platform's ceiling; the ceiling applies"
            );
        }
    }

    /// Servers with limiter state now (for the tests of shedding).
    #[cfg(test)]
    fn servers_held(&self) -> usize {
        lock(&self.gates).by_server.len()
    }
}

impl Gates {
    /// Sheds what no longer changes a decision: idle gates whole, and in the rest the callers
    /// whose buckets are full again.
    fn sweep(&mut self, now: Instant) {
        self.by_server.retain(|_, gate| !gate.idle(now));
        for gate in self.by_server.values() {
            if let Some(limiter) = &gate.per_caller {
                limiter.retain_recent();
                limiter.shrink_to_fit();
            }
        }
        self.next_sweep = now + SWEEP_EVERY;
    }
}

/// A lock whose holder cannot leave its data half-changed: every critical section here is a
/// few assignments, so a poisoned lock's data is still whole.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
