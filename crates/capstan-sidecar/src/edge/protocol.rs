//! The protocol's rules for an MCP POST, made here once for every message the edge serves,
//! before it is served: what the caller must accept and send, its `MCP-Protocol-Version`
//! against its body, the standard headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) against
//! what the body says, and its `_meta`. They are the rules rmcp's Streamable HTTP server
//! applies to the requests it serves, in the same order and with the same answers
//! (hand-written: rmcp keeps its checks crate-private); the revisions served are one list.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use capstan_api::wire::{MCP_METHOD, MCP_PROTOCOL_VERSION};
use capstan_upstream::mcp::ParamHeader;
use capstan_upstream::mcp::argument_header_mismatch;
use capstan_upstream::mcp::decoded_header_value;
use rmcp::ErrorData as McpError;
use rmcp::model::{ClientCapabilities, ProtocolVersion};
use serde::Deserialize as _;
use serde_json::{Map, Value, json};

use super::answer::Revision;
use super::request::Refused;
use crate::message::{Envelope, PROTOCOL_VERSION_META, Params};

/// The protocol revisions served: 2026-07-28 (without sessions) and every session-based one.
pub(crate) const SUPPORTED_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2026_07_28,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2024_11_05,
];

/// `Mcp-Name`: what a request names (a tool, a prompt, a resource), beside its method.
const MCP_NAME: &str = "mcp-name";
/// The `_meta` member holding the caller's capabilities (2026-07-28).
const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
/// Whether `version` is 2026-07-28 or later (revisions are dates: they compare as text).
fn is_modern(version: &str) -> bool {
    version >= ProtocolVersion::V_2026_07_28.as_str()
}

/// Checks an MCP POST (`headers`, its one message `message`) against the protocol's rules;
/// `marks` are the argument headers the tool a `tools/call` names asks for (capstan-upstream
/// `mcp/param_headers.rs`), if the caller's task serves it. Its revision when it passes, else
/// the answer that refuses it.
pub(super) fn check_post(
    headers: &HeaderMap,
    message: &Envelope,
    marks: Option<&[ParamHeader]>,
) -> Result<Revision, Refused> {
    media_types(headers)?;
    let request_id = message
        .method
        .is_some()
        .then_some(())
        .and(message.id.as_ref());
    let initialize = request_id.is_some() && message.method() == Some("initialize");
    let meta_version = request_id.and(message.meta_str(PROTOCOL_VERSION_META));
    if initialize {
        init_body_version(headers, message)?;
    } else {
        header_version(headers, meta_version.is_some())?;
    }
    standard_headers(headers, message, marks)?;
    let discover = message.method() == Some("server/discover");
    let per_request = request_id.is_some() && (meta_version.is_some() || discover);
    let sent_modern = header_str(headers, MCP_PROTOCOL_VERSION).is_some_and(is_modern);
    // What the `_meta` lacks matters only to a request of a revision that requires it: a
    // session's requests (the hot path of the session revisions) skip the walk.
    let missing = match request_id {
        Some(_) if !initialize && (per_request || sent_modern) => request_id
            .and(message.meta())
            .map_or_else(|| REQUIRED_META.to_vec(), missing_meta),
        _ => Vec::new(),
    };
    if let Some(id) = request_id.filter(|_| !initialize) {
        meta_against_header(headers, id, meta_version, discover, &missing)?;
    }
    let version = if initialize {
        message.param("protocolVersion")
    } else {
        meta_version.or_else(|| header_str(headers, MCP_PROTOCOL_VERSION))
    };
    let revision = Revision {
        per_request,
        // A request that names no revision speaks 2025-03-26 (as the 2025-06-18 spec asks).
        modern: version.is_some_and(is_modern),
        meta_malformed: !missing.is_empty(),
    };
    if let Some(id) = request_id.filter(|_| !initialize) {
        per_request_meta(id, meta_version, discover, &missing, revision)?;
    }
    Ok(revision)
}

