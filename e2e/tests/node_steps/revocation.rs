//! A live MCP session held by the assistant through its sidecar, spoken with curl over the
//! socket from inside the assistant container (each request its own connection, the session
//! carried by `Mcp-Session-Id` as MCP's Streamable HTTP carries it).

use std::time::Duration;

use capstan_e2e::kubenode::Node;
use libtest_mimic::Failed;
use serde_json::{Value, json};

use super::{PROJECT, exec_assistant};

/// The sidecar's caller-check TTL on the node (`CAPSTAN_CALLER_CHECK_TTL_SECONDS`): 10 s
/// instead of the default 60, so the revocation trial waits seconds, not a minute.
pub const CALLER_CHECK_TTL: Duration = Duration::from_secs(10);

/// One answer of the sidecar, as curl in the assistant read it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub session: Option<String>,
    pub body: String,
}

/// POSTs `message` to the sidecar's `/mcp` from the assistant container, as the holder of
/// `token`, in `session` if given.
pub fn post(
    node: &Node,
    token: &str,
    session: Option<&str>,
    message: &Value,
) -> Result<Answer, Failed> {
    let authorization = format!("Authorization: Bearer {token}");
    let project = format!("X-Capstan-Project: {PROJECT}");
    let session_header = session.map(|id| format!("Mcp-Session-Id: {id}"));
    let body = message.to_string();
    let mut command = vec![
        "/usr/bin/curl",
        "-sS",
        "-i",
        "--max-time",
        "30",
        "--unix-socket",
        "/var/run/capstan/composer.sock",
        "-H",
        &authorization,
        "-H",
        &project,
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
        "-H",
        "MCP-Protocol-Version: 2025-06-18",
    ];
    if let Some(header) = &session_header {
        command.extend(["-H", header]);
    }
    command.extend(["--data-binary", &body, "http://localhost/mcp"]);
    let printed = exec_assistant(node, &command)?;
    parse(&printed).ok_or_else(|| format!("curl in the assistant printed:\n{printed}").into())
}

/// Status, session id and body of curl's `-i` output.
fn parse(printed: &str) -> Option<Answer> {
    let (head, body) = printed
        .split_once("\r\n\r\n")
        .or_else(|| printed.split_once("\n\n"))?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let session = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_owned())
    });
    Some(Answer {
        status,
        session,
        body: body.to_owned(),
    })
}

/// `initialize` and `notifications/initialized`: the session's id.
pub fn open_session(node: &Node, token: &str) -> Result<String, Failed> {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "node-suite-assistant", "version": "1"}}});
    let answer = post(node, token, None, &initialize)?;
    let session = answer
        .session
        .clone()
        .filter(|_| answer.status == 200)
        .ok_or_else(|| format!("initialize was answered {answer:?}"))?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = post(node, token, Some(&session), &initialized)?;
    if answer.status >= 300 {
        return Err(format!("notifications/initialized was answered {answer:?}").into());
    }
    Ok(session)
}

/// `tools/call streamco__streams_list` in `session`.
pub fn call_in_session(node: &Node, token: &str, session: &str, id: u64) -> Result<Answer, Failed> {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "streamco__streams_list", "arguments": {}}});
    post(node, token, Some(session), &call)
}
