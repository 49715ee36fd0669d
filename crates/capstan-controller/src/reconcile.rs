//! Reconcilers: a CapabilityBinding's `Accepted` condition from runtime validation, and every
//! RouteQualifier's `Accepted` condition from validation plus the set-level verdicts.
//!
//! Reconcilers compute desired statuses and hand them to the status queue; they never write.
//! (The `every-reconcile` write mode, kept for benchmarking against, writes directly instead.)

use std::sync::Arc;
use std::time::Duration;

use capstan_api::binding::first_wins_key;
use capstan_api::conditions::composed;
use capstan_api::validate::validate_binding_spec;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::Value;
use thiserror::Error;
use tokio::sync::watch;
use tracing::{instrument, warn};

use crate::cached::CachedBinding;
use crate::metrics::Metrics;
use crate::probe::Prober;
use crate::status::{
    ConditionStatus, DesiredCondition, DesiredStatus, Kind, ObjectKey, ObservedStatus,
    accepted_condition, accepted_with_warnings,
};
use crate::status_queue::{Sent, StatusSender};
use crate::summary::with_summary;
use crate::writer::write_status;

/// Errors of a reconcile.
#[derive(Debug, Error)]
pub enum Error {
    /// A direct status write failed (`every-reconcile` mode only).
    #[error("writing status of {key}: {source}")]
    Write {
        /// The object.
        key: ObjectKey,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The variant as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Write { .. } => "write",
        }
    }
}

/// How statuses reach the apiserver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WriteMode {
    /// Through the coalescing queue, only on a transition (the default, and the design).
    Transitions,
    /// Every reconcile writes its status directly: the naive controller, kept as the
    /// benchmark's baseline.
    EveryReconcile,
}

/// What reconcilers share.
pub struct Context {
    /// The apiserver client.
    pub client: Client,
    /// Where desired statuses go.
    pub queue: StatusSender<ObjectKey, DesiredStatus>,
    /// The controller's metrics.
    pub metrics: Metrics,
    /// How statuses are written.
    pub mode: WriteMode,
    /// How often every object is reconciled again, recovering anything dropped.
    pub resync: Duration,
    /// Runs Composed probes and keeps their findings; `None` when probing is off.
    pub probe: Option<Arc<Prober>>,
    /// True while this replica holds the Lease. The queue's worker checks it itself; the
    /// `every-reconcile` baseline writes only while it is true, so two baseline replicas
    /// never both write either.
    pub leader: watch::Receiver<bool>,
}

impl Context {
    /// Hands `desired` to the status queue (or, in the `every-reconcile` baseline, writes it).
    /// Returns whether the queue was full and dropped it.
    pub(crate) async fn submit(
        &self,
        key: ObjectKey,
        observed: &ObservedStatus,
        desired: DesiredStatus,
    ) -> Result<bool, Error> {
        match self.mode {
            WriteMode::Transitions => {
                let sent = self.queue.send(key, desired);
                self.metrics.sent(sent);
                self.metrics
                    .queue_depth
                    .set(i64::try_from(self.queue.len()).unwrap_or(i64::MAX));
                Ok(sent == Sent::Dropped)
            }
            WriteMode::EveryReconcile if !*self.leader.borrow() => Ok(false),
            WriteMode::EveryReconcile => write_status(&self.client, &key, observed, &desired)
                .await
                .map(|_| false)
                .map_err(|source| Error::Write { key, source }),
        }
    }

    /// The resync interval with up to 10% jitter, so objects created together do not resync
    /// together forever.
    pub(crate) fn resync_interval(&self, name: &str) -> Duration {
        self.resync + self.resync.mul_f64(spread(name) as f64 / 1000.0)
    }

    /// When an object whose update the full queue dropped is reconciled again: once the queue
    /// has likely drained — its depth at the rate the status worker has been taking keys
    /// (`status_queue.rs`; a thousand a second until it has measured one) —, at least a second
    /// and at most the resync, spread by name over up to twice that so the dropped objects do
    /// not all return at once. Without it, a burst larger than the queue (the initial sync of a
    /// cluster with more objects than `--status-queue-capacity`) would wait for the resync to
    /// converge; with a fixed rate faster than the apiserver's, each dropped object was
    /// reconciled again and again while the queue was still full (100,000 bindings: ~17 times
    /// each, docs/performance.md "The controller").
    pub(crate) fn retry_after_drop(&self, name: &str) -> Duration {
        let drain = self
            .queue
            .time_to_drain()
            .unwrap_or_else(|| {
                Duration::from_millis(u64::try_from(self.queue.len()).unwrap_or(u64::MAX))
            })
            .clamp(Duration::from_secs(1), self.resync);
        drain + drain.mul_f64(spread(name) as f64 / 100.0)
    }
}

/// A number from 0 to 99 fixed by `name`, to spread objects' timers.
fn spread(name: &str) -> u64 {
    name.bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        % 100
}

