//! A single-node cluster for the node suite (`e2e/tests/node.rs`): `e2e/kubenode/node` starts
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, CoreDNS,
//! containerd and a kubelet inside network and mount namespaces of their own. The cluster's
//! addresses exist only there, so every `kubectl` and `helm` runs inside the network namespace
//! (`nsenter --net`), as `e2e/kubenode/node exec` does by hand.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use libtest_mimic::Arguments;

use crate::suite::{BodyOn, Outcome, list_only, run_against};
use crate::{
    HarnessError, built_tool, exported, output_with_input, printed, repo_root, run,
    watch_over_this_process,
};

/// A trial on the node.
pub type NodeBody = BodyOn<Node>;

/// A trial named `name` running `body` on the node.
pub fn on_node(
    name: impl Into<String>,
    body: impl FnOnce(&Node) -> Outcome + Send + 'static,
) -> (String, NodeBody) {
    (name.into(), Box::new(body))
}

/// Runs `trials` in order on a fresh node named `suite`: starts it, runs `setup`, runs the
/// trials one at a time (they build on each other, as a user's steps do), and always stops
/// it. `--list` lists without starting anything. A node that cannot start fails the suite,
/// and so does one that leaves the machine changed (a sysctl, a cgroup, a mount).
pub fn run_on_node(
    suite: &str,
    setup: impl FnOnce(&Node) -> Result<(), String>,
    trials: Vec<(String, NodeBody)>,
) -> ExitCode {
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    if args.list {
        return list_only(&args, trials);
    }
    let before = MachineState::read();
    let node = match Node::start(suite) {
        Ok(node) => Arc::new(node),
        Err(error) => {
            eprintln!("{suite}: cannot start the node: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(error) = setup(&node) {
        eprintln!("{suite}: cannot set up the node: {error}");
        let _ = node.stop();
        return ExitCode::FAILURE;
    }
    let conclusion = run_against(&args, &node, trials);
    if let Err(error) = node.stop() {
        eprintln!("{suite}: node down: {error}");
        return ExitCode::FAILURE;
    }
    let after = MachineState::read();
    if after != before {
        eprintln!(
            "{suite}: the node left the machine changed:\nbefore {before:?}\nafter  {after:?}"
        );
        return ExitCode::FAILURE;
    }
    conclusion.exit_code()
}

/// What a node changes on the machine while it runs, and `down` must put back: the sysctls
/// kubelet sets, cgroups, mounts and namespace files.
#[derive(Debug, PartialEq)]
struct MachineState {
    sysctls: Vec<(&'static str, String)>,
    cgroups: Vec<PathBuf>,
    node_mounts: Vec<String>,
}

impl MachineState {
    fn read() -> Self {
        const SYSCTLS: [&str; 6] = [
            "vm/overcommit_memory",
            "vm/panic_on_oom",
            "kernel/panic",
            "kernel/panic_on_oops",
            "kernel/keys/root_maxkeys",
            "kernel/keys/root_maxbytes",
        ];
        let sysctls = SYSCTLS
            .into_iter()
            .map(|key| {
                let value = std::fs::read_to_string(format!("/proc/sys/{key}")).unwrap_or_default();
                (key, value.trim().to_owned())
            })
            .collect();
        let mut cgroups = Vec::new();
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            for entry in std::fs::read_dir(hierarchy.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with("capstan-node-")
                {
                    cgroups.push(entry.path());
                }
            }
        }
        let node_mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains("capstan-node"))
            .map(str::to_owned)
            .collect();
        Self {
            sysctls,
            cgroups,
            node_mounts,
        }
    }
}

/// A running node, owned by this process.
#[derive(Debug)]
pub struct Node {
    state: PathBuf,
    netns: PathBuf,
    kubeconfig: PathBuf,
    cgroup: String,
    helm: PathBuf,
}

/// A process of a pod, as the machine sees it (`/proc`), not as its pod spec says.
#[derive(Clone, Debug)]
pub struct PodProcess {
    /// Its process id on the machine.
    pub pid: u32,
    /// The UID of the pod it runs in (from its cgroup, `…/pod<uid>/<container>`).
    pub pod_uid: String,
    /// The real, effective, saved and filesystem user ids (`Uid:` of `/proc/<pid>/status`).
    pub uids: Vec<u32>,
    /// Its effective capabilities (`CapEff:`, hexadecimal).
    pub capabilities: String,
    /// Its seccomp mode (`Seccomp:`; 2 is a filter, as RuntimeDefault installs).
    pub seccomp: String,
    /// `NoNewPrivs:` (1 when privilege escalation is off).
    pub no_new_privileges: String,
    /// The options of its root mount (`ro` for a read-only root filesystem).
    pub root_mount_options: String,
}

impl Node {
    /// Starts a node whose state lives in a directory named after `suite` and this process,
    /// and a watchdog that stops it once this process is gone.
    pub fn start(suite: &str) -> Result<Self, HarnessError> {
        let state =
            std::env::temp_dir().join(format!("capstan-node-{suite}-{}", std::process::id()));
        let started = run(Command::new(script())
            .arg("up")
            .env("CAPSTAN_NODE_STATE", &state));
        let output = match started {
            Ok(output) => output,
            Err(error) => {
                // What `up` printed (the failing component's log) is in the error; `down`
                // restores the machine.
                let _ = run(Command::new(script())
                    .arg("down")
                    .env("CAPSTAN_NODE_STATE", &state));
                return Err(error);
            }
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        let node = Self {
            kubeconfig: exported(&stdout, "KUBECONFIG")?,
            netns: exported(&stdout, "CAPSTAN_NODE_NETNS")?,
            cgroup: exported(&stdout, "CAPSTAN_NODE_CGROUP")?
                .to_string_lossy()
                .into_owned(),
            state,
            helm: built_tool("helm")?,
        };
        watch_over_this_process(&script(), "CAPSTAN_NODE_STATE", &node.state)?;
        Ok(node)
    }

    /// Stops the node, restores what it changed on the machine and removes its state.
    pub fn stop(&self) -> Result<(), HarnessError> {
        run(Command::new(script())
            .arg("down")
            .env("CAPSTAN_NODE_STATE", &self.state))
        .map(drop)
    }

    /// The state directory: the components' logs, the plane's in `plane/`.
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// The apiserver's audit log (one JSON event per request, Metadata level).
    pub fn audit_log(&self) -> PathBuf {
        self.state.join("plane/audit.log")
    }

    /// Audit events (parsed JSON lines) recorded so far.
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.audit_log())
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// `program` inside the node's network namespace, with the admin kubeconfig in
    /// `KUBECONFIG`, run from the repository root.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net={}", self.netns.display()))
            .arg("--")
            .arg(program)
            .env("KUBECONFIG", &self.kubeconfig)
            .current_dir(repo_root());
        command
    }

    /// `kubectl` with `input` on its standard input: its standard output, or what it printed
    /// when it failed.
    pub fn kubectl(&self, args: &[&str], input: Option<&str>) -> Result<String, String> {
        let output = output_with_input(self.command("kubectl").args(args), input);
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!("kubectl {}: {}", args.join(" "), printed(&output)))
        }
    }

    /// `kubectl … -o json`, parsed.
    pub fn kubectl_json(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        let text = self.kubectl(&args, None)?;
        serde_json::from_str(&text)
            .map_err(|e| format!("kubectl {}: not JSON: {e}", args.join(" ")))
    }

    /// `helm` with its cache and config in the node's state directory: its standard output,
    /// or what it printed when it failed.
    pub fn helm(&self, args: &[&str]) -> Result<String, String> {
        let home = self.state.join("helm");
        let mut command = self.command(&self.helm);
        command
            .args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"));
        let output = output_with_input(&mut command, None);
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!("helm {}: {}", args.join(" "), printed(&output)))
        }
    }

    /// Imports an image archive into the node's containerd as `image`: pods run it without a
    /// registry.
    pub fn import(&self, archive: &Path, image: &str) -> Result<(), HarnessError> {
        run(Command::new(script())
            .arg("import")
            .arg(archive)
            .arg(image)
            .env("CAPSTAN_NODE_STATE", &self.state))
        .map(drop)
    }

    /// The processes of the node's pods whose executable is named `name`, read from `/proc`:
    /// what the kernel enforces, whatever the manifests say.
    pub fn pod_processes(&self, name: &str) -> Vec<PodProcess> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let proc = entry.path();
            let cgroup = std::fs::read_to_string(proc.join("cgroup")).unwrap_or_default();
            let exe = std::fs::read_link(proc.join("exe")).unwrap_or_default();
            let ours = cgroup.contains(&format!("/{}/", self.cgroup));
            if ours && exe.file_name().is_some_and(|n| n == name) {
                found.push(pod_process(pid, &proc));
            }
        }
        found
    }
}

fn pod_process(pid: u32, proc: &Path) -> PodProcess {
    let status = std::fs::read_to_string(proc.join("status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let cgroup = std::fs::read_to_string(proc.join("cgroup")).unwrap_or_default();
    let pod_uid = cgroup
        .split(['/', '\n'])
        .find_map(|segment| segment.strip_prefix("pod"))
        .unwrap_or_default()
        .to_owned();
    let mountinfo = std::fs::read_to_string(proc.join("mountinfo")).unwrap_or_default();
    // The last mount on "/" is the one the process sees (fields: id parent major:minor root
    // mount-point options ...).
    let root_mount_options = mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(4) == Some(&"/")).then(|| fields.get(5).copied().unwrap_or_default())
        })
        .next_back()
        .unwrap_or_default()
        .to_owned();
    PodProcess {
        pid,
        pod_uid,
        uids: field("Uid")
            .split_whitespace()
            .filter_map(|u| u.parse().ok())
            .collect(),
        capabilities: field("CapEff"),
        seccomp: field("Seccomp"),
        no_new_privileges: field("NoNewPrivs"),
        root_mount_options,
    }
}

fn script() -> PathBuf {
    repo_root().join("e2e/kubenode/node")
}
