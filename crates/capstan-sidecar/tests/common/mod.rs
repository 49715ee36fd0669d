//! A real sidecar process on a Unix socket, fed a fixture pointing at real demo providers.

#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use capstan_demo_provider::harness::{
    DemoProvider, binary, binding_document, client, node_dir, python, repo_root,
};
use rmcp::model::ClientConfig;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

pub const PROJECT_HEADER: &str = "X-Capstan-Project";

/// A running capstan-sidecar; stopped (and its directory removed) on drop.
pub struct Sidecar {
    child: Child,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub metering: PathBuf,
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

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

    pub fn command(
        socket: &Path,
        fixture: &Path,
        metering: &Path,
        hosts: &[String],
        env: &[(&str, &str)],
    ) -> Command {
        let mut command = Command::new(binary("capstan-sidecar", "capstan-sidecar"));
        command
            .env("CAPSTAN_SOCKET", socket)
            .env("CAPABILITY_SOURCE", "fixture")
            .env("CAPABILITY_DOCS_FIXTURE", fixture)
            .env("CAPABILITY_MCP_ENDPOINT_HOSTS", hosts.join(","))
            .env("CAPABILITY_FETCH_HOSTS", hosts.join(","))
            .env("CAPSTAN_METERING_SINK", metering)
            .env("CAPSTAN_LOG", "warn")
            .env("CAPSTAN_LOG_FORMAT", "text");
        for (k, v) in env {
            command.env(k, v);
        }
        command
    }

    /// An MCP session (rmcp client over the socket) for `project` with `token`.
    pub async fn session(
        &self,
        project: &str,
        token: Option<&str>,
    ) -> RunningService<RoleClient, ClientConfig> {
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
        ClientConfig::default()
            .serve(StreamableHttpClientTransport::with_client(client, config))
            .await
            .expect("initializing a session")
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

    /// The metering events written so far.
    pub fn meter_events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.metering)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

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

/// A binding document for `project` with one MCP server on `provider`.
pub fn binding(
    name: &str,
    project: Option<&str>,
    server: &str,
    provider: &DemoProvider,
    include: &[&str],
) -> Value {
    let mut document = binding_document(name, server, &provider.url("/mcp"), include);
    if let Some(project) = project {
        document["metadata"]["namespace"] = json!(project);
    }
    document
}

/// The StreamCo fixture with its endpoints on `provider`.
pub fn streamco(provider: &DemoProvider) -> Value {
    let text =
        std::fs::read_to_string(repo_root().join("examples/streamco/capability-documents.json"))
            .unwrap()
            .replace("127.0.0.1:7810", &provider.host());
    serde_json::from_str(&text).unwrap()
}

/// Arguments as an MCP argument object.
pub fn args(value: Value) -> Option<serde_json::Map<String, Value>> {
    value.as_object().cloned()
}