/// Reconciles one CapabilityBinding: validates its spec, starts a Composed probe when one is
/// due, and sends the `Accepted` and `Composed` conditions together with the summary they
/// imply (`summary.rs`: `Ready`, and `Stalled` or `Reconciling` while True; server-side apply
/// drops an owned condition left out).
#[instrument(skip_all, fields(
    otel.name = "reconcile CapabilityBinding",
    capstan.object.kind = "CapabilityBinding",
    capstan.object.name = %binding.name_any(),
    capstan.object.generation = binding.metadata.generation,
))]
pub async fn reconcile_binding(
    binding: Arc<CachedBinding>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let name = binding.name_any();
    let generation = binding.metadata.generation.unwrap_or_default();
    let spec = binding.spec();
    let errors = spec_errors(&spec);
    let accepted = if errors.is_empty() {
        accepted_with_warnings(&mapping_warnings(&spec))
    } else {
        accepted_condition(&errors)
    };
    ctx.metrics.reconciled(Kind::Binding, accepted.reason);
    let mut requeue = ctx.resync_interval(&name);
    let (composed, tools) = match &ctx.probe {
        None => (
            not_probed("probing is off (--probe-interval-seconds 0)"),
            None,
        ),
        Some(prober) if !errors.is_empty() => {
            prober.forget(&name);
            (
                DesiredCondition {
                    type_: composed::TYPE,
                    status: ConditionStatus::False,
                    reason: composed::NOT_ACCEPTED,
                    message: "the spec is not accepted; nothing of it is composed".into(),
                },
                Some(Vec::new()),
            )
        }
        Some(prober) => {
            let (composed, next_probe) =
                composed_by_probe(prober, &binding, spec, generation, &ctx.leader);
            requeue = requeue.min(next_probe);
            composed
        }
    };
    let desired = DesiredStatus {
        generation,
        conditions: with_summary(vec![accepted, composed], ctx.probe.is_some()),
        tools,
    };
    let dropped = ctx
        .submit(
            ObjectKey {
                kind: Kind::Binding,
                name: name.clone(),
            },
            &binding.status,
            desired,
        )
        .await?;
    if dropped {
        requeue = requeue.min(ctx.retry_after_drop(&name));
    }
    Ok(Action::requeue(requeue))
}

/// Runtime validation's errors of a binding spec, each `path: message`; logged when there are
/// any.
fn spec_errors(spec: &Value) -> Vec<String> {
    let errors: Vec<String> = validate_binding_spec(spec)
        .iter()
        .map(ToString::to_string)
        .collect();
    if !errors.is_empty() {
        warn!(errors = errors.len(), first = %errors[0], "binding is invalid");
    }
    errors
}

/// The warnings of a valid spec's capability mappings against the embedded catalog (mappings
/// that will not be routed, claims not counted); none when the spec does not decode.
fn mapping_warnings(spec: &Value) -> Vec<String> {
    serde_json::from_value(spec.clone())
        .map(|spec| {
            capstan_route::mapping_warnings(&spec, capstan_route::Catalog::embedded())
                .iter()
                .map(ToString::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The `Composed` condition and tools of a valid binding as the prober knows them, and how
/// soon the binding should be reconciled for its next probe. Starts the probe when it is due
/// and this replica leads (only the leader's findings are written).
fn composed_by_probe(
    prober: &Arc<Prober>,
    binding: &CachedBinding,
    spec: Value,
    generation: i64,
    leader: &watch::Receiver<bool>,
) -> ((DesiredCondition, Option<Vec<String>>), Duration) {
    let name = binding.name_any();
    let due = prober.next_probe(&name, generation);
    if due.is_zero() && *leader.borrow() {
        match serde_json::from_value(spec) {
            Ok(spec) => prober.probe(first_wins_key(&binding.metadata), generation, spec),
            Err(error) => warn!(%error, "an accepted spec does not decode; not probed"),
        }
    }
    let next_probe = if due.is_zero() {
        prober.interval(&name)
    } else {
        due
    };
    let composed = match prober.condition(&name, generation) {
        Some((condition, tools)) => (condition, Some(tools)),
        None => observed_composed(&binding.status, generation).unwrap_or_else(|| {
            (
                not_probed("the first probe of this generation is pending"),
                None,
            )
        }),
    };
    (composed, next_probe)
}

/// `Composed` unknown: no probe has spoken for this generation, for the reason in `message`.
fn not_probed(message: &str) -> DesiredCondition {
    DesiredCondition {
        type_: composed::TYPE,
        status: ConditionStatus::Unknown,
        reason: composed::NOT_PROBED,
        message: message.to_owned(),
    }
}

/// The `Composed` condition and tools already written for this generation, kept while this
/// replica has not probed yet (a new leader must not overwrite what the old one found with
/// "not probed").
fn observed_composed(
    observed: &ObservedStatus,
    generation: i64,
) -> Option<(DesiredCondition, Option<Vec<String>>)> {
    let condition = observed
        .conditions
        .iter()
        .find(|c| c.type_ == composed::TYPE && c.observed_generation == Some(generation))?;
    let (status, reason) = match (condition.status.as_str(), condition.reason.as_str()) {
        ("True", composed::COMPOSED) => (ConditionStatus::True, composed::COMPOSED),
        ("False", composed::COMPOSITION_DEGRADED) => {
            (ConditionStatus::False, composed::COMPOSITION_DEGRADED)
        }
        _ => return None,
    };
    Some((
        DesiredCondition {
            type_: composed::TYPE,
            status,
            reason,
            message: condition.message.clone(),
        },
        observed.tools.clone(),
    ))
}

/// Requeues a failed reconcile after a short pause.
pub fn binding_error_policy(_: Arc<CachedBinding>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(%error, "reconcile failed");
    ctx.metrics.reconciled(Kind::Binding, error.metric_label());
    Action::requeue(Duration::from_secs(5))
}
