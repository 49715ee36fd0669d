//! Test support for Capstan's e2e suites: a real kube-apiserver and etcd per test binary
//! (started by `e2e/control-plane`), a `kube::Client` and `kubectl` against it, and the CRDs
//! from `config/crd` installed.
//!
//! Each test binary uses a custom harness (libtest-mimic): it starts one [`ControlPlane`], runs
//! its trials, and tears the control plane down before exiting, also when trials fail. A
//! watchdog process stops the control plane if the test binary dies without tearing down.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};
use thiserror::Error;

pub mod bench;
pub mod callers;
pub mod controller;
pub mod jaeger;
pub mod kubenode;
pub mod objects;
pub mod sidecar;
pub mod suite;

/// The field manager e2e tests write with.
pub const FIELD_MANAGER: &str = "capstan-e2e";

/// Why the harness could not provide a control plane.
#[derive(Debug, Error)]
pub enum HarnessError {
    /// A command the harness runs failed.
    #[error("`{command}` failed ({status}):\n{stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A command could not be started at all.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why it could not start.
        #[source]
        source: std::io::Error,
    },
    /// `control-plane up` did not print the environment it promises.
    #[error("control-plane up printed no {0} line")]
    MissingEnv(&'static str),
    /// The kubeconfig could not be loaded.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Where it was read from.
        path: PathBuf,
        /// Why it was refused.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A Kubernetes API call failed.
    #[error("kubernetes api: {0}")]
    Kube(#[from] kube::Error),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// A CRD did not become established in time.
    #[error("CRD {0} not established within 30 s")]
    NotEstablished(String),
}

impl HarnessError {
    /// A suite's set-up that failed for `reason` (a command's output, a wait that ran out).
    pub fn setup(suite: &str, reason: String) -> Self {
        Self::Command {
            command: format!("{suite} setup"),
            status: "failed".into(),
            stderr: reason,
        }
    }
}

/// The repository root (as the testkit finds it: at run time first).
pub fn repo_root() -> PathBuf {
    capstan_testkit::repo_root()
}

/// How a control plane is started beyond the defaults.
#[derive(Clone, Debug, Default)]
pub struct PlaneOptions {
    /// A static token file (`token,user,uid,"groups"`) the apiserver authenticates with,
    /// besides certificates and service-account tokens: planes given the same file know the
    /// same callers, as the project planes behind one identity provider do.
    pub token_auth_file: Option<PathBuf>,
}

/// A running control plane: etcd and kube-apiserver on loopback, owned by this process.
#[derive(Debug)]
pub struct ControlPlane {
    state: PathBuf,
    kubeconfig: PathBuf,
    audit_log: PathBuf,
}

impl ControlPlane {
    /// Starts a control plane whose state lives in a directory named after `suite` and this
    /// process, so test binaries running side by side never share one.
    pub fn start(suite: &str) -> Result<Self, HarnessError> {
        Self::start_with(suite, &PlaneOptions::default())
    }

    /// [`ControlPlane::start`] with `options`.
    pub fn start_with(suite: &str, options: &PlaneOptions) -> Result<Self, HarnessError> {
        let state =
            std::env::temp_dir().join(format!("capstan-e2e-{suite}-{}", std::process::id()));
        let mut command = Command::new(repo_root().join("e2e/control-plane"));
        command.arg("up").env("CAPSTAN_E2E_STATE", &state);
        if let Some(tokens) = &options.token_auth_file {
            command.env("CAPSTAN_E2E_TOKEN_AUTH_FILE", tokens);
        }
        let output = run(&mut command)?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let plane = Self {
            kubeconfig: exported(&stdout, "KUBECONFIG")?,
            audit_log: exported(&stdout, "CAPSTAN_E2E_AUDIT_LOG")?,
            state,
        };
        watch_over_this_process(
            &repo_root().join("e2e/control-plane"),
            "CAPSTAN_E2E_STATE",
            &plane.state,
        )?;
        Ok(plane)
    }

    /// Stops the control plane and removes its state.
    pub fn stop(&self) -> Result<(), HarnessError> {
        control_plane(&self.state, "down").map(drop)
    }

    /// The state directory (certificates, logs); files a test writes here go away on `stop`.
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// The kube-apiserver's process id (`e2e/control-plane` writes it to its state directory),
    /// for measuring what it spends; `None` when it is not running.
    pub fn apiserver_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.state.join("kube-apiserver.pid")).ok()?;
        let pid: u32 = text.trim().parse().ok()?;
        Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    }

    /// Restarts kube-apiserver on the same port and etcd, keeping all state.
    pub fn restart_apiserver(&self) -> Result<(), HarnessError> {
        control_plane(&self.state, "restart-apiserver").map(drop)
    }

    /// Stops etcd and starts it again on the same ports and data.
    pub fn restart_etcd(&self) -> Result<(), HarnessError> {
        control_plane(&self.state, "restart-etcd").map(drop)
    }

    /// The admin kubeconfig (system:masters).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The apiserver's audit log: one JSON event per request, Metadata level.
    pub fn audit_log(&self) -> &Path {
        &self.audit_log
    }

    /// A client with the admin credential.
    pub async fn client(&self) -> Result<Client, HarnessError> {
        let kubeconfig =
            Kubeconfig::read_from(&self.kubeconfig).map_err(|source| HarnessError::Kubeconfig {
                path: self.kubeconfig.clone(),
                source,
            })?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|source| HarnessError::Kubeconfig {
                path: self.kubeconfig.clone(),
                source,
            })?;
        Ok(Client::try_from(config)?)
    }

    /// `kubectl` with this control plane's kubeconfig, run from the repository root.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with_input(args, None)
    }

    /// `kubectl` with `input` on its standard input: its standard output, or what it printed
    /// when it failed.
    pub fn kubectl_ok(&self, args: &[&str], input: Option<&str>) -> Result<String, String> {
        let output = self.kubectl_with_input(args, input);
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!("kubectl {}: {}", args.join(" "), printed(&output)))
        }
    }

    /// `kubectl` with `input` on its standard input.
    pub fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> Output {
        let mut command = Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .current_dir(repo_root());
        output_with_input(&mut command, input)
    }

    /// Installs the committed CRDs (server-side apply) and waits until each is established.
    pub async fn install_crds(&self, client: &Client) -> Result<(), HarnessError> {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for (file, _) in capstan_api::crd::crds() {
            let path = repo_root().join("config/crd").join(file);
            let text = std::fs::read_to_string(&path).map_err(|source| HarnessError::Io {
                path: path.clone(),
                source,
            })?;
            let crd: CustomResourceDefinition =
                serde_saphyr::from_str(&text).map_err(|e| HarnessError::Io {
                    path: path.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await?;
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            tokio::time::timeout(Duration::from_secs(30), established)
                .await
                .map_err(|_| HarnessError::NotEstablished(name.clone()))?
                .map_err(|e| HarnessError::Kube(kube::Error::Service(Box::new(e))))?;
        }
        Ok(())
    }

    /// A client of this plane after installing every CRD, the CapabilityBinding CRD with an
    /// open spec schema ([`Self::install_open_binding_crd`]): what the controller benchmarks
    /// start from.
    pub async fn client_with_open_crds(&self) -> Result<Client, HarnessError> {
        let client = self.client().await?;
        self.install_crds(&client).await?;
        self.install_open_binding_crd(&client).await?;
        Ok(client)
    }

    /// Replaces the CapabilityBinding CRD with one whose spec schema is open, standing in for
    /// bindings an older, looser CRD admitted: runtime validation is what catches those, and
    /// tests and benchmarks need invalid bindings to reach the controller.
    pub async fn install_open_binding_crd(&self, client: &Client) -> Result<(), HarnessError> {
        use kube::CustomResourceExt;

        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        // The committed CRD (its status default included), with the spec opened.
        let [(_, mut crd), _] = capstan_api::crd::crds();
        let open = JSONSchemaProps {
            type_: Some("object".into()),
            x_kubernetes_preserve_unknown_fields: Some(true),
            ..Default::default()
        };
        for version in &mut crd.spec.versions {
            let schema = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut());
            if let Some(properties) = schema.and_then(|s| s.properties.as_mut()) {
                properties.insert("spec".into(), open.clone());
            }
        }
        let name = capstan_api::CapabilityBinding::crd_name();
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await?;
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(api, name, conditions::is_crd_established()),
        )
        .await
        .map_err(|_| HarnessError::NotEstablished(name.to_owned()))?
        .map_err(|e| HarnessError::Kube(kube::Error::Service(Box::new(e))))?;
        Ok(())
    }

    /// Successful status writes (patch or update on `<resource>/status`) the apiserver recorded,
    /// by user, for objects accepted by `object`.
    pub fn status_writes(
        &self,
        resource: &str,
        object: impl Fn(&str) -> bool,
    ) -> std::collections::BTreeMap<String, usize> {
        let mut writes = std::collections::BTreeMap::new();
        for (user, name) in self.status_write_events(resource) {
            if object(&name) {
                *writes.entry(user).or_insert(0) += 1;
            }
        }
        writes
    }

    /// Every successful status write (patch or update on `<resource>/status`) the apiserver
    /// recorded, in order, as (user, object name).
    pub fn status_write_events(&self, resource: &str) -> Vec<(String, String)> {
        let mut writes = Vec::new();
        for event in self.audit_events().unwrap_or_default() {
            let target = &event["objectRef"];
            let is_write = matches!(event["verb"].as_str(), Some("patch" | "update"))
                && event["stage"] == "ResponseComplete"
                && target["resource"] == resource
                && target["subresource"] == "status"
                && event["responseStatus"]["code"]
                    .as_i64()
                    .is_some_and(|c| c < 300);
            if let (true, Some(name)) = (is_write, target["name"].as_str()) {
                let user = event["user"]["username"].as_str().unwrap_or("?").to_owned();
                writes.push((user, name.to_owned()));
            }
        }
        writes
    }

    /// Audit events (parsed JSON lines) recorded so far.
    pub fn audit_events(&self) -> Result<Vec<serde_json::Value>, HarnessError> {
        let text = std::fs::read_to_string(&self.audit_log).map_err(|source| HarnessError::Io {
            path: self.audit_log.clone(),
            source,
        })?;
        Ok(text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect())
    }
}

