//! Running `capstan-sidecar` processes against the test control plane (the crd source, with
//! the sidecar's own service account) and talking to them over their socket: raw HTTP with
//! curl, for status codes, and JSON-RPC in an MCP session, for tool calls.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{ControlPlane, HarnessError, spawn_logged};

/// The project header clients send.
pub const PROJECT_HEADER: &str = "X-Capstan-Project";

/// The caller check's refusal of a caller `project`'s plane does not admit, as the sidecar
/// words its start.
pub fn not_admitted(project: &str) -> String {
    format!(
        "project {project}: the project's control plane says this caller may not list \
         CapabilityBindings there"
    )
}

/// Whether `body` is the sidecar's refusal `{"error": {"kind", "message"}}` of `kind` with a
/// message starting with `message`.
pub fn refusal_is(body: &str, kind: &str, message: &str) -> bool {
    serde_json::from_str::<Value>(body).is_ok_and(|refusal| {
        refusal["error"]["kind"] == kind
            && refusal["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(message))
    })
}

/// A running sidecar; stopped when dropped.
pub struct SidecarProcess {
    child: Option<Child>,
    /// Its socket.
    pub socket: PathBuf,
    /// Where its metering events go.
    pub metering: PathBuf,
    /// Where its log goes.
    pub log: PathBuf,
}

impl SidecarProcess {
    /// Starts a sidecar named `name` reading bindings with `kubeconfig` (the crd source), with
    /// extra environment `env`.
    pub fn start(
        plane: &ControlPlane,
        kubeconfig: &Path,
        name: &str,
        env: &[(&str, &str)],
    ) -> Result<Self, HarnessError> {
        let dir = plane.state_dir().join(format!("sidecar-{name}"));
        std::fs::create_dir_all(&dir).map_err(|source| HarnessError::Io {
            path: dir.clone(),
            source,
        })?;
        let socket = dir.join("composer.sock");
        let metering = dir.join("metering.jsonl");
        let log = dir.join("sidecar.log");
        let binary = capstan_testkit::binary("capstan-sidecar");
        let mut command = Command::new(&binary);
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("CAPSTAN_SOCKET", &socket)
            .env("CAPABILITY_SOURCE", "crd")
            .env("KUBECONFIG", kubeconfig)
            .env("CAPSTAN_METERING_SINK", &metering)
            .env("CAPSTAN_LOG", "info")
            .env("CAPSTAN_LOG_FORMAT", "text");
        for (key, value) in env {
            command.env(key, value);
        }
        let child = spawn_logged(&mut command, &log)?;
        let mut sidecar = Self {
            child: Some(child),
            socket,
            metering,
            log,
        };
        let started = Instant::now();
        while std::os::unix::net::UnixStream::connect(&sidecar.socket).is_err() {
            let exited = sidecar
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited || started.elapsed() > Duration::from_secs(30) {
                return Err(HarnessError::Command {
                    command: format!("capstan-sidecar ({name})"),
                    status: "did not start serving".into(),
                    stderr: sidecar.log_text(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(sidecar)
    }

    /// Waits (up to 30 s) until the sidecar, serving metrics on `metrics`, has read every
    /// binding of its plane once (`capstan_sidecar_crd_synced`).
    pub fn wait_synced(
        &self,
        runtime: &tokio::runtime::Runtime,
        metrics: &str,
    ) -> Result<(), HarnessError> {
        runtime
            .block_on(crate::suite::eventually(
                Duration::from_secs(30),
                || async {
                    (crate::metric(metrics, "capstan_sidecar_crd_synced ") == 1.0).then_some(())
                },
                || format!("the sidecar did not sync:\n{}", self.log_text()),
            ))
            .map_err(|failed| HarnessError::setup("sidecar", format!("{failed:?}")))
    }

    /// The process id (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    /// The sidecar's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Metering events written so far.
    pub fn meter_events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.metering)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// One HTTP request over the socket: (status, headers, body).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, String, String) {
        use std::io::Write;

        let mut command = Command::new("curl");
        command
            .args(["-s", "-D", "-", "--unix-socket"])
            .arg(&self.socket)
            .args(["-X", method, &format!("http://localhost{path}")])
            .args(["-H", "content-type: application/json"])
            .args(["-H", "accept: application/json, text/event-stream"]);
        for (key, value) in headers {
            command.args(["-H", &format!("{key}: {value}")]);
        }
        if body.is_some() {
            command.args(["--data-binary", "@-"]).stdin(Stdio::piped());
        } else {
            command.stdin(Stdio::null());
        }
        let mut child = match command.stdout(Stdio::piped()).spawn() {
            Ok(child) => child,
            Err(e) => return (0, String::new(), format!("curl: {e}")),
        };
        if let (Some(body), Some(mut stdin)) = (body, child.stdin.take()) {
            let _ = stdin.write_all(body.as_bytes());
        }
        let output = match child.wait_with_output() {
            Ok(output) => output,
            Err(e) => return (0, String::new(), format!("curl: {e}")),
        };
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .lines()
            .next()
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        (status, head.to_owned(), body.to_owned())
    }

    /// Sends `initialize` as `project` with `token`: (status, session id, body).
    pub fn initialize(&self, project: &str, token: Option<&str>) -> (u16, Option<String>, String) {
        let authorization = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![(PROJECT_HEADER, project)];
        if let Some(value) = &authorization {
            headers.push(("authorization", value.as_str()));
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "capstan-e2e", "version": "1"}}});
        let (status, head, body) = self.request("POST", "/mcp", &headers, Some(&body.to_string()));
        let session = head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        });
        (status, session, body)
    }

    /// A session as `project` with `token`, initialized and ready for calls.
    pub fn session(&self, project: &str, token: Option<&str>) -> Result<Session<'_>, String> {
        let (status, id, body) = self.initialize(project, token);
        let Some(id) = id.filter(|_| status == 200) else {
            return Err(format!("initialize answered {status}: {body}"));
        };
        let session = Session {
            sidecar: self,
            project: project.to_owned(),
            authorization: token.map(|t| format!("Bearer {t}")),
            id,
        };
        session.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        Ok(session)
    }

    /// A session as `project` with `token` once the sidecar lists `tool` to it (its source has
    /// read the bindings): a sidecar that has not composes built-ins only. Waits up to 30 s.
    pub fn session_listing(
        &self,
        project: &str,
        token: Option<&str>,
        tool: &str,
    ) -> Result<Session<'_>, String> {
        let started = Instant::now();
        loop {
            let session = self.session(project, token)?;
            let names: Vec<String> = session
                .tools()?
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect();
            if names.iter().any(|n| n == tool) {
                return Ok(session);
            }
            session.end();
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("after 30 s {tool} is still not listed: {names:?}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One `tools/call` of the 2026-07-28 revision, without a session, as `project` with
    /// `token`: (status, body).
    pub fn sessionless_call(
        &self,
        project: &str,
        token: Option<&str>,
        tool: &str,
        arguments: &Value,
    ) -> (u16, String) {
        self.sessionless_request(
            project,
            token,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        )
    }

    /// Any request without a session (2026-07-28) as `token`, its `_meta` and headers
    /// (`Mcp-Method`, and `Mcp-Name` from `params.name` or `params.uri`) as a client sends
    /// them: (status, body).
    pub fn sessionless_request(
        &self,
        project: &str,
        token: Option<&str>,
        method: &str,
        mut params: Value,
    ) -> (u16, String) {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let name = match method {
            "tools/call" | "prompts/get" => params["name"].as_str().map(str::to_owned),
            "resources/read" => params["uri"].as_str().map(str::to_owned),
            _ => None,
        };
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let authorization = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            (PROJECT_HEADER, project),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
        ];
        if let Some(name) = &name {
            headers.push(("mcp-name", name));
        }
        if let Some(authorization) = &authorization {
            headers.push(("authorization", authorization));
        }
        let (status, _, body) = self.request("POST", "/mcp", &headers, Some(&body));
        (status, body)
    }

    /// Stops the process (SIGTERM, then SIGKILL after 10 s).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            for _ in 0..100 {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An MCP session with a sidecar, spoken as plain JSON-RPC over HTTP (the sidecar answers a
/// `tools/call` in a session with one JSON body).
pub struct Session<'a> {
    sidecar: &'a SidecarProcess,
    project: String,
    authorization: Option<String>,
    /// The session id.
    pub id: String,
}

