//! The sidecar's Prometheus metrics.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use capstan_compose::source::WatchCounts;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
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

/// A provider tool and the limit of its server that kept a call from it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabel {
    /// The binding.
    pub binding: String,
    /// The composed tool.
    pub tool: String,
    /// The limit (`calls_per_minute_per_caller`, `concurrent_calls_per_caller`,
    /// `calls_per_minute`).
    pub limit: String,
}

/// The outcomes of `caller_checks` (`caller/check.rs`).
const CALLER_CHECK_OUTCOMES: [&str; 6] = [
    "allowed",
    "denied",
    "no_token",
    "error",
    "cached_allowed",
    "cached_denied",
];

/// The answers of `access_reviews` (`caller/authorization.rs`).
const ACCESS_REVIEW_OUTCOMES: [&str; 3] = ["allowed", "denied", "error"];

/// The caps of `admission_refusals` (`caller/admission.rs`, `Full::label`).
const ADMISSION_CAPS: [&str; 4] = ["total", "caller", "project", "task_streams"];

/// The outcomes of `session_refreshes` (`composition/refresh.rs`).
const REFRESH_OUTCOMES: [&str; 3] = ["list_changed", "unchanged", "requalified"];

/// An HTTP status code label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// The status code.
    pub code: u16,
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
    /// Time to answer a tool call that reached a provider or the control plane.
    pub tool_call_duration: Histogram,
    /// Requests refused before they were served (HTTP 4xx: no or a wrong identity, a session
    /// of another caller or none, a full cap, a malformed request), by status.
    pub requests_refused: Family<CodeLabel, Counter>,
    /// Upstreams that could not be used at composition (refused, connect or list failures).
    pub upstream_connect_failures: Counter,
    /// Document source reads by outcome (`hit`, `miss`, `stale_served`, `error`, `empty`).
    pub source_reads: Family<OutcomeLabel, Counter>,
    /// Caller checks by outcome (`allowed`, `denied`, `no_token`, `error`; `cached_allowed`,
    /// `cached_denied` when answered from the cache).
    pub caller_checks: Family<OutcomeLabel, Counter>,
    /// Tool authorization reviews asked of project planes (`use` on tools, prompts,
    /// bindings), by answer (`allowed`, `denied`, `error`); answers from the cache are not
    /// counted.
    pub access_reviews: Family<OutcomeLabel, Counter>,
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
    /// Calls a server's limit kept from it (`limits.rs`), by binding, tool and limit; a
    /// routed call another provider then served counts here too.
    pub limit_refusals: Family<LimitLabel, Counter>,
}

/// The crd source's watches (`capstan_compose::source::WatchedCluster`), read at each scrape: their
/// counts, and whether they have listed every kind once.
#[derive(Debug)]
pub struct WatchMetrics {
    /// The watches' counts.
    pub counts: Arc<WatchCounts>,
    /// True once the first lists are in.
    pub synced: tokio::sync::watch::Receiver<bool>,
}

