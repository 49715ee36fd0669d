//! Running `capstan-controller` processes against the test control plane, as a service account
//! bound to the controller's RBAC rules (`config/rbac/controller.yaml`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::{ControlPlane, HarnessError, spawn_logged};

/// The namespace the controller's Lease and service accounts live in.
pub const NAMESPACE: &str = "capstan-system";

/// The controller binary, as the tests' own build made it (see
/// `capstan_testkit::binary`).
pub fn controller_binary() -> PathBuf {
    capstan_testkit::binary("capstan-controller")
}

/// The controller benchmark's naive baseline: the controller writing every status as it is
/// computed (`src/bin/naive_controller.rs`).
pub fn naive_controller_binary() -> PathBuf {
    capstan_testkit::binary("capstan-naive-controller")
}

/// Runs kubectl on the test plane, failing with what it printed.
fn kubectl(
    plane: &ControlPlane,
    args: &[&str],
    input: Option<&str>,
) -> Result<String, HarnessError> {
    let output = plane.kubectl_with_input(args, input);
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(HarnessError::Command {
            command: format!("kubectl {}", args.join(" ")),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

/// Creates service account `name` in [`NAMESPACE`] (and the namespace) and returns a kubeconfig
/// that authenticates as it, with no permissions of its own: bind what the test grants with
/// [`bind_cluster_role`] and [`bind_role`].
pub fn service_account(plane: &ControlPlane, name: &str) -> Result<PathBuf, HarnessError> {
    let account = format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [
            {{"apiVersion": "v1", "kind": "Namespace", "metadata": {{"name": "{NAMESPACE}"}}}},
            {{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {{"name": "{name}", "namespace": "{NAMESPACE}"}}}}
        ]}}"#
    );
    kubectl(plane, &["apply", "-f", "-"], Some(&account))?;
    account_kubeconfig(plane, NAMESPACE, name)
}

/// A bearer token of the existing service account `namespace/name` from the TokenRequest API
/// (`kubectl create token`), valid for two hours.
pub fn account_token(
    plane: &ControlPlane,
    namespace: &str,
    name: &str,
) -> Result<String, HarnessError> {
    account_token_for(plane, namespace, name, &[])
}

/// [`account_token`] for the apiserver and each of `audiences` besides (a token a token
/// service also takes as a subject token); none: the apiserver's audience alone.
pub fn account_token_for(
    plane: &ControlPlane,
    namespace: &str,
    name: &str,
    audiences: &[&str],
) -> Result<String, HarnessError> {
    let mut args = vec!["create", "token", name, "-n", namespace, "--duration", "2h"];
    if !audiences.is_empty() {
        args.extend(["--audience", "https://kubernetes.default.svc"]);
        for audience in audiences {
            args.extend(["--audience", audience]);
        }
    }
    kubectl(plane, &args, None).map(|token| token.trim().to_owned())
}

/// A kubeconfig that authenticates as the existing service account `namespace/name` with a
/// token from the TokenRequest API (`kubectl create token`), valid for two hours.
pub fn account_kubeconfig(
    plane: &ControlPlane,
    namespace: &str,
    name: &str,
) -> Result<PathBuf, HarnessError> {
    let token = account_token(plane, namespace, name)?;
    let server = kubectl(
        plane,
        &[
            "config",
            "view",
            "--raw",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ],
        None,
    )?;
    let ca = kubectl(
        plane,
        &[
            "config",
            "view",
            "--raw",
            "-o",
            "jsonpath={.clusters[0].cluster.certificate-authority-data}",
        ],
        None,
    )?;
    let path = plane
        .state_dir()
        .join(format!("kubeconfig-{namespace}-{name}"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\n\
         contexts:\n- name: e2e\n  context: {{cluster: e2e, user: {name}}}\ncurrent-context: e2e\n",
    );
    std::fs::write(&path, text).map_err(|source| HarnessError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// Binds service account `account` of [`NAMESPACE`] to the ClusterRole `role`.
pub fn bind_cluster_role(
    plane: &ControlPlane,
    account: &str,
    role: &str,
) -> Result<(), HarnessError> {
    let binding = format!(
        r#"{{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {{"name": "{role}-{account}"}},
            "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "{role}"}},
            "subjects": [{{"kind": "ServiceAccount", "name": "{account}", "namespace": "{NAMESPACE}"}}]}}"#
    );
    kubectl(plane, &["apply", "-f", "-"], Some(&binding)).map(drop)
}

/// Binds service account `account` to the Role `role`, both in [`NAMESPACE`].
pub fn bind_role(plane: &ControlPlane, account: &str, role: &str) -> Result<(), HarnessError> {
    let binding = format!(
        r#"{{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {{"name": "{role}-{account}", "namespace": "{NAMESPACE}"}},
            "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "{role}"}},
            "subjects": [{{"kind": "ServiceAccount", "name": "{account}", "namespace": "{NAMESPACE}"}}]}}"#
    );
    kubectl(plane, &["apply", "-f", "-"], Some(&binding)).map(drop)
}

/// The controller's ClusterRole and leader-election Role in `config/rbac/controller.yaml`.
pub const CONTROLLER_ROLE: &str = "capstan-controller";
/// See [`CONTROLLER_ROLE`].
pub const LEADER_ELECTION_ROLE: &str = "capstan-controller-leader-election";

