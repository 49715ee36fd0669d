//! `capstanctl compose` and `capstanctl call`: talk to a capstan-sidecar over its Unix socket.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use capstan_api::wire::{DEFAULT_SOCKET, MCP_URL, PROJECT_HEADER, SOCKET_HOST};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};
use serde_json::Value;

/// Where the sidecar listens and who is asking.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The sidecar's Unix socket.
    #[arg(long, env = "CAPSTAN_SOCKET", default_value = DEFAULT_SOCKET)]
    pub(crate) socket: PathBuf,
    /// The project to act in (a Kubernetes object name: lower-case letters, digits, '-'
    /// and '.').
    #[arg(long, env = "CAPSTAN_PROJECT", value_parser = project_name)]
    pub(crate) project: String,
    /// The caller's bearer token (sent as `Authorization: Bearer …`, never to providers).
    #[arg(long, env = "CAPSTAN_TOKEN")]
    pub(crate) token: Option<String>,
    /// The header naming the project (as the sidecar is configured).
    #[arg(long, env = "CAPSTAN_PROJECT_HEADER", default_value = PROJECT_HEADER)]
    pub(crate) project_header: String,
}

/// Refuses what the sidecar would refuse, with the same rule, before anything is sent.
pub(crate) fn project_name(value: &str) -> Result<String, capstan_api::ProjectNameError> {
    capstan_api::check_project_name(value).map(|()| value.to_owned())
}

/// `capstanctl compose`.
#[derive(Debug, clap::Args)]
pub struct ComposeArgs {
    #[command(flatten)]
    target: Target,
    /// Print the composition as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// `capstanctl call`.
#[derive(Debug, clap::Args)]
pub struct CallArgs {
    #[command(flatten)]
    target: Target,
    /// The composed tool name, e.g. `streamco__streams_list`.
    tool: String,
    /// The arguments as a JSON object.
    #[arg(default_value = "{}")]
    arguments: String,
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))
}

pub(crate) fn fail(message: &str) -> ExitCode {
    eprintln!("capstanctl: {message}");
    ExitCode::from(1)
}

/// Runs `compose`: exit 0 with the composition printed, 1 when it could not be read.
pub fn compose(args: &ComposeArgs) -> ExitCode {
    let result = runtime().and_then(|rt| rt.block_on(fetch_composition(&args.target)));
    match result {
        Ok(composition) if args.json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&composition).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Ok(composition) => {
            print!("{}", render(&composition));
            ExitCode::SUCCESS
        }
        Err(message) => fail(&message),
    }
}

async fn fetch_composition(target: &Target) -> Result<Value, String> {
    fetch_json(target, "/v1/composition").await
}

/// GETs `path` (with its query) from the sidecar as `target`'s caller: the JSON body, or the
/// sidecar's refusal as a message.
pub(crate) async fn fetch_json(target: &Target, path: &str) -> Result<Value, String> {
    let socket = &target.socket;
    let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| {
        format!(
            "connecting to {}: {e} (is the sidecar running?)",
            socket.display()
        )
    })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("{}: {e}", socket.display()))?;
    tokio::spawn(connection);
    let mut request = hyper::Request::get(format!("http://{SOCKET_HOST}{path}"))
        .header(hyper::header::HOST, SOCKET_HOST)
        .header(target.project_header.as_str(), target.project.as_str());
    if let Some(token) = &target.token {
        request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("building the request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("GET {path}: {e}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the answer to GET {path}: {e}"))?
        .to_bytes();
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("the sidecar answered {status} with a body that is not JSON: {e}"))?;
    if !status.is_success() {
        let message = value["error"]["message"].as_str().unwrap_or("no message");
        return Err(format!("the sidecar refused ({status}): {message}"));
    }
    Ok(value)
}