/// A session's GET stream: its `MCP-Protocol-Version` as [`check_revision`] asks, and an
/// `Accept` that takes `text/event-stream` (or anything), else 406.
pub(super) fn check_stream(headers: &HeaderMap) -> Result<(), Refused> {
    check_revision(headers)?;
    let values = headers.get_all(header::ACCEPT).into_iter();
    let takes_events = values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| unquoted(v, ','))
        .map(|range| unquoted(range, ';').next().unwrap_or_default().trim())
        .any(|essence| essence.eq_ignore_ascii_case("text/event-stream") || essence == "*/*");
    if !takes_events {
        return Err(plain(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: a session's GET stream is text/event-stream; send Accept: \
             text/event-stream",
        ));
    }
    Ok(())
}

/// A session's GET or DELETE: a `MCP-Protocol-Version` it sends must be one the sidecar
/// speaks (400 otherwise, as a JSON-RPC error: the session's client reads it as one).
pub(super) fn check_revision(headers: &HeaderMap) -> Result<(), Refused> {
    let Some(version) = headers.get(MCP_PROTOCOL_VERSION) else {
        return Ok(());
    };
    let known = version
        .to_str()
        .is_ok_and(|v| SUPPORTED_VERSIONS.iter().any(|s| s.as_str() == v));
    if known {
        return Ok(());
    }
    Err(json_error(
        None,
        McpError::invalid_request(
            "unsupported MCP-Protocol-Version: use the revision negotiated at initialize",
            None,
        ),
    ))
}

/// The caller must take both answers a POST may get, and send JSON: 406 and 415 otherwise.
fn media_types(headers: &HeaderMap) -> Result<(), Refused> {
    let (mut json, mut sse) = (false, false);
    let values = headers.get_all(header::ACCEPT).into_iter();
    for range in values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| unquoted(v, ','))
    {
        let mut fields = unquoted(range, ';');
        let essence = fields.next().unwrap_or_default().trim();
        if fields.any(|field| zero_quality(field.trim())) {
            continue;
        }
        json |= essence.eq_ignore_ascii_case("application/json");
        sse |= essence.eq_ignore_ascii_case("text/event-stream");
    }
    if !json || !sse {
        return Err(plain(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        ));
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let is_json = content_type.is_some_and(|value| {
        let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
        essence.trim().eq_ignore_ascii_case("application/json")
    });
    if !is_json {
        return Err(plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: Content-Type must be application/json",
        ));
    }
    Ok(())
}

/// `value` split at each `delimiter` outside a quoted string (an HTTP list or parameter list
/// may quote one; a backslash escapes a quote inside).
fn unquoted(value: &str, delimiter: char) -> impl Iterator<Item = &str> {
    let (mut quoted, mut escaped) = (false, false);
    value.split(move |c| {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if !quoted && c == delimiter {
            return true;
        }
        false
    })
}

/// Whether a media range's parameter is an explicit quality of zero (`q=0`, `q=0.000`),
/// which refuses the range. A weight that breaks RFC 9110's grammar (more than three
/// decimals, not digits) is ignored, so the range stays accepted.
fn zero_quality(field: &str) -> bool {
    let Some((name, value)) = field.split_once('=') else {
        return false;
    };
    if !name.trim().eq_ignore_ascii_case("q") {
        return false;
    }
    let (whole, fraction) = value.trim().split_once('.').unwrap_or((value.trim(), ""));
    let well_formed = fraction.len() <= 3 && fraction.bytes().all(|d| d.is_ascii_digit());
    well_formed && whole == "0" && fraction.bytes().all(|d| d == b'0')
}

/// An `initialize`'s `MCP-Protocol-Version`, if sent, must be the revision its params ask for.
fn init_body_version(headers: &HeaderMap, message: &Envelope) -> Result<(), Refused> {
    let Some(sent) = headers.get(MCP_PROTOCOL_VERSION) else {
        return Ok(());
    };
    let id = message.id.as_ref();
    let Ok(sent) = sent.to_str() else {
        return Err(json_error(
            id,
            McpError::invalid_request(
                "Invalid Request: MCP-Protocol-Version header is not valid UTF-8",
                None,
            ),
        ));
    };
    let asked = message.param("protocolVersion").unwrap_or_default();
    if sent != asked {
        return Err(json_error(
            id,
            McpError::invalid_request(
                format!(
                    "Invalid Request: MCP-Protocol-Version header ({sent}) does not match \
                     initialize params.protocolVersion ({asked})"
                ),
                None,
            ),
        ));
    }
    Ok(())
}

