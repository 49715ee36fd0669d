//! Where a controller round's CPU goes (issue 60): the CPU time of the controller, the
//! apiserver and etcd, read every 50 ms while the round runs and split at its phases — start
//! (process start to its first list of the bindings: clients, the lease), the initial list (to
//! its first watch of them) and the writes (to every binding Accepted) — at the times the
//! apiserver's audit log gives; and the same for the raw status patches the round is measured
//! against, with the bench's own client in the controller's place. So the distance between the
//! controller and the apiserver's own limit reads as CPU spent, process by process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use capstan_e2e::ControlPlane;
use capstan_testkit::cpu_nanos;
use k8s_openapi::jiff::Timestamp;

/// The processes whose CPU is read: the writer (the controller, or the bench's own client for
/// the raw patches), the apiserver, etcd.
pub const PROCESSES: [&str; 3] = ["writer", "kube-apiserver", "etcd"];

/// How often the processes' CPU is read.
const EVERY: Duration = Duration::from_millis(50);

/// One reading: when, and each process's CPU time in ns (its live threads').
type Sample = (SystemTime, [u64; 3]);

/// CPU readings taken on a thread of their own until [`Timeline::finish`].
pub struct Timeline {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Timeline {
    /// Starts reading `pids` (writer, apiserver, etcd) now.
    pub fn start(pids: [u32; 3]) -> Self {
        let samples = Arc::new(Mutex::new(vec![read(pids)]));
        let stop = Arc::new(AtomicBool::new(false));
        let (kept, stopped) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                std::thread::sleep(EVERY);
                let sample = read(pids);
                kept.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(sample);
            }
        });
        Self {
            samples,
            stop,
            thread,
        }
    }

    /// Stops reading; the readings, the last taken now.
    pub fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples.clone()
    }
}

fn read(pids: [u32; 3]) -> Sample {
    (SystemTime::now(), pids.map(cpu_nanos))
}

/// The reading nearest `at` (the last at or before it, else the first).
fn at(samples: &[Sample], at: SystemTime) -> [u64; 3] {
    samples
        .iter()
        .rev()
        .find(|(time, _)| *time <= at)
        .or_else(|| samples.first())
        .map_or([0; 3], |(_, cpu)| *cpu)
}

/// Each process's CPU seconds between two times.
fn between(samples: &[Sample], from: SystemTime, to: SystemTime) -> [f64; 3] {
    let (a, b) = (at(samples, from), at(samples, to));
    [0, 1, 2].map(|i| b[i].saturating_sub(a[i]) as f64 / 1e9)
}

/// A phase: its name, wall seconds, and each process's CPU seconds.
pub struct Phase {
    pub name: &'static str,
    pub wall: f64,
    pub cpu: [f64; 3],
}

/// The phases of a controller round run as `user`, from its spawn to `done`.
pub fn controller_phases(
    plane: &ControlPlane,
    user: &str,
    samples: &[Sample],
    (spawned, done): (SystemTime, SystemTime),
) -> Vec<Phase> {
    let events = plane.audit_events().unwrap_or_default();
    let first = |verb: &str| {
        events
            .iter()
            .filter(|e| e["user"]["username"] == user && e["verb"] == verb)
            .filter(|e| e["objectRef"]["resource"] == "capabilitybindings")
            .filter_map(|e| {
                e["requestReceivedTimestamp"]
                    .as_str()?
                    .parse::<Timestamp>()
                    .ok()
            })
            .map(SystemTime::from)
            .filter(|t| *t >= spawned)
            .min()
    };
    let listed = first("list").unwrap_or(spawned);
    let watching = first("watch").filter(|t| *t >= listed).unwrap_or(listed);
    let phase = |name, from: SystemTime, to: SystemTime| Phase {
        name,
        wall: to.duration_since(from).unwrap_or_default().as_secs_f64(),
        cpu: between(samples, from, to),
    };
    vec![
        phase("start (to the first list)", spawned, listed),
        phase("initial list (to the first watch)", listed, watching),
        phase("writes (to all Accepted)", watching, done),
        phase("whole round", spawned, done),
    ]
}

/// The whole of a raw-patch run, as one phase.
pub fn raw_phase(samples: &[Sample], (from, to): (SystemTime, SystemTime)) -> Phase {
    Phase {
        name: "raw status patches (best concurrency)",
        wall: to.duration_since(from).unwrap_or_default().as_secs_f64(),
        cpu: between(samples, from, to),
    }
}

/// The pids of the apiserver and etcd (`e2e/control-plane` writes them to its state directory).
pub fn plane_pids(plane: &ControlPlane) -> [u32; 2] {
    let etcd = std::fs::read_to_string(plane.state_dir().join("etcd.pid"))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    [plane.apiserver_pid().unwrap_or(0), etcd]
}

/// The phases as lines of the report.
pub fn report(label: &str, phases: &[&Phase]) -> String {
    let mut out = format!(
        "{label}: CPU seconds per process and phase\n{:<40} {:>8} {:>10} {:>15} {:>8}\n",
        "phase", "wall s", PROCESSES[0], PROCESSES[1], PROCESSES[2]
    );
    for p in phases {
        out.push_str(&format!(
            "{:<40} {:>8.2} {:>10.2} {:>15.2} {:>8.2}\n",
            p.name, p.wall, p.cpu[0], p.cpu[1], p.cpu[2]
        ));
    }
    out
}
