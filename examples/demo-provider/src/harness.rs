//! Processes for tests: workspace binaries and the demo provider.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("no workspace root above {}", env!("CARGO_MANIFEST_DIR")))
}

/// Set by `make test` and `make bench` once their one build has made every workspace binary:
/// the harness then uses them as they are.
pub const PREBUILT: &str = "CAPSTAN_BINARIES_PREBUILT";

/// The workspace binary `bin`, as the tests' own build made it.
///
/// `cargo test --workspace` builds every binary with the same feature set as the tests
/// (packages with integration tests get their binaries built; the demo provider has one for
/// that reason), so under `make test` nothing is built here. Run some other way (`cargo test
/// -p …`), the binaries are built once per process with the command `make test` uses, so no
/// second feature set is compiled: `cargo test --workspace --no-run` (debug), or `cargo build
/// --profile bench --workspace --bins --benches` under `cargo bench`.
pub fn binary(bin: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        if std::env::var_os(PREBUILT).is_none() {
            build_workspace_binaries();
        }
    });
    // Test and bench executables run from <target>/<profile>/deps; binaries sit in
    // <target>/<profile>.
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current exe: {e}"));
    let path = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} has no target dir", exe.display()))
        .join(bin);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `make test` (or `cargo test --workspace`)",
        path.display()
    );
    path
}

fn build_workspace_binaries() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let args: &[&str] = if cfg!(debug_assertions) {
        &["test", "--workspace", "--no-run", "-q"]
    } else {
        &[
            "build",
            "--profile",
            "bench",
            "--workspace",
            "--bins",
            "--benches",
            "-q",
        ]
    };
    let status = Command::new(cargo)
        .args(args)
        .current_dir(repo_root())
        .status()
        .unwrap_or_else(|e| panic!("running cargo: {e}"));
    assert!(status.success(), "cargo {} failed", args.join(" "));
}

/// A running demo provider on a free loopback port; stopped on drop.
pub struct DemoProvider {
    child: Child,
    /// Where it listens.
    pub address: SocketAddr,
}

impl DemoProvider {
    /// Starts the demo provider on a free loopback port with the given faults.
    pub fn start(faults: &[&str]) -> Self {
        Self::start_on("127.0.0.1:0", faults, &[])
    }

