#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

const A: Caller = [1; 32];
const B: Caller = [2; 32];

fn limits(per_caller: Option<u32>, concurrent: Option<u32>, total: Option<u32>) -> CallLimits {
    CallLimits {
        calls_per_minute_per_caller: per_caller,
        concurrent_calls_per_caller: concurrent,
        calls_per_minute: total,
    }
}

fn admit(gates: &CallGates, declared: &CallLimits, caller: Caller) -> Result<Admitted, Limited> {
    gates.admit("p", "b", "s", Some(declared), caller)
}

#[test]
fn a_declared_limit_should_beat_the_default_and_stay_under_the_ceiling() {
    let platform = PlatformLimits {
        defaults: limits(Some(30), Some(4), None),
        ceilings: limits(Some(100), None, Some(1000)),
    };
    assert_eq!(
        platform.effective(Some(&limits(Some(500), None, Some(10)))),
        limits(Some(100), Some(4), Some(10)),
        "500 is clamped to the ceiling, the omitted concurrency takes the default"
    );
    assert_eq!(
        platform.effective(None),
        limits(Some(30), Some(4), Some(1000)),
        "nothing declared: defaults, and a ceiling stands where there is no default"
    );
    assert_eq!(
        platform.clamped(&limits(Some(500), None, Some(10))),
        vec![("callsPerMinutePerCaller", 500, 100)]
    );
    assert_eq!(
        PlatformLimits::default().effective(None),
        CallLimits::default(),
        "no platform limits and none declared: unlimited"
    );
}

#[test]
fn the_call_after_a_callers_minute_is_spent_should_be_refused_with_a_wait() {
    let gates = CallGates::new(PlatformLimits::default());
    let declared = limits(Some(3), None, None);
    for _ in 0..3 {
        admit(&gates, &declared, A).map(drop).unwrap();
    }
    let refused = admit(&gates, &declared, A).err().unwrap();
    assert_eq!(refused.limit, Limit::CallsPerMinutePerCaller);
    assert_eq!(refused.value, 3);
    let wait = refused.retry_after.unwrap();
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(20),
        "one call comes back every 60/3 s: {wait:?}"
    );
    admit(&gates, &declared, B)
        .map(drop)
        .expect("another caller has its own minute");
}

#[test]
fn a_callers_refused_calls_should_not_spend_the_servers_total() {
    let gates = CallGates::new(PlatformLimits::default());
    let declared = limits(Some(2), None, Some(3));
    admit(&gates, &declared, A).map(drop).unwrap();
    admit(&gates, &declared, A).map(drop).unwrap();
    for _ in 0..5 {
        let refused = admit(&gates, &declared, A).err().unwrap();
        assert_eq!(refused.limit, Limit::CallsPerMinutePerCaller);
    }
    admit(&gates, &declared, B)
        .map(drop)
        .expect("the total's third call is still there");
    let refused = admit(&gates, &declared, B).err().unwrap();
    assert_eq!(refused.limit, Limit::CallsPerMinute);
    assert_eq!(refused.value, 3);
    assert!(refused.retry_after.is_some());
}

#[test]
fn a_concurrency_cap_should_hold_places_until_calls_end() {
    let gates = CallGates::new(PlatformLimits::default());
    let declared = limits(None, Some(2), None);
    let first = admit(&gates, &declared, A).unwrap();
    let second = admit(&gates, &declared, A).unwrap();
    let refused = admit(&gates, &declared, A).err().unwrap();
    assert_eq!(refused.limit, Limit::ConcurrentCallsPerCaller);
    assert_eq!(
        refused.retry_after, None,
        "no clock says when a running call ends"
    );
    let _other = admit(&gates, &declared, B).expect("another caller has its own places");
    drop(first);
    let _third = admit(&gates, &declared, A).expect("an ended call frees its place");
    drop(second);
}

#[test]
fn a_call_refused_by_a_rate_should_give_back_its_running_place() {
    let gates = CallGates::new(PlatformLimits::default());
    let declared = limits(Some(1), Some(1), None);
    drop(admit(&gates, &declared, A).unwrap());
    let refused = admit(&gates, &declared, A).err().unwrap();
    assert_eq!(refused.limit, Limit::CallsPerMinutePerCaller);
    let gate = lock(&gates.gates)
        .by_server
        .values()
        .next()
        .cloned()
        .unwrap();
    assert!(
        lock(&gate.running).is_empty(),
        "the refused call held no place"
    );
}

#[test]
fn changed_limits_should_start_afresh_and_unlimited_servers_hold_nothing() {
    let gates = CallGates::new(PlatformLimits::default());
    admit(&gates, &limits(Some(1), None, None), A)
        .map(drop)
        .unwrap();
    assert!(admit(&gates, &limits(Some(1), None, None), A).is_err());
    admit(&gates, &limits(Some(2), None, None), A)
        .map(drop)
        .expect("new limits, new minute");
    assert_eq!(gates.servers_held(), 1);
    let unlimited = CallGates::new(PlatformLimits::default());
    for _ in 0..100 {
        unlimited.admit("p", "b", "s", None, A).map(drop).unwrap();
    }
    assert_eq!(unlimited.servers_held(), 0);
}

#[test]
fn a_sweep_should_shed_only_idle_gates() {
    let gates = CallGates::new(PlatformLimits::default());
    let declared = limits(None, Some(1), None);
    let running = admit(&gates, &declared, A).unwrap();
    gates
        .admit("p", "b", "other", Some(&declared), A)
        .map(drop)
        .unwrap();
    let later = Instant::now() + SWEEP_EVERY + Duration::from_secs(1);
    lock(&gates.gates).sweep(later);
    assert_eq!(
        gates.servers_held(),
        1,
        "the gate with a running call stays"
    );
    assert!(admit(&gates, &declared, A).is_err(), "and still counts it");
    drop(running);
}

#[test]
fn the_refusal_should_name_the_server_the_limit_and_what_to_do() {
    let limited = Limited {
        limit: Limit::ConcurrentCallsPerCaller,
        value: 2,
        retry_after: None,
    };
    let message = limited.message("streamco", "streams");
    assert!(message.contains("streams"), "{message}");
    assert!(message.contains("binding streamco"), "{message}");
    assert!(message.contains("concurrent_calls_per_caller"), "{message}");
    assert!(
        message.contains("once one of your running calls has finished"),
        "{message}"
    );
}