/// Runs `e2e/control-plane <verb>` on the control plane whose state lives in `state`.
fn control_plane(state: &Path, verb: &str) -> Result<Output, HarnessError> {
    let script = repo_root().join("e2e/control-plane");
    run(Command::new(script)
        .arg(verb)
        .env("CAPSTAN_E2E_STATE", state))
}

/// A binary `e2e/build-tools` built (`helm`, `kubelet`, …), as it names it: an error when it
/// is not built yet (`make tools` builds them all).
pub fn built_tool(name: &str) -> Result<PathBuf, HarnessError> {
    let output =
        run(Command::new(repo_root().join("e2e/build-tools")).args(["--print-paths", name]))?;
    let variable = format!("{}=", name.to_uppercase().replace('-', "_"));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix(variable.as_str()))
        .map(PathBuf::from)
        .filter(|path| path.exists())
        .ok_or_else(|| HarnessError::Command {
            command: format!("e2e/build-tools --print-paths {name}"),
            status: "the binary is not built".into(),
            stderr: format!("{name} is not built; run `make tools`"),
        })
}

/// The sum of every sample of the /metrics at `address` whose line starts with `prefix` (0
/// when the endpoint does not answer or has no such line).
pub fn metric(address: &str, prefix: &str) -> f64 {
    let output = std::process::Command::new("curl")
        .args(["-s", &format!("http://{address}/metrics")])
        .output();
    let metrics = output
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A loopback address nothing listens on yet.
pub fn free_address() -> Result<String, HarnessError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.to_string())
        .map_err(|source| HarnessError::Io {
            path: "a free loopback port".into(),
            source,
        })
}

