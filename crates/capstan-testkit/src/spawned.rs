//! Child processes the testkit starts: reading a server's chosen address from its first line,
//! and killing (and reaping) a process on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// Spawns `command` (binary `name`), which prints `<name>: listening on http://<address>` as
/// its first line, and returns it with that address.
pub(crate) fn spawn_listening(command: Command, name: &str) -> (Child, SocketAddr) {
    let (child, line) = spawn_first_line(command, name);
    let address = line
        .trim()
        .strip_prefix(&format!("{name}: listening on http://"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{name}'s first line was {line:?}"));
    (child, address)
}

/// Spawns `command` (binary `name`) and returns it once it has printed its first line, with
/// that line.
pub(crate) fn spawn_first_line(mut command: Command, name: &str) -> (Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"));
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = BufReader::new(stdout).read_line(&mut line);
    }
    (child, line)
}

/// A process the testkit started, killed (and reaped) on drop.
pub(crate) struct Spawned(pub(crate) Child);

impl Spawned {
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
