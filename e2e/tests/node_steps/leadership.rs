//! Exactly one leader among three controller replicas, through repeated leader kills and a
//! leader stalled past its lease: read from the Lease's own history (a watch of every version
//! of it) and from the apiserver's audit log (which pod wrote the Lease and each status).

use std::io::BufReader;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_e2e::kubenode::Node;
use capstan_e2e::suite::{Outcome, check};
use k8s_openapi::jiff::Timestamp;
use libtest_mimic::Failed;
use serde_json::{Value, json};

use super::{RELEASE_NAMESPACE, apply, kubectl, ready_controller_pods, wait};

/// The chart's lease duration.
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// A dead leader's successor holds the Lease within the duration, two retry periods (2 s each,
/// the last renewal and the standby's read) and the time a busy node takes to answer.
pub const TAKEOVER_BOUND: Duration = Duration::from_secs(25);
/// The binding whose spec changes every half second, so that a leader always has a status to
/// write: its writes say who led when.
pub const TICKING_BINDING: &str = "streamco-ticking";

/// One version of the Lease, as the watch saw it.
#[derive(Clone, Debug)]
pub struct LeaseVersion {
    /// When the watch delivered it.
    pub seen: Timestamp,
    /// Its holder (`None`: the lease names nobody).
    pub holder: Option<String>,
}

/// Every version of the controller's Lease from now on, seen by `kubectl get --watch`
/// (restarted should the server end the watch).
pub struct LeaseHistory {
    versions: Arc<Mutex<Vec<LeaseVersion>>>,
    child: Arc<Mutex<Option<Child>>>,
    done: Arc<std::sync::atomic::AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl LeaseHistory {
    pub fn watch(node: &Node) -> Self {
        let versions = Arc::new(Mutex::new(Vec::new()));
        let child = Arc::new(Mutex::new(None::<Child>));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut command = node.command("kubectl");
        command
            .args(["-n", RELEASE_NAMESPACE, "get", "lease", "capstan"])
            .args(["--watch", "-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let reader = {
            let (versions, child, done) = (versions.clone(), child.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let Ok(mut spawned) = command.spawn() else {
                        return;
                    };
                    let stdout = spawned.stdout.take();
                    *child.lock().unwrap_or_else(|e| e.into_inner()) = Some(spawned);
                    let Some(stdout) = stdout else { return };
                    let stream = serde_json::Deserializer::from_reader(BufReader::new(stdout))
                        .into_iter::<Value>();
                    for lease in stream.flatten() {
                        let holder = lease["spec"]["holderIdentity"]
                            .as_str()
                            .filter(|h| !h.is_empty())
                            .map(str::to_owned);
                        let version = LeaseVersion {
                            seen: Timestamp::now(),
                            holder,
                        };
                        versions
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(version);
                    }
                }
            })
        };
        Self {
            versions,
            child,
            done,
            reader: Some(reader),
        }
    }

