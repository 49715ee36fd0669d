//! Controller benchmark (`make bench`): 5,000 CapabilityBindings, 10% invalid, on a real
//! control plane. For each write mode — `transitions` (the design: `capstan-controller`) and
//! `every-reconcile` (the naive baseline: `capstan-naive-controller`, the same controller
//! writing every status as it is computed, `e2e/src/bin/naive_controller.rs`), run
//! alternately, three rounds each (`CAPSTAN_BENCH_ROUNDS`) — it measures:
//!
//! - the time from controller start until every binding shows Accepted for its current
//!   generation (each round bumps every binding's generation first, so every round has 5,000
//!   statuses to write);
//! - status writes the apiserver recorded (audit log) for that round's controller;
//! - status writes during three forced resyncs with nothing changed (three restarts: each
//!   re-lists and reconciles every binding, as a resync does);
//! - the controller's peak RSS.
//!
//! Before each round, the apiserver's own limit: 5,000 raw status patches from one client, as
//! JSON merge patches and as server-side apply (what the controller writes), at several
//! concurrencies, the best of each. Progress is counted from a watch, never by polling LISTs.
//!
//! Then one round with the Composed probe on, against the demo provider: time until every
//! binding shows its Composed verdict, status writes, writes over three unchanged probe
//! rounds, the MCP sessions opened at the provider per probe round, and peak RSS. Then the
//! large round: 50,000 bindings, time to all Accepted, writes, peak and settled RSS. With
//! `CAPSTAN_BENCH_HUGE=1` the same at 100,000 bindings and, after it, the apiserver's own limit
//! at that size (raw server-side apply status patches), in a section of its own.
//!
//! Where each round's CPU goes: the controller's, the apiserver's and etcd's CPU seconds per
//! phase (start, initial list, writes), and the same processes' over the raw patches
//! (`controller_cpu/mod.rs`); the last round of the design's mode is reported.
//!
//! Reports medians and the ratios between the modes. Nothing here is asserted. For iterating:
//! `CAPSTAN_BENCH_ROUNDS` (3), `CAPSTAN_BENCH_NAIVE=0`, `CAPSTAN_BENCH_PROBE=0`,
//! `CAPSTAN_BENCH_LARGE=0`, `CAPSTAN_BENCH_CONTROLLER_ARGS` (extra controller flags); the huge
//! round alone: `CAPSTAN_BENCH_PROBE_ONLY=1 CAPSTAN_BENCH_PROBE=0 CAPSTAN_BENCH_LARGE=0
//! CAPSTAN_BENCH_HUGE=1`.

mod controller_cpu;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

use capstan_e2e::ControlPlane;
use capstan_e2e::bench::median;
use capstan_e2e::controller::{
    ControllerProcess, controller_binary, naive_controller_binary, service_account_kubeconfig,
};
use capstan_e2e::objects::{apply_many, sample_binding_spec};
use capstan_e2e::suite::with_plane;
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const BINDINGS: usize = 5_000;
const INVALID_EVERY: usize = 10;

struct Round {
    mode: &'static str,
    first_accepted: Duration,
    all_accepted: Duration,
    writes: usize,
    resync_writes: usize,
    peak_rss_mib: f64,
    /// CPU seconds per process and phase (`controller_cpu/mod.rs`).
    phases: Vec<controller_cpu::Phase>,
}

