//! Reconcilers: a CapabilityBinding's `Accepted` condition from runtime validation, and every
//! RouteQualifier's `Accepted` condition from validation plus the set-level verdicts.
//!
//! Reconcilers compute desired statuses and hand them to the status queue; they never write
//! (unless a [`DirectWriter`] is plugged in: see there).

use std::sync::Arc;
use std::time::Duration;

use capstan_api::binding::first_wins_key;
use capstan_api::conditions::{accepted, composed};
use capstan_api::validate::validate_binding_spec;
use futures::future::BoxFuture;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::Value;
use thiserror::Error;
use tokio::sync::watch;
use tracing::{debug, instrument, warn};

use crate::cached::CachedBinding;
use crate::leader::Term;
use crate::metrics::Metrics;
use crate::probe::Prober;
use crate::status::{
    ConditionStatus, DesiredCondition, DesiredStatus, Kind, ObjectKey, ObservedStatus,
    accepted_condition, accepted_with_warnings, messages,
};
use crate::status_queue::{Sent, StatusSender};
use crate::summary::with_summary;

/// Errors of a reconcile.
#[derive(Debug, Error)]
pub enum Error {
    /// A [`DirectWriter`]'s write failed.
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

/// Writes every desired status as a reconcile computes it, bypassing the coalescing queue.
///
/// Capstan's controller never uses one: it is the seam through which the controller benchmark
/// runs its naive baseline (`e2e/src/bin/naive_controller.rs`) as the same controller, so that
/// the two differ only in how statuses reach the apiserver. Called only while this replica
/// leads, as the queue's worker writes only then.
pub trait DirectWriter: Send + Sync {
    /// Writes `desired` onto `key`'s status, `observed` being what the cache held.
    fn write<'a>(
        &'a self,
        client: &'a Client,
        key: &'a ObjectKey,
        observed: &'a ObservedStatus,
        desired: &'a DesiredStatus,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// Where reconcilers' desired statuses go.
#[derive(Clone)]
pub(crate) enum StatusPath {
    /// The coalescing queue, written only on a transition: the design.
    Queue,
    /// A writer of every status, for a benchmark's baseline ([`DirectWriter`]).
    Direct(Arc<dyn DirectWriter>),
}

/// What reconcilers share.
pub struct Context {
    /// The apiserver client.
    pub client: Client,
    /// Where desired statuses go.
    pub queue: StatusSender<ObjectKey, DesiredStatus>,
    /// The controller's metrics.
    pub metrics: Metrics,
    /// Where desired statuses go: the queue, or a benchmark's direct writer.
    pub(crate) path: StatusPath,
    /// How often every object is reconciled again, recovering anything dropped.
    pub resync: Duration,
    /// Runs Composed probes and keeps their findings; `None` when probing is off.
    pub probe: Option<Arc<Prober>>,
    /// True while this replica holds the Lease. The queue's worker checks it itself; a
    /// [`DirectWriter`] is called only while it is true, so two such replicas never both
    /// write either.
    pub leader: watch::Receiver<bool>,
    /// Until when this replica leads, on its own clock: what the queue's worker asks before
    /// each write (the flag above may be stale after a stall; the term's end is not).
    pub term: Term,
}

impl Context {
    /// Hands `desired` to the status queue (or, with a [`DirectWriter`], writes it).
    /// An update the full queue drops is not lost: the queue keeps its key and hands it back
    /// for a reconcile when it has room (`status_queue.rs`).
    pub(crate) async fn submit(
        &self,
        key: ObjectKey,
        observed: &ObservedStatus,
        desired: DesiredStatus,
    ) -> Result<(), Error> {
        match &self.path {
            StatusPath::Queue => {
                let sent = self.queue.send(key, desired);
                self.metrics.sent(sent);
                self.metrics
                    .queue_depth
                    .set(i64::try_from(self.queue.len()).unwrap_or(i64::MAX));
                if sent == Sent::Dropped {
                    self.metrics
                        .queue_overflow
                        .set(i64::try_from(self.queue.overflowed()).unwrap_or(i64::MAX));
                }
                Ok(())
            }
            StatusPath::Direct(_) if self.term.until().is_none() => Ok(()),
            StatusPath::Direct(writer) => writer
                .write(&self.client, &key, observed, &desired)
                .await
                .map_err(|source| Error::Write { key, source }),
        }
    }

