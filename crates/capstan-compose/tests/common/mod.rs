//! Real servers on loopback for the composer's integration tests: the demo provider (built from
//! this workspace) and an independent MCP server written with the Python `mcp` SDK.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use capstan_compose::{Composer, Document, EndpointGuard, Fetcher, Limits};
use serde_json::Value;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// Builds the demo provider once per binary, in the caller's profile (release under
/// `cargo bench`, so a benchmark measures an optimised server).
fn demo_provider_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args([
                    "build",
                    "-q",
                    "-p",
                    "capstan-demo-provider",
                    "--bin",
                    "demo-provider",
                ])
                .args(if cfg!(debug_assertions) {
                    &[][..]
                } else {
                    &["--release"][..]
                })
                .current_dir(repo_root())
                .status()
                .expect("cargo build");
            assert!(status.success(), "building the demo provider failed");
            let exe = std::env::current_exe().unwrap();
            exe.parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("demo-provider")
        })
        .clone()
}

/// A running demo provider; stopped on drop.
pub struct DemoProvider {
    child: Child,
    pub address: SocketAddr,
}

impl DemoProvider {
    pub fn start(faults: &[&str]) -> Self {
        let mut command = Command::new(demo_provider_binary());
        command
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("DEMO_PROVIDER_FAULTS")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for fault in faults {
            command.args(["--fault", fault]);
        }
        let mut child = command.spawn().expect("demo provider");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let address = line
            .trim()
            .strip_prefix("demo-provider: listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Self { child, address }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// `host:port` as an allow-list entry.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    /// Every request the provider received: method, path, headers.
    pub async fn requests(&self) -> Vec<Value> {
        reqwest::get(self.url("/debug/requests"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn set_faults(&self, faults: &[&str]) {
        let response = reqwest::Client::new()
            .put(self.url("/debug/faults"))
            .body(serde_json::to_string(faults).unwrap())
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    }
}

impl Drop for DemoProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python interpreter with the `mcp` SDK (`make tools` installs it into
/// ~/.cache/capstan/python; CAPSTAN_PYTHON overrides).
pub fn python() -> PathBuf {
    if let Ok(python) = std::env::var("CAPSTAN_PYTHON") {
        return python.into();
    }
    let home = std::env::var("HOME").unwrap();
    let cache = std::env::var("XDG_CACHE_HOME").unwrap_or_else(|_| format!("{home}/.cache"));
    let python = PathBuf::from(cache).join("capstan/python/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `make tools` (it installs the Python mcp SDK the tests use)",
        python.display()
    );
    python
}

/// An MCP server written with the Python `mcp` SDK (MCPServer, FastMCP's successor).
pub struct PythonServer {
    child: Child,
    pub address: SocketAddr,
}

impl PythonServer {
    pub fn start() -> Self {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let script = repo_root().join("crates/capstan-compose/tests/python/streamco_server.py");
        let child = Command::new(python())
            .arg(script)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python server");
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(address).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "python server did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { child, address }
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The StreamCo fixture with its endpoints moved to `address`.
pub fn streamco_documents(address: SocketAddr) -> Vec<Document> {
    let text =
        std::fs::read_to_string(repo_root().join("examples/streamco/capability-documents.json"))
            .unwrap()
            .replace("127.0.0.1:7810", &address.to_string());
    documents(&text)
}

/// Parses documents the way the sources do.
pub fn documents(text: &str) -> Vec<Document> {
    let parsed = capstan_api::parse(text).unwrap();
    assert!(parsed.invalid.is_empty(), "{:?}", parsed.invalid);
    parsed
        .objects
        .into_iter()
        .map(|p| {
            let document = p.object.into_document().unwrap();
            Document {
                binding: document.metadata.name.clone().unwrap(),
                spec: document.spec,
            }
        })
        .collect()
}

/// A binding document with one MCP server and optional knowledge and skills.
pub fn binding(name: &str, server: &str, endpoint: &str, include: &[&str]) -> Value {
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

pub fn composer(mcp_hosts: &[String], fetch_hosts: &[String], limits: Limits) -> Composer {
    capstan_compose::install_crypto_provider();
    Composer::new(
        EndpointGuard::new(mcp_hosts).unwrap(),
        Fetcher::new(EndpointGuard::new(fetch_hosts).unwrap()).unwrap(),
        limits,
    )
}