fn main() {
    let (((rounds, raws), probe), huge) = with_plane("bench-controller", |plane, runtime| {
        runtime.block_on(async {
            // CAPSTAN_BENCH_PROBE_ONLY=1 runs the probe round alone (the write-mode rounds take
            // ~15 min).
            let rounds = if std::env::var_os("CAPSTAN_BENCH_PROBE_ONLY").is_some() {
                open_crds(plane).await;
                (Vec::new(), Vec::new())
            } else {
                bench(plane).await
            };
            // CAPSTAN_BENCH_PROBE=0 leaves the probe round out.
            let probe = if std::env::var("CAPSTAN_BENCH_PROBE").is_ok_and(|v| v == "0") {
                String::new()
            } else {
                probe_round(plane).await
            };
            // CAPSTAN_BENCH_LARGE=0 leaves the 50,000-binding round out.
            let large = if std::env::var("CAPSTAN_BENCH_LARGE").is_ok_and(|v| v == "0") {
                String::new()
            } else {
                large_round(plane, "large", LARGE, false).await
            };
            // CAPSTAN_BENCH_HUGE=1 adds the 100,000-binding round (~30 min), its own section.
            let huge = if std::env::var("CAPSTAN_BENCH_HUGE").is_ok_and(|v| v == "1") {
                large_round(plane, "huge", HUGE, true).await
            } else {
                String::new()
            };
            ((rounds, format!("{probe}\n{large}")), huge)
        })
    });
    println!("<!-- bench:controller -->\n### Controller (`e2e/benches/controller.rs`)\n\n```text");
    report(&rounds, &raws);
    println!("{probe}");
    println!("```\n<!-- /bench:controller -->");
    if !huge.is_empty() {
        println!(
            "<!-- bench:controller_huge -->\n### Controller, {HUGE} bindings \
             (`CAPSTAN_BENCH_HUGE=1`, `e2e/benches/controller.rs`)\n\n```text\n{huge}\n```\n\
             <!-- /bench:controller_huge -->"
        );
    }
}

/// Seconds between probes in the probe round: 5,000 bindings at 8 at once fit well inside.
const PROBE_INTERVAL_SECONDS: u64 = 60;

/// The `initialize` requests the provider received: MCP sessions opened.
async fn sessions_opened(provider: &capstan_testkit::DemoProvider) -> usize {
    provider
        .requests()
        .await
        .iter()
        .filter_map(|r| r["rpc"].as_array())
        .flatten()
        .filter(|m| m["method"] == "initialize")
        .count()
}

/// The probe round: every binding's endpoint on a running demo provider, probing on.
async fn probe_round(plane: &ControlPlane) -> String {
    let client = plane.client().await.unwrap_or_else(|e| panic!("{e}"));
    let api: Api<DynamicObject> = Api::all_with(client, &binding_resource());
    let provider = capstan_testkit::DemoProvider::start(&[]);
    let endpoint = provider.url("/mcp");
    apply_all(&api, |index| {
        let mut spec = spec(index, 99);
        spec["tools"]["mcpServers"][0]["endpoint"] = json!(endpoint);
        // Each binding its own server name: no binding takes another's tools.
        spec["tools"]["mcpServers"][0]["name"] = json!(format!("s{index}"));
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("skills");
        }
        spec
    })
    .await;
    let identity = "bench-probe";
    let kubeconfig = service_account_kubeconfig(plane, identity).unwrap_or_else(|e| panic!("{e}"));
    let user = format!("system:serviceaccount:capstan-system:{identity}");
    let host = provider.host();
    let interval = PROBE_INTERVAL_SECONDS.to_string();
    let args = [
        "--log",
        "warn",
        "--mcp-endpoint-hosts",
        &host,
        "--probe-interval-seconds",
        &interval,
    ];
    let before = sessions_opened(&provider).await;
    let mut composed = ConditionCount::watch(&api, "Composed");
    let started = Instant::now();
    let mut controller = ControllerProcess::start(plane, &kubeconfig, identity, &args)
        .unwrap_or_else(|e| panic!("{e}"));
    composed
        .wait_for(
            BINDINGS,
            &mut controller,
            (started, Duration::from_secs(900)),
            "probe round, all Composed",
            |_, _| {},
        )
        .await;
    let all_composed = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = writes_by(plane, &user);
    let first_round_sessions = sessions_opened(&provider).await - before;
    // Three more probe rounds with nothing changing.
    let probes = || controller.metric("capstan_controller_probes_total{");
    let probed = probes();
    let rounds_started = Instant::now();
    let valid = (BINDINGS - BINDINGS / INVALID_EVERY) as f64;
    while probes() < probed + 3.0 * valid {
        assert!(
            rounds_started.elapsed() < Duration::from_secs(20 * PROBE_INTERVAL_SECONDS),
            "three probe rounds did not finish"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let unchanged_writes = writes_by(plane, &user) - writes;
    let sessions = sessions_opened(&provider).await - before;
    let probe_sum = controller.metric("capstan_controller_probe_duration_seconds_sum");
    let probe_count = controller.metric("capstan_controller_probe_duration_seconds_count");
    let peak = controller.peak_rss_mib();
    drop(controller);
    format!(
        "probe round ({BINDINGS} bindings, {}% invalid, demo provider, interval {PROBE_INTERVAL_SECONDS} s, \
         8 at once): all Composed after {all_composed:.2?}, {writes} status writes, \
         {unchanged_writes} during 3 unchanged probe rounds, {first_round_sessions} MCP sessions \
         in the first round ({sessions} over 4 rounds), mean probe {:.1} ms, peak RSS {peak:.1} MiB",
        100 / INVALID_EVERY,
        1000.0 * probe_sum / probe_count.max(1.0)
    )
}

fn binding_resource() -> ApiResource {
    ApiResource::erase::<capstan_api::CapabilityBinding>(&())
}

fn spec(index: usize, round: usize) -> Value {
    sample_binding_spec(
        index,
        &format!("round-{round}"),
        !index.is_multiple_of(INVALID_EVERY),
    )
}

/// Applies every binding with the spec `spec_of` gives its index (32 requests in flight).
async fn apply_all(api: &Api<DynamicObject>, spec_of: impl Fn(usize) -> Value) {
    apply_range(api, 0..BINDINGS, spec_of).await;
}

/// Applies the bindings numbered `indices` with the spec `spec_of` gives each.
async fn apply_range(
    api: &Api<DynamicObject>,
    indices: std::ops::Range<usize>,
    spec_of: impl Fn(usize) -> Value,
) {
    let client = kube::Client::from(api.clone());
    let objects = indices.map(|index| (format!("bench-{index:05}"), spec_of(index)));
    apply_many(&client, "CapabilityBinding", objects, 32)
        .await
        .unwrap_or_else(|e| panic!("applying bindings: {e}"));
}

/// Whether `object` shows a condition of `type_` for its current generation (`Composed` only
/// with a probe verdict, not `NotProbed`).
fn shows(object: &DynamicObject, type_: &str) -> bool {
    let generation = object.metadata.generation;
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c["type"] == type_
                    && c["reason"] != "NotProbed"
                    && c["observedGeneration"].as_i64() == generation
            })
        })
}