    /// How often the resync walk (`triggers.rs`) visits every binding: the resync, or the probe
    /// interval when that is shorter, so that every probe falls due within half a visit of one
    /// and is requeued for its time from there (`composed_by_probe`).
    pub(crate) fn revisit(&self) -> Duration {
        let revisit = match &self.probe {
            Some(prober) => self.resync.min(prober.settings_interval()),
            None => self.resync,
        };
        revisit.max(Duration::from_secs(1))
    }
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
    let errors = spec_errors(&spec, reported_invalid(&binding.status, generation));
    let accepted = if errors.is_empty() {
        accepted_with_warnings(&mapping_warnings(&spec))
    } else {
        accepted_condition(&errors)
    };
    ctx.metrics.reconciled(Kind::Binding, accepted.reason);
    let mut action = Action::await_change();
    let (composed, tools) = match &ctx.probe {
        None => (not_probed(messages::PROBING_OFF), None),
        Some(prober) if !errors.is_empty() => {
            prober.forget(&name);
            (
                DesiredCondition {
                    type_: composed::TYPE,
                    status: ConditionStatus::False,
                    reason: composed::NOT_ACCEPTED,
                    message: messages::NOTHING_COMPOSED.into(),
                },
                Some(Vec::new()),
            )
        }
        Some(prober) => {
            let (composed, probe_in) = composed_by_probe(
                prober,
                &binding,
                spec,
                generation,
                ctx.revisit(),
                &ctx.leader,
            );
            if let Some(wait) = probe_in {
                action = Action::requeue(wait);
            }
            composed
        }
    };
    let desired = DesiredStatus {
        generation,
        conditions: with_summary(vec![accepted, composed], ctx.probe.is_some()),
        tools,
    };
    ctx.submit(
        ObjectKey {
            kind: Kind::Binding,
            name,
        },
        &binding.status,
        desired,
    )
    .await?;
    // No timer per object but a probe's: the resync walk visits every binding again
    // (`triggers.rs`), and a dropped update comes back from the status queue.
    Ok(action)
}

/// Runtime validation's errors of a binding spec, each `path: message`. Any are logged as a
/// warning the first time — while the status does not show them yet — and at debug level on
/// every reconcile after (the resync visits an invalid binding every pass).
fn spec_errors(spec: &Value, reported: bool) -> Vec<String> {
    let errors: Vec<String> = validate_binding_spec(spec)
        .iter()
        .map(ToString::to_string)
        .collect();
    if let Some(first) = errors.first() {
        if reported {
            debug!(errors = errors.len(), %first, "binding is invalid (reported in its status)");
        } else {
            warn!(errors = errors.len(), %first, "binding is invalid");
        }
    }
    errors
}

/// Whether the status already reports this generation's spec as failing validation.
fn reported_invalid(observed: &ObservedStatus, generation: i64) -> bool {
    observed.conditions.iter().any(|c| {
        c.type_ == accepted::TYPE
            && c.reason == accepted::VALIDATION_FAILED
            && c.observed_generation == Some(generation)
    })
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

/// The `Composed` condition and tools of a valid binding as the prober knows them. Starts the
/// probe when it is due and this replica leads (only the leader's findings are written). A
/// probe due within half a `revisit` — the walk comes by every `revisit`, and a held verdict
/// is confirmed after a tenth of the interval — is returned as the wait until it, for a
/// requeue: only those few bindings hold a timer, and each probe runs on time.
fn composed_by_probe(
    prober: &Arc<Prober>,
    binding: &CachedBinding,
    spec: Value,
    generation: i64,
    revisit: Duration,
    leader: &watch::Receiver<bool>,
) -> (ComposedStatus, Option<Duration>) {
    let name = binding.name_any();
    let due = prober.next_probe(&name, generation);
    let probe_in = (!due.is_zero() && due <= revisit / 2).then_some(due);
    if due.is_zero() && *leader.borrow() {
        match serde_json::from_value(spec) {
            Ok(spec) => prober.probe(first_wins_key(&binding.metadata), generation, spec),
            Err(error) => warn!(%error, "an accepted spec does not decode; not probed"),
        }
    }
    let composed = match prober.condition(&name, generation) {
        Some((condition, tools)) => (condition, Some(tools)),
        None => observed_composed(&binding.status, generation)
            .unwrap_or_else(|| (not_probed(messages::FIRST_PROBE_PENDING), None)),
    };
    (composed, probe_in)
}

/// The `Composed` condition, and the tools when known.
type ComposedStatus = (DesiredCondition, Option<Vec<String>>);

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
            message: condition.message.to_string(),
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
