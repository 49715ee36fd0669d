//! Reconcilers: a CapabilityBinding's `Accepted` condition from runtime validation, and every
//! RouteQualifier's `Accepted` condition from validation plus the set-level verdicts.
//!
//! Reconcilers compute desired statuses and hand them to the status queue; they never write.
//! (The `every-reconcile` write mode, kept for benchmarking against, writes directly instead.)

use std::sync::Arc;
use std::time::Duration;

use capstan_api::validate::validate_binding_spec;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use thiserror::Error;
use tokio::sync::watch;
use tracing::{instrument, warn};

use crate::cached::CachedBinding;
use crate::metrics::Metrics;
use crate::status::{DesiredStatus, Kind, ObjectKey, ObservedStatus, accepted_condition};
use crate::status_queue::StatusSender;
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
    /// True while this replica holds the Lease. The queue's worker checks it itself; the
    /// `every-reconcile` baseline writes only while it is true, so two baseline replicas
    /// never both write either.
    pub leader: watch::Receiver<bool>,
}

impl Context {
    /// Hands `desired` to the status queue (or, in the `every-reconcile` baseline, writes it).
    pub(crate) async fn submit(
        &self,
        key: ObjectKey,
        observed: &ObservedStatus,
        desired: DesiredStatus,
    ) -> Result<(), Error> {
        match self.mode {
            WriteMode::Transitions => {
                let sent = self.queue.send(key, desired);
                self.metrics.sent(sent);
                self.metrics
                    .queue_depth
                    .set(i64::try_from(self.queue.len()).unwrap_or(i64::MAX));
                Ok(())
            }
            WriteMode::EveryReconcile if !*self.leader.borrow() => Ok(()),
            WriteMode::EveryReconcile => write_status(&self.client, &key, observed, &desired)
                .await
                .map(drop)
                .map_err(|source| Error::Write { key, source }),
        }
    }

    /// The resync interval with up to 10% jitter, so objects created together do not resync
    /// together forever.
    fn resync_action(&self, name: &str) -> Action {
        let jitter_permille = name
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
            % 100;
        let resync = self.resync + self.resync.mul_f64(jitter_permille as f64 / 1000.0);
        Action::requeue(resync)
    }
}

/// Reconciles one CapabilityBinding: validates its spec and sends the `Accepted` condition.
#[instrument(skip_all, fields(name = %binding.name_any(), generation = binding.metadata.generation))]
pub async fn reconcile_binding(
    binding: Arc<CachedBinding>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let name = binding.name_any();
    let errors: Vec<String> = validate_binding_spec(&binding.spec())
        .iter()
        .map(ToString::to_string)
        .collect();
    if !errors.is_empty() {
        warn!(errors = errors.len(), first = %errors[0], "binding is invalid");
    }
    let condition = accepted_condition(&errors);
    ctx.metrics.reconciled(Kind::Binding, condition.reason);
    let desired = DesiredStatus {
        generation: binding.metadata.generation.unwrap_or_default(),
        conditions: vec![condition],
        tools: None,
    };
    ctx.submit(
        ObjectKey {
            kind: Kind::Binding,
            name: name.clone(),
        },
        &binding.status,
        desired,
    )
    .await?;
    Ok(ctx.resync_action(&name))
}

/// Requeues a failed reconcile after a short pause.
pub fn binding_error_policy(_: Arc<CachedBinding>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(%error, "reconcile failed");
    ctx.metrics.reconciled(Kind::Binding, error.metric_label());
    Action::requeue(Duration::from_secs(5))
}