/// A `MCP-Protocol-Version` header must name a revision the sidecar speaks, unless the request
/// names its own in `_meta` (`named_in_meta`: that one is then checked against it).
fn header_version(headers: &HeaderMap, named_in_meta: bool) -> Result<(), Refused> {
    let Some(sent) = headers.get(MCP_PROTOCOL_VERSION) else {
        return Ok(());
    };
    let Ok(sent) = sent.to_str() else {
        return Err(plain(
            StatusCode::BAD_REQUEST,
            "Bad Request: Invalid MCP-Protocol-Version header encoding",
        ));
    };
    if !named_in_meta
        && !SUPPORTED_VERSIONS
            .iter()
            .any(|known| known.as_str() == sent)
    {
        return Err(plain(
            StatusCode::BAD_REQUEST,
            &format!("Bad Request: Unsupported MCP-Protocol-Version: {sent}"),
        ));
    }
    Ok(())
}

/// A request may say beside its body what it asks — `Mcp-Method`, `Mcp-Name` for what it
/// names, `Mcp-Param-*` for each argument the called tool marks — so that a proxy can route on
/// them. Each it sends must say what the body says (a Base64-wrapped value decoded), or the
/// request is refused with -32020: a proxy would route it as another. In 2026-07-28 (by the
/// `MCP-Protocol-Version` header) they are required, but for `initialize`.
fn standard_headers(
    headers: &HeaderMap,
    message: &Envelope,
    marks: Option<&[ParamHeader]>,
) -> Result<(), Refused> {
    let Some(method) = message.method() else {
        return Ok(());
    };
    let required = header_str(headers, MCP_PROTOCOL_VERSION).is_some_and(is_modern);
    let id = message.id.as_ref();
    let initialize = id.is_some() && method == "initialize";
    let mismatch = |reason: String| json_error(id, McpError::header_mismatch(reason, None));
    match one_header(headers, MCP_METHOD).map_err(|defect| mismatch(defect.to_string()))? {
        None if required && !initialize => {
            return Err(mismatch("missing required Mcp-Method header".to_owned()));
        }
        Some(sent) if sent != method => {
            return Err(mismatch(format!(
                "Mcp-Method header `{sent}` does not match body method `{method}`"
            )));
        }
        _ => {}
    }
    if initialize {
        return Ok(());
    }
    if let Some(named) = named_param(method).and_then(|key| message.param(key)) {
        match one_header(headers, MCP_NAME).map_err(|defect| mismatch(defect.to_string()))? {
            None if required => {
                return Err(mismatch(format!(
                    "missing required Mcp-Name header for `{method}`"
                )));
            }
            None => {}
            Some(sent) => {
                let sent = decoded_header_value(sent)
                    .ok_or_else(|| mismatch("Mcp-Name header is not valid Base64".to_owned()))?;
                if sent != named {
                    return Err(mismatch(format!(
                        "Mcp-Name header `{sent}` does not match body value `{named}`"
                    )));
                }
            }
        }
    }
    if let (Params::Call(params), Some(marks), true) = (&message.params, marks, required)
        && let Some(reason) = argument_header_mismatch(headers, marks, params.arguments.as_ref())
    {
        return Err(mismatch(reason));
    }
    Ok(())
}

