//! The sidecar's Prometheus metrics.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use capstan_compose::WatchCounts;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// An `outcome` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// The outcome.
    pub outcome: String,
}

/// A routed capability and how its call was decided.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    /// The capability id.
    pub capability: String,
    /// The route reason, or `no_eligible_provider` / `refused`.
    pub reason: String,
}

/// Why a candidate was excluded.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExclusionLabel {
    /// The exclusion reason (`quarantined`, `cost_ceiling`, …).
    pub reason: String,
}

/// Every metric the sidecar exports.
#[derive(Clone)]
pub struct Metrics {
    /// Sessions open now.
    pub sessions_active: Gauge,
    /// Sessions opened since start.
    pub sessions_total: Counter,
    /// Time to compose a project (documents, upstreams, knowledge).
    pub compose_duration: Histogram,
    /// Tool calls by outcome (`ok`, `tool_error`, or an error kind).
    pub tool_calls: Family<OutcomeLabel, Counter>,
    /// Upstreams that could not be used at composition (refused, connect or list failures).
    pub upstream_connect_failures: Counter,
    /// Document source reads by outcome (`hit`, `miss`, `stale_served`, `error`, `empty`).
    pub source_reads: Family<OutcomeLabel, Counter>,
    /// Caller checks by outcome (`allowed`, `denied`, `no_token`, `error`; `cached_allowed`,
    /// `cached_denied` when answered from the cache).
    pub caller_checks: Family<OutcomeLabel, Counter>,
    /// Routed (`cap.*`) calls by capability and how they were decided.
    pub route_decisions: Family<RouteLabel, Counter>,
    /// Candidates excluded from routed calls, by reason.
    pub route_exclusions: Family<ExclusionLabel, Counter>,
    /// Live sessions composed again, by what followed (`list_changed`: the tools differ and
    /// the client was told; `unchanged`: same tools; `requalified`: only the qualifiers
    /// moved).
    pub session_refreshes: Family<OutcomeLabel, Counter>,
    /// Places (sessions, tasks, streams) held now.
    pub places_held: Gauge,
    /// Places refused, by the cap that was full (`total`, `caller`, `project`,
    /// `task_streams`).
    pub admission_refusals: Family<OutcomeLabel, Counter>,
}

/// The crd source's watches (`capstan_compose::WatchedCluster`), read at each scrape.
#[derive(Debug)]
pub struct WatchMetrics(pub Arc<WatchCounts>);

impl Collector for WatchMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, value) in [
            (
                "capstan_sidecar_crd_lists",
                "Full LISTs the crd source's watches issued (the first, and one after each failed watch)",
                &self.0.lists,
            ),
            (
                "capstan_sidecar_crd_watch_failures",
                "Failures of the crd source's watches, each followed by a re-list after backoff",
                &self.0.failures,
            ),
            (
                "capstan_sidecar_crd_objects_received",
                "Objects the crd source's watches received, in lists and as events",
                &self.0.events,
            ),
        ] {
            let counter = ConstCounter::new(value.load(Ordering::Relaxed));
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        let bytes = ConstCounter::new(self.0.bytes.load(Ordering::Relaxed));
        bytes.encode(encoder.encode_descriptor(
            "capstan_sidecar_crd_read_bytes",
            "Response bytes the crd source's watches read from the apiserver",
            None,
            bytes.metric_type(),
        )?)?;
        Ok(())
    }
}

impl Metrics {
    /// Creates the metrics and registers them under the `capstan_sidecar` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            sessions_active: Gauge::default(),
            sessions_total: Counter::default(),
            // 5 ms .. ~10 s: a local composition to one stuck at the connect timeout.
            compose_duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
            tool_calls: Family::default(),
            upstream_connect_failures: Counter::default(),
            source_reads: Family::default(),
            caller_checks: Family::default(),
            route_decisions: Family::default(),
            route_exclusions: Family::default(),
            session_refreshes: Family::default(),
            places_held: Gauge::default(),
            admission_refusals: Family::default(),
        };
        let registry = registry.sub_registry_with_prefix("capstan_sidecar");
        registry.register(
            "sessions_active",
            "MCP sessions open now",
            metrics.sessions_active.clone(),
        );
        registry.register(
            "sessions",
            "MCP sessions opened",
            metrics.sessions_total.clone(),
        );
        registry.register(
            "compose_duration_seconds",
            "Time to compose a project",
            metrics.compose_duration.clone(),
        );
        registry.register(
            "tool_calls",
            "Tool calls by outcome",
            metrics.tool_calls.clone(),
        );
        registry.register(
            "upstream_connect_failures",
            "MCP upstreams not usable at composition",
            metrics.upstream_connect_failures.clone(),
        );
        registry.register(
            "source_reads",
            "Capability document reads by outcome",
            metrics.source_reads.clone(),
        );
        registry.register(
            "places_held",
            "Sessions, tasks without a session and open streams holding a place now",
            metrics.places_held.clone(),
        );
        registry.register(
            "admission_refusals",
            "Sessions, tasks and streams refused because a cap was full, by cap",
            metrics.admission_refusals.clone(),
        );
        registry.register(
            "caller_checks",
            "Checks that a caller may act in the project it names, by outcome",
            metrics.caller_checks.clone(),
        );
        registry.register(
            "route_decisions",
            "Routed capability calls by capability and route reason",
            metrics.route_decisions.clone(),
        );
        registry.register(
            "route_exclusions",
            "Candidates excluded from routed calls, by reason",
            metrics.route_exclusions.clone(),
        );
        registry.register(
            "session_refreshes",
            "Live sessions whose documents, qualifiers or upstream tool lists changed, by what followed",
            metrics.session_refreshes.clone(),
        );
        metrics
    }

    /// Counts a live session's refresh.
    pub fn session_refresh(&self, outcome: &str) {
        self.session_refreshes
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Counts a routing decision and its exclusions.
    pub fn route_decision(&self, capability: &str, reason: &str, exclusions: &[&str]) {
        self.route_decisions
            .get_or_create(&RouteLabel {
                capability: capability.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
        for reason in exclusions {
            self.route_exclusions
                .get_or_create(&ExclusionLabel {
                    reason: (*reason).to_owned(),
                })
                .inc();
        }
    }

    /// Counts a place refused because `cap` was full.
    pub fn admission_refused(&self, cap: &str) {
        self.admission_refusals
            .get_or_create(&OutcomeLabel {
                outcome: cap.to_owned(),
            })
            .inc();
    }

    /// Counts a caller check.
    pub fn caller_check(&self, outcome: &str) {
        self.caller_checks
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Counts a document source read.
    pub fn source_read(&self, outcome: &str) {
        self.source_reads
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Counts a tool call.
    pub fn tool_call(&self, outcome: &str) {
        self.tool_calls
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }
}
