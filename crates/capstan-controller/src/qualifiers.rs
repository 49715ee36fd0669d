//! RouteQualifiers are judged as a set: each one's `Accepted` condition follows from its own
//! validation and the verdicts of every valid qualifier together (the 32-qualifier limit,
//! contradictory merges). The derivation is pure; the loop re-runs it on any change to the set
//! (deletions included), each resync tick, and when this replica becomes leader.

use std::sync::Arc;

use capstan_api::RouteQualifierSpec;
use capstan_api::conditions::accepted;
use capstan_api::validate::{validate_qualifier_name, validate_qualifier_spec};
use capstan_route::{Qualifier, Verdict};
use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::watch;
use tracing::{instrument, warn};

use crate::cached::CachedQualifier;
use crate::leader::became_leader;
use crate::reconcile::{Context, Error};
use crate::status::{
    ConditionStatus, DesiredCondition, DesiredStatus, Kind, MAX_MESSAGE_LEN, ObjectKey,
    accepted_condition, bounded_message,
};
use crate::summary::with_summary;

/// The `Accepted` condition of every qualifier, in input order, from `(name, spec)` pairs:
/// validation errors first (`ValidationFailed`), then the set's verdicts for the valid ones
/// (`LimitExceeded`, `Conflict`, or `Validated`).
pub fn accepted_conditions(qualifiers: &[(String, Value)]) -> Vec<DesiredCondition> {
    let mut conditions: Vec<Option<DesiredCondition>> = vec![None; qualifiers.len()];
    let mut valid: Vec<(usize, &str, RouteQualifierSpec)> = Vec::new();
    for (index, (name, spec)) in qualifiers.iter().enumerate() {
        let mut errors: Vec<String> = validate_qualifier_spec(spec)
            .iter()
            .map(ToString::to_string)
            .collect();
        errors.extend(validate_qualifier_name(name).map(|e| e.to_string()));
        match serde_json::from_value::<RouteQualifierSpec>(spec.clone()) {
            Ok(parsed) if errors.is_empty() => valid.push((index, name, parsed)),
            Ok(_) => conditions[index] = Some(accepted_condition(&errors)),
            Err(error) => {
                if errors.is_empty() {
                    errors.push(format!("spec: cannot be decoded: {error}"));
                }
                conditions[index] = Some(accepted_condition(&errors));
            }
        }
    }
    let verdicts = capstan_route::verdicts(
        &valid
            .iter()
            .map(|(_, name, spec)| Qualifier { name, spec })
            .collect::<Vec<_>>(),
    );
    for (index, name, _) in &valid {
        conditions[*index] = Some(match verdicts.get(*name) {
            None | Some(Verdict::Accepted) => accepted_condition(&[]),
            Some(verdict @ Verdict::LimitExceeded { .. }) => DesiredCondition {
                type_: accepted::TYPE,
                status: ConditionStatus::False,
                reason: accepted::LIMIT_EXCEEDED,
                message: verdict.message(name),
            },
            Some(verdict @ Verdict::Conflict(_)) => DesiredCondition {
                type_: accepted::TYPE,
                status: ConditionStatus::False,
                reason: accepted::CONFLICT,
                message: bounded_message(&[verdict.message(name)], MAX_MESSAGE_LEN),
            },
        });
    }
    conditions
        .into_iter()
        .map(|c| c.unwrap_or_else(|| accepted_condition(&[])))
        .collect()
}

/// Evaluates every RouteQualifier together (a verdict depends on the whole set, deletions
/// included) and sends each one's `Accepted` condition with the summary it implies
/// (`summary.rs`).
#[instrument(skip_all, fields(
    otel.name = "reconcile RouteQualifiers",
    capstan.object.kind = "RouteQualifier",
    capstan.objects = qualifiers.len(),
))]
pub async fn reconcile_qualifiers(
    qualifiers: &[Arc<CachedQualifier>],
    ctx: &Context,
) -> Result<(), Error> {
    let inputs: Vec<(String, Value)> = qualifiers
        .iter()
        .map(|object| (object.name_any(), object.spec()))
        .collect();
    let conditions = accepted_conditions(&inputs);
    for (object, condition) in qualifiers.iter().zip(conditions) {
        ctx.metrics.reconciled(Kind::Qualifier, condition.reason);
        let status = DesiredStatus {
            generation: object.metadata.generation.unwrap_or_default(),
            conditions: with_summary(vec![condition], false),
            tools: None,
        };
        let key = ObjectKey {
            kind: Kind::Qualifier,
            name: object.name_any(),
        };
        // A dropped update comes back from the status queue when it has room, and wakes the
        // loop below for another pass.
        ctx.submit(key, &object.status, status).await?;
    }
    Ok(())
}