/// The param whose value a method's `Mcp-Name` header carries.
fn named_param(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// The `_meta` members a 2026-07-28 request must carry.
const REQUIRED_META: [&str; 2] = [PROTOCOL_VERSION_META, CLIENT_CAPABILITIES_META];

/// Which of [`REQUIRED_META`] `meta` lacks, or holds in a form that is not its own.
fn missing_meta(meta: &Map<String, Value>) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if !meta
        .get(PROTOCOL_VERSION_META)
        .is_some_and(Value::is_string)
    {
        missing.push(PROTOCOL_VERSION_META);
    }
    let capabilities = meta.get(CLIENT_CAPABILITIES_META);
    if capabilities.is_none_or(|value| ClientCapabilities::deserialize(value).is_err()) {
        missing.push(CLIENT_CAPABILITIES_META);
    }
    missing
}

/// A request's `_meta` against its header: a request that names its revision in `_meta`
/// must send the same one in `MCP-Protocol-Version` (-32020); one that does not, but is
/// `server/discover` or sent as 2026-07-28, lacks what that revision requires (-32602).
fn meta_against_header(
    headers: &HeaderMap,
    id: &Value,
    meta_version: Option<&str>,
    discover: bool,
    missing: &[&str],
) -> Result<(), Refused> {
    let sent = header_str(headers, MCP_PROTOCOL_VERSION);
    let Some(meta_version) = meta_version else {
        let required = discover || sent.is_some_and(is_modern);
        if required {
            return Err(json_error(
                Some(id),
                McpError::invalid_params(
                    format!(
                        "Invalid params: request _meta is missing or has malformed required \
                         fields: {}",
                        missing.join(", ")
                    ),
                    None,
                ),
            ));
        }
        return Ok(());
    };
    let mismatch = |message: String| json_error(Some(id), McpError::header_mismatch(message, None));
    match sent {
        None => Err(mismatch(
            "request _meta protocolVersion requires MCP-Protocol-Version header".to_owned(),
        )),
        Some(sent) if sent != meta_version => Err(mismatch(format!(
            "MCP-Protocol-Version header ({sent}) does not match request _meta protocolVersion \
             ({meta_version})"
        ))),
        Some(_) => Ok(()),
    }
}

/// A request that names its revision must name one the sidecar speaks (-32022, with the
/// revisions it does), and one of 2026-07-28 on — or `server/discover` — must carry all of
/// that revision's `_meta` (-32602).
fn per_request_meta(
    id: &Value,
    meta_version: Option<&str>,
    discover: bool,
    missing: &[&str],
    revision: Revision,
) -> Result<(), Refused> {
    if let Some(asked) = meta_version
        && !SUPPORTED_VERSIONS
            .iter()
            .any(|known| known.as_str() == asked)
    {
        // rmcp's type reads any text as a revision (its only constructor is serde's).
        let asked = serde_json::from_value(json!(asked)).unwrap_or(ProtocolVersion::LATEST);
        let error = McpError::unsupported_protocol_version(asked, SUPPORTED_VERSIONS);
        return Err(Box::new(super::answer::error(id, error, revision)));
    }
    let required = discover || revision.modern && meta_version.is_some();
    if required && !missing.is_empty() {
        let error = McpError::invalid_params(
            format!(
                "request _meta is missing or has malformed required fields: {}",
                missing.join(", ")
            ),
            None,
        );
        return Err(Box::new(super::answer::error(id, error, revision)));
    }
    Ok(())
}

/// The one value of header `name`, if sent: sent twice, or not as text, is a defect.
fn one_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, HeaderDefect> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(HeaderDefect::Repeated(name.to_owned()));
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| HeaderDefect::NotText(name.to_owned()))
}

/// A standard header that cannot say anything: sent twice, or not as text.
#[derive(Debug, thiserror::Error)]
enum HeaderDefect {
    #[error("duplicate {0} header")]
    Repeated(String),
    #[error("{0} header contains invalid characters")]
    NotText(String),
}

/// Header `name` as text, if sent as text.
fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// A refusal that comes before the message is read as JSON-RPC: plain text.
fn plain(status: StatusCode, message: &str) -> Refused {
    Box::new((status, message.to_owned()).into_response())
}

/// A request refused for what it says against its headers: a JSON-RPC error, 400.
fn json_error(id: Option<&Value>, error: McpError) -> Refused {
    Box::new(super::answer::refusal(id, error))
}

#[cfg(test)]
mod tests;
