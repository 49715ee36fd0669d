//! Fleet benchmark (`make bench`): what many sidecars' crd sources cost the apiserver, on a
//! real control plane holding 5,000 CapabilityBindings (10% invalid).
//!
//! N sources (1, 10, 50: `CAPSTAN_BENCH_FLEET_SIZES`) run in this one process, each with its own
//! kube client and connections, as N sidecars would. Three ways of reading, each measured at
//! every N:
//!
//! - `list` — what every sidecar did before the watch: a new client and a consistent LIST of
//!   both kinds once per cache TTL (60 s), the sources' TTLs spread over the minute as pods'
//!   would be;
//! - `list-cached` — what a sidecar with a URL template does now (`source/crd_list.rs` behind
//!   `source/cache.rs`, TTL 60 s): the real source, read every 10 s as sessions would;
//! - `watch` — what a sidecar without a template does now (`source/crd_watch.rs`). Reading a watched
//!   source never reaches the apiserver, so only the probe source (below) reads.
//!
//! For each: the apiserver's CPU-seconds (from `/proc/<pid>/stat`) and the bytes it sent for the
//! two kinds (its own `/metrics`: response sizes of LISTs, sizes of watch events) while the
//! sources start, per minute while idle (`CAPSTAN_BENCH_FLEET_IDLE_SECONDS`, 300), and per
//! minute during 100 binding changes at one a second (`CAPSTAN_BENCH_FLEET_CHANGES`); and the
//! time from each change (its apply answered) until the first source — read every 20 ms — shows
//! it. The apiserver's own idle cost with no source is measured right before each run
//! (`CAPSTAN_BENCH_FLEET_BASELINE_SECONDS`, 120; it drifts over a bench of more than an hour)
//! and taken off that run's per-source CPU. `CAPSTAN_BENCH_FLEET_MODES` picks modes
//! (`list,list-cached,watch`).
//!
//! Nothing here is asserted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_compose::source::CachedSource;
use capstan_compose::source::CrdSource;
use capstan_compose::source::ProjectDocuments;
use capstan_compose::source::Snapshot;
use capstan_compose::source::WatchedCluster;
use capstan_e2e::ControlPlane;
use capstan_e2e::objects::{apply_many, resource, sample_binding_spec};
use capstan_e2e::suite::with_plane;
use capstan_testkit::cpu_seconds;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

const BINDINGS: usize = 5_000;
const INVALID_EVERY: usize = 10;
const TTL: Duration = Duration::from_secs(60);
/// How often a session reads its source in `list-cached`.
const SESSION_EVERY: Duration = Duration::from_secs(10);
/// How often the probe source is read for the change-to-visible time.
const PROBE_EVERY: Duration = Duration::from_millis(20);
/// How long after the last change the probe waits for changes it has not seen yet.
const SETTLE: Duration = Duration::from_secs(90);
/// The project every source reads (without a template every project reads the one cluster).
const PROJECT: &str = "fleet";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    List,
    ListCached,
    Watch,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::ListCached => "list-cached",
            Self::Watch => "watch",
        }
    }
}

/// What the apiserver spent and sent, read at one moment.
#[derive(Clone, Copy, Debug)]
struct Spent {
    at: Instant,
    cpu_seconds: f64,
    bytes: f64,
}

impl Spent {
    async fn now(plane: &ControlPlane, admin: &kube::Client) -> Self {
        let pid = plane
            .apiserver_pid()
            .unwrap_or_else(|| panic!("kube-apiserver is not running"));
        Self {
            at: Instant::now(),
            cpu_seconds: cpu_seconds(pid),
            bytes: bytes_sent(admin).await,
        }
    }

    /// CPU-seconds and MB per minute since `earlier`.
    fn per_minute_since(self, earlier: Self) -> (f64, f64) {
        let minutes = (self.at - earlier.at).as_secs_f64() / 60.0;
        (
            (self.cpu_seconds - earlier.cpu_seconds) / minutes,
            (self.bytes - earlier.bytes) / 1e6 / minutes,
        )
    }

    /// CPU-seconds and MB since `earlier`.
    fn since(self, earlier: Self) -> (f64, f64) {
        (
            self.cpu_seconds - earlier.cpu_seconds,
            (self.bytes - earlier.bytes) / 1e6,
        )
    }
}