    pub fn versions(&self) -> Vec<LeaseVersion> {
        self.versions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The holders the Lease named in turn from `since` to `until` (each change once, `None`
    /// for none).
    pub fn holders_between(&self, since: Timestamp, until: Timestamp) -> Vec<Option<String>> {
        let mut holders: Vec<Option<String>> = Vec::new();
        let within = |v: &LeaseVersion| v.seen >= since && v.seen < until;
        for version in self.versions().into_iter().filter(within) {
            if holders.last() != Some(&version.holder) {
                holders.push(version.holder);
            }
        }
        holders
    }
}

impl Drop for LeaseHistory {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// The pod an identity (`<pod>-<process id>-<random>`) belongs to.
pub fn pod_of(identity: &str) -> Option<String> {
    let mut parts = identity.rsplitn(3, '-');
    let (_random, pid, pod) = (parts.next()?, parts.next()?, parts.next()?);
    pid.parse::<u32>().ok().map(|_| pod.to_owned())
}

/// A successful write the audit log recorded: which pod sent it, and when it arrived.
#[derive(Clone, Debug)]
pub struct Write {
    pub received: Timestamp,
    pub pod: String,
}

/// The successful writes of the controller's Lease (`lease`) or of a binding's status, in the
/// order the apiserver received them.
pub fn writes(node: &Node, what: Written) -> Vec<Write> {
    let mut writes: Vec<Write> = node
        .audit_events()
        .into_iter()
        .filter(|event| {
            matches!(
                event["verb"].as_str(),
                Some("patch" | "update" | "create" | "apply")
            ) && event["stage"] == "ResponseComplete"
                && event["responseStatus"]["code"]
                    .as_i64()
                    .is_some_and(|c| c < 300)
                && match what {
                    Written::Lease => {
                        event["objectRef"]["resource"] == "leases"
                            && event["objectRef"]["namespace"] == RELEASE_NAMESPACE
                            && event["objectRef"]["name"] == "capstan"
                    }
                    Written::Status(name) => {
                        event["objectRef"]["resource"] == "capabilitybindings"
                            && event["objectRef"]["subresource"] == "status"
                            && event["objectRef"]["name"] == name
                    }
                }
        })
        .filter_map(|event| {
            Some(Write {
                received: event["requestReceivedTimestamp"].as_str()?.parse().ok()?,
                pod: event["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
                    .as_str()?
                    .to_owned(),
            })
        })
        .collect();
    writes.sort_by_key(|write| write.received);
    writes
}

/// What [`writes`] reads.
#[derive(Clone, Copy)]
pub enum Written<'a> {
    Lease,
    Status(&'a str),
}

/// Runs `act` while `TICKING_BINDING`'s spec changes every 500 ms, so the leader always has a
/// new generation to write a status for.
pub fn while_ticking<T>(node: &Node, act: impl FnOnce() -> T) -> Result<T, Failed> {
    apply(node, &super::binding(TICKING_BINDING))?;
    let done = std::sync::atomic::AtomicBool::new(false);
    Ok(std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut tick = 0u64;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                tick += 1;
                let patch = json!({"spec": {"configurationVersion": format!("v{tick}")}});
                let _ = node.kubectl(
                    &[
                        "patch",
                        "capabilitybinding",
                        TICKING_BINDING,
                        "--type",
                        "merge",
                        "-p",
                        &patch.to_string(),
                    ],
                    None,
                );
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let result = act();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        result
    }))
}

/// The Lease's holder identity now.
pub fn holder_identity(node: &Node) -> Result<String, Failed> {
    let identity = kubectl(
        node,
        &[
            "-n",
            RELEASE_NAMESPACE,
            "get",
            "lease",
            "capstan",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    )?;
    Ok(identity.trim().to_owned())
}

/// The machine's process id of the controller in `pod`.
pub fn controller_pid(node: &Node, pod: &str) -> Result<u32, Failed> {
    let uid = kubectl(
        node,
        &[
            "-n",
            RELEASE_NAMESPACE,
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    )?;
    let processes = node.pod_processes("capstan-controller");
    match processes
        .iter()
        .filter(|p| p.pod_uid == uid.trim())
        .collect::<Vec<_>>()
        .as_slice()
    {
        [process] => Ok(process.pid),
        found => Err(format!("controller processes of {pod} ({uid}): {found:?}").into()),
    }
}

/// How a round ends the leader.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// SIGKILL: it dies holding the lease; kubelet starts the container again.
    Kill,
    /// SIGSTOP for longer than the lease, then SIGCONT: a stalled process that comes back
    /// believing nothing happened.
    Stall,
}

/// What one round found.
pub struct Round {
    pub fault: Fault,
    pub leader: String,
    pub successor: String,
    pub took_over: Duration,
}

/// Waits until three controller pods are ready and the Lease names one of them; its identity.
pub fn steady_leader(node: &Node) -> Result<String, Failed> {
    wait(
        Duration::from_secs(120),
        "three ready controller pods, one of them holding the Lease",
        || {
            let ready = ready_controller_pods(node).ok()?;
            let holder = holder_identity(node).ok()?;
            let pod = pod_of(&holder)?;
            (ready.len() == 3 && ready.contains(&pod)).then_some(holder)
        },
    )
}

/// Ends `leader` with `fault` and waits for another identity to hold the Lease.
pub fn end_the_leader(node: &Node, leader: String, fault: Fault) -> Result<Round, Failed> {
    let pod = pod_of(&leader).ok_or("the holder names no pod")?;
    let pid = controller_pid(node, &pod)?;
    let signal = match fault {
        Fault::Kill => "-KILL",
        Fault::Stall => "-STOP",
    };
    signal_process(pid, signal)?;
    let ended = Instant::now();
    let successor = wait(
        TAKEOVER_BOUND,
        &format!("another replica to hold the Lease after {fault:?} of {leader}"),
        || {
            holder_identity(node)
                .ok()
                .filter(|h| !h.is_empty() && h != &leader)
        },
    );
    let took_over = ended.elapsed();
    if let Fault::Stall = fault {
        // Past the lease, whatever happened: then the stalled leader comes back.
        std::thread::sleep((LEASE_DURATION + Duration::from_secs(5)).saturating_sub(took_over));
        signal_process(pid, "-CONT")?;
        // Long enough for it to run its election round and its writer.
        std::thread::sleep(Duration::from_secs(6));
    }
    let successor = successor?;
    if let Fault::Kill = fault {
        // The killed process is gone (its restarted container is another process, another
        // identity, and may win like any standby).
        wait(
            Duration::from_secs(10),
            &format!("process {pid} to be gone after SIGKILL"),
            || process_gone(pid).then_some(()),
        )?;
    }
    Ok(Round {
        fault,
        leader,
        successor,
        took_over,
    })
}

/// Whether `pid` has exited (no such process, or a zombie not yet reaped).
fn process_gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest);
            state.is_some_and(|rest| rest.starts_with('Z') || rest.starts_with('X'))
        })
        .unwrap_or(true)
}