/// How many bindings show a condition of `type_` for their current generation, kept from a
/// watch. Polling with LISTs would not do: one LIST of 5,000 bindings costs the apiserver
/// about a third of a CPU-second, on the same two cores the measured writes need.
struct ConditionCount {
    count: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl ConditionCount {
    fn watch(api: &Api<DynamicObject>, type_: &'static str) -> Self {
        let (sender, count) = tokio::sync::watch::channel(0);
        let api = api.clone();
        let task = tokio::spawn(async move {
            // Per binding whether it shows the condition, and how many do (kept as events
            // arrive: recounting 50,000 entries per event would not keep up).
            let mut showing: HashMap<String, bool> = HashMap::new();
            let mut count = 0usize;
            let mut relisted: HashMap<String, bool> = HashMap::new();
            let config = watcher::Config::default().any_semantic();
            let mut events = std::pin::pin!(watcher(api, config).default_backoff());
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Init) => relisted.clear(),
                    Ok(watcher::Event::InitApply(object)) => {
                        relisted.insert(object.name_any(), shows(&object, type_));
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => {
                        showing = std::mem::take(&mut relisted);
                        count = showing.values().filter(|shown| **shown).count();
                    }
                    Ok(watcher::Event::Apply(object)) => {
                        let now = shows(&object, type_);
                        let before = showing.insert(object.name_any(), now).unwrap_or(false);
                        count = count + usize::from(now) - usize::from(before);
                    }
                    Ok(watcher::Event::Delete(object)) => {
                        let before = showing.remove(&object.name_any()).unwrap_or(false);
                        count -= usize::from(before);
                    }
                    Err(_) => continue,
                }
                sender.send_replace(count);
            }
        });
        Self { count, task }
    }

    fn now(&self) -> usize {
        *self.count.borrow()
    }

    /// Waits until `target` objects show the condition, failing the bench if `controller`
    /// exits or `limit` passes since `started`; `seen` gets the elapsed time and the count at
    /// every change.
    async fn wait_for(
        &mut self,
        target: usize,
        controller: &mut ControllerProcess,
        (started, limit): (Instant, Duration),
        what: &str,
        mut seen: impl FnMut(Duration, usize),
    ) {
        loop {
            let now = self.now();
            seen(started.elapsed(), now);
            if now == target {
                return;
            }
            assert!(
                controller.is_running(),
                "{what}: the controller exited:\n{}",
                controller.log_text()
            );
            assert!(
                started.elapsed() < limit,
                "{what}: not {target} in {limit:?}"
            );
            self.changed_within_a_second().await;
        }
    }

    /// Waits for the next change, at most a second.
    async fn changed_within_a_second(&mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.count.changed()).await;
    }
}