/// The composition as tables: tools, skills, bindings with their reasons.
pub fn render(composition: &Value) -> String {
    let empty = Vec::new();
    let tools = composition["tools"].as_array().unwrap_or(&empty);
    let skills = composition["skills"].as_array().unwrap_or(&empty);
    let bindings = composition["bindings"].as_array().unwrap_or(&empty);
    let degraded = bindings.iter().filter(|b| b["degraded"] == true).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "project {}: {} tools, {} skills, {} bindings ({} degraded)\n",
        composition["project"].as_str().unwrap_or("?"),
        tools.len(),
        skills.len(),
        bindings.len(),
        degraded
    );
    let width = tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .map(str::len)
        .chain([4])
        .max()
        .unwrap_or(4);
    let _ = writeln!(out, "{:<width$}  MUTATING  BINDING / SERVICE", "TOOL");
    for tool in tools {
        let _ = write!(
            out,
            "{:<width$}  {:<8}  {} / {}",
            tool["name"].as_str().unwrap_or("?"),
            if tool["mutating"] == true {
                "yes"
            } else {
                "no"
            },
            tool["binding"].as_str().unwrap_or("?"),
            tool["serviceName"].as_str().unwrap_or("?"),
        );
        match tool["shortenedFrom"].as_str() {
            Some(full) => {
                let _ = writeln!(out, " (shortened from {full})");
            }
            None => out.push('\n'),
        }
    }
    for capability in composition["capabilities"].as_array().unwrap_or(&empty) {
        let candidates: Vec<String> = capability["candidates"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .map(|c| {
                let mut name = c["tool"].as_str().unwrap_or("?").to_owned();
                if c["composed"] != true {
                    name.push_str(" (not composed)");
                } else if c["status"] == "quarantined" {
                    name.push_str(" (quarantined)");
                }
                name
            })
            .collect();
        let _ = writeln!(
            out,
            "{:<width$}  {:<8}  routed {}: {}",
            capability["tool"].as_str().unwrap_or("?"),
            if capability["effect"] == "read" {
                "no"
            } else {
                "yes"
            },
            capability["capability"].as_str().unwrap_or("?"),
            candidates.join(", "),
        );
    }
    if let Some(builtins) = composition["builtins"].as_array()
        && !builtins.is_empty()
    {
        let names: Vec<&str> = builtins.iter().filter_map(Value::as_str).collect();
        let _ = writeln!(out, "built-in: {}", names.join(", "));
    }
    if !skills.is_empty() {
        let _ = writeln!(out, "\nSKILL  (SERVICE)  DESCRIPTION");
        for skill in skills {
            let _ = writeln!(
                out,
                "{}  ({})  {}",
                skill["name"].as_str().unwrap_or("?"),
                skill["serviceName"].as_str().unwrap_or("?"),
                skill["description"].as_str().unwrap_or(""),
            );
        }
    }
    let _ = writeln!(out, "\nBINDING  STATE");
    for binding in bindings {
        let name = binding["binding"].as_str().unwrap_or("?");
        if binding["degraded"] == true {
            let _ = writeln!(out, "{name}  DEGRADED");
            for reason in binding["reasons"].as_array().unwrap_or(&empty) {
                let _ = writeln!(out, "  - {}", reason.as_str().unwrap_or(""));
            }
        } else {
            let _ = writeln!(out, "{name}  ok");
        }
    }
    out
}

/// Runs `call`: exit 0 with the result printed, 1 when the tool reported an error or the call
/// could not be made.
pub fn call(args: &CallArgs) -> ExitCode {
    let arguments: Value = match serde_json::from_str(&args.arguments) {
        Ok(value @ Value::Object(_)) => value,
        Ok(_) => return fail("the arguments must be a JSON object, e.g. '{\"name\": \"orders\"}'"),
        Err(e) => return fail(&format!("the arguments are not JSON: {e}")),
    };
    let result =
        runtime().and_then(|rt| rt.block_on(call_tool(&args.target, &args.tool, arguments)));
    match result {
        Ok((text, is_error)) => {
            print!("{text}");
            if is_error {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(message) => fail(&message),
    }
}

async fn call_tool(
    target: &Target,
    tool: &str,
    arguments: Value,
) -> Result<(String, bool), String> {
    let socket = target.socket.to_string_lossy().into_owned();
    let header = http::HeaderName::try_from(target.project_header.as_str())
        .map_err(|e| format!("project header: {e}"))?;
    let value = http::HeaderValue::try_from(target.project.as_str())
        .map_err(|e| format!("project: {e}"))?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(MCP_URL)
        .custom_headers(HashMap::from([(header, value)]));
    if let Some(token) = &target.token {
        config = config.auth_header(token.clone());
    }
    let transport = StreamableHttpClientTransport::with_client(
        UnixSocketHttpClient::new(&socket, MCP_URL),
        config,
    );
    let client = ClientConfig::default()
        .serve(transport)
        .await
        .map_err(|e| format!("opening a session on {socket}: {e}"))?;
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = arguments.as_object().cloned();
    let result = client.call_tool(params).await;
    let _ = client.cancel().await;
    let result = result.map_err(|e| format!("calling {tool}: {e}"))?;
    let mut out = String::new();
    for block in &result.content {
        if let Some(text) = block.as_text() {
            let _ = writeln!(out, "{}", text.text);
        }
    }
    if let Some(structured) = &result.structured_content
        && result.content.is_empty()
    {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(structured).unwrap_or_default()
        );
    }
    Ok((out, result.is_error == Some(true)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_should_show_tools_mutating_and_degraded_reasons() {
        let composition = json!({
            "project": "demo",
            "tools": [
                {"name": "streamco__streams_list", "mutating": false, "binding": "b", "serviceName": "s"},
                {"name": "streamco__restart", "mutating": true, "binding": "b", "serviceName": "s"}
            ],
            "builtins": ["load_skill"],
            "capabilities": [{"capability": "cap.web.search", "tool": "cap__web_search", "effect": "read",
                              "candidates": [{"tool": "a__search", "composed": true, "status": "active"},
                                             {"tool": "b__search", "composed": false, "status": "active"}]}],
            "skills": [{"name": "lag-triage", "serviceName": "s", "description": "d"}],
            "bindings": [
                {"binding": "b", "degraded": false, "reasons": []},
                {"binding": "c", "degraded": true, "reasons": ["endpoint x was not dialed: y"]}
            ]
        });
        let table = render(&composition);
        assert!(table.starts_with("project demo: 2 tools, 1 skills, 2 bindings (1 degraded)\n"));
        assert!(
            table.contains("streamco__restart       yes       b / s\n"),
            "{table}"
        );
        assert!(table.contains("built-in: load_skill\n"));
        assert!(
            table.contains(
                "cap__web_search         no        routed cap.web.search: a__search, b__search (not composed)\n"
            ),
            "{table}"
        );
        assert!(
            table.contains("c  DEGRADED\n  - endpoint x was not dialed: y\n"),
            "{table}"
        );
    }
}
