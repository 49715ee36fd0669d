//! The controller's Prometheus metrics.

use std::time::Instant;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::status::Kind;
use crate::status_queue::Sent;

/// What happened to a desired status sent to the queue.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are snake_case on the wire
pub enum QueueOutcome {
    /// Queued behind other keys.
    enqueued,
    /// Replaced a status already waiting for the same object.
    coalesced,
    /// Dropped: the queue was full. The periodic resync sends it again.
    dropped,
}

impl From<Sent> for QueueOutcome {
    fn from(sent: Sent) -> Self {
        match sent {
            Sent::Queued => Self::enqueued,
            Sent::Coalesced => Self::coalesced,
            Sent::Dropped => Self::dropped,
        }
    }
}

/// What the status worker did with one desired status.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are snake_case on the wire
pub enum WriteOutcome {
    /// Written with server-side apply.
    written,
    /// Not written: no transition compared with the cache.
    skipped_unchanged,
    /// Not written: this replica does not hold the lease.
    skipped_not_leader,
    /// Not written: the object is gone from the cache.
    skipped_gone,
    /// The write failed; the next reconcile retries.
    failed,
}

/// The label set of queue counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// What happened.
    pub outcome: QueueOutcome,
}

/// The label set of write counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// What happened.
    pub outcome: WriteOutcome,
}

/// Kinds as label values.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum KindLabel {
    /// CapabilityBinding.
    CapabilityBinding,
    /// RouteQualifier.
    RouteQualifier,
}

impl From<Kind> for KindLabel {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Binding => Self::CapabilityBinding,
            Kind::Qualifier => Self::RouteQualifier,
        }
    }
}

/// The label set of reconcile counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The kind reconciled.
    pub kind: KindLabel,
    /// The Accepted verdict's reason, or `error`.
    pub result: String,
}

/// Every metric the controller exports.
#[derive(Clone)]
pub struct Metrics {
    /// Desired statuses sent to the queue, by outcome.
    pub queue: Family<QueueLabels, Counter>,
    /// Desired statuses taken off the queue, by what the worker did.
    pub writes: Family<WriteLabels, Counter>,
    /// How long each status write took.
    pub write_duration: Histogram,
    /// Keys waiting in the status queue.
    pub queue_depth: Gauge,
    /// Objects whose update found the status queue full, waiting for room to be reconciled
    /// again.
    pub queue_overflow: Gauge,
    /// Bindings due for a reconcile that has not started (`due.rs`).
    pub reconciles_due: Gauge,
    /// Reconciles, by kind and verdict.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    /// Composed probes, by outcome (`composed`, `degraded`, `timeout`).
    pub probes: Family<ProbeLabels, Counter>,
    /// How long each probe took.
    pub probe_duration: Histogram,
    /// Probes running now.
    pub probes_in_flight: Gauge,
    /// Bindings whose reported Composed condition is False (their last probes found them
    /// degraded, or could not finish).
    pub bindings_not_composed: Gauge,
    /// 1 once the binding and qualifier caches have synced.
    pub caches_synced: Gauge,
}

/// The label set of probe counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// `composed`, `degraded` or `timeout`.
    pub outcome: &'static str,
}

impl Metrics {
    /// Creates the metrics and registers them under the `capstan_controller` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            queue: Family::default(),
            writes: Family::default(),
            // 1 ms to ~4 s: a status patch on a healthy apiserver takes a few milliseconds.
            write_duration: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 13),
            ),
            queue_depth: Gauge::default(),
            queue_overflow: Gauge::default(),
            reconciles_due: Gauge::default(),
            reconciles: Family::default(),
            leader: Gauge::default(),
            probes: Family::default(),
            // 5 ms to ~40 s: a local provider answers in milliseconds, a hanging one is cut
            // at the probe deadline.
            probe_duration: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.005, 2.0, 14),
            ),
            probes_in_flight: Gauge::default(),
            bindings_not_composed: Gauge::default(),
            caches_synced: Gauge::default(),
        };
        metrics.start_at_zero();
        metrics.register_in(registry);
        metrics
    }

    /// The closed label sets, at zero from the start: a rate, or an alert's `increase`, sees
    /// the first one too, and a dashboard finds every series before it is first used.
    fn start_at_zero(&self) {
        for outcome in [
            QueueOutcome::enqueued,
            QueueOutcome::coalesced,
            QueueOutcome::dropped,
        ] {
            let _ = self.queue.get_or_create(&QueueLabels { outcome });
        }
        for outcome in [
            WriteOutcome::written,
            WriteOutcome::skipped_unchanged,
            WriteOutcome::skipped_not_leader,
            WriteOutcome::skipped_gone,
            WriteOutcome::failed,
        ] {
            let _ = self.writes.get_or_create(&WriteLabels { outcome });
        }
        for outcome in ["composed", "degraded", "timeout"] {
            let _ = self.probes.get_or_create(&ProbeLabels { outcome });
        }
    }

    /// Registers every metric under the binary's prefix.
    fn register_in(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("capstan_controller");
        registry.register(
            "status_queue",
            "Desired statuses sent to the status queue, by outcome (enqueued, coalesced, dropped)",
            self.queue.clone(),
        );
        registry.register(
            "status_writes",
            "Desired statuses handled by the status worker, by outcome",
            self.writes.clone(),
        );
        registry.register(
            "status_write_duration_seconds",
            "Duration of status writes (server-side apply on /status)",
            self.write_duration.clone(),
        );
        registry.register(
            "status_queue_depth",
            "Objects waiting in the status queue",
            self.queue_depth.clone(),
        );
        registry.register(
            "status_queue_overflow",
            "Objects whose update found the status queue full, to be reconciled again when it has room",
            self.queue_overflow.clone(),
        );
        registry.register(
            "binding_reconciles_due",
            "Bindings due for a reconcile that has not started yet",
            self.reconciles_due.clone(),
        );
        registry.register(
            "reconciles",
            "Reconciles by kind and result",
            self.reconciles.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader lease",
            self.leader.clone(),
        );
        registry.register(
            "probes",
            "Composed probes by outcome (composed, degraded, timeout)",
            self.probes.clone(),
        );
        registry.register(
            "probe_duration_seconds",
            "Duration of Composed probes",
            self.probe_duration.clone(),
        );
        registry.register(
            "probes_in_flight",
            "Composed probes running now",
            self.probes_in_flight.clone(),
        );
        registry.register(
            "bindings_not_composed",
            "Bindings whose reported Composed condition is False, by this replica's probes",
            self.bindings_not_composed.clone(),
        );
        registry.register(
            "caches_synced",
            "1 once the binding and qualifier caches have synced, else 0",
            self.caches_synced.clone(),
        );
    }

    /// Counts one send to the queue.
    pub fn sent(&self, sent: Sent) {
        self.queue
            .get_or_create(&QueueLabels {
                outcome: sent.into(),
            })
            .inc();
    }

    /// Counts one worker outcome.
    pub fn wrote(&self, outcome: WriteOutcome) {
        self.writes.get_or_create(&WriteLabels { outcome }).inc();
    }

    /// Counts one reconcile.
    pub fn reconciled(&self, kind: Kind, result: &str) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                kind: kind.into(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// Starts timing a write; the duration is recorded when the guard drops.
    pub fn time_write(&self) -> WriteTimer<'_> {
        WriteTimer {
            histogram: &self.write_duration,
            started: Instant::now(),
        }
    }
}

/// Records a write's duration when dropped.
pub struct WriteTimer<'a> {
    histogram: &'a Histogram,
    started: Instant,
}

impl Drop for WriteTimer<'_> {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}