/// Re-evaluates every qualifier on any change to the set (deletions included), on each resync
/// tick, when this replica becomes leader, and when the status queue hands back a qualifier
/// whose update it dropped.
pub async fn run_qualifiers(
    events: impl futures::Stream<Item = Result<watcher::Event<CachedQualifier>, watcher::Error>>
    + Send
    + 'static,
    store: Store<CachedQualifier>,
    mut synced: watch::Receiver<bool>,
    released: Arc<tokio::sync::Notify>,
    ctx: Arc<Context>,
    leader: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()> + Send,
) {
    // The watch stream feeds the cache on its own task; a burst of events (the initial list,
    // a bulk apply) leaves one pending notification, so it is evaluated once.
    let changed = Arc::new(tokio::sync::Notify::new());
    let feeder = {
        let changed = changed.clone();
        tokio::spawn(events.for_each(move |event| {
            if let Err(error) = event {
                warn!(%error, "route qualifier watch");
            } else {
                changed.notify_one();
            }
            futures::future::ready(())
        }))
    };
    let changes = futures::stream::unfold(changed, |changed| async move {
        changed.notified().await;
        Some(((), changed))
    });
    let ticks = futures::stream::unfold(
        tokio::time::interval(ctx.resync),
        |mut interval| async move {
            interval.tick().await;
            Some(((), interval))
        },
    );
    // A qualifier whose update found the status queue full comes back when it has room.
    let released = futures::stream::unfold(released, |released| async move {
        released.notified().await;
        Some(((), released))
    });
    let triggers = futures::stream::select(
        futures::stream::select(changes, ticks),
        futures::stream::select(became_leader(leader), released),
    );
    let mut triggers = std::pin::pin!(triggers.take_until(shutdown));
    while triggers.next().await.is_some() {
        if synced.wait_for(|synced| *synced).await.is_err() {
            break;
        }
        if let Err(error) = reconcile_qualifiers(&store.state(), &ctx).await {
            warn!(%error, "qualifier reconcile");
        }
    }
    feeder.abort();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reasons(qualifiers: &[(&str, Value)]) -> Vec<(&'static str, &'static str)> {
        let owned: Vec<(String, Value)> = qualifiers
            .iter()
            .map(|(name, spec)| ((*name).to_owned(), spec.clone()))
            .collect();
        accepted_conditions(&owned)
            .iter()
            .map(|c| (c.status.as_str(), c.reason))
            .collect()
    }

    fn only(targets: &[&str]) -> Value {
        json!({ "capabilityId": "cap.web.search", "constraint": { "kind": "only", "targets": targets } })
    }

    #[test]
    fn a_valid_qualifier_alone_should_be_accepted() {
        assert_eq!(reasons(&[("a", only(&["exa"]))]), [("True", "Validated")]);
    }

    #[test]
    fn an_invalid_qualifier_should_fail_validation_and_not_join_the_verdicts() {
        let broken = json!({ "constraint": { "kind": "pinned", "target": "exa" } });
        assert_eq!(
            reasons(&[("a", broken), ("b", only(&["exa"]))]),
            [("False", "ValidationFailed"), ("True", "Validated")]
        );
    }

    #[test]
    fn contradictory_qualifiers_should_both_be_in_conflict_naming_each_other() {
        let owned = vec![
            ("a".to_owned(), only(&["exa"])),
            ("b".to_owned(), only(&["brave"])),
        ];
        let conditions = accepted_conditions(&owned);
        assert_eq!(
            conditions.iter().map(|c| c.reason).collect::<Vec<_>>(),
            ["Conflict", "Conflict"]
        );
        assert!(
            conditions[0].message.contains('b'),
            "{}",
            conditions[0].message
        );
        assert!(
            conditions[1].message.contains('a'),
            "{}",
            conditions[1].message
        );
    }

    #[test]
    fn qualifiers_beyond_the_limit_should_be_refused_in_name_order() {
        let owned: Vec<(String, Value)> = (0..33)
            .map(|i| (format!("q{i:02}"), json!({ "minQuality": 1000 })))
            .collect();
        let conditions = accepted_conditions(&owned);
        assert!(conditions[..32].iter().all(|c| c.reason == "Validated"));
        assert_eq!(conditions[32].reason, "LimitExceeded");
    }

    #[test]
    fn a_name_over_the_bound_should_fail_validation() {
        assert_eq!(
            reasons(&[(&"q".repeat(129), only(&["exa"]))]),
            [("False", "ValidationFailed")]
        );
    }
}