impl Session<'_> {
    fn post(&self, message: &Value) -> (u16, String) {
        let mut headers = vec![
            (PROJECT_HEADER, self.project.as_str()),
            ("mcp-session-id", self.id.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
        ];
        if let Some(value) = &self.authorization {
            headers.push(("authorization", value.as_str()));
        }
        let (status, _, body) =
            self.sidecar
                .request("POST", "/mcp", &headers, Some(&message.to_string()));
        (status, body)
    }

    /// The JSON-RPC answer to `method` with `params` (the `result`, or the whole answer when it
    /// is an error).
    pub fn rpc(&self, method: &str, params: Value) -> Result<Value, String> {
        let (status, body) =
            self.post(&json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}));
        // A streamed answer carries the message on a `data:` line (after an empty priming
        // event).
        let text = body
            .lines()
            .filter_map(|line| line.strip_prefix("data:").map(str::trim))
            .rfind(|data| !data.is_empty())
            .unwrap_or(body.as_str());
        let message: Value = serde_json::from_str(text)
            .map_err(|e| format!("{method} answered {status} with {body:?}: {e}"))?;
        if let Some(result) = message.get("result") {
            Ok(result.clone())
        } else {
            Err(format!("{method} answered {status}: {message}"))
        }
    }

    /// The tools `tools/list` shows.
    pub fn tools(&self) -> Result<Vec<Value>, String> {
        let result = self.rpc("tools/list", json!({}))?;
        Ok(result["tools"].as_array().cloned().unwrap_or_default())
    }

    /// Calls `tool` with `arguments`: the result (`isError` tells failures apart).
    pub fn call(&self, tool: &str, arguments: Value) -> Result<Value, String> {
        self.rpc("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// Calls `tool` and returns its structured content, failing on a tool error.
    pub fn ok(&self, tool: &str, arguments: Value) -> Result<Value, String> {
        let result = self.call(tool, arguments)?;
        if result["isError"] == true {
            return Err(format!("{tool} failed: {}", result["structuredContent"]));
        }
        Ok(result["structuredContent"].clone())
    }

    /// Calls `tool` expecting a tool error; returns `structuredContent.error`.
    pub fn error(&self, tool: &str, arguments: Value) -> Result<Value, String> {
        let result = self.call(tool, arguments)?;
        if result["isError"] != true {
            return Err(format!("{tool} succeeded where it should fail: {result}"));
        }
        Ok(result["structuredContent"]["error"].clone())
    }

    /// Ends the session (DELETE).
    pub fn end(self) {
        let mut headers = vec![
            (PROJECT_HEADER, self.project.as_str()),
            ("mcp-session-id", self.id.as_str()),
        ];
        if let Some(value) = &self.authorization {
            headers.push(("authorization", value.as_str()));
        }
        let _ = self.sidecar.request("DELETE", "/mcp", &headers, None);
    }
}
