//! Property: whatever sequence of desired statuses reconcilers send, the status worker writes
//! at most once per distinct transition, and what ends up written is the last desired status —
//! directly, or after a drop, once the resync sends it again.

use std::collections::HashMap;

use capstan_controller::status::{
    ConditionStatus, DesiredCondition, DesiredStatus, Kind, ObjectKey, ObservedStatus, apply_body,
    is_transition,
};
use capstan_controller::status_queue::{Sent, status_queue};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    Send {
        key: u8,
        generation: i64,
        accepted: bool,
    },
    /// The worker writes (or skips) one queued status.
    Work,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..3, 1i64..4, any::<bool>())
            .prop_map(|(key, generation, accepted)| Step::Send { key, generation, accepted }),
        2 => Just(Step::Work),
    ]
}

fn desired(generation: i64, accepted: bool) -> DesiredStatus {
    let (status, reason) = if accepted {
        (ConditionStatus::True, "Validated")
    } else {
        (ConditionStatus::False, "ValidationFailed")
    };
    DesiredStatus {
        generation,
        conditions: vec![DesiredCondition {
            type_: "Accepted",
            status,
            reason,
            message: String::new(),
        }],
        tools: None,
    }
}

fn key(k: u8) -> ObjectKey {
    ObjectKey {
        kind: Kind::Binding,
        name: format!("b{k}"),
    }
}

/// What a reader acts on.
fn projection(status: &DesiredStatus) -> (i64, bool) {
    (
        status.generation,
        status.conditions[0].status == ConditionStatus::True,
    )
}

/// What the cache shows a reader, read field by field rather than through the worker's own
/// transition check: observedGeneration, whether Accepted is "True", its reason, and the
/// condition's observedGeneration. `None` while nothing was written.
fn shown(have: &ObservedStatus) -> Option<(i64, bool, String, Option<i64>)> {
    let accepted = have.conditions.iter().find(|c| c.type_ == "Accepted")?;
    Some((
        have.observed_generation?,
        accepted.status == "True",
        accepted.reason.to_string(),
        accepted.observed_generation,
    ))
}

/// What a reader should see once `want` is written.
fn expected(want: &DesiredStatus) -> Option<(i64, bool, String, Option<i64>)> {
    let (generation, accepted) = projection(want);
    Some((
        generation,
        accepted,
        want.conditions[0].reason.to_owned(),
        Some(generation),
    ))
}

struct World {
    cache: HashMap<ObjectKey, ObservedStatus>,
    writes: HashMap<ObjectKey, usize>,
}

impl World {
    fn work(&mut self, key: ObjectKey, want: DesiredStatus) {
        let have = self.cache.entry(key.clone()).or_default();
        if is_transition(have, &want) {
            let now = Time(Timestamp::UNIX_EPOCH);
            let body = apply_body(&key, have, &want, &now);
            *have =
                serde_json::from_value(body["status"].clone()).unwrap_or_else(|e| panic!("{e}"));
            *self.writes.entry(key).or_default() += 1;
        }
    }
}

proptest! {
    #[test]
    fn writes_should_follow_transitions_and_end_at_the_last_desired_status(
        steps in proptest::collection::vec(step(), 0..80),
        capacity in 1usize..3,
    ) {
        let (tx, mut rx, _released) = status_queue(capacity);
        let mut world = World { cache: HashMap::new(), writes: HashMap::new() };
        let mut sent: HashMap<ObjectKey, Vec<(i64, bool)>> = HashMap::new();
        let mut last: HashMap<ObjectKey, DesiredStatus> = HashMap::new();
        let mut last_dropped: HashMap<ObjectKey, bool> = HashMap::new();

        for step in steps {
            match step {
                Step::Send { key: k, generation, accepted } => {
                    let want = desired(generation, accepted);
                    sent.entry(key(k)).or_default().push(projection(&want));
                    last.insert(key(k), want.clone());
                    let outcome = tx.send(key(k), want);
                    last_dropped.insert(key(k), outcome == Sent::Dropped);
                }
                Step::Work => {
                    if let Some((k, want)) = rx.try_recv() {
                        world.work(k, want);
                    }
                }
            }
        }
        while let Some((k, want)) = rx.try_recv() {
            world.work(k, want);
        }
        // Unless its last update was dropped, every object already shows its last desired status.
        for (k, want) in &last {
            if !last_dropped[k] {
                let have = world.cache.get(k).cloned().unwrap_or_default();
                prop_assert_eq!(shown(&have), expected(want), "{}: cache {:?}", k, have);
            }
        }
        // The periodic resync sends every object's current desired status again.
        for (k, want) in &last {
            tx.send(k.clone(), want.clone());
            while let Some((k, want)) = rx.try_recv() {
                world.work(k, want);
            }
        }

        for (k, want) in &last {
            let have = &world.cache[k];
            prop_assert_eq!(shown(have), expected(want), "{}: cache {:?}", k, have);
            let sequence = &sent[k];
            let transitions = 1 + sequence.windows(2).filter(|pair| pair[0] != pair[1]).count();
            let writes = world.writes.get(k).copied().unwrap_or(0);
            prop_assert!(writes <= transitions, "{k}: {writes} writes for {transitions} transitions in {sequence:?}");
            // Something was written: the cache started empty and now shows a status.
            prop_assert!(writes >= 1, "{k}: shown without a write");
        }
    }
}