impl Drop for ConditionCount {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Successful status writes to bindings by `user`, from the audit log.
fn writes_by(plane: &ControlPlane, user: &str) -> usize {
    plane
        .status_writes("capabilitybindings", |_| true)
        .get(user)
        .copied()
        .unwrap_or(0)
}

/// Waits until a freshly started controller leads, has reconciled every binding and has an
/// empty queue (its /metrics), and then until the audit log shows no new status write by
/// `user` for five seconds. The audit log is what both modes share: the baseline writes from
/// its reconciles, not through the queue.
async fn wait_until_settled(
    plane: &ControlPlane,
    controller: &ControllerProcess,
    user: &str,
    bindings: usize,
) {
    let started = Instant::now();
    let deadline = || {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "controller did not settle in 10 min"
        );
    };
    loop {
        let leads = controller.metric("capstan_controller_leader ") == 1.0;
        let reconciled =
            controller.metric("capstan_controller_reconciles_total{kind=\"CapabilityBinding\"");
        let queued = controller.metric("capstan_controller_status_queue_depth");
        if leads && reconciled >= bindings as f64 && queued == 0.0 {
            break;
        }
        deadline();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut last = writes_by(plane, user);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = writes_by(plane, user);
        if now == last {
            return;
        }
        last = now;
        deadline();
    }
}

/// Installs the CRDs, the binding CRD with an open spec schema (so invalid bindings reach the
/// controller), and returns an admin client.
async fn open_crds(plane: &ControlPlane) -> kube::Client {
    plane
        .client_with_open_crds()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Bindings in the large round.
const LARGE: usize = 50_000;

/// Bindings in the huge round (`CAPSTAN_BENCH_HUGE=1`).
const HUGE: usize = 100_000;

/// Concurrencies the raw baseline tries at the huge size, where each try takes ten minutes: the
/// one that was best most often at 5,000 (a lower bound of the apiserver's best, so the ratio
/// errs against the controller).
const HUGE_RAW_CONCURRENCY: [usize; 1] = [128];

/// A round of `size` bindings (10% invalid), every one with a new generation, and a controller
/// started on them with probing off — time until all are Accepted, its writes, and its memory:
/// peak RSS, and RSS after three minutes settled (what it keeps, not what the initial burst of
/// reconciles and writes took). With `raw`, the apiserver's own limit at that size after it:
/// the same count of raw server-side-apply status patches at `HUGE_RAW_CONCURRENCY`, the best.
async fn large_round(plane: &ControlPlane, label: &str, size: usize, raw: bool) -> String {
    let client = open_crds(plane).await;
    let api: Api<DynamicObject> = Api::all_with(client, &binding_resource());
    let created = Instant::now();
    apply_range(&api, 0..size, |index| spec(index, 1_000 + size)).await;
    eprintln!("{size}-binding round: applied in {:.1?}", created.elapsed());
    let mut accepted = ConditionCount::watch(&api, "Accepted");
    while accepted.now() > 0 {
        accepted.changed_within_a_second().await;
    }
    let identity = format!("bench-large-{size}");
    let kubeconfig = service_account_kubeconfig(plane, &identity).unwrap_or_else(|e| panic!("{e}"));
    let user = format!("system:serviceaccount:capstan-system:{identity}");
    let args = ["--log", "warn", "--probe-interval-seconds", "0"];
    let started = Instant::now();
    let mut controller = ControllerProcess::start(plane, &kubeconfig, &identity, &args)
        .unwrap_or_else(|e| panic!("{e}"));
    accepted
        .wait_for(
            size,
            &mut controller,
            (started, Duration::from_secs(3600)),
            "large round, all Accepted",
            |_, _| {},
        )
        .await;
    let all_accepted = started.elapsed();
    let peak_at_accepted = controller.peak_rss_mib();
    wait_until_settled(plane, &controller, &user, size).await;
    // Three minutes with nothing changing: what the controller holds, not what it took.
    let mut samples = Vec::new();
    for _ in 0..18 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        samples.push(controller.rss_mib());
    }
    let writes = writes_by(plane, &user);
    let peak = controller.peak_rss_mib();
    drop(controller);
    let mut report = format!(
        "{label} round ({size} bindings, {}% invalid, probing off): all Accepted after {all_accepted:.1?}, \
         {writes} status writes, peak RSS {peak_at_accepted:.1} MiB until all Accepted ({peak:.1} MiB \
         overall), RSS settled {:.1} MiB (min {:.1}, max {:.1} over 3 min) (goal <= 256 MiB)",
        100 / INVALID_EVERY,
        samples.last().copied().unwrap_or_default(),
        samples.iter().copied().fold(f64::INFINITY, f64::min),
        samples.iter().copied().fold(0.0, f64::max),
    );
    // Shown at once: the raw baseline after it takes minutes more.
    eprintln!("{report}");
    if raw {
        let (took, concurrency, _) =
            raw_status_patches(plane, &api, RawKind::Apply, 0, size, &HUGE_RAW_CONCURRENCY).await;
        report.push_str(&format!(
            "\nthe apiserver's own limit at {size}: raw server-side apply status patches at the \
             best of {HUGE_RAW_CONCURRENCY:?} in flight ({concurrency}): {took:.1?}; all \
             Accepted / raw: {:.2}x (goal <= 1.2x)",
            all_accepted.as_secs_f64() / took.as_secs_f64()
        ));
    }
    report
}

