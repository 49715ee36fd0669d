//! The benchmarks' independent client (`e2e/tools/mcpload`, the official Go MCP SDK): a load
//! client that is not the project's, so that what `make bench` reports is also what an outside
//! client sees (`docs/benchmarks.md`).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::spawned::{Spawned, spawn_first_line};
use crate::workspace::repo_root;

/// Runs `command`, its stderr shown, and returns its output; fails the caller on any error.
fn run_checked(command: &mut Command, what: &str) -> Output {
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {what}: {e}"));
    assert!(output.status.success(), "{what} failed: {}", output.status);
    output
}

/// The `mcpload` binary `e2e/build-tools` built (`make bench` builds it first; `e2e/build-tools
/// mcpload` alone takes seconds with a warm module cache).
pub fn mcpload() -> PathBuf {
    let output = run_checked(
        Command::new(repo_root().join("e2e/build-tools")).arg("mcpload"),
        "e2e/build-tools mcpload",
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("MCPLOAD="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("e2e/build-tools printed no MCPLOAD= line"))
}

/// Runs `mcpload call <args>` and returns the JSON object it prints (per target: p50, p99,
/// calls/s, the client's and each watched process's CPU per call; see its `main.go`).
pub fn mcpload_call(args: &[String]) -> serde_json::Value {
    let output = run_checked(
        Command::new(mcpload()).arg("call").args(args),
        &format!("mcpload call {args:?}"),
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "mcpload call printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// `mcpload open`: sessions held open by the Go SDK client until dropped.
pub struct OpenSessions {
    /// The client, killed on drop.
    _client: Spawned,
}

impl OpenSessions {
    /// Opens `args`' sessions (`--target … --sessions N …`) and returns once all are open.
    pub fn open(args: &[String]) -> Self {
        let mut command = Command::new(mcpload());
        command.arg("open").args(args).stdin(Stdio::piped());
        let (child, line) = spawn_first_line(command, "mcpload open");
        let open = Self {
            _client: Spawned(child),
        };
        assert_eq!(line.trim(), "open", "mcpload open {args:?} failed");
        open
    }
}