    /// Starts the demo provider on `listen` (port 0 picks one) with the given faults,
    /// accepting MCP requests addressed to `allowed_hosts` too.
    pub fn start_on(listen: &str, faults: &[&str], allowed_hosts: &[&str]) -> Self {
        let mut command = Command::new(binary("demo-provider"));
        command
            .args(["--listen", listen])
            .env_remove("DEMO_PROVIDER_FAULTS")
            .env_remove("DEMO_PROVIDER_ALLOWED_HOSTS");
        for fault in faults {
            command.args(["--fault", fault]);
        }
        for host in allowed_hosts {
            command.args(["--allowed-host", host]);
        }
        let (child, address) = spawn_listening(command, "demo-provider");
        Self { child, address }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A URL on the provider.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// `host:port`, as an allow-list entry.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    /// Every request the provider received: method, path, headers.
    pub async fn requests(&self) -> Vec<Value> {
        let response = client()
            .get(self.url("/debug/requests"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("reading the provider's requests: {e}"));
        response
            .json()
            .await
            .unwrap_or_else(|e| panic!("decoding the provider's requests: {e}"))
    }

    /// How many `method` requests (POST, GET, DELETE) the provider received on `/mcp`.
    pub async fn mcp_requests(&self, method: &str) -> usize {
        self.requests()
            .await
            .iter()
            .filter(|r| r["method"] == method && r["path"] == "/mcp")
            .count()
    }

    /// The tools named by the `tools/call` requests the provider received, in order.
    pub async fn tool_calls(&self) -> Vec<String> {
        self.requests()
            .await
            .iter()
            .filter_map(|r| r["rpc"].as_array())
            .flatten()
            .filter_map(|m| m["tool"].as_str().map(str::to_owned))
            .collect()
    }

    /// The tools the provider lists now, as raw JSON, read with plain JSON-RPC over HTTP
    /// (initialize, tools/list, DELETE): no MCP client library, so a test's oracle does not
    /// share code with what it checks. Adds its requests to the provider's record.
    pub async fn listed_tools(&self) -> Vec<Value> {
        let url = self.url("/mcp");
        let post = |body: Value, session: Option<String>| {
            let mut request = client()
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-11-25")
                .json(&body);
            if let Some(session) = session {
                request = request.header("mcp-session-id", session);
            }
            request.send()
        };
        let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "oracle", "version": "1"}}});
        let response = post(initialize, None)
            .await
            .unwrap_or_else(|e| panic!("initialize: {e}"));
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let _ = response.text().await;
        let initialized =
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let _ = post(initialized, session.clone()).await;
        let list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let text = post(list, session.clone())
            .await
            .unwrap_or_else(|e| panic!("tools/list: {e}"))
            .text()
            .await
            .unwrap_or_default();
        if let Some(session) = session {
            let _ = client()
                .delete(&url)
                .header("mcp-session-id", session)
                .send()
                .await;
        }
        // The answer is JSON or one SSE event whose data is the JSON-RPC response.
        let answer: Value = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| serde_json::from_str(data.trim()).ok())
            .or_else(|| serde_json::from_str(&text).ok())
            .unwrap_or_else(|| panic!("tools/list answered {text:?}"));
        answer["result"]["tools"]
            .as_array()
            .cloned()
            .unwrap_or_else(|| panic!("tools/list answered {answer}"))
    }

    /// The tool `name` as the provider lists it now ([`DemoProvider::listed_tools`]).
    pub async fn listed_tool(&self, name: &str) -> Value {
        self.listed_tools()
            .await
            .into_iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("the provider lists no tool {name}"))
    }

    /// Sends `notifications/tools/list_changed` to every session opened while the
    /// `list-changed` switch was set; returns how many sessions were told.
    pub async fn notify_list_changed(&self) -> u64 {
        let answer: Value = client()
            .post(self.url("/debug/list-changed"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("asking for a list change: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("reading the list change answer: {e}"));
        answer["told"].as_u64().unwrap_or(0)
    }

    /// Replaces the provider's faults.
    pub async fn set_faults(&self, faults: &[&str]) {
        let body = serde_json::to_string(faults).unwrap_or_default();
        let response = client()
            .put(self.url("/debug/faults"))
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("setting faults: {e}"));
        assert!(
            response.status().is_success(),
            "setting faults: {}",
            response.status()
        );
    }

    /// Stops the provider now (as if it died).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for DemoProvider {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Spawns `command` (binary `name`), which prints `<name>: listening on http://<address>` as
/// its first line, and returns it with that address.
fn spawn_listening(mut command: Command, name: &str) -> (Child, SocketAddr) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"));
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = BufReader::new(stdout).read_line(&mut line);
    }
    let address = line
        .trim()
        .strip_prefix(&format!("{name}: listening on http://"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{name}'s first line was {line:?}"));
    (child, address)
}

/// A harness binary's process, killed (and reaped) on drop.
struct Spawned(Child);

impl Spawned {
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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

/// A memory figure of process `pid` from `/proc/<pid>/status` — `field` is e.g. `VmRSS:` (now)
/// or `VmHWM:` (peak) — in KiB; `None` once the process is gone.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        line.strip_prefix(field)?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    })
}

/// CPU time process `pid` has used so far (user + system, every thread), in seconds, from
/// `/proc/<pid>/stat` (clock ticks of 1/100 s, Linux's USER_HZ on every mainstream build).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) end with ')'; utime and stime are
    // fields 14 and 15, i.e. the 12th and 13th after it.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// An HTTP client for talking to test servers (installs the process's TLS provider, which
/// the workspace's reqwest leaves to the application).
pub fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::new()
}

/// Installs the process's TLS crypto provider (ring) unless one is installed: the workspace's
/// reqwest and rmcp clients leave that choice to the application.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The directory holding the TypeScript MCP SDK's `node_modules` (`make tools` installs it
/// into `~/.cache/capstan/node`; `CAPSTAN_NODE_DIR` overrides). Scripts run from there, since
/// ES modules resolve packages next to the importing file.
pub fn node_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("CAPSTAN_NODE_DIR") {
        return dir.into();
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap_or_default()));
    let dir = PathBuf::from(cache).join("capstan/node");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").exists(),
        "{} has no TypeScript MCP SDK: run `make tools` (e2e/node-env installs it)",
        dir.display()
    );
    dir
}

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

/// A capability document (a CapabilityBinding's shape) named `name`, with one MCP server
/// `server` at `endpoint` allowing `include`. Shared by the composer's and the sidecar's tests
/// and benches.
pub fn binding_document(name: &str, server: &str, endpoint: &str, include: &[&str]) -> Value {
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
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap_or_else(|e| panic!("a free port: {e}"))
            .port();
        let script = repo_root().join("crates/capstan-compose/tests/python/streamco_server.py");
        let child = Command::new(python())
            .arg(script)
            .arg(port.to_string())
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

/// The pin of a listed tool (raw JSON), computed apart from Capstan's code: the tool's `name`,
/// `description`, `inputSchema` and `annotations` (those present), written with sorted keys
/// and no whitespace — RFC 8785's form for the strings, integers and booleans the demo tools
/// use — and hashed with SHA-256: `sha256:<hex>`. docs/pins.md defines the digest.
pub fn pin_oracle(tool: &Value) -> String {
    use sha2::Digest as _;
    let mut covered = serde_json::Map::new();
    for member in ["name", "description", "inputSchema", "annotations"] {
        if let Some(value) = tool.get(member) {
            covered.insert(member.to_owned(), value.clone());
        }
    }
    let mut text = String::new();
    sorted_compact(&Value::Object(covered), &mut text);
    let digest = sha2::Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `value` as JSON with object keys sorted and no whitespace (integral numbers only).
fn sorted_compact(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                sorted_compact(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                sorted_compact(item, out);
            }
            out.push(']');
        }
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (_, Some(u), _) => out.push_str(&u.to_string()),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e15 => {
                out.push_str(&(f as i64).to_string())
            }
            _ => panic!("pin_oracle: {n} is not an integer; the oracle writes integers only"),
        },
        other => out.push_str(&other.to_string()),
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
