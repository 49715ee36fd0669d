//! Controller soak (`make soak`, see `docs/reliability.md`): 5,000 CapabilityBindings on a real
//! control plane under random spec churn for SOAK_CONTROLLER_SECONDS (300) at
//! SOAK_CONTROLLER_RATE changes per second (20), seeded by SOAK_SEED (random when unset,
//! printed either way so a run can be repeated).
//!
//! The churn mixes what a cluster sees: a new spec for a valid binding, a binding made invalid
//! and valid again, a label-only change and a re-apply of the same spec (neither bumps the
//! generation, so neither may cause a write), two generations back to back on a small hot set
//! (the controller may write the newer one only), and a delete followed by a re-create.
//!
//! Two oracles the controller does not compute:
//! - the apiserver's audit log counts the controller's successful status writes, per binding;
//! - an independent watch of the bindings counts condition transitions: events whose
//!   `status` differs from the one the watch saw before for that object.
//!
//! Every status write must be a transition (a write that changes nothing would show in the
//! audit log but not on the watch), no binding generation may see its Accepted condition
//! change twice, and at the end every binding must show Accepted for its current generation
//! with the verdict its last spec earns. A mismatch fails the run (exit code 1) and is listed.
//! The controller's RSS is printed every 30 s. SOAK_CONTROLLER_WRITE_MODE=every-reconcile runs
//! the benchmark's naive baseline (`capstan-naive-controller`) instead, which the soak must
//! fail.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_e2e::controller::{
    ControllerProcess, controller_binary, naive_controller_binary, service_account_kubeconfig,
};
use capstan_e2e::suite::with_plane;
use capstan_e2e::{ControlPlane, FIELD_MANAGER};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const BINDINGS: usize = 5_000;
/// Bindings that take the back-to-back double changes.
const HOT: usize = 50;
const IDENTITY: &str = "soak-controller";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let seconds = env_u64("SOAK_CONTROLLER_SECONDS", 300);
    let rate = env_u64("SOAK_CONTROLLER_RATE", 20).max(1);
    let seed = env_u64("SOAK_SEED", fastrand::u64(..));
    let failures = with_plane("soak-controller", |plane, runtime| {
        runtime.block_on(soak(plane, seconds, rate, seed))
    });
    if failures.is_empty() {
        println!("controller soak: no failures");
    } else {
        println!("controller soak FAILED:");
        for failure in failures {
            println!("  {failure}");
        }
        std::process::exit(1);
    }
}

/// What the soak last applied to one binding.
#[derive(Clone, Copy)]
struct Applied {
    version: u64,
    valid: bool,
    label: u64,
}

fn object(index: usize, applied: Applied) -> Value {
    let mut spec = json!({
        "serviceRef": { "name": format!("service-{index}") },
        "serviceName": format!("service-{index}.example"),
        "serviceAgentRef": { "name": format!("agent-{index}") },
        "configurationVersion": format!("v{}", applied.version),
        "tools": { "mcpServers": [{
            "name": "streamco",
            "endpoint": "http://127.0.0.1:7810/mcp",
            "toolSelector": { "include": ["streams_list", "streams_get"] }
        }]},
    });
    if !applied.valid {
        spec.as_object_mut().map(|s| s.remove("serviceName"));
    }
    json!({
        "apiVersion": capstan_api::API_VERSION, "kind": "CapabilityBinding",
        "metadata": { "name": name(index), "labels": { "soak/label": applied.label.to_string() } },
        "spec": spec,
    })
}

fn name(index: usize) -> String {
    format!("soak-{index:05}")
}

async fn apply(api: &Api<DynamicObject>, index: usize, applied: Applied) {
    api.patch(
        &name(index),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object(index, applied)),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {}: {e}", name(index)));
}

/// What the independent watch saw: status transitions per object (by uid), and how often the
/// Accepted condition changed per (uid, observedGeneration).
#[derive(Default)]
struct Seen {
    status: HashMap<String, Value>,
    transitions: HashMap<String, usize>,
    name_of: HashMap<String, String>,
    accepted: HashMap<(String, i64), usize>,
    last_accepted: HashMap<String, Value>,
    restarts: usize,
}

