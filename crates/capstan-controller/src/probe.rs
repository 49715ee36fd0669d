//! The Composed probe: each accepted binding composed alone with the sidecar's own composer —
//! the same endpoint guard, allow-lists, timeouts and tool allow-list — at most `concurrency`
//! at once, each cut at `deadline`. Every upstream session a probe opens is closed (the
//! provider sees a DELETE); what it found goes into `Findings`, and the bindings whose status
//! may have changed are sent on for a reconcile.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_api::CapabilityBindingSpec;
use capstan_compose::composer::Composer;
use capstan_compose::composition::UpstreamStage;
use capstan_compose::source::Document;
use tokio::sync::{Semaphore, mpsc};
use tracing::field::Empty;
use tracing::{Instrument as _, debug_span, info};

use crate::composed_condition::{Finding, Findings, OrderKey, Report};
use crate::metrics::{Metrics, ProbeLabels};
use crate::status::DesiredCondition;

/// Default seconds between probes of one binding. 300 s: a broken endpoint shows within five
/// minutes, and 5,000 bindings cost ~17 probes a second.
pub const DEFAULT_PROBE_INTERVAL_SECONDS: u64 = 300;

/// Default probes at once. 8: enough to probe 5,000 bindings well within an interval, few
/// enough that providers never see a burst.
pub const DEFAULT_PROBE_CONCURRENCY: usize = 8;

/// Default seconds one probe may take. 30 s: above the connect (5 s) and knowledge (5 s)
/// timeouts of a composition, so only a provider that stalls after connecting is cut.
pub const DEFAULT_PROBE_DEADLINE_SECONDS: u64 = 30;

/// How probes run.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSettings {
    /// Between probes of one binding (plus up to 10% jitter by name).
    pub interval: Duration,
    /// Probes at once.
    pub concurrency: usize,
    /// One probe's limit.
    pub deadline: Duration,
}

/// Runs probes and keeps what they found.
pub struct Prober {
    composer: Composer,
    settings: ProbeSettings,
    permits: Arc<Semaphore>,
    findings: Mutex<Findings>,
    in_flight: Mutex<HashSet<String>>,
    changed: mpsc::UnboundedSender<String>,
    metrics: Metrics,
}

impl Prober {
    /// A prober composing with `composer`; the names of bindings whose status may have changed
    /// come out of the returned receiver.
    pub fn new(
        composer: Composer,
        settings: ProbeSettings,
        metrics: Metrics,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<String>) {
        let (changed, rx) = mpsc::unbounded_channel();
        let prober = Arc::new(Self {
            composer,
            settings,
            permits: Arc::new(Semaphore::new(settings.concurrency.max(1))),
            findings: Mutex::default(),
            in_flight: Mutex::default(),
            changed,
            metrics,
        });
        (prober, rx)
    }

    /// The probe interval setting, before the jitter by name.
    pub fn settings_interval(&self) -> Duration {
        self.settings.interval
    }