/// Concurrencies the raw status-patch baseline tries.
const RAW_CONCURRENCY: [usize; 4] = [8, 32, 128, 256];

/// The two kinds of raw status patch: a JSON merge patch (the cheapest write the apiserver
/// takes) and a server-side apply of the same two conditions the controller writes (what the
/// controller does, with managed fields to track).
#[derive(Clone, Copy, PartialEq)]
enum RawKind {
    Merge,
    Apply,
}

impl RawKind {
    fn name(self) -> &'static str {
        match self {
            RawKind::Merge => "merge",
            RawKind::Apply => "server-side apply",
        }
    }
}

/// The apiserver's own limit for what the controller does: a status patch (a new Accepted
/// condition) for every binding, from one kept-alive client with `RAW_CONCURRENCY` requests in
/// flight; the best (time, concurrency, CPU seconds of this client, the apiserver and etcd).
async fn raw_status_patches(
    plane: &ControlPlane,
    api: &Api<DynamicObject>,
    kind: RawKind,
    round: usize,
    count: usize,
    concurrencies: &[usize],
) -> (Duration, usize, controller_cpu::Phase) {
    let mut best: Option<(Duration, usize, controller_cpu::Phase)> = None;
    for &concurrency in concurrencies {
        let [apiserver, etcd] = controller_cpu::plane_pids(plane);
        let timeline = controller_cpu::Timeline::start([std::process::id(), apiserver, etcd]);
        let from = SystemTime::now();
        let started = Instant::now();
        futures::stream::iter(0..count)
            .map(|index| {
                let name = format!("bench-{index:05}");
                let message = format!("raw patch, round {round}, {concurrency} in flight");
                async move {
                    match kind {
                        RawKind::Merge => {
                            let status = json!({ "status": { "conditions": [{
                                "type": "Accepted", "status": "True", "reason": "Raw",
                                "message": message,
                                "observedGeneration": 0, "lastTransitionTime": "2026-01-01T00:00:00Z"
                            }]}});
                            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                                .await
                        }
                        RawKind::Apply => {
                            let status = json!({
                                "apiVersion": capstan_api::API_VERSION, "kind": "CapabilityBinding",
                                "metadata": { "name": name },
                                "status": { "observedGeneration": 0, "conditions": [{
                                    "type": "Accepted", "status": "True", "reason": "Raw",
                                    "message": message,
                                    "observedGeneration": 0, "lastTransitionTime": "2026-01-01T00:00:00Z"
                                }, {
                                    "type": "Composed", "status": "Unknown", "reason": "NotProbed",
                                    "message": "probing is off",
                                    "observedGeneration": 0, "lastTransitionTime": "2026-01-01T00:00:00Z"
                                }]}
                            });
                            api.patch_status(
                                &name,
                                &PatchParams::apply("bench-raw").force(),
                                &Patch::Apply(&status),
                            )
                            .await
                        }
                    }
                }
            })
            .buffer_unordered(concurrency)
            .try_for_each(|_| async { Ok(()) })
            .await
            .unwrap_or_else(|e| panic!("raw status patches: {e}"));
        let took = started.elapsed();
        let phase = controller_cpu::raw_phase(&timeline.finish(), (from, SystemTime::now()));
        eprintln!(
            "round {round}: {count} raw {} status patches, {concurrency} in flight: {took:.2?}",
            kind.name()
        );
        if best.as_ref().is_none_or(|(b, _, _)| took < *b) {
            best = Some((took, concurrency, phase));
        }
    }
    best.unwrap_or_else(|| panic!("raw status patches: no concurrency to try"))
}