/// Starts `command` in the background, its standard error (the log) written to the new file
/// `log`, nothing on its standard input or output.
pub fn spawn_logged(command: &mut Command, log: &Path) -> Result<Child, HarnessError> {
    let file = std::fs::File::create(log).map_err(|source| HarnessError::Io {
        path: log.to_owned(),
        source,
    })?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .map_err(|source| HarnessError::Spawn {
            command: command.get_program().to_string_lossy().into_owned(),
            source,
        })
}

/// Runs `command` to completion with `input` (if any) on its standard input, capturing its
/// output; a command that cannot be started is a harness bug, and panics.
pub fn output_with_input(command: &mut Command, input: Option<&str>) -> Output {
    use std::io::Write;

    command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("{command:?} stdin: {e}"));
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"))
}

/// The value of `export NAME=…` in what a script's `up` printed.
fn exported(stdout: &str, name: &'static str) -> Result<PathBuf, HarnessError> {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(&format!("export {name}=")).map(unquote))
        .map(PathBuf::from)
        .ok_or(HarnessError::MissingEnv(name))
}

/// Starts a detached watchdog that runs `script down` (with `variable` naming `state`) once
/// this process is gone, so a test binary killed mid-run (or interrupted with Ctrl-C) leaves
/// nothing running behind.
fn watch_over_this_process(
    script: &Path,
    variable: &str,
    state: &Path,
) -> Result<(), HarnessError> {
    use std::os::unix::process::CommandExt;

    let watch = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; exec \"$0\" down",
        pid = std::process::id()
    );
    Command::new("bash")
        .args(["-c", &watch])
        .arg(script)
        .env(variable, state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C aimed at the test run must not stop the cleanup.
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|source| HarnessError::Spawn {
            command: format!("bash (watchdog of {})", script.display()),
            source,
        })
}

/// Removes the shell quoting `printf %q` adds to plain paths.
fn unquote(value: &str) -> String {
    value.trim_matches('\'').replace("\\ ", " ")
}

fn run(command: &mut Command) -> Result<Output, HarnessError> {
    let line = format!("{command:?}");
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .map_err(|source| HarnessError::Spawn {
            command: line.clone(),
            source,
        })?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(HarnessError::Command {
            command: line,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

/// What a finished command printed, for assertion messages.
pub fn printed(output: &Output) -> String {
    format!(
        "status: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
