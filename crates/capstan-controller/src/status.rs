//! Desired statuses, the transition test that decides whether one is written, and the
//! server-side apply body that writes it.
//!
//! A status is written only when, compared with what the watch cache shows, some condition's
//! (type, status, reason, observedGeneration) changed or the tool list changed. A condition
//! whose status did not change keeps its `lastTransitionTime`.

use std::fmt;

use capstan_api::API_VERSION;
use capstan_api::conditions::accepted;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde_json::{Value, json};

mod observed;

pub use observed::{ObservedCondition, Text, messages};

/// The longest condition message written, in characters. Validation can report hundreds of
/// errors; a message that fits a `kubectl describe` screen with a count of what was left out
/// is more useful than the full list (which `capstanctl validate` prints).
pub const MAX_MESSAGE_LEN: usize = 1024;

/// Which of Capstan's kinds an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A CapabilityBinding.
    Binding,
    /// A RouteQualifier.
    Qualifier,
}

impl Kind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Binding => "CapabilityBinding",
            Self::Qualifier => "RouteQualifier",
        }
    }
}

/// One object: the status queue's key. Both kinds are cluster-scoped, so kind and name
/// identify it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The object's kind.
    pub kind: Kind,
    /// The object's name.
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.as_str(), self.name)
    }
}

/// A condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet.
    Unknown,
}

impl ConditionStatus {
    /// The status as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// One condition as the controller wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition {
    /// The condition type, e.g. `Accepted`.
    pub type_: &'static str,
    /// Its status.
    pub status: ConditionStatus,
    /// A CamelCase reason from `capstan_api::conditions`.
    pub reason: &'static str,
    /// A human-readable message, at most [`MAX_MESSAGE_LEN`] characters.
    pub message: String,
}

/// The whole status the controller owns for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredStatus {
    /// The `metadata.generation` this status describes.
    pub generation: i64,
    /// Every condition the controller owns on the object (server-side apply removes owned
    /// conditions left out).
    pub conditions: Vec<DesiredCondition>,
    /// The tools the binding contributes, when known; `None` leaves the tool fields alone.
    pub tools: Option<Vec<String>>,
}

/// The status as the watch cache shows it. Read leniently: a malformed status reads as empty,
/// and the next write replaces it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedStatus {
    /// The generation the last written status described.
    #[serde(default)]
    pub observed_generation: Option<i64>,
    /// The conditions present.
    #[serde(default, deserialize_with = "shared_conditions")]
    pub conditions: Vec<ObservedCondition>,
    /// The tool list present.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

impl ObservedStatus {
    /// Reads the `status` member of an object's JSON.
    pub fn from_object_data(data: &Value) -> Self {
        data.get("status")
            .and_then(|status| serde_json::from_value(status.clone()).ok())
            .unwrap_or_default()
    }