/// The best merge and server-side apply baselines of one round; in the last round also the
/// server-side apply patches again at their best concurrency with one more watch of the
/// bindings open, as the controller holds its own beside the bench's (`explained`).
struct Raw {
    merge: (Duration, usize, controller_cpu::Phase),
    apply: (Duration, usize, controller_cpu::Phase),
    watched: Option<(Duration, controller_cpu::Phase)>,
}

/// The raw server-side apply patches at `concurrency` with a second watch of the bindings
/// open (the bench's own `ConditionCount` is the first): what the apiserver spends sending
/// every write to one more watcher, which a controller cannot do without. Not the goal's
/// baseline, which stays the raw patches as they are; it explains the distance to it.
async fn raw_with_a_second_watch(
    plane: &ControlPlane,
    api: &Api<DynamicObject>,
    round: usize,
    concurrency: usize,
) -> (Duration, controller_cpu::Phase) {
    let second = ConditionCount::watch(api, "Accepted");
    // Its initial list done before the clock starts, as the controller's is.
    let mut seen = second.count.clone();
    let _ = tokio::time::timeout(Duration::from_secs(60), seen.changed()).await;
    let (took, _, mut phase) =
        raw_status_patches(plane, api, RawKind::Apply, round, BINDINGS, &[concurrency]).await;
    drop(second);
    phase.name = "raw, with a second watch open";
    (took, phase)
}