fn signal_process(pid: u32, signal: &str) -> Outcome {
    let sent = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    check(sent.success(), || format!("kill {signal} {pid} failed"))
}

/// Checks the writes the audit log recorded from `since` to `until`, `leader_pod` holding the
/// Lease at `since`, `successor_pod` at `until` (the same pod when a killed leader's restarted
/// container won: the audit log names pods, not processes): the Lease is written by one pod at
/// a time (another pod's first write begins its term, and no earlier holder writes the Lease
/// after that), and every status write comes from the pod whose term it fell in.
pub fn one_writer_at_a_time(
    (lease, statuses): (&[Write], &[Write]),
    (since, until): (Timestamp, Timestamp),
    (leader_pod, successor_pod): (&str, &str),
) -> Outcome {
    let within = |w: &&Write| w.received >= since && w.received < until;
    let lease: Vec<Write> = lease.iter().filter(within).cloned().collect();
    let statuses: Vec<Write> = statuses.iter().filter(within).cloned().collect();
    // The terms: each pod from its first Lease write until the next pod's.
    let mut terms: Vec<(Timestamp, String)> = vec![(since, leader_pod.to_owned())];
    for write in &lease {
        if terms.last().map(|(_, pod)| pod) != Some(&write.pod) {
            if terms.iter().any(|(_, pod)| pod == &write.pod) {
                return Err(format!(
                    "{} wrote the Lease again at {} after another pod had taken it: {}",
                    write.pod,
                    write.received,
                    describe(&lease)
                )
                .into());
            }
            terms.push((write.received, write.pod.clone()));
        }
    }
    for write in &statuses {
        let term = terms
            .iter()
            .rev()
            .find(|(start, _)| *start <= write.received)
            .map(|(_, pod)| pod.as_str());
        check(term == Some(write.pod.as_str()), || {
            format!(
                "{} wrote a status at {} while the Lease was {}'s (Lease writes: {})",
                write.pod,
                write.received,
                term.unwrap_or("nobody"),
                describe(&lease)
            )
        })?;
    }
    let pods: Vec<&str> = terms.iter().map(|(_, pod)| pod.as_str()).collect();
    let expected: &[&str] = if leader_pod == successor_pod {
        &[leader_pod]
    } else {
        &[leader_pod, successor_pod]
    };
    check(pods == expected, || {
        format!(
            "the Lease was written by {pods:?} in turn, not {expected:?}: {}",
            describe(&lease)
        )
    })?;
    check(statuses.iter().any(|w| w.pod == successor_pod), || {
        format!("no status write of {TICKING_BINDING} by {successor_pod}, the new leader's pod")
    })
}

fn describe(writes: &[Write]) -> String {
    let mut runs: Vec<(String, usize, Timestamp)> = Vec::new();
    for write in writes {
        match runs.last_mut() {
            Some((pod, count, _)) if pod == &write.pod => *count += 1,
            _ => runs.push((write.pod.clone(), 1, write.received)),
        }
    }
    runs.iter()
        .map(|(pod, count, from)| format!("{pod} ×{count} from {from}"))
        .collect::<Vec<_>>()
        .join(", ")
}
