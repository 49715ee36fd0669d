//! The benchmarks' independent side (`e2e/tools/mcpload`, the official Go MCP SDK): an echo
//! server and a load client that are not the project's, so that what `make bench` reports is
//! also what an outside client sees (`docs/benchmarks.md`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::spawned::{Spawned, spawn_listening};
use crate::workspace::repo_root;

/// The `mcpload` binary `e2e/build-tools` built (`make bench` builds it first; `e2e/build-tools
/// mcpload` alone takes seconds with a warm module cache).
pub fn mcpload() -> PathBuf {
    let output = Command::new(repo_root().join("e2e/build-tools"))
        .arg("mcpload")
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running e2e/build-tools mcpload: {e}"));
    assert!(
        output.status.success(),
        "e2e/build-tools mcpload failed: {}",
        output.status
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("MCPLOAD="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("e2e/build-tools printed no MCPLOAD= line"))
}

/// A running `mcpload serve`: the Go SDK's Streamable HTTP server with one tool, `echo`, on a
/// free loopback port. Stopped on drop.
pub struct GoEcho {
    process: Spawned,
    /// Where it listens.
    pub address: std::net::SocketAddr,
}

impl GoEcho {
    /// Starts one; with `json` it answers POSTs with `application/json` instead of an SSE
    /// stream.
    pub fn start(json: bool) -> Self {
        let mut command = Command::new(mcpload());
        command.args(["serve", "--listen", "127.0.0.1:0"]);
        if json {
            command.arg("--json");
        }
        let (child, address) = spawn_listening(command, "mcpload");
        Self {
            process: Spawned(child),
            address,
        }
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    /// `host:port`, as an allow-list entry.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// Runs `mcpload call <args>` and returns the JSON object it prints (per target: p50, p99,
/// calls/s, the client's and each watched process's CPU per call; see its `main.go`).
pub fn mcpload_call(args: &[String]) -> serde_json::Value {
    let output = Command::new(mcpload())
        .arg("call")
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running mcpload call: {e}"));
    assert!(
        output.status.success(),
        "mcpload call {args:?} failed: {}",
        output.status
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "mcpload call printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// `mcpload open`: sessions held open by the Go SDK client until dropped.
pub struct OpenSessions(Spawned);

impl OpenSessions {
    /// Opens `args`' sessions (`--target … --sessions N …`) and returns once all are open.
    pub fn open(args: &[String]) -> Self {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(mcpload())
            .arg("open")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("running mcpload open: {e}"));
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        assert_eq!(line.trim(), "open", "mcpload open {args:?} failed");
        Self(Spawned(child))
    }

    /// The client's process id.
    pub fn pid(&self) -> u32 {
        self.0.pid()
    }
}
