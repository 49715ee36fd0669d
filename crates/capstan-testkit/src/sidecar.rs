//! A real sidecar process on a Unix socket, fed a fixture pointing at real demo providers, and
//! what the sidecar's tests and benchmarks do with it: raw HTTP with curl, rmcp and SDK clients,
//! the fixtures they compose, and the waits they share.

// A harness: a failed step is the test's failure, reported by the panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::{DemoProvider, binary, binding_document, client, node_dir, python, repo_root};
use rmcp::model::ClientConfig;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

mod fixtures;
mod sdk_clients;
mod waits;

pub use self::fixtures::*;
pub use self::sdk_clients::*;
pub use self::waits::*;

/// The header that names the caller's project, as the sidecar reads it by default.
pub const PROJECT_HEADER: &str = "X-Capstan-Project";

/// A running capstan-sidecar; stopped (and its directory removed) on drop.
pub struct Sidecar {
    child: Child,
    /// Its own directory: fixture, socket, metering file.
    pub dir: PathBuf,
    /// The socket it serves on.
    pub socket: PathBuf,
    /// The file its metering events are appended to.
    pub metering: PathBuf,
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A fresh, empty directory under the system's temp dir, unique to this process and call.
pub fn temp_dir(label: &str) -> PathBuf {
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "capstan-sidecar-{}-{label}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Sidecar {
    /// Starts a sidecar serving `documents` (a fixture), allowing `hosts` for MCP and fetches.
    pub fn start(documents: &Value, hosts: &[String], env: &[(&str, &str)]) -> Self {
        let dir = temp_dir("run");
        let fixture = dir.join("documents.json");
        std::fs::write(&fixture, serde_json::to_string(documents).unwrap()).unwrap();
        let socket = dir.join("run/composer.sock");
        let metering = dir.join("metering.jsonl");
        Self::start_at(&dir, &socket, &fixture, &metering, hosts, env)
    }

    /// Starts a sidecar on `socket` reading the fixture file `fixture`, its metering to
    /// `metering`, and waits until it serves.
    pub fn start_at(
        dir: &Path,
        socket: &Path,
        fixture: &Path,
        metering: &Path,
        hosts: &[String],
        env: &[(&str, &str)],
    ) -> Self {
        let child = Self::command(socket, fixture, metering, hosts, env)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the sidecar");
        let started = Instant::now();
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the sidecar did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            dir: dir.to_owned(),
            socket: socket.to_owned(),
            metering: metering.to_owned(),
        }
    }

