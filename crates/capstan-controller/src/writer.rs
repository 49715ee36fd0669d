//! The status worker: drains the status queue and writes a status only on a transition.
//!
//! Up to `in_flight` writes run at once — one status write costs an apiserver round trip and
//! an etcd commit, and written one at a time the statuses of 5,000 bindings take 3× as long as
//! the apiserver itself allows — but never two for the same object: a status arriving for an
//! object whose write is still running waits beside it (a newer one replacing it, as in the
//! queue) and is decided once that write's answer is known.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument as _, Span, debug, debug_span, warn};

use crate::cached::{CachedBinding, CachedQualifier};
use crate::leader::Term;
use crate::metrics::{Metrics, WriteOutcome};
use crate::status::{DesiredStatus, Kind, ObjectKey, ObservedStatus, apply_body, is_transition};
use crate::status_queue::StatusReceiver;

/// The one field manager Capstan writes status under.
pub const FIELD_MANAGER: &str = "capstan-controller";

/// How long one status write may take before it counts as failed. 10 s: far beyond a healthy
/// apiserver's latency, short enough that one stuck write does not hold up the queue for long.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The API resource of each kind, for dynamic clients and cache lookups.
pub fn api_resource(kind: Kind) -> ApiResource {
    match kind {
        Kind::Binding => ApiResource::erase::<capstan_api::CapabilityBinding>(&()),
        Kind::Qualifier => ApiResource::erase::<capstan_api::RouteQualifier>(&()),
    }
}

/// Writes `desired` onto the status of `key` with server-side apply under [`FIELD_MANAGER`].
/// No retry: the next observation is a better retry than an immediate one.
pub async fn write_status(
    client: &Client,
    key: &ObjectKey,
    observed: &ObservedStatus,
    desired: &DesiredStatus,
) -> Result<DynamicObject, kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource(key.kind));
    let body = apply_body(key, observed, desired, &Time(Timestamp::now()));
    api.patch_status(
        &key.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
}

/// The span of one status write (its HTTP request is kube's span inside it).
fn write_span(key: &ObjectKey, generation: i64) -> Span {
    debug_span!(
        "capstan.status.write",
        otel.name = %format_args!("write status {}", key.kind.as_str()),
        otel.status_code = Empty,
        capstan.object.kind = key.kind.as_str(),
        capstan.object.name = %key.name,
        capstan.object.generation = generation,
        error.type = Empty,
    )
}

/// A failed write's kind, as a span's `error.type` names it: the apiserver's status code,
/// `transport`, or `timeout`.
fn failure_kind(answer: &Answer) -> Option<String> {
    match answer {
        Ok(Ok(_)) => None,
        Ok(Err(kube::Error::Api(status))) => Some(status.code.to_string()),
        Ok(Err(_)) => Some("transport".into()),
        Err(_) => Some("timeout".into()),
    }
}

/// What this worker last wrote for an object, until the cache shows it.
struct Written {
    resource_version: u64,
    observed: ObservedStatus,
}

/// The single consumer of the status queue.
pub struct StatusWriter {
    client: Client,
    bindings: Store<CachedBinding>,
    qualifiers: Store<CachedQualifier>,
    term: Term,
    metrics: Metrics,
    written: HashMap<ObjectKey, Written>,
    in_flight: usize,
}

/// What a started write came to: the apiserver's answer, or the timeout.
type Answer = Result<Result<DynamicObject, kube::Error>, tokio::time::error::Elapsed>;

/// The writes running: each finishes with its object and its answer.
type Running = FuturesUnordered<futures::future::BoxFuture<'static, (ObjectKey, Answer)>>;

impl StatusWriter {
    /// A worker comparing against the given caches, writing only within this replica's
    /// leadership `term` (each write cut at the term's end), with up to `in_flight` writes
    /// running at once (at least one).
    pub fn new(
        client: Client,
        bindings: Store<CachedBinding>,
        qualifiers: Store<CachedQualifier>,
        term: Term,
        metrics: Metrics,
        in_flight: usize,
    ) -> Self {
        Self {
            client,
            bindings,
            qualifiers,
            term,
            metrics,
            written: HashMap::new(),
            in_flight: in_flight.max(1),
        }
    }