/// Applies the controller's RBAC (`config/rbac/controller.yaml`).
pub fn apply_controller_rbac(plane: &ControlPlane) -> Result<(), HarnessError> {
    kubectl(plane, &["apply", "-f", "config/rbac/controller.yaml"], None).map(drop)
}

/// Applies the controller's RBAC and creates a service account `name` bound to it, returning a
/// kubeconfig that authenticates as that account (so the audit log tells replicas apart).
pub fn service_account_kubeconfig(
    plane: &ControlPlane,
    name: &str,
) -> Result<PathBuf, HarnessError> {
    apply_controller_rbac(plane)?;
    let kubeconfig = service_account(plane, name)?;
    bind_cluster_role(plane, name, CONTROLLER_ROLE)?;
    bind_role(plane, name, LEADER_ELECTION_ROLE)?;
    Ok(kubeconfig)
}

/// A controller as the service account `identity` (the controller's RBAC), electing on a
/// Lease of its own, probing bindings every `interval` seconds (cut at `deadline`) and
/// dialing only `hosts`.
pub fn probing_controller(
    plane: &ControlPlane,
    identity: &str,
    hosts: &[String],
    interval: u64,
    deadline: u64,
) -> Result<ControllerProcess, HarnessError> {
    probing_controller_with(plane, identity, hosts, (interval, deadline), &[])
}

/// [`probing_controller`] probing every `timing.0` seconds (cut at `timing.1`), with `more`
/// flags after its own.
pub fn probing_controller_with(
    plane: &ControlPlane,
    identity: &str,
    hosts: &[String],
    timing: (u64, u64),
    more: &[&str],
) -> Result<ControllerProcess, HarnessError> {
    let kubeconfig = service_account_kubeconfig(plane, identity)?;
    let hosts = hosts.join(",");
    let (interval, deadline) = (timing.0.to_string(), timing.1.to_string());
    let lease = format!("capstan-e2e-{identity}");
    let mut flags = vec![
        "--lease-name",
        &lease,
        "--mcp-endpoint-hosts",
        &hosts,
        "--fetch-hosts",
        &hosts,
        "--probe-interval-seconds",
        &interval,
        "--probe-deadline-seconds",
        &deadline,
    ];
    flags.extend_from_slice(more);
    ControllerProcess::start(plane, &kubeconfig, identity, &flags)
}

/// A running controller process; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct ControllerProcess {
    child: Option<Child>,
    /// Where its log goes.
    pub log: PathBuf,
    /// Its /metrics, /healthz and /readyz address.
    pub address: String,
}

impl ControllerProcess {
    /// Starts a controller as the identity `name`, authenticating with `kubeconfig`, with extra
    /// flags `args`.
    pub fn start(
        plane: &ControlPlane,
        kubeconfig: &Path,
        name: &str,
        args: &[&str],
    ) -> Result<Self, HarnessError> {
        Self::start_with_env(plane, kubeconfig, name, args, &[])
    }

    /// [`Self::start`] with extra environment `env`.
    pub fn start_with_env(
        plane: &ControlPlane,
        kubeconfig: &Path,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self, HarnessError> {
        Self::start_program(&controller_binary(), plane, kubeconfig, name, args, env)
    }

    /// [`Self::start_with_env`] of the controller program `binary` (the controller, or the
    /// benchmark's naive baseline).
    pub fn start_program(
        binary: &Path,
        plane: &ControlPlane,
        kubeconfig: &Path,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self, HarnessError> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|source| HarnessError::Io {
                path: "a free port".into(),
                source,
            })?
            .port();
        let address = format!("127.0.0.1:{port}");
        let log = plane.state_dir().join(format!("controller-{name}.log"));
        let mut command = Command::new(binary);
        command
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--listen-address", &address, "--identity", name])
            // The test namespace unless a caller names another (clap takes a flag once).
            .args(if args.contains(&"--lease-namespace") {
                &[][..]
            } else {
                &["--lease-namespace", NAMESPACE][..]
            })
            .args(["--log-format", "json"])
            // Debug logs by default; a caller's own `--log` wins (clap takes it once).
            .args(if args.contains(&"--log") {
                &[][..]
            } else {
                &["--log", "info,capstan_controller=debug"][..]
            })
            .args(args)
            .envs(env.iter().copied());
        let child = spawn_logged(&mut command, &log)?;
        Ok(Self {
            child: Some(child),
            log,
            address,
        })
    }

    /// Kills the process at once (SIGKILL): no lease release, as when a node dies.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the process gracefully (SIGTERM) and waits up to 10 s before killing it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            for _ in 0..100 {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// The process's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The sum of every sample of its /metrics whose line starts with `prefix` (0 when the
    /// endpoint does not answer).
    pub fn metric(&self, prefix: &str) -> f64 {
        crate::metric(&self.address, prefix)
    }

    /// Its resident memory now (`VmRSS`), MiB; 0 once it has exited.
    pub fn rss_mib(&self) -> f64 {
        self.memory_mib("VmRSS:")
    }

    /// Its peak resident memory so far (`VmHWM`), MiB; 0 once it has exited.
    pub fn peak_rss_mib(&self) -> f64 {
        self.memory_mib("VmHWM:")
    }

    fn memory_mib(&self, field: &str) -> f64 {
        self.pid()
            .and_then(|pid| capstan_testkit::proc_status_kib(pid, field))
            .map_or(0.0, |kib| kib / 1024.0)
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