    fn condition(&self, type_: &str) -> Option<&ObservedCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Conditions read, those repeating a message sharing it.
fn shared_conditions<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<ObservedCondition>, D::Error> {
    let mut conditions = Vec::<ObservedCondition>::deserialize(deserializer)?;
    observed::share_messages(&mut conditions);
    Ok(conditions)
}

/// The `Accepted` condition of a spec with these validation errors (none: accepted).
pub fn accepted_condition(errors: &[String]) -> DesiredCondition {
    if errors.is_empty() {
        DesiredCondition {
            type_: accepted::TYPE,
            status: ConditionStatus::True,
            reason: accepted::VALIDATED,
            message: messages::SPEC_VALID.into(),
        }
    } else {
        DesiredCondition {
            type_: accepted::TYPE,
            status: ConditionStatus::False,
            reason: accepted::VALIDATION_FAILED,
            message: bounded_message(errors, MAX_MESSAGE_LEN),
        }
    }
}

/// The `Accepted` condition of a valid spec that carries warnings (a mapping onto a
/// capability this Capstan has no spec for, a feature outside a vocabulary): still accepted —
/// the rest of the binding is served — with the warnings in the message (docs/routing.md).
pub fn accepted_with_warnings(warnings: &[String]) -> DesiredCondition {
    let mut condition = accepted_condition(&[]);
    if !warnings.is_empty() {
        condition.message = bounded_message(
            &std::iter::once("the spec is valid, with warnings".to_owned())
                .chain(warnings.iter().map(|w| format!("warning: {w}")))
                .collect::<Vec<_>>(),
            MAX_MESSAGE_LEN,
        );
    }
    condition
}

/// The summary condition types (`summary.rs`), some written only while True: a write that
/// leaves one out removes it (server-side apply), which is a transition.
const SUMMARY_TYPES: [&str; 3] = [
    capstan_api::conditions::ready::TYPE,
    capstan_api::conditions::stalled::TYPE,
    capstan_api::conditions::reconciling::TYPE,
];

/// Whether writing `desired` changes anything a reader acts on (a condition's status, reason,
/// message or generation, or the tool list), compared with `observed`.
pub fn is_transition(observed: &ObservedStatus, desired: &DesiredStatus) -> bool {
    if observed.observed_generation != Some(desired.generation) {
        return true;
    }
    let condition_changed =
        desired
            .conditions
            .iter()
            .any(|want| match observed.condition(want.type_) {
                None => true,
                // Messages are compared too: every message is built from stable facts (the
                // Composed probe's sentences carry no ports or durations), so a changed message
                // is a changed problem.
                Some(have) => {
                    have.status != want.status.as_str()
                        || have.reason != want.reason
                        || have.message != want.message
                        || have.observed_generation != Some(desired.generation)
                }
            });
    // A summary condition written before and left out now (Stalled or Reconciling no longer
    // True) is removed by the write.
    let condition_removed = observed.conditions.iter().any(|have| {
        SUMMARY_TYPES.contains(&have.type_.as_str())
            && !desired
                .conditions
                .iter()
                .any(|want| want.type_ == have.type_)
    });
    let tools_changed = desired
        .tools
        .as_ref()
        .is_some_and(|tools| observed.tools.as_ref() != Some(tools));
    condition_changed || condition_removed || tools_changed
}

/// The server-side apply body writing `desired` onto the status of the object `key`.
pub fn apply_body(
    key: &ObjectKey,
    observed: &ObservedStatus,
    desired: &DesiredStatus,
    now: &Time,
) -> Value {
    let conditions: Vec<Value> = desired
        .conditions
        .iter()
        .map(|want| {
            let since = observed
                .condition(want.type_)
                .filter(|have| have.status == want.status.as_str())
                .map_or(now, |have| &have.last_transition_time);
            json!({
                "type": want.type_,
                "status": want.status.as_str(),
                "reason": want.reason,
                "message": want.message,
                "observedGeneration": desired.generation,
                "lastTransitionTime": since,
            })
        })
        .collect();
    let mut status = json!({
        "observedGeneration": desired.generation,
        "conditions": conditions,
    });
    if let Some(tools) = &desired.tools {
        status["tools"] = json!(tools);
        status["toolCount"] = json!(tools.len());
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": key.kind.as_str(),
        "metadata": { "name": key.name },
        "status": status,
    })
}

