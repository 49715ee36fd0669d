//! A real sidecar process on a Unix socket, fed a fixture pointing at real demo providers.

#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use capstan_testkit::{
    DemoProvider, binary, binding_document, client, node_dir, python, repo_root,
};
use capstan_testkit::{ListeningClient, unix_seconds};
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
        let mut command = Command::new(binary("capstan-sidecar"));
        command
            .env("CAPSTAN_SOCKET", socket)
            .env("CAPABILITY_SOURCE", "fixture")
            .env("CAPABILITY_DOCS_FIXTURE", fixture)
            .env("CAPABILITY_MCP_ENDPOINT_HOSTS", hosts.join(","))
            .env("CAPABILITY_FETCH_HOSTS", hosts.join(","))
            .env("CAPSTAN_METERING_SINK", metering)
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

    /// Rewrites the fixture (the fixture source reads it at every read).
    /// The fixture file the sidecar reads its documents from.
    pub fn fixture_path(&self) -> PathBuf {
        self.dir.join("documents.json")
    }

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

/// Asserts that `body` is the sidecar's refusal `{"error": {"kind", "message"}}` of `kind`
/// whose message contains `message`.
pub fn assert_refusal(body: &str, kind: &str, message: &str) {
    let refusal: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not a refusal ({e}): {body}"));
    assert_eq!(refusal["error"]["kind"], kind, "{body}");
    assert!(
        refusal["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(message)),
        "want {message:?}: {body}"
    );
}

/// The value of header `name` in a response head or curl's header dump.
pub fn header_value(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

/// The body of an `initialize` request.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}"#;

/// A capability-provider API on loopback that answers every project with `documents` and
/// counts the requests it receives.
pub struct RecordingProviderApi {
    pub url: String,
    pub requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl RecordingProviderApi {
    pub async fn start(documents: Value) -> Self {
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = requests.clone();
        let app = axum::Router::new().route(
            "/projects/{project}/capability-documents",
            axum::routing::get(move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let documents = documents.clone();
                async move { axum::Json(documents) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, requests }
    }

    pub fn count(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Reads the sidecar's `/metrics` at `address`.
pub async fn metrics(address: &str) -> String {
    client()
        .get(format!("http://{address}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A free TCP address on loopback for the sidecar's metrics.
pub fn free_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// How long a condition may take to hold before a test fails: generous, because the machine
/// may be busy; tests assert outcomes, not speed.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `probe` until it yields a value, failing the test with `what` after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "not within {PATIENCE:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Project, token, tool and arguments the SDK client scripts are run with.
pub const SDK_CLIENT_ARGS: [&str; 4] = [
    "demo-project",
    "caller-token",
    "streamco__streams_get",
    r#"{"name": "clickstream"}"#,
];

/// What an SDK client script (Python or TypeScript) must report after connecting at protocol
/// revision `version`, listing, reading the instructions and calling `streamco__streams_get`
/// on the StreamCo fixture.
pub fn assert_sdk_client_saw_streamco(output: &std::process::Output, version: &str) {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(seen["protocolVersion"], version, "{seen}");
    assert_eq!(
        seen["tools"],
        json!([
            "streamco__pipeline_diagnose",
            "streamco__streams_get",
            "streamco__streams_list",
            "load_skill"
        ])
    );
    let instructions = seen["instructions"].as_str().unwrap();
    assert!(instructions.contains("## Overview — streaming.streamco.example"));
    assert!(instructions.contains("- lag-triage (streaming.streamco.example): Step-by-step"));
    assert_eq!(seen["isError"], false);
    assert_eq!(seen["structured"]["state"], "Lagging");
}

/// Runs `tests/python/client.py` (the Python SDK) against `sidecar` in connect `mode`.
pub fn python_sdk_client(sidecar: &Sidecar, mode: &str) -> Output {
    Command::new(python())
        .arg(repo_root().join("crates/capstan-sidecar/tests/python/client.py"))
        .arg(&sidecar.socket)
        .args(SDK_CLIENT_ARGS)
        .arg(mode)
        .output()
        .expect("running the Python SDK client")
}

/// Runs the TypeScript SDK client script `tests/node/<script>` against `sidecar` (a copy in
/// the SDK's directory: ES modules find packages next to the script).
pub fn typescript_sdk_client(sidecar: &Sidecar, script: &str) -> Output {
    typescript_sdk_script(sidecar, script, &SDK_CLIENT_ARGS)
}

/// Runs `tests/node/<script>` with the sidecar's socket and `args`.
pub fn typescript_sdk_script(sidecar: &Sidecar, script: &str, args: &[&str]) -> Output {
    let dir = node_dir();
    let copy = dir.join(format!(
        "sidecar-{}-{}-{script}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::copy(
        repo_root()
            .join("crates/capstan-sidecar/tests/node")
            .join(script),
        &copy,
    )
    .expect("copying the TypeScript client");
    let output = Command::new("node")
        .arg(&copy)
        .arg(&sidecar.socket)
        .args(args)
        .output()
        .expect("running the TypeScript SDK client");
    let _ = std::fs::remove_file(&copy);
    output
}

/// Writes `changed` as the fixture and waits for the client's notification: how long after the
/// write it arrived, by the client's clock (never before the write).
pub fn change_and_wait(
    sidecar: &Sidecar,
    client: &ListeningClient,
    changed: &Value,
    patience: Duration,
) -> f64 {
    let changed_at = unix_seconds();
    sidecar.write_fixture(changed);
    let notified = client.next(patience);
    let notified_at = notified["notifiedAt"]
        .as_f64()
        .unwrap_or_else(|| panic!("no notification: {notified}"));
    assert!(
        notified_at >= changed_at,
        "a notification came before the change: {notified}"
    );
    notified_at - changed_at
}

/// The Python SDK client of `list_changed.py` in `sidecar` as (demo-project, t) in connect
/// `mode`, calling `gone` once notified.
pub fn listening_client(sidecar: &Sidecar, mode: &str, gone: Option<&str>) -> ListeningClient {
    ListeningClient::start(&sidecar.socket, "demo-project", "t", mode, gone)
}

/// The names `tools/list` shows in `session`, in order.
pub async fn tool_names(session: &RunningService<RoleClient, ClientConfig>) -> Vec<String> {
    session
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect()
}

/// Arguments as an MCP argument object.
pub fn args(value: Value) -> Option<serde_json::Map<String, Value>> {
    value.as_object().cloned()
}

/// A `tools/call` of `name` with `arguments`.
pub fn call(name: &str, arguments: Value) -> rmcp::model::CallToolRequestParams {
    let mut params = rmcp::model::CallToolRequestParams::new(name.to_owned());
    params.arguments = args(arguments);
    params
}

/// The upstream sessions the provider saw closed (DELETE on /mcp).
pub async fn upstream_deletes(provider: &DemoProvider) -> usize {
    provider.mcp_requests("DELETE").await
}

/// How many JSON-RPC messages of `method` the provider received.
pub async fn provider_messages(provider: &DemoProvider, method: &str) -> usize {
    provider
        .requests()
        .await
        .iter()
        .flat_map(|r| r["rpc"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["method"] == method)
        .count()
}

/// The resident memory of process `pid`, in KiB (0 when it cannot be read).
pub fn rss_kib(pid: u32) -> f64 {
    capstan_testkit::proc_status_kib(pid, "VmRSS:").unwrap_or(0.0)
}

pub use capstan_testkit::cpu_seconds;

/// Runs a Python SDK client script of `tests/python/` with `args` and reads the one JSON
/// report it prints; a script that fails, or prints anything else, fails the test with its
/// output.
pub fn python_report(script: &str, args: &[&str]) -> serde_json::Value {
    let output = std::process::Command::new(python())
        .arg(
            repo_root()
                .join("crates/capstan-sidecar/tests/python")
                .join(script),
        )
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        output.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{script}: {e}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}