    /// Drains the queue until the task is dropped.
    pub async fn run(mut self, mut queue: StatusReceiver<ObjectKey, DesiredStatus>) {
        let mut running = Running::new();
        // The objects whose write is running, each with the status that arrived for it
        // meanwhile (the newest), if any: at most `in_flight` entries.
        let mut busy: HashMap<ObjectKey, Option<DesiredStatus>> = HashMap::new();
        loop {
            tokio::select! {
                Some((key, answer)) = running.next(), if !running.is_empty() => {
                    let outcome = self.finish(&key, answer);
                    self.metrics.wrote(outcome);
                    debug!(object = %key, ?outcome, "status write finished");
                    if let Some(desired) = busy.remove(&key).flatten() {
                        self.start(key, desired, &mut running, &mut busy);
                    }
                }
                // recv is cancel-safe: it takes an item in the same poll that returns it.
                (key, desired) = queue.recv(), if running.len() < self.in_flight => {
                    self.metrics
                        .queue_depth
                        .set(i64::try_from(queue.len()).unwrap_or(i64::MAX));
                    self.metrics
                        .queue_overflow
                        .set(i64::try_from(queue.overflowed()).unwrap_or(i64::MAX));
                    match busy.get_mut(&key) {
                        Some(waiting) => *waiting = Some(desired),
                        None => self.start(key, desired, &mut running, &mut busy),
                    }
                }
            }
        }
    }

    /// Decides whether `desired` is a transition and, if so, starts its write.
    fn start(
        &mut self,
        key: ObjectKey,
        desired: DesiredStatus,
        running: &mut Running,
        busy: &mut HashMap<ObjectKey, Option<DesiredStatus>>,
    ) {
        let decided = self
            .term
            .until()
            .ok_or(WriteOutcome::skipped_not_leader)
            .and_then(|until| Ok((self.decide(&key, &desired)?, until)));
        let (observed, until) = match decided {
            Ok(decided) => decided,
            Err(outcome) => {
                self.metrics.wrote(outcome);
                debug!(object = %key, ?outcome, generation = desired.generation, "status handled");
                return;
            }
        };
        busy.insert(key.clone(), None);
        let (client, metrics) = (self.client.clone(), self.metrics.clone());
        let span = write_span(&key, desired.generation);
        running.push(Box::pin(
            async move {
                let answer = {
                    let _timer = metrics.time_write();
                    // Cut at the end of the term too: a write must not outlive this
                    // replica's leadership (one already on the wire cannot be recalled).
                    let deadline = (Instant::now() + WRITE_TIMEOUT).min(until);
                    tokio::time::timeout_at(
                        deadline,
                        write_status(&client, &key, &observed, &desired),
                    )
                    .await
                };
                if let Some(kind) = failure_kind(&answer) {
                    let span = Span::current();
                    span.record("otel.status_code", "error");
                    span.record("error.type", kind);
                }
                (key, answer)
            }
            .instrument(span),
        ));
    }

    /// The status to compare against and write over, or why nothing is written.
    fn decide(
        &mut self,
        key: &ObjectKey,
        desired: &DesiredStatus,
    ) -> Result<ObservedStatus, WriteOutcome> {
        let in_cache = match key.kind {
            Kind::Binding => self
                .bindings
                .get(&ObjectRef::new(&key.name))
                .map(|o| (o.status.clone(), o.resource_version())),
            Kind::Qualifier => self
                .qualifiers
                .get(&ObjectRef::new(&key.name))
                .map(|o| (o.status.clone(), o.resource_version())),
        };
        let Some((cached, cached_version)) = in_cache else {
            self.written.remove(key);
            return Err(WriteOutcome::skipped_gone);
        };
        // Right after a write the cache may not have caught up yet; until it has, what this
        // worker wrote is the truer picture (resource versions are etcd revisions, so a
        // smaller one is older).
        let observed = match self.written.get(key) {
            Some(written) if cached_version.is_none_or(|v| v < written.resource_version) => {
                &written.observed
            }
            _ => {
                self.written.remove(key);
                &cached
            }
        };
        if !is_transition(observed, desired) {
            return Err(WriteOutcome::skipped_unchanged);
        }
        Ok(observed.clone())
    }

    /// Records what a write's answer means for the next decision about the object.
    fn finish(&mut self, key: &ObjectKey, answer: Answer) -> WriteOutcome {
        match answer {
            Ok(Ok(updated)) => {
                if let Some(resource_version) =
                    updated.resource_version().and_then(|v| v.parse().ok())
                {
                    let observed = ObservedStatus::from_object_data(&updated.data);
                    self.written.insert(
                        key.clone(),
                        Written {
                            resource_version,
                            observed,
                        },
                    );
                }
                WriteOutcome::written
            }
            Ok(Err(error)) => {
                warn!(object = %key, %error, "status write failed; the next reconcile retries");
                WriteOutcome::failed
            }
            Err(_) => {
                warn!(object = %key, timeout = ?WRITE_TIMEOUT, "status write timed out; the next reconcile retries");
                WriteOutcome::failed
            }
        }
    }
}
