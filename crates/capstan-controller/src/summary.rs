//! The conditions GitOps tools read: `Ready` always, `Stalled` and `Reconciling` only while
//! True (kstatus reads an absent one as False, and Flux and kpt decide from them whether an
//! apply succeeded). They are derived from `Accepted` and `Composed` alone, so they change
//! exactly when those do and status writes stay one per transition.
//!
//! | Accepted | Composed | Ready | Stalled | Reconciling | kstatus |
//! |---|---|---|---|---|---|
//! | False (any reason) | – | False, same reason | True, same reason | – | Failed |
//! | True | True | True `Ready` | – | – | Current |
//! | True | Unknown `NotProbed`, probe on | False `NotProbed` | – | True `NotProbed` | InProgress |
//! | True | Unknown, probe off | True `Ready` | – | – | Current |
//! | True | False `CompositionDegraded` | False, same reason | True, same reason | – | Failed |
//! | True (a qualifier: no Composed) | – | True `Ready` | – | – | Current |
//!
//! A degraded binding is `Failed`, not `InProgress`: the probe has concluded (a flip waits
//! for a second probe), and what it names — an endpoint outside the allow-list, a provider
//! down, a missing tool, a taken name, a broken pin — needs someone to act, or at least to
//! know; a GitOps tool should fail its health check with that message now rather than wait
//! out its timeout. The next probe that finds the binding whole clears `Stalled`.

use capstan_api::conditions::{accepted, composed, ready, reconciling, stalled};

use crate::status::{ConditionStatus, DesiredCondition, messages};

/// `conditions` (an object's `Accepted`, and a binding's `Composed`) followed by the summary
/// conditions they imply; `probing` says whether the Composed probe is on.
pub fn with_summary(mut conditions: Vec<DesiredCondition>, probing: bool) -> Vec<DesiredCondition> {
    let summary = summarize(&conditions, probing);
    conditions.extend(summary);
    conditions
}

fn summarize(conditions: &[DesiredCondition], probing: bool) -> Vec<DesiredCondition> {
    let find = |type_: &str| conditions.iter().find(|c| c.type_ == type_);
    let Some(accepted) = find(accepted::TYPE) else {
        return Vec::new();
    };
    if accepted.status != ConditionStatus::True {
        return stalled_by(accepted);
    }
    match find(composed::TYPE) {
        None => vec![is_ready(messages::TAKES_EFFECT)],
        Some(composed) => match composed.status {
            ConditionStatus::True => vec![is_ready(messages::ACCEPTED_AND_COMPOSED)],
            ConditionStatus::False => stalled_by(composed),
            ConditionStatus::Unknown if probing => vec![
                like(ready::TYPE, ConditionStatus::False, composed),
                like(reconciling::TYPE, ConditionStatus::True, composed),
            ],
            ConditionStatus::Unknown => vec![is_ready(messages::NOT_PROBED)],
        },
    }
}

/// Not ready, and stalled, for the reason `cause` gives.
fn stalled_by(cause: &DesiredCondition) -> Vec<DesiredCondition> {
    vec![
        like(ready::TYPE, ConditionStatus::False, cause),
        like(stalled::TYPE, ConditionStatus::True, cause),
    ]
}

fn is_ready(message: &str) -> DesiredCondition {
    DesiredCondition {
        type_: ready::TYPE,
        status: ConditionStatus::True,
        reason: ready::READY,
        message: message.to_owned(),
    }
}

/// A condition of `type_` with `cause`'s reason and message.
fn like(
    type_: &'static str,
    status: ConditionStatus,
    cause: &DesiredCondition,
) -> DesiredCondition {
    DesiredCondition {
        type_,
        status,
        reason: cause.reason,
        message: cause.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(
        type_: &'static str,
        status: ConditionStatus,
        reason: &'static str,
    ) -> DesiredCondition {
        DesiredCondition {
            type_,
            status,
            reason,
            message: format!("{type_} {reason}"),
        }
    }

    /// (type, status, reason) of each summary condition, in order.
    fn summary(
        conditions: &[DesiredCondition],
        probing: bool,
    ) -> Vec<(&'static str, &'static str, &'static str)> {
        with_summary(conditions.to_vec(), probing)
            .into_iter()
            .skip(conditions.len())
            .map(|c| (c.type_, c.status.as_str(), c.reason))
            .collect()
    }

    #[test]
    fn a_refused_spec_should_be_stalled_and_not_ready_with_its_reason_and_message() {
        let refused = [
            condition(
                accepted::TYPE,
                ConditionStatus::False,
                accepted::VALIDATION_FAILED,
            ),
            condition(
                composed::TYPE,
                ConditionStatus::False,
                composed::NOT_ACCEPTED,
            ),
        ];
        assert_eq!(
            summary(&refused, true),
            [
                ("Ready", "False", "ValidationFailed"),
                ("Stalled", "True", "ValidationFailed")
            ]
        );
        let written = with_summary(refused.to_vec(), true);
        assert!(
            written[2..]
                .iter()
                .all(|c| c.message == "Accepted ValidationFailed")
        );
        let conflict = [condition(
            accepted::TYPE,
            ConditionStatus::False,
            accepted::CONFLICT,
        )];
        assert_eq!(
            summary(&conflict, true),
            [
                ("Ready", "False", "Conflict"),
                ("Stalled", "True", "Conflict")
            ]
        );
    }

    #[test]
    fn an_accepted_composed_binding_or_accepted_qualifier_should_be_ready_alone() {
        let composed_binding = [
            condition(accepted::TYPE, ConditionStatus::True, accepted::VALIDATED),
            condition(composed::TYPE, ConditionStatus::True, composed::COMPOSED),
        ];
        assert_eq!(
            summary(&composed_binding, true),
            [("Ready", "True", "Ready")]
        );
        let qualifier = [condition(
            accepted::TYPE,
            ConditionStatus::True,
            accepted::VALIDATED,
        )];
        assert_eq!(summary(&qualifier, true), [("Ready", "True", "Ready")]);
    }

    #[test]
    fn a_pending_probe_should_be_reconciling_unless_probing_is_off() {
        let pending = [
            condition(accepted::TYPE, ConditionStatus::True, accepted::VALIDATED),
            condition(
                composed::TYPE,
                ConditionStatus::Unknown,
                composed::NOT_PROBED,
            ),
        ];
        assert_eq!(
            summary(&pending, true),
            [
                ("Ready", "False", "NotProbed"),
                ("Reconciling", "True", "NotProbed")
            ]
        );
        assert_eq!(summary(&pending, false), [("Ready", "True", "Ready")]);
    }

    #[test]
    fn a_degraded_binding_should_be_stalled_never_ready() {
        let degraded = [
            condition(accepted::TYPE, ConditionStatus::True, accepted::VALIDATED),
            condition(
                composed::TYPE,
                ConditionStatus::False,
                composed::COMPOSITION_DEGRADED,
            ),
        ];
        assert_eq!(
            summary(&degraded, true),
            [
                ("Ready", "False", "CompositionDegraded"),
                ("Stalled", "True", "CompositionDegraded")
            ]
        );
    }

    #[test]
    fn no_summary_without_accepted() {
        assert!(summary(&[], true).is_empty());
    }
}