impl Seen {
    fn observe(&mut self, object: &DynamicObject) {
        let uid = object.metadata.uid.clone().unwrap_or_default();
        let name = object.metadata.name.clone().unwrap_or_default();
        let status = object.data.get("status").cloned().unwrap_or(Value::Null);
        // A new object's status is the schema's default (`{observedGeneration: 0}`, the CRD's
        // `status` default: docs/plan.md, issue 33): what creation looks like, not a transition
        // anyone wrote.
        let before = self
            .status
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| json!({ "observedGeneration": 0 }));
        if status != before {
            *self.transitions.entry(uid.clone()).or_default() += 1;
            let accepted = status["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Accepted"))
                .cloned()
                .unwrap_or(Value::Null);
            let was = self.last_accepted.get(&uid).unwrap_or(&Value::Null);
            if accepted != *was && !accepted.is_null() {
                let generation = accepted["observedGeneration"].as_i64().unwrap_or(-1);
                *self.accepted.entry((uid.clone(), generation)).or_default() += 1;
            }
            self.last_accepted.insert(uid.clone(), accepted);
        }
        self.status.insert(uid.clone(), status);
        self.name_of.insert(uid, name);
    }

    /// Transitions per binding name (a re-created binding's objects summed).
    fn transitions_by_name(&self) -> BTreeMap<String, usize> {
        let mut by_name = BTreeMap::new();
        for (uid, count) in &self.transitions {
            let name = self.name_of.get(uid).cloned().unwrap_or_default();
            *by_name.entry(name).or_default() += count;
        }
        by_name
    }
}

/// Watches every binding until the task is aborted, recording into `seen`.
fn watch(api: Api<DynamicObject>, seen: Arc<Mutex<Seen>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut inits = 0;
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = events.next().await {
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                Ok(watcher::Event::Init) => {
                    inits += 1;
                    seen.restarts = inits - 1;
                }
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    seen.observe(&object)
                }
                Ok(watcher::Event::Delete(object)) => seen.observe(&object),
                Ok(watcher::Event::InitDone) | Err(_) => {}
            }
        }
    })
}

/// Bindings showing Accepted for their current generation with the verdict `applied` earns,
/// and up to three that do not.
async fn converged(api: &Api<DynamicObject>, applied: &[Applied]) -> (usize, Vec<String>) {
    let list = api
        .list(&ListParams::default().match_any())
        .await
        .unwrap_or_else(|e| panic!("list: {e}"));
    let mut ok = 0;
    let mut lagging = Vec::new();
    for object in &list.items {
        let Some(index) = object
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.strip_prefix("soak-"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let expected = if applied[index].valid {
            "True"
        } else {
            "False"
        };
        let generation = object.metadata.generation;
        let accepted = object.data["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Accepted"));
        match accepted {
            Some(c)
                if c["observedGeneration"].as_i64() == generation && c["status"] == expected =>
            {
                ok += 1
            }
            other if lagging.len() < 3 => lagging.push(format!(
                "{} (generation {generation:?}, expected {expected}): {}",
                object.metadata.name.as_deref().unwrap_or("?"),
                other.map_or("no Accepted".into(), Value::to_string)
            )),
            _ => {}
        }
    }
    (ok, lagging)
}