/// Joins error lines into one condition message of at most `max` characters, ending with a
/// count of the lines left out.
pub fn bounded_message(lines: &[String], max: usize) -> String {
    let mut message = String::new();
    for (index, line) in lines.iter().enumerate() {
        let separator = if message.is_empty() { "" } else { "; " };
        let left_after = lines.len() - index - 1;
        let suffix_room = if left_after > 0 { 32 } else { 0 };
        if message.chars().count() + separator.len() + line.chars().count() + suffix_room <= max {
            message.push_str(separator);
            message.push_str(line);
            continue;
        }
        if message.is_empty() {
            // Even the first line does not fit: keep its start, which names the field.
            let room = max.saturating_sub(32);
            message = line.chars().take(room).collect();
            message.push('…');
            if left_after > 0 {
                message.push_str(&format!(" (and {left_after} more)"));
            }
            return message;
        }
        message.push_str(&format!("; (and {} more)", lines.len() - index));
        return message;
    }
    message
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn accepted(status: ConditionStatus, reason: &'static str) -> DesiredCondition {
        DesiredCondition {
            type_: "Accepted",
            status,
            reason,
            message: String::new(),
        }
    }

    fn desired(generation: i64, condition: DesiredCondition) -> DesiredStatus {
        DesiredStatus {
            generation,
            conditions: vec![condition],
            tools: None,
        }
    }

    fn time(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap_or_else(|e| panic!("{e}")))
    }

    /// What the cache shows after `desired` was applied at `at`.
    fn observed_after(desired: &DesiredStatus, at: i64) -> ObservedStatus {
        let key = ObjectKey {
            kind: Kind::Binding,
            name: "b".into(),
        };
        let body = apply_body(&key, &ObservedStatus::default(), desired, &time(at));
        serde_json::from_value(body["status"].clone()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn first_status_should_be_a_transition() {
        let want = desired(1, accepted(ConditionStatus::True, "Validated"));
        assert!(is_transition(&ObservedStatus::default(), &want));
    }

    #[test]
    fn the_same_status_written_later_should_not_be_a_transition() {
        let want = desired(1, accepted(ConditionStatus::True, "Validated"));
        assert!(!is_transition(&observed_after(&want, 10), &want.clone()));
    }

    #[test]
    fn a_summary_condition_left_out_should_be_a_transition() {
        // Stalled was True and written; the same Accepted without it must be written again,
        // or the stale Stalled stays. Another manager's condition left out is not ours.
        let mut stalled = desired(1, accepted(ConditionStatus::True, "Validated"));
        stalled.conditions.push(DesiredCondition {
            type_: "Stalled",
            status: ConditionStatus::True,
            reason: "CompositionDegraded",
            message: String::new(),
        });
        let plain = desired(1, accepted(ConditionStatus::True, "Validated"));
        assert!(is_transition(&observed_after(&stalled, 10), &plain));
        let mut foreign = stalled.clone();
        foreign.conditions[1].type_ = "SomeoneElses";
        assert!(!is_transition(&observed_after(&foreign, 10), &plain));
    }

    #[test]
    fn a_changed_message_should_be_a_transition() {
        // Messages carry only stable facts (the problems of a degraded binding): a new message
        // is a new problem, and a reader must see it.
        let want = desired(1, accepted(ConditionStatus::True, "Validated"));
        let mut again = want.clone();
        again.conditions[0].message = "another problem".into();
        assert!(is_transition(&observed_after(&want, 10), &again));
    }

    #[test]
    fn generation_status_or_reason_change_should_be_a_transition() {
        let have = observed_after(
            &desired(1, accepted(ConditionStatus::True, "Validated")),
            10,
        );
        assert!(is_transition(
            &have,
            &desired(2, accepted(ConditionStatus::True, "Validated"))
        ));
        assert!(is_transition(
            &have,
            &desired(1, accepted(ConditionStatus::False, "ValidationFailed"))
        ));
        assert!(is_transition(
            &have,
            &desired(1, accepted(ConditionStatus::True, "Other"))
        ));
    }

    #[test]
    fn tool_list_change_should_be_a_transition() {
        let mut want = desired(1, accepted(ConditionStatus::True, "Validated"));
        want.tools = Some(vec!["s__a".into()]);
        let have = observed_after(&want, 10);
        assert!(!is_transition(&have, &want));
        want.tools = Some(vec!["s__a".into(), "s__b".into()]);
        assert!(is_transition(&have, &want));
    }

    #[test]
    fn unchanged_status_should_keep_last_transition_time() {
        let key = ObjectKey {
            kind: Kind::Binding,
            name: "b".into(),
        };
        let have = observed_after(
            &desired(1, accepted(ConditionStatus::True, "Validated")),
            10,
        );
        let next = desired(2, accepted(ConditionStatus::True, "Validated"));
        let body = apply_body(&key, &have, &next, &time(99));
        assert_eq!(
            body["status"]["conditions"][0]["lastTransitionTime"],
            json!(time(10))
        );
        assert_eq!(
            body["status"]["conditions"][0]["observedGeneration"],
            json!(2)
        );

        let flipped = desired(3, accepted(ConditionStatus::False, "ValidationFailed"));
        let body = apply_body(&key, &have, &flipped, &time(99));
        assert_eq!(
            body["status"]["conditions"][0]["lastTransitionTime"],
            json!(time(99))
        );
    }

    #[test]
    fn warnings_should_keep_a_spec_accepted_and_be_named() {
        let condition = accepted_with_warnings(&[
            "spec.tools.mcpServers[0].capabilities[0].capabilityId: no capability spec cap.x"
                .into(),
        ]);
        assert_eq!(condition.status, ConditionStatus::True);
        assert_eq!(condition.reason, accepted::VALIDATED);
        assert!(
            condition
                .message
                .starts_with("the spec is valid, with warnings; warning: spec.tools"),
            "{}",
            condition.message
        );
        assert_eq!(accepted_with_warnings(&[]), accepted_condition(&[]));
    }

    #[test]
    fn bounded_message_should_count_what_it_leaves_out() {
        let lines: Vec<String> = (0..100)
            .map(|i| format!("spec.skills[{i}].source: required"))
            .collect();
        let message = bounded_message(&lines, 200);
        assert!(message.chars().count() <= 200, "{message}");
        assert!(
            message.starts_with("spec.skills[0].source: required; spec.skills[1]"),
            "{message}"
        );
        let shown = message.matches(": required").count();
        assert!(
            message.ends_with(&format!("; (and {} more)", 100 - shown)),
            "{message}"
        );
    }

    #[test]
    fn bounded_message_should_cut_a_single_huge_line() {
        let lines = vec![format!("spec.skills[0].description: {}", "x".repeat(5000))];
        let message = bounded_message(&lines, MAX_MESSAGE_LEN);
        assert!(message.chars().count() <= MAX_MESSAGE_LEN);
        assert!(message.starts_with("spec.skills[0].description: xxx"));
    }

    #[test]
    fn short_messages_should_be_kept_whole() {
        let lines = vec!["a: required".to_owned(), "b: required".to_owned()];
        assert_eq!(
            bounded_message(&lines, MAX_MESSAGE_LEN),
            "a: required; b: required"
        );
    }
}