impl Collector for WatchMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, value) in [
            (
                "capstan_sidecar_crd_lists",
                "Full LISTs the crd source's watches issued (the first, and one after each failed watch)",
                &self.counts.lists,
            ),
            (
                "capstan_sidecar_crd_watch_failures",
                "Failures of the crd source's watches, each followed by a re-list after backoff",
                &self.counts.failures,
            ),
            (
                "capstan_sidecar_crd_objects_received",
                "Objects the crd source's watches received, in lists and as events",
                &self.counts.events,
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
        let synced = ConstGauge::new(i64::from(*self.synced.borrow()));
        synced.encode(encoder.encode_descriptor(
            "capstan_sidecar_crd_synced",
            "1 once the crd source's watches have listed bindings and qualifiers, else 0",
            None,
            synced.metric_type(),
        )?)?;
        let bytes = ConstCounter::new(self.counts.bytes.load(Ordering::Relaxed));
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
            // 1 ms .. ~16 s: a local echo to a provider at the call timeout.
            tool_call_duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            requests_refused: Family::default(),
            upstream_connect_failures: Counter::default(),
            source_reads: Family::default(),
            caller_checks: Family::default(),
            access_reviews: Family::default(),
            route_decisions: Family::default(),
            route_exclusions: Family::default(),
            session_refreshes: Family::default(),
            places_held: Gauge::default(),
            admission_refusals: Family::default(),
            limit_refusals: Family::default(),
        };
        metrics.start_at_zero();
        metrics.register_in(registry);
        metrics
    }

    /// The closed label sets, at zero from the start: a rate, or an alert's `increase`, sees
    /// the first one too, and a dashboard finds every series before it is first used.
    fn start_at_zero(&self) {
        for code in [401, 403] {
            let _ = self.requests_refused.get_or_create(&CodeLabel { code });
        }
        let outcomes = [
            (&self.caller_checks, &CALLER_CHECK_OUTCOMES[..]),
            (&self.access_reviews, &ACCESS_REVIEW_OUTCOMES[..]),
            (&self.admission_refusals, &ADMISSION_CAPS[..]),
            (&self.session_refreshes, &REFRESH_OUTCOMES[..]),
        ];
        for (family, values) in outcomes {
            for outcome in values {
                let _ = family.get_or_create(&OutcomeLabel {
                    outcome: (*outcome).to_owned(),
                });
            }
        }
    }

    /// Registers every metric under the binary's prefix.
    fn register_in(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("capstan_sidecar");
        registry.register(
            "sessions_active",
            "MCP sessions open now",
            self.sessions_active.clone(),
        );
        registry.register(
            "sessions",
            "MCP sessions opened",
            self.sessions_total.clone(),
        );
        registry.register(
            "compose_duration_seconds",
            "Time to compose a project",
            self.compose_duration.clone(),
        );
        registry.register(
            "tool_calls",
            "Tool calls by outcome",
            self.tool_calls.clone(),
        );
        registry.register(
            "tool_call_duration_seconds",
            "Time to answer tool calls that reached a provider or the control plane",
            self.tool_call_duration.clone(),
        );
        registry.register(
            "requests_refused",
            "Requests refused before they were served, by HTTP status",
            self.requests_refused.clone(),
        );
        registry.register(
            "upstream_connect_failures",
            "MCP upstreams not usable at composition",
            self.upstream_connect_failures.clone(),
        );
        registry.register(
            "source_reads",
            "Capability document reads by outcome",
            self.source_reads.clone(),
        );
        self.register_refusals_in(registry);
    }

    /// Registers the metrics of who may call what, and how much: places, caps, limits, the
    /// caller check, authorization and routing.
    fn register_refusals_in(&self, registry: &mut Registry) {
        registry.register(
            "places_held",
            "Sessions, tasks without a session and open streams holding a place now",
            self.places_held.clone(),
        );
        registry.register(
            "admission_refusals",
            "Sessions, tasks and streams refused because a cap was full, by cap",
            self.admission_refusals.clone(),
        );
        registry.register(
            "limit_refusals",
            "Calls a provider server's limit kept from it, by binding, tool and limit",
            self.limit_refusals.clone(),
        );
        registry.register(
            "caller_checks",
            "Checks that a caller may act in the project it names, by outcome",
            self.caller_checks.clone(),
        );
        registry.register(
            "access_reviews",
            "Reviews asked of project planes of what a caller may use, by answer",
            self.access_reviews.clone(),
        );
        registry.register(
            "route_decisions",
            "Routed capability calls by capability and route reason",
            self.route_decisions.clone(),
        );
        registry.register(
            "route_exclusions",
            "Candidates excluded from routed calls, by reason",
            self.route_exclusions.clone(),
        );
        registry.register(
            "session_refreshes",
            "Live sessions whose documents, qualifiers or upstream tool lists changed, by what followed",
            self.session_refreshes.clone(),
        );
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

    /// Counts a call `limit` of `binding`'s server kept from `tool`.
    pub fn limit_refused(&self, binding: &str, tool: &str, limit: &str) {
        self.limit_refusals
            .get_or_create(&LimitLabel {
                binding: binding.to_owned(),
                tool: tool.to_owned(),
                limit: limit.to_owned(),
            })
            .inc();
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

    /// Counts a tool authorization review asked of a plane.
    pub fn access_review(&self, outcome: &str) {
        self.access_reviews
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

    /// Counts a refused request of HTTP status `code`.
    pub fn request_refused(&self, code: u16) {
        self.requests_refused
            .get_or_create(&CodeLabel { code })
            .inc();
    }

    /// Counts a tool call that reached a provider or the control plane, and its duration.
    pub fn tool_call_answered(&self, outcome: &str, started: std::time::Instant) {
        self.tool_call_duration
            .observe(started.elapsed().as_secs_f64());
        self.tool_call(outcome);
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