/// Waits until every binding has converged, up to `limit`; the time it took, or what lags.
async fn until_converged(
    api: &Api<DynamicObject>,
    applied: &[Applied],
    controller: &mut ControllerProcess,
    limit: Duration,
) -> Result<Duration, String> {
    let started = Instant::now();
    loop {
        let (ok, lagging) = converged(api, applied).await;
        if ok == BINDINGS {
            return Ok(started.elapsed());
        }
        if !controller.is_running() {
            return Err(format!("the controller exited:\n{}", controller.log_text()));
        }
        if started.elapsed() > limit {
            return Err(format!(
                "{ok}/{BINDINGS} converged after {limit:?}; e.g. {}",
                lagging.join("; ")
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Change {
    NewSpec,
    Invalidate,
    Revalidate,
    LabelOnly,
    SameSpec,
    BackToBack,
    Recreate,
}

fn pick(rng: &mut fastrand::Rng, applied: &[Applied]) -> (usize, Change) {
    let roll = rng.u32(..100);
    if roll < 10 {
        return (rng.usize(..HOT), Change::BackToBack);
    }
    let index = rng.usize(HOT..BINDINGS);
    let change = match roll {
        10..=49 => Change::NewSpec,
        50..=64 if applied[index].valid => Change::Invalidate,
        50..=64 => Change::Revalidate,
        65..=79 => Change::LabelOnly,
        80..=94 => Change::SameSpec,
        _ => Change::Recreate,
    };
    (index, change)
}

async fn soak(plane: &ControlPlane, seconds: u64, rate: u64, seed: u64) -> Vec<String> {
    println!(
        "controller soak: {BINDINGS} bindings, {seconds} s of churn at {rate} changes/s, SOAK_SEED={seed}"
    );
    // An open spec schema, so invalid bindings reach the controller.
    let client = plane
        .client_with_open_crds()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let resource = ApiResource::erase::<capstan_api::CapabilityBinding>(&());
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watching = watch(api.clone(), seen.clone());

    let mut rng = fastrand::Rng::with_seed(seed);
    let mut applied: Vec<Applied> = (0..BINDINGS)
        .map(|index| Applied {
            version: 0,
            valid: !index.is_multiple_of(10),
            label: 0,
        })
        .collect();
    let created = Instant::now();
    futures::stream::iter(applied.clone().into_iter().enumerate())
        .map(|(index, a)| {
            let api = api.clone();
            async move {
                apply(&api, index, a).await;
                Ok::<_, ()>(())
            }
        })
        .buffer_unordered(32)
        .try_for_each(|()| async { Ok(()) })
        .await
        .ok();
    println!("created {BINDINGS} bindings in {:.1?}", created.elapsed());

    let kubeconfig = service_account_kubeconfig(plane, IDENTITY).unwrap_or_else(|e| panic!("{e}"));
    let user = format!("system:serviceaccount:capstan-system:{IDENTITY}");
    // SOAK_CONTROLLER_WRITE_MODE=every-reconcile runs the benchmark's naive baseline: the
    // soak must then fail on writes that are not transitions.
    let program = match std::env::var("SOAK_CONTROLLER_WRITE_MODE").as_deref() {
        Ok("every-reconcile") => naive_controller_binary(),
        _ => controller_binary(),
    };
    let args = ["--log", "warn", "--probe-interval-seconds", "0"];
    let mut controller =
        ControllerProcess::start_program(&program, plane, &kubeconfig, IDENTITY, &args, &[])
            .unwrap_or_else(|e| panic!("{e}"));
    let mut failures = Vec::new();
    match until_converged(&api, &applied, &mut controller, Duration::from_secs(600)).await {
        Ok(took) => println!("initial: every binding Accepted after {took:.1?}"),
        Err(e) => {
            failures.push(format!("initial convergence: {e}"));
            return failures;
        }
    }

    let mut changes: BTreeMap<Change, usize> = BTreeMap::new();
    let mut generations = 0usize;
    let mut rss = vec![(0u64, controller.rss_mib())];
    let mut peak_depth = 0.0f64;
    let churn_started = Instant::now();
    // The queue depth is read from /metrics (a curl process) four times a second, not after
    // every change: at full rate that would spend the machine on curl, not on the churn.
    let mut depth_read = churn_started;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while churn_started.elapsed() < Duration::from_secs(seconds) {
        tick.tick().await;
        let (index, change) = pick(&mut rng, &applied);
        let a = &mut applied[index];
        match change {
            Change::NewSpec => a.version += 1,
            Change::Invalidate | Change::Revalidate => a.valid = !a.valid,
            Change::LabelOnly => a.label += 1,
            Change::SameSpec => {}
            Change::BackToBack => {
                a.version += 1;
                apply(&api, index, *a).await;
                generations += 1;
                a.version += 1;
            }
            Change::Recreate => {
                api.delete(&name(index), &DeleteParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("deleting {}: {e}", name(index)));
                a.version += 1;
            }
        }
        apply(&api, index, applied[index]).await;
        if !matches!(change, Change::LabelOnly | Change::SameSpec) {
            generations += 1;
        }
        *changes.entry(change).or_default() += 1;
        if depth_read.elapsed() >= Duration::from_millis(250) {
            depth_read = Instant::now();
            peak_depth = peak_depth.max(controller.metric("capstan_controller_status_queue_depth"));
        }
        let secs = churn_started.elapsed().as_secs();
        if secs >= rss.last().map_or(0, |(s, _)| *s) + 30 {
            let mib = controller.rss_mib();
            rss.push((secs, mib));
            println!("{secs:>4} s: controller RSS {mib:.1} MiB");
        }
        if !controller.is_running() {
            failures.push(format!("the controller exited:\n{}", controller.log_text()));
            return failures;
        }
    }
    let churned = churn_started.elapsed();
    let applied_total: usize = changes.values().sum();
    println!(
        "churn: {applied_total} changes in {churned:.1?} ({:.1}/s), {generations} new generations; {}",
        applied_total as f64 / churned.as_secs_f64(),
        changes
            .iter()
            .map(|(change, n)| format!("{change:?} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match until_converged(&api, &applied, &mut controller, Duration::from_secs(600)).await {
        Ok(took) => {
            println!("after churn: every binding converged {took:.1?} after the last change")
        }
        Err(e) => failures.push(format!("convergence after churn: {e}")),
    }
    rss.push((churned.as_secs(), controller.rss_mib()));

    // Let the last writes land on both oracles: nothing new on either for five seconds.
    let count = |seen: &Arc<Mutex<Seen>>| {
        let watched: usize = seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .transitions
            .values()
            .sum();
        (
            plane.status_write_events("capabilitybindings").len(),
            watched,
        )
    };
    let mut last = count(&seen);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = count(&seen);
        if now == last {
            break;
        }
        last = now;
    }
    watching.abort();

    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    for (who, name) in plane.status_write_events("capabilitybindings") {
        if who == user {
            *writes.entry(name).or_default() += 1;
        }
    }
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    let transitions = seen.transitions_by_name();
    let total_writes: usize = writes.values().sum();
    let total_transitions: usize = transitions.values().sum();
    let mut differing = Vec::new();
    for index in 0..BINDINGS {
        let name = name(index);
        let (w, t) = (
            writes.get(&name).copied().unwrap_or(0),
            transitions.get(&name).copied().unwrap_or(0),
        );
        if w != t {
            differing.push(format!("{name}: {w} writes, {t} transitions"));
        }
    }
    let twice: Vec<String> = seen
        .accepted
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|((uid, generation), n)| {
            let name = seen.name_of.get(uid).map_or("?", String::as_str);
            format!("{name} generation {generation}: Accepted changed {n} times")
        })
        .collect();
    println!(
        "status writes (audit log) {total_writes}; transitions (independent watch) {total_transitions}; \
         bindings where they differ {}; generations whose Accepted changed twice {}; watch restarts {}",
        differing.len(),
        twice.len(),
        seen.restarts
    );
    let drops =
        controller.metric("capstan_controller_status_queue_total{outcome=\"dropped\"") as u64;
    println!(
        "status queue: peak depth {peak_depth}, drops {drops}; controller RSS {}; peak {:.1} MiB",
        rss.iter()
            .map(|(s, mib)| format!("{s}s {mib:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        controller.peak_rss_mib()
    );
    if seen.restarts > 0 {
        println!("(the watch re-listed: transitions between its lists may be missed)");
    }
    failures.extend(differing.into_iter().take(20));
    failures.extend(twice.into_iter().take(20));
    failures
}