    /// The probe interval of binding `name`: the setting plus up to 10% by a hash of the name,
    /// so bindings created together are not probed together forever.
    pub fn interval(&self, name: &str) -> Duration {
        let permille = name
            .bytes()
            .fold(11u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
            % 100;
        self.settings.interval + self.settings.interval.mul_f64(permille as f64 / 1000.0)
    }

    /// How long until binding `name` at `generation` is due for a probe (zero: now).
    pub fn next_probe(&self, name: &str, generation: i64) -> Duration {
        self.findings
            .lock()
            .map(|f| f.next_probe(name, generation, self.interval(name), Instant::now()))
            .unwrap_or_default()
    }

    /// The `Composed` condition and tools of `name` at `generation`, when probed.
    pub fn condition(
        &self,
        name: &str,
        generation: i64,
    ) -> Option<(DesiredCondition, Vec<String>)> {
        self.findings.lock().ok()?.condition(name, generation)
    }

    /// Forgets binding `name` (no longer accepted, or gone); bindings it shared names with are
    /// reconciled again.
    pub fn forget(&self, name: &str) {
        let affected = self
            .findings
            .lock()
            .map(|mut f| {
                let affected = f.forget(name);
                self.count_not_composed(&f);
                affected
            })
            .unwrap_or_default();
        for binding in affected {
            let _ = self.changed.send(binding);
        }
    }

    /// Keeps the `bindings_not_composed` gauge at what `findings` report.
    fn count_not_composed(&self, findings: &Findings) {
        self.metrics
            .bindings_not_composed
            .set(i64::try_from(findings.not_composed()).unwrap_or(i64::MAX));
    }

    /// Forgets every binding `exists` says is gone.
    pub fn forget_missing(&self, exists: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self
            .findings
            .lock()
            .map(|f| {
                f.bindings()
                    .filter(|name| !exists(name))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        for name in gone {
            self.forget(&name);
        }
    }

    /// Starts a probe of generation `generation` of the binding `key.1`, unless one of it runs.
    pub fn probe(self: &Arc<Self>, key: OrderKey, generation: i64, spec: CapabilityBindingSpec) {
        let name = key.1.clone();
        let started = self
            .in_flight
            .lock()
            .map(|mut running| running.insert(name.clone()))
            .unwrap_or(false);
        if !started {
            return;
        }
        let prober = self.clone();
        tokio::spawn(async move {
            let finding = prober.run(&name, spec).await;
            let (report, affected) = match prober.findings.lock() {
                Ok(mut findings) => {
                    let recorded =
                        findings.record(key, generation, finding.clone(), Instant::now());
                    prober.count_not_composed(&findings);
                    recorded
                }
                Err(_) => (Report::Same, Vec::new()),
            };
            if matches!(report, Report::Flipped)
                || (matches!(report, Report::First) && !finding.reasons.is_empty())
            {
                info!(
                    binding = %name,
                    composed = finding.reasons.is_empty(),
                    reasons = ?finding.reasons,
                    "composed verdict changed"
                );
            }
            if let Ok(mut running) = prober.in_flight.lock() {
                running.remove(&name);
            }
            for binding in affected {
                let _ = prober.changed.send(binding);
            }
        });
    }

    /// Composes the binding alone within the deadline and closes what it opened.
    async fn run(&self, name: &str, spec: CapabilityBindingSpec) -> Finding {
        let Ok(_permit) = self.permits.clone().acquire_owned().await else {
            return Finding::default();
        };
        self.metrics.probes_in_flight.inc();
        let started = Instant::now();
        let document = Document {
            binding: name.to_owned(),
            spec,
        };
        let span = debug_span!(
            "capstan.probe",
            otel.name = "probe CapabilityBinding",
            capstan.object.kind = "CapabilityBinding",
            capstan.object.name = name,
            capstan.probe.outcome = Empty,
        );
        let probed = tokio::time::timeout(self.settings.deadline, async {
            let composed = self.composer.compose(std::slice::from_ref(&document)).await;
            let finding = composed
                .composition
                .bindings
                .first()
                .map(|outcome| Finding {
                    tools: outcome.exposed.clone(),
                    reasons: outcome.stable_reasons(),
                    credential: outcome
                        .upstream_failures
                        .iter()
                        .any(|f| f.stage == UpstreamStage::Credential),
                    unprobed: outcome
                        .needs_caller
                        .iter()
                        .map(|why| format!("not probed without a caller: {why}"))
                        .collect(),
                })
                .unwrap_or_default();
            composed.close().await;
            finding
        })
        .instrument(span.clone())
        .await;
        let (finding, outcome) = match probed {
            Ok(finding) if finding.reasons.is_empty() => (finding, "composed"),
            Ok(finding) => (finding, "degraded"),
            Err(_) => (
                Finding {
                    tools: Vec::new(),
                    credential: false,
                    unprobed: Vec::new(),
                    reasons: vec![format!(
                        "the probe did not finish within {} s (--probe-deadline-seconds)",
                        self.settings.deadline.as_secs()
                    )],
                },
                "timeout",
            ),
        };
        span.record("capstan.probe.outcome", outcome);
        self.metrics.probes_in_flight.dec();
        self.metrics
            .probe_duration
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .probes
            .get_or_create(&ProbeLabels { outcome })
            .inc();
        finding
    }
}
