//! Processes for tests: workspace binaries and the demo provider.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("no workspace root above {}", env!("CARGO_MANIFEST_DIR")))
}

/// Builds `bin` of `package` once per process, in the caller's profile (release under
/// `cargo bench`, so benchmarks measure optimised binaries), and returns its path.
pub fn binary(package: &str, bin: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Mutex::default);
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(bin) {
        return path.clone();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The caller's profile. `cargo bench` runs its targets with `--bench`: building with the
    // bench profile (output in target/release too) reuses the bench build's artifacts instead
    // of rebuilding the dependency graph under the release profile's fingerprints.
    let profile: &[&str] = if cfg!(debug_assertions) {
        &[]
    } else if std::env::args().any(|arg| arg == "--bench") {
        &["--profile", "bench"]
    } else {
        &["--release"]
    };
    let status = Command::new(cargo)
        .args(["build", "-q", "-p", package, "--bin", bin])
        .args(profile)
        .current_dir(repo_root())
        .status()
        .unwrap_or_else(|e| panic!("running cargo build: {e}"));
    assert!(
        status.success(),
        "cargo build -p {package} --bin {bin} failed"
    );
    // Test binaries run from <target>/<profile>/deps; binaries sit in <target>/<profile>.
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current exe: {e}"));
    let path = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} has no target dir", exe.display()))
        .join(bin);
    built.insert(bin.to_owned(), path.clone());
    path
}

/// A running demo provider on a free loopback port; stopped on drop.
pub struct DemoProvider {
    child: Child,
    /// Where it listens.
    pub address: SocketAddr,
}

impl DemoProvider {
    /// Starts the demo provider on a free loopback port with the given faults.
    pub fn start(faults: &[&str]) -> Self {
        Self::start_on("127.0.0.1:0", faults, &[])
    }

    /// Starts the demo provider on `listen` (port 0 picks one) with the given faults,
    /// accepting MCP requests addressed to `allowed_hosts` too.
    pub fn start_on(listen: &str, faults: &[&str], allowed_hosts: &[&str]) -> Self {
        let mut command = Command::new(binary("capstan-demo-provider", "demo-provider"));
        command
            .args(["--listen", listen])
            .env_remove("DEMO_PROVIDER_FAULTS")
            .env_remove("DEMO_PROVIDER_ALLOWED_HOSTS")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for fault in faults {
            command.args(["--fault", fault]);
        }
        for host in allowed_hosts {
            command.args(["--allowed-host", host]);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting the demo provider: {e}"));
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        let address = line
            .trim()
            .strip_prefix("demo-provider: listening on http://")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("demo provider's first line was {line:?}"));
        Self { child, address }
    }

    /// A URL on the provider.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// `host:port`, as an allow-list entry.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    /// Every request the provider received: method, path, headers.
    pub async fn requests(&self) -> Vec<Value> {
        let response = client()
            .get(self.url("/debug/requests"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("reading the provider's requests: {e}"));
        response
            .json()
            .await
            .unwrap_or_else(|e| panic!("decoding the provider's requests: {e}"))
    }

    /// The tools named by the `tools/call` requests the provider received, in order.
    pub async fn tool_calls(&self) -> Vec<String> {
        self.requests()
            .await
            .iter()
            .filter_map(|r| r["rpc"].as_array())
            .flatten()
            .filter_map(|m| m["tool"].as_str().map(str::to_owned))
            .collect()
    }

    /// Replaces the provider's faults.
    pub async fn set_faults(&self, faults: &[&str]) {
        let body = serde_json::to_string(faults).unwrap_or_default();
        let response = client()
            .put(self.url("/debug/faults"))
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("setting faults: {e}"));
        assert!(
            response.status().is_success(),
            "setting faults: {}",
            response.status()
        );
    }

    /// Stops the provider now (as if it died).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for DemoProvider {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An HTTP client for talking to test servers (installs the process's TLS provider, which
/// the workspace's reqwest leaves to the application).
pub fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::new()
}

/// Installs the process's TLS crypto provider (ring) unless one is installed: the workspace's
/// reqwest and rmcp clients leave that choice to the application.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The directory holding the TypeScript MCP SDK's `node_modules` (`make tools` installs it
/// into `~/.cache/capstan/node`; `CAPSTAN_NODE_DIR` overrides). Scripts run from there, since
/// ES modules resolve packages next to the importing file.
pub fn node_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("CAPSTAN_NODE_DIR") {
        return dir.into();
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap_or_default()));
    let dir = PathBuf::from(cache).join("capstan/node");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").exists(),
        "{} has no TypeScript MCP SDK: run `make tools` (e2e/node-env installs it)",
        dir.display()
    );
    dir
}

/// The Python interpreter with the `mcp` SDK (`make tools` installs it into
/// `~/.cache/capstan/python`; `CAPSTAN_PYTHON` overrides).
pub fn python() -> PathBuf {
    if let Ok(python) = std::env::var("CAPSTAN_PYTHON") {
        return python.into();
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap_or_default()));
    let python = PathBuf::from(cache).join("capstan/python/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `make tools` (it installs the Python mcp SDK the tests use)",
        python.display()
    );
    python
}

/// A capability document (a CapabilityBinding's shape) named `name`, with one MCP server
/// `server` at `endpoint` allowing `include`. Shared by the composer's and the sidecar's tests
/// and benches.
pub fn binding_document(name: &str, server: &str, endpoint: &str, include: &[&str]) -> Value {
    serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "serviceRef": { "name": name },
            "serviceName": format!("{name}.example"),
            "serviceAgentRef": { "name": format!("{name}-agent") },
            "configurationVersion": "v1",
            "tools": { "mcpServers": [{
                "name": server,
                "endpoint": endpoint,
                "toolSelector": { "include": include },
            }]}
        }
    })
}
