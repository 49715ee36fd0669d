//! The Python `mcp` SDK: its interpreter, the StreamCo server written with it, and the client
//! that listens on a sidecar session for list changes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::spawned::Spawned;
use crate::workspace::repo_root;

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

/// An MCP server written with the Python `mcp` SDK (MCPServer, FastMCP's successor), the
/// StreamCo tools of the demo provider; stopped on drop.
pub struct PythonServer {
    child: Child,
    /// Where it listens.
    pub address: SocketAddr,
}

impl PythonServer {
    /// Starts the StreamCo server of `crates/capstan-compose/tests/python` on a free port.
    pub fn start() -> Self {
        Self::start_script("crates/capstan-compose/tests/python/streamco_server.py")
    }

    /// Starts the server script at `script` (relative to the repository; it takes the port as
    /// its one argument) on a free port.
    pub fn start_script(script: &str) -> Self {
        Self::start_script_with(script, &[])
    }

    /// Starts the server script at `script` with the port and then `args` as its arguments.
    pub fn start_script_with(script: &str, args: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap_or_else(|e| panic!("a free port: {e}"))
            .port();
        let script = repo_root().join(script);
        let child = Command::new(python())
            .arg(script)
            .arg(port.to_string())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting the Python MCP server: {e}"));
        let address = SocketAddr::from(([127, 0, 0, 1], port));
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

/// The Python SDK client of `crates/capstan-sidecar/tests/python/list_changed.py`: one
/// session on a sidecar's socket that waits for `notifications/tools/list_changed` and reports
/// what it sees, a JSON object per line. Killed on drop.
pub struct ListeningClient {
    process: Spawned,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ListeningClient {
    /// Connects to the sidecar at `socket` as (`project`, `token`) in the SDK's connect `mode`
    /// (`legacy`, `auto`, or a revision); after the notification it calls `gone`, if given.
    pub fn start(
        socket: &Path,
        project: &str,
        token: &str,
        mode: &str,
        gone: Option<&str>,
    ) -> Self {
        let mut command = Command::new(python());
        command
            .arg(repo_root().join("crates/capstan-sidecar/tests/python/list_changed.py"))
            .arg(socket)
            .args([project, token, mode]);
        if let Some(gone) = gone {
            command.arg(gone);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting the Python SDK client: {e}"));
        let stdout = child.stdout.take();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let Some(stdout) = stdout else { return };
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            process: Spawned(child),
            lines,
        }
    }

    /// The next line the client printed, as JSON; panics after `patience`.
    pub fn next(&self, patience: Duration) -> Value {
        let line = self.lines.recv_timeout(patience).unwrap_or_else(|e| {
            panic!("the Python SDK client said nothing within {patience:?}: {e}")
        });
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("the client printed {line:?}: {e}"))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// Seconds since the Unix epoch, as the Python client stamps what it saw.
pub fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
