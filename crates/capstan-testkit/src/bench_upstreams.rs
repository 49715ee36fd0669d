//! The benchmarks' upstreams as processes: the minimal MCP server and the bare network hop.

use std::net::SocketAddr;
use std::process::Command;

use crate::spawned::{Spawned, spawn_listening};
use crate::workspace::binary;

/// A running `echo-upstream` (one tool, `echo`) on a free loopback port: the benchmarks'
/// minimal upstream. Stopped on drop.
pub struct EchoUpstream {
    process: Spawned,
    /// Where it listens.
    pub address: SocketAddr,
}

impl EchoUpstream {
    /// Starts it on a free loopback port.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts one that speaks only the 2026-07-28 revision (no `initialize`, no sessions).
    pub fn start_only_2026_07_28() -> Self {
        Self::start_with(&["--only-2026-07-28"])
    }

    /// Starts one that keeps no sessions and answers every POST with `application/json`.
    pub fn start_json() -> Self {
        Self::start_with(&["--json"])
    }

    fn start_with(flags: &[&str]) -> Self {
        let mut command = Command::new(binary("echo-upstream"));
        command.args(["--listen", "127.0.0.1:0"]).args(flags);
        let (child, address) = spawn_listening(command, "echo-upstream");
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

/// A running `tcp-hop` on a free loopback port, copying every connection's bytes to `to`:
/// one network hop and nothing else, for the benchmarks' floor. Stopped on drop.
pub struct TcpHop {
    process: Spawned,
    /// Where it listens.
    pub address: SocketAddr,
}

impl TcpHop {
    /// Starts it in front of `to`.
    pub fn start(to: SocketAddr) -> Self {
        let mut command = Command::new(binary("tcp-hop"));
        command.args(["--listen", "127.0.0.1:0", "--to", &to.to_string()]);
        let (child, address) = spawn_listening(command, "tcp-hop");
        Self {
            process: Spawned(child),
            address,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}
