//! The RFC 8693 token service of the upstream-credential tests (`e2e/tools/tokenservice`,
//! zitadel/oidc's OP): exchanges a ServiceAccount token of a test apiserver for a JWT of
//! another audience, and counts what it did (`/stats`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::spawned::{Spawned, spawn_listening};
use crate::workspace::repo_root;

/// The `tokenservice` binary `e2e/build-tools` built (`make tools` builds it).
pub fn tokenservice() -> PathBuf {
    let output = Command::new(repo_root().join("e2e/build-tools"))
        .arg("tokenservice")
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running e2e/build-tools tokenservice: {e}"));
    assert!(
        output.status.success(),
        "e2e/build-tools tokenservice failed"
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("TOKENSERVICE="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("e2e/build-tools printed no TOKENSERVICE= line"))
}

/// A running token service on loopback, stopped on drop.
pub struct TokenService {
    _process: Spawned,
    /// Where it listens (its issuer is `http://<address>`).
    pub address: SocketAddr,
}

impl TokenService {
    /// Starts the service with `args` (its flags, `--listen` aside: a free loopback port).
    pub fn start(args: &[&str]) -> Self {
        let mut command = Command::new(tokenservice());
        command.args(["--listen", "127.0.0.1:0"]).args(args);
        let (child, address) = spawn_listening(command, "tokenservice");
        Self {
            _process: Spawned(child),
            address,
        }
    }

    /// Its issuer URL.
    pub fn issuer(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Its token endpoint.
    pub fn token_endpoint(&self) -> String {
        format!("http://{}/oauth/token", self.address)
    }

    /// Its keys (JWKS).
    pub fn jwks(&self) -> String {
        format!("http://{}/keys", self.address)
    }

    /// What it counted: `{"exchanges": N, "refused": M}`.
    pub fn stats(&self) -> serde_json::Value {
        let output = Command::new("curl")
            .args(["-s", &format!("http://{}/stats", self.address)])
            .output();
        output
            .ok()
            .and_then(|o| serde_json::from_slice(&o.stdout).ok())
            .unwrap_or(serde_json::Value::Null)
    }
}