/// Rounds per write mode: `CAPSTAN_BENCH_ROUNDS`, 3 unless set.
fn rounds() -> usize {
    std::env::var("CAPSTAN_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// The write modes to run: both, or only the design's with `CAPSTAN_BENCH_NAIVE=0` (the naive
/// mode takes ~4 min a round; leaving it out is for iterating on the design's mode).
fn modes() -> &'static [&'static str] {
    if std::env::var("CAPSTAN_BENCH_NAIVE").is_ok_and(|v| v == "0") {
        &["transitions"]
    } else {
        &["transitions", "every-reconcile"]
    }
}

/// The program a write mode runs: the controller, or its naive baseline.
fn program(mode: &str) -> std::path::PathBuf {
    match mode {
        "every-reconcile" => naive_controller_binary(),
        _ => controller_binary(),
    }
}

/// Extra flags for the measured controller (`CAPSTAN_BENCH_CONTROLLER_ARGS`, space-separated),
/// e.g. `--status-writes-in-flight 128`.
fn extra_args() -> Vec<String> {
    std::env::var("CAPSTAN_BENCH_CONTROLLER_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

async fn bench(plane: &ControlPlane) -> (Vec<Round>, Vec<Raw>) {
    let client = open_crds(plane).await;
    let api: Api<DynamicObject> = Api::all_with(client, &binding_resource());

    let created = Instant::now();
    apply_all(&api, |index| spec(index, 0)).await;
    eprintln!("created {BINDINGS} bindings in {:.1?}", created.elapsed());
    // One list before the clock starts: the first list of the bindings after they were
    // created has been seen to take ~95 s on this apiserver (the first round's controller
    // stalled on its own initial list for as long), which is not the controller's time.
    let warm = Instant::now();
    let listed = api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list: {e}"))
        .items
        .len();
    eprintln!(
        "first list of all {listed} bindings took {:.1?}",
        warm.elapsed()
    );
    let mut accepted = ConditionCount::watch(&api, "Accepted");
    let extra = extra_args();

    let mut rounds = Vec::new();
    let mut raws = Vec::new();
    for round in 1..=self::rounds() {
        raws.push(Raw {
            merge: raw_status_patches(
                plane,
                &api,
                RawKind::Merge,
                round,
                BINDINGS,
                &RAW_CONCURRENCY,
            )
            .await,
            apply: raw_status_patches(
                plane,
                &api,
                RawKind::Apply,
                round,
                BINDINGS,
                &RAW_CONCURRENCY,
            )
            .await,
            watched: None,
        });
        if round == self::rounds() {
            let best = raws.last().map_or(RAW_CONCURRENCY[0], |raw| raw.apply.1);
            let watched = raw_with_a_second_watch(plane, &api, round, best).await;
            if let Some(raw) = raws.last_mut() {
                raw.watched = Some(watched);
            }
        }
        for &mode in modes() {
            // A new generation for every binding: this round's controller has 5,000 to write.
            let generation = round * 10 + rounds.len();
            apply_all(&api, |index| spec(index, generation)).await;
            while accepted.now() > 0 {
                accepted.changed_within_a_second().await;
            }
            let identity = format!("bench-{mode}-{round}");
            let kubeconfig =
                service_account_kubeconfig(plane, &identity).unwrap_or_else(|e| panic!("{e}"));
            let user = format!("system:serviceaccount:capstan-system:{identity}");

            let started = Instant::now();
            let spawned = SystemTime::now();
            // Probing off: these rounds measure Accepted writes (the probe has its own round).
            let mut args = vec!["--log", "warn", "--probe-interval-seconds", "0"];
            args.extend(extra.iter().map(String::as_str));
            let program = program(mode);
            let start = || {
                ControllerProcess::start_program(
                    &program,
                    plane,
                    &kubeconfig,
                    &identity,
                    &args,
                    &[],
                )
                .unwrap_or_else(|e| panic!("{e}"))
            };
            let mut controller = start();
            let [apiserver, etcd] = controller_cpu::plane_pids(plane);
            let timeline =
                controller_cpu::Timeline::start([controller.pid().unwrap_or(0), apiserver, etcd]);
            let mut progress = Vec::new();
            let mut first = None;
            accepted
                .wait_for(
                    BINDINGS,
                    &mut controller,
                    (started, Duration::from_secs(600)),
                    &format!("{mode}, all Accepted"),
                    |elapsed, now| {
                        progress.push((elapsed.as_secs(), now));
                        if now > 0 && first.is_none() {
                            first = Some(elapsed);
                        }
                    },
                )
                .await;
            let all_accepted = started.elapsed();
            let (samples, done) = (timeline.finish(), SystemTime::now());
            eprintln!(
                "round {round} {mode}: first Accepted after {:.2?} (process start, lease, initial list)",
                first.unwrap_or_default()
            );
            // Let in-flight writes land before counting.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let writes = writes_by(plane, &user);
            let phases = controller_cpu::controller_phases(plane, &user, &samples, (spawned, done));
            let peak = controller.peak_rss_mib();
            // Where the time went: the queue worker's write latency (transitions mode only),
            // and how many bindings were Accepted every 10 s.
            let write_count =
                controller.metric("capstan_controller_status_write_duration_seconds_count");
            let write_sum =
                controller.metric("capstan_controller_status_write_duration_seconds_sum");
            if write_count > 0.0 {
                eprintln!(
                    "round {round} {mode}: {write_count} queued writes, mean {:.1} ms, {:.1} s writing",
                    1000.0 * write_sum / write_count,
                    write_sum
                );
            }
            progress.dedup_by_key(|(secs, _)| *secs / 10);
            let timeline: Vec<String> = progress
                .iter()
                .map(|(secs, accepted)| format!("{secs}s:{accepted}"))
                .collect();
            eprintln!(
                "round {round} {mode}: accepted over time {}",
                timeline.join(" ")
            );
            drop(controller);

            // Three forced resyncs with nothing changed: a restart re-lists and reconciles
            // every binding, which is what a resync does, without waiting out a period.
            for _ in 0..3 {
                let controller = start();
                wait_until_settled(plane, &controller, &user, BINDINGS).await;
                drop(controller);
            }
            let resync_writes = writes_by(plane, &user) - writes;
            eprintln!(
                "round {round} {mode}: all accepted after {all_accepted:.2?}, {writes} writes, \
                 {resync_writes} during 3 resyncs, peak RSS {peak:.1} MiB"
            );
            rounds.push(Round {
                mode,
                first_accepted: first.unwrap_or_default(),
                all_accepted,
                writes,
                resync_writes,
                peak_rss_mib: peak,
                phases,
            });
        }
    }
    (rounds, raws)
}

fn report(rounds: &[Round], raws: &[Raw]) {
    if rounds.is_empty() {
        return;
    }
    println!(
        "\ncapstan-controller: {BINDINGS} bindings ({}% invalid), medians of {} rounds, modes alternated",
        100 / INVALID_EVERY,
        raws.len()
    );
    println!(
        "{:<16} {:>15} {:>14} {:>14} {:>20} {:>13}",
        "mode",
        "first Accepted",
        "all Accepted",
        "status writes",
        "writes in 3 resyncs",
        "peak RSS"
    );
    let mut medians = BTreeMap::new();
    for mode in modes() {
        let of = |f: &dyn Fn(&Round) -> f64| {
            median(rounds.iter().filter(|r| r.mode == *mode).map(f).collect())
        };
        let row = (
            of(&|r| r.all_accepted.as_secs_f64()),
            of(&|r| r.writes as f64),
            of(&|r| r.resync_writes as f64),
            of(&|r| r.peak_rss_mib),
            of(&|r| r.first_accepted.as_secs_f64()),
        );
        println!(
            "{mode:<16} {:>13.2} s {:>12.2} s {:>14} {:>20} {:>9.1} MiB",
            row.4, row.0, row.1, row.2, row.3
        );
        medians.insert(*mode, row);
    }
    if let (Some(t), Some(e)) = (medians.get("transitions"), medians.get("every-reconcile")) {
        println!(
            "ratio transitions/every-reconcile: time {:.2}x, writes {:.2}x, resync writes {} vs {}, RSS {:.2}x",
            t.0 / e.0,
            t.1 / e.1.max(1.0),
            t.2,
            e.2,
            t.3 / e.3.max(f64::MIN_POSITIVE)
        );
    }
    let Some(t) = medians.get("transitions") else {
        return;
    };
    for kind in [RawKind::Merge, RawKind::Apply] {
        let pick = |raw: &Raw| match kind {
            RawKind::Merge => (raw.merge.0, raw.merge.1),
            RawKind::Apply => (raw.apply.0, raw.apply.1),
        };
        let best = median(raws.iter().map(|r| pick(r).0.as_secs_f64()).collect());
        let concurrencies: Vec<String> = raws.iter().map(|r| pick(r).1.to_string()).collect();
        println!(
            "the apiserver's own limit, {}: {BINDINGS} raw status patches at the best of {RAW_CONCURRENCY:?} \
             in flight (best per round: {} in flight), median {best:.2} s; all Accepted / raw: {:.2}x (goal <= 1.2x)",
            kind.name(),
            concurrencies.join(", "),
            t.0 / best
        );
    }
    if let Some((took, _)) = raws.last().and_then(|raw| raw.watched.as_ref()) {
        println!(
            "the same server-side apply patches with a second watch of the bindings open (the \
             controller's own, beside the bench's), last round: {:.2} s; all Accepted / that: \
             {:.2}x (an explanation, not the goal's baseline)",
            took.as_secs_f64(),
            t.0 / took.as_secs_f64()
        );
    }
    let last_round = rounds.iter().rev().find(|r| r.mode == "transitions");
    if let (Some(round), Some(raw)) = (last_round, raws.last()) {
        let mut phases: Vec<&controller_cpu::Phase> = round.phases.iter().collect();
        phases.push(&raw.apply.2);
        if let Some((_, watched)) = &raw.watched {
            phases.push(watched);
        }
        println!(
            "\n{}",
            controller_cpu::report(
                "transitions, last round, and that round's best raw server-side apply \
                 (writer: the controller; for the raw patches, this bench's client)",
                &phases
            )
        );
    }
}