/// Bytes the apiserver sent for CapabilityBindings and RouteQualifiers so far: the sizes of
/// its responses (LISTs) and of its watch events, from its `/metrics`.
async fn bytes_sent(admin: &kube::Client) -> f64 {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .unwrap_or_else(|e| panic!("{e}"));
    let text = admin
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("apiserver /metrics: {e}"));
    text.lines()
        .filter(|line| {
            line.starts_with("apiserver_response_sizes_sum{")
                || line.starts_with("apiserver_watch_events_sizes_sum{")
        })
        .filter(|line| {
            line.contains("resource=\"capabilitybindings\"")
                || line.contains("resource=\"routequalifiers\"")
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// One source of the fleet.
enum Source {
    /// Before the watch: a new client and a consistent LIST of both kinds per TTL.
    List {
        config: Box<kube::Config>,
        listed: Option<(Instant, Arc<Vec<DynamicObject>>)>,
    },
    ListCached(CachedSource),
    Watch(WatchedCluster),
}

/// What a source showed at one read.
enum Seen {
    Objects(Arc<Vec<DynamicObject>>),
    Snapshot(Arc<Snapshot>),
}

impl Seen {
    /// The configurationVersion binding `name` shows.
    fn version_of(&self, name: &str) -> Option<String> {
        match self {
            Self::Objects(objects) => objects
                .iter()
                .find(|o| o.metadata.name.as_deref() == Some(name))
                .and_then(|o| o.data["spec"]["configurationVersion"].as_str())
                .map(str::to_owned),
            Self::Snapshot(snapshot) => snapshot
                .documents
                .iter()
                .find(|d| d.binding == name)
                .map(|d| d.spec.configuration_version.clone()),
        }
    }
}

impl Source {
    async fn start(mode: Mode, config: &kube::Config) -> Self {
        match mode {
            Mode::List => Self::List {
                config: Box::new(config.clone()),
                listed: None,
            },
            Mode::ListCached => Self::ListCached(CachedSource::new(
                Arc::new(CrdSource::new(config.clone(), None)),
                TTL,
                1,
            )),
            Mode::Watch => {
                let watched = WatchedCluster::connect(config.clone())
                    .unwrap_or_else(|e| panic!("watched source: {e}"));
                let mut synced = watched.first_sync();
                synced
                    .wait_for(|synced| *synced)
                    .await
                    .unwrap_or_else(|e| panic!("first sync: {e}"));
                Self::Watch(watched)
            }
        }
    }

    /// A read as a session makes it: `list` lists when its TTL has passed.
    async fn read(&mut self) -> Seen {
        match self {
            Self::List { config, listed } => {
                if let Some((at, objects)) = listed
                    && at.elapsed() < TTL
                {
                    return Seen::Objects(objects.clone());
                }
                let client = kube::Client::try_from(config.as_ref().clone())
                    .unwrap_or_else(|e| panic!("{e}"));
                let bindings: Api<DynamicObject> =
                    Api::all_with(client.clone(), &resource("CapabilityBinding"));
                let qualifiers: Api<DynamicObject> =
                    Api::all_with(client, &resource("RouteQualifier"));
                let params = ListParams::default();
                let (bindings, _qualifiers) =
                    futures::join!(bindings.list(&params), qualifiers.list(&params));
                let objects = Arc::new(bindings.map(|l| l.items).unwrap_or_default());
                *listed = Some((Instant::now(), objects.clone()));
                Seen::Objects(objects)
            }
            Self::ListCached(cached) => Seen::Snapshot(cached.read(PROJECT).await.0),
            Self::Watch(watched) => Seen::Snapshot(watched.read(PROJECT).await.0),
        }
    }
}

/// One (mode, N) run's figures.
struct Run {
    mode: Mode,
    sources: usize,
    /// The apiserver with no source, measured right before the run.
    alone: (f64, f64),
    start: (f64, f64),
    idle: (f64, f64),
    changes: (f64, f64),
    visible: Vec<Duration>,
}

fn main() {
    let sizes: Vec<usize> = std::env::var("CAPSTAN_BENCH_FLEET_SIZES")
        .unwrap_or_else(|_| "1,10,50".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let setting = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let idle = Duration::from_secs(setting("CAPSTAN_BENCH_FLEET_IDLE_SECONDS", 300));
    let changes = setting("CAPSTAN_BENCH_FLEET_CHANGES", 100).max(1) as usize;
    let baseline = Duration::from_secs(setting("CAPSTAN_BENCH_FLEET_BASELINE_SECONDS", 120));
    let modes: Vec<Mode> = std::env::var("CAPSTAN_BENCH_FLEET_MODES")
        .unwrap_or_else(|_| "list,list-cached,watch".into())
        .split(',')
        .filter_map(|m| {
            [Mode::List, Mode::ListCached, Mode::Watch]
                .into_iter()
                .find(|k| k.name() == m.trim())
        })
        .collect();
    let runs = with_plane("bench-fleet", |plane, runtime| {
        runtime.block_on(async {
            let admin = plane
                .client_with_open_crds()
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let bindings = (0..BINDINGS).map(|index| (name(index), spec(index, "initial")));
            apply_many(&admin, "CapabilityBinding", bindings, 32)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let config = kube::Config::from_custom_kubeconfig(
                kube::config::Kubeconfig::read_from(plane.kubeconfig())
                    .unwrap_or_else(|e| panic!("{e}")),
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
            let mut runs = Vec::new();
            let mut round = 0;
            for &sources in &sizes {
                for &mode in &modes {
                    round += 1;
                    let run =
                        measure(plane, &admin, &config, mode, (sources, changes), (idle, baseline), round)
                            .await;
                    eprintln!(
                        "fleet: {} × {sources}: alone {:.3?}, idle {:.3?}, changes {:.3?}, visible median {:?}",
                        mode.name(),
                        run.alone,
                        run.idle,
                        run.changes,
                        median(&run.visible)
                    );
                    runs.push(run);
                }
            }
            runs
        })
    });
    report(&runs, (idle, baseline), changes);
}

fn name(index: usize) -> String {
    format!("fleet-{index:05}")
}

fn spec(index: usize, version: &str) -> Value {
    sample_binding_spec(index, version, !index.is_multiple_of(INVALID_EVERY))
}

/// Measures the apiserver alone for `baseline`, then starts `sources` sources reading in
/// `mode`, measures them idle for `idle` and through `changes` changes, and stops them.
async fn measure(
    plane: &ControlPlane,
    admin: &kube::Client,
    config: &kube::Config,
    mode: Mode,
    (sources, changes): (usize, usize),
    (idle, baseline): (Duration, Duration),
    round: usize,
) -> Run {
    // The apiserver alone right before the run: its own idle cost drifts over a long bench.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before_alone = Spent::now(plane, admin).await;
    tokio::time::sleep(baseline).await;
    let alone = Spent::now(plane, admin)
        .await
        .per_minute_since(before_alone);
    let started = Spent::now(plane, admin).await;
    let mut fleet = Vec::new();
    for _ in 0..sources {
        let mut source = Source::start(mode, config).await;
        source.read().await;
        fleet.push(source);
    }
    let probe = fleet.remove(0);
    let start = Spent::now(plane, admin).await.since(started);
    // The others read on their own, their minutes spread over the TTL as pods' would be.
    let readers: Vec<_> = fleet
        .into_iter()
        .enumerate()
        .map(|(index, mut source)| {
            let offset = TTL.mul_f64((index + 1) as f64 / sources as f64);
            tokio::spawn(async move {
                if mode == Mode::Watch {
                    // Its reads never reach the apiserver; keeping it alive is its cost.
                    std::future::pending::<()>().await;
                }
                let every = if mode == Mode::List {
                    TTL
                } else {
                    SESSION_EVERY
                };
                tokio::time::sleep(offset.min(every)).await;
                loop {
                    source.read().await;
                    tokio::time::sleep(every).await;
                }
            })
        })
        .collect();
    let probe = Arc::new(tokio::sync::Mutex::new(probe));
    // The probe reads as a session would every 10 s while idle.
    let idle_reads = {
        let probe = probe.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SESSION_EVERY).await;
                probe.lock().await.read().await;
            }
        })
    };
    let before_idle = Spent::now(plane, admin).await;
    tokio::time::sleep(idle).await;
    let idle_cost = Spent::now(plane, admin).await.per_minute_since(before_idle);
    idle_reads.abort();

    // The changes, one a second, each to its own valid binding (an invalid one never shows in
    // a snapshot); the probe reads every 20 ms.
    let tag = format!("round-{round}");
    let changed: Vec<usize> = (0..BINDINGS)
        .filter(|index| !index.is_multiple_of(INVALID_EVERY))
        .take(changes)
        .collect();
    let (applied_tx, mut applied_rx) = tokio::sync::mpsc::unbounded_channel();
    let changer = {
        let admin = admin.clone();
        let tag = tag.clone();
        let changed = changed.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            for (index, &binding) in changed.iter().enumerate() {
                tick.tick().await;
                let change = std::iter::once((name(binding), spec(binding, &tag)));
                apply_many(&admin, "CapabilityBinding", change, 1)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                let _ = applied_tx.send((index, Instant::now()));
            }
        })
    };
    let before_changes = Spent::now(plane, admin).await;
    let mut applied: Vec<Option<Instant>> = vec![None; changes];
    let mut visible: Vec<Option<Duration>> = vec![None; changes];
    let mut changes_cost = None;
    let mut last_applied = None;
    let mut probe = probe.lock().await;
    loop {
        while let Ok((index, at)) = applied_rx.try_recv() {
            applied[index] = Some(at);
            if index + 1 == changes {
                changes_cost = Some(
                    Spent::now(plane, admin)
                        .await
                        .per_minute_since(before_changes),
                );
                last_applied = Some(at);
            }
        }
        let seen = probe.read().await;
        let now = Instant::now();
        for (index, &binding) in changed.iter().enumerate() {
            if let (Some(at), None) = (applied[index], visible[index])
                && seen.version_of(&name(binding)).as_deref() == Some(tag.as_str())
            {
                visible[index] = Some(now - at);
            }
        }
        let all_seen = visible.iter().all(Option::is_some);
        let settled = last_applied.is_some_and(|at: Instant| at.elapsed() > SETTLE);
        if all_seen || settled {
            break;
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    changer.await.unwrap_or_else(|e| panic!("changes: {e}"));
    for reader in readers {
        reader.abort();
        let _ = reader.await;
    }
    drop(probe);
    // Let the apiserver see the connections go before the next run.
    tokio::time::sleep(Duration::from_secs(5)).await;
    Run {
        mode,
        sources,
        alone,
        start,
        idle: idle_cost,
        changes: changes_cost.unwrap_or_else(|| panic!("no change cost taken")),
        visible: visible.into_iter().flatten().collect(),
    }
}

fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

fn report(runs: &[Run], (idle, baseline): (Duration, Duration), changes: usize) {
    println!("<!-- bench:fleet -->\n### Fleet of crd sources (`e2e/benches/fleet.rs`)\n\n```text");
    println!(
        "{BINDINGS} bindings ({} invalid); per run: the apiserver alone {} s, then idle {} s, then {changes} changes at one a second",
        BINDINGS / INVALID_EVERY,
        baseline.as_secs(),
        idle.as_secs()
    );
    println!();
    println!(
        "{:<12} {:>3} | {:>11} | {:>9} {:>8} | {:>10} {:>9} | {:>12} {:>11} | {:>10} {:>9} | {:>8} {:>8} {:>5}",
        "mode",
        "N",
        "alone CPU/m",
        "start CPU",
        "start MB",
        "idle CPU/m",
        "idle MB/m",
        "idle CPU/m/N",
        "idle KB/m/N",
        "chg CPU/m",
        "chg MB/m",
        "vis p50",
        "vis max",
        "seen"
    );
    for run in runs {
        let n = run.sources as f64;
        let max = run.visible.iter().max().copied().unwrap_or_default();
        println!(
            "{:<12} {:>3} | {:>11.3} | {:>9.2} {:>8.1} | {:>10.3} {:>9.2} | {:>12.4} {:>11.1} | {:>10.3} {:>9.2} | {:>7.2}s {:>7.2}s {:>5}",
            run.mode.name(),
            run.sources,
            run.alone.0,
            run.start.0,
            run.start.1,
            run.idle.0,
            run.idle.1,
            (run.idle.0 - run.alone.0) / n,
            run.idle.1 * 1e3 / n,
            run.changes.0,
            run.changes.1,
            median(&run.visible).as_secs_f64(),
            max.as_secs_f64(),
            format!("{}/{changes}", run.visible.len()),
        );
    }
    println!();
    println!(
        "idle cost per source against `list` at the same N (apiserver CPU above its own idle; bytes sent):"
    );
    for run in runs.iter().filter(|r| r.mode != Mode::List) {
        if let Some(list) = runs
            .iter()
            .find(|r| r.mode == Mode::List && r.sources == run.sources)
        {
            let above = |r: &Run| r.idle.0 - r.alone.0;
            // CPU above the apiserver's own idle is noise below a few hundredths of a second
            // a minute on this machine; bytes are exact.
            let cpu = if above(list) > 0.05 {
                format!("{:.1}%", 100.0 * above(run).max(0.0) / above(list))
            } else {
                "n/a (list within noise)".to_owned()
            };
            let bytes = if list.idle.1 > 0.0 {
                format!("{:.3}%", 100.0 * run.idle.1 / list.idle.1)
            } else {
                "n/a (no list while idle)".to_owned()
            };
            println!(
                "  {:<12} N={:<3} CPU {cpu:>8}  bytes {bytes:>8}",
                run.mode.name(),
                run.sources
            );
        }
    }
    println!("```\n<!-- /bench:fleet -->");
}