    /// The command that starts a sidecar with the fixture source and these paths, allowing
    /// `hosts` for MCP and fetches, with `env` on top: for tests that start it themselves.
    pub fn command(
        socket: &Path,
        fixture: &Path,
        metering: &Path,
        hosts: &[String],
        env: &[(&str, &str)],
    ) -> Command {
        let mut command = Command::new(binary("capstan-sidecar"));
        command
            .env("CAPSTAN_SOCKET", socket)
            .env("CAPABILITY_SOURCE", "fixture")
            .env("CAPABILITY_DOCS_FIXTURE", fixture)
            .env("CAPABILITY_MCP_ENDPOINT_HOSTS", hosts.join(","))
            .env("CAPABILITY_FETCH_HOSTS", hosts.join(","))
            .env("CAPSTAN_METERING_SINK", metering)
            // Off unless a test asks: the default file is a pod's state volume.
            .env("CAPSTAN_GAP_SINK", "off")
            // `CAPSTAN_TEST_LOG=capstan_sidecar=debug cargo test … -- --nocapture` shows more.
            .env(
                "CAPSTAN_LOG",
                std::env::var("CAPSTAN_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env("CAPSTAN_LOG_FORMAT", "text");
        for (k, v) in env {
            command.env(k, v);
        }
        command
    }

    /// The rmcp client transport over the socket, as `project` with `token`.
    fn transport(
        &self,
        project: &str,
        token: Option<&str>,
    ) -> StreamableHttpClientTransport<UnixSocketHttpClient> {
        let url = "http://localhost/mcp";
        let mut config =
            StreamableHttpClientTransportConfig::with_uri(url).custom_headers(HashMap::from([(
                http::HeaderName::from_static("x-capstan-project"),
                http::HeaderValue::from_str(project).unwrap(),
            )]));
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let client = UnixSocketHttpClient::new(self.socket.to_str().unwrap(), url);
        StreamableHttpClientTransport::with_client(client, config)
    }

    /// An MCP session (rmcp client over the socket) for `project` with `token`.
    pub async fn session(
        &self,
        project: &str,
        token: Option<&str>,
    ) -> RunningService<RoleClient, ClientConfig> {
        ClientConfig::default()
            .serve(self.transport(project, token))
            .await
            .expect("initializing a session")
    }

    /// An rmcp client of the 2026-07-28 revision (`server/discover`, no session) for
    /// `project` with `token`.
    pub async fn modern_client(
        &self,
        project: &str,
        token: Option<&str>,
    ) -> RunningService<RoleClient, ClientConfig> {
        use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
        ClientConfig::default()
            .serve_with_lifecycle(
                self.transport(project, token),
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("discovering the sidecar")
    }

    /// curl over the socket: returns (HTTP status, body, headers).
    pub fn curl(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, String, String) {
        let header_file = self.dir.join(format!(
            "headers-{}",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut command = Command::new("curl");
        command
            .args(["-s", "-o", "-", "-w", "\n%{http_code}", "-D"])
            .arg(&header_file)
            .args(["--unix-socket"])
            .arg(&self.socket)
            .args(["-X", method, &format!("http://localhost{path}")])
            .args([
                "-H",
                "content-type: application/json",
                "-H",
                "accept: application/json, text/event-stream",
            ]);
        for (k, v) in headers {
            command.args(["-H", &format!("{k}: {v}")]);
        }
        if body.is_some() {
            command.args(["--data-binary", "@-"]);
            command.stdin(Stdio::piped());
        }
        command.stdout(Stdio::piped());
        let mut child = command.spawn().expect("curl");
        if let Some(body) = body {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(body.as_bytes())
                .unwrap();
        }
        let output = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or((&text, "0"));
        let headers = std::fs::read_to_string(&header_file).unwrap_or_default();
        (code.trim().parse().unwrap_or(0), body.to_owned(), headers)
    }

    /// One HTTP/1.1 request over the socket without a child process (for tests that send
    /// thousands): returns (status, response head, body as received).
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String, String) {
        use std::io::{Read, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\
             content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
             content-length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            request.push_str(&format!("{k}: {v}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, head.to_owned(), body.to_owned())
    }

    /// Opens a session with curl; returns its id.
    pub fn curl_initialize(&self, project: &str, token: &str) -> String {
        let (code, body, headers) = self.curl(
            "POST",
            "/mcp",
            &[(PROJECT_HEADER, project), ("authorization", &format!("Bearer {token}"))],
            Some(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#),
        );
        assert_eq!(code, 200, "{body}");
        headers
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| v.trim().to_owned())
            })
            .expect("a session id")
    }

    /// POSTs `body` in session `id`, as the caller `curl_initialize("demo-project", "t")`
    /// bound to it; returns (HTTP status, body).
    pub fn curl_in_session(&self, id: &str, body: &str) -> (u16, String) {
        let (code, body, _) = self.curl(
            "POST",
            "/mcp",
            &[
                (PROJECT_HEADER, "demo-project"),
                ("authorization", "Bearer t"),
                ("mcp-session-id", id),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            Some(body),
        );
        (code, body)
    }

    /// The fixture file the sidecar reads its documents from.
    pub fn fixture_path(&self) -> PathBuf {
        self.dir.join("documents.json")
    }

    /// Rewrites the fixture (the fixture source reads it at every read).
    pub fn write_fixture(&self, documents: &Value) {
        std::fs::write(
            self.dir.join("documents.json"),
            serde_json::to_string(documents).unwrap(),
        )
        .unwrap();
    }

    /// The metering events written so far.
    pub fn meter_events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.metering)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The sidecar's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the sidecar (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
