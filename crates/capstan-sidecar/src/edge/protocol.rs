//! The protocol's rules for the requests the sidecar answers itself (a session's `tools/call`,
//! GET stream and DELETE; a plain 2026-07-28 `tools/call`), made here once: rmcp makes the same
//! checks on the requests it serves, and the revisions served are one list for both.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use capstan_api::wire::{MCP_METHOD, MCP_PROTOCOL_VERSION};
use rmcp::model::ProtocolVersion;
use serde_json::json;

use capstan_compose::argument_header_mismatch;
use rmcp::model::ErrorCode;
use serde_json::Value;

use super::request::EdgeRequest;
use crate::message::{Envelope, Message, PROTOCOL_VERSION_META, Params};

/// The protocol revisions served: 2026-07-28 (without sessions) and every session-based one.
pub(crate) const SUPPORTED_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2026_07_28,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2024_11_05,
];

/// `Mcp-Name`: the tool a 2026-07-28 `tools/call` names.
const MCP_NAME: &str = "mcp-name";
/// A header value sent Base64-encoded starts so (left to rmcp to decode and check).
const BASE64_PREFIX: &str = "=?base64?";

/// Whether a `tools/call` without a session (`message`, sent with `headers`) is one the
/// sidecar answers itself: 2026-07-28 in the header and the `_meta`, `Mcp-Method` and
/// `Mcp-Name` once each and equal to the body's method and name as plain text. Any other —
/// a header missing, repeated, contradicting or Base64-encoded, another revision — goes to
/// rmcp, whose checks answer it.
pub(super) fn plain_sessionless_call(headers: &HeaderMap, message: &Envelope) -> bool {
    let one = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok(),
            _ => None,
        }
    };
    let revision = ProtocolVersion::V_2026_07_28.as_str();
    let name = message.param("name");
    one(MCP_PROTOCOL_VERSION) == Some(revision)
        && message.meta_str(PROTOCOL_VERSION_META) == Some(revision)
        && one(MCP_METHOD) == Some("tools/call")
        && name.is_some_and(|name| !name.starts_with(BASE64_PREFIX) && one(MCP_NAME) == Some(name))
}

/// A 2026-07-28 `tools/call` without a session whose `Mcp-Param-*` headers contradict its
/// body, for a tool the caller's task serves that marks arguments (capstan-upstream
/// `mcp/param_headers.rs`): refused with -32020 and 400, as rmcp refuses a header that
/// contradicts the body — whether the edge or rmcp would serve the call (rmcp's server checks
/// these only through a handler's `get_tool`, which cannot know the caller's task).
pub(super) fn argument_headers_refused(request: &EdgeRequest) -> Option<Response> {
    let version = request.parts.headers.get(MCP_PROTOCOL_VERSION)?;
    if version.to_str().ok()? < ProtocolVersion::V_2026_07_28.as_str() {
        return None;
    }
    let message = request.message.as_ref().and_then(Message::single)?;
    let Params::Call(params) = &message.params else {
        return None;
    };
    let task = request.checked.caller_task.as_ref()?;
    let served = task.served();
    let marks = served.argument_headers(&params.name)?;
    let reason =
        argument_header_mismatch(&request.parts.headers, marks, params.arguments.as_ref())?;
    Some(header_contradicts_body(message.id.as_ref(), &reason))
}

/// The answer to a request whose standard headers contradict its body: -32020, 400.
fn header_contradicts_body(id: Option<&Value>, reason: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({
            "jsonrpc": "2.0", "id": id,
            "error": { "code": ErrorCode::HEADER_MISMATCH.0, "message": reason }
        })),
    )
        .into_response()
}

/// A session's `tools/call` whose protocol headers break the rules, refused with 400 as rmcp
/// refuses it: a `MCP-Protocol-Version` the sidecar does not speak, or an `Mcp-Method` header
/// that contradicts the body.
pub(super) fn header_mismatch(headers: &HeaderMap) -> Option<Response> {
    if let Some(refused) = unknown_revision(headers) {
        return Some(refused);
    }
    if let Some(method) = headers.get(MCP_METHOD)
        && method.as_bytes() != b"tools/call"
    {
        return Some(bad_request(
            "the Mcp-Method header does not match the request's method",
        ));
    }
    None
}

/// A `MCP-Protocol-Version` the sidecar does not speak, refused with 400 as rmcp refuses it.
pub(super) fn unknown_revision(headers: &HeaderMap) -> Option<Response> {
    let version = headers.get(MCP_PROTOCOL_VERSION)?;
    let known = version
        .to_str()
        .is_ok_and(|v| SUPPORTED_VERSIONS.iter().any(|s| s.as_str() == v));
    (!known).then(|| {
        bad_request("unsupported MCP-Protocol-Version: use the revision negotiated at initialize")
    })
}

fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({
            "jsonrpc": "2.0", "id": null,
            "error": { "code": -32600, "message": message }
        })),
    )
        .into_response()
}
