//! What a request is, decided once: its session id, method and (for an MCP POST) its JSON-RPC
//! message, read and parsed here once.

use axum::body::{Body, Bytes};
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use capstan_api::wire::MCP_PROTOCOL_VERSION;
use rmcp::model::ProtocolVersion;
use serde_json::json;

use super::large::{self, LARGE_BODY_BYTES};
use super::{MAX_BODY_BYTES, Refused};
use crate::caller::identity::refusal;
use crate::message::{Envelope, Message, PROTOCOL_VERSION_META};

/// What a request is, decided once from its path, method, session id and (for an MCP POST)
/// its JSON-RPC message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `initialize`: opens a session.
    Initialize,
    /// A request naming a session: a POST in it, its GET stream, its DELETE.
    InSession {
        /// The session id.
        id: String,
        /// Whether it opens the session's GET stream.
        stream: bool,
        /// Whether it is of a revision without sessions (refused once the session is known to
        /// be the caller's: an unbound id stays 404).
        modern: bool,
    },
    /// A request of the 2026-07-28 revision, without a session.
    Sessionless {
        /// Whether it is `subscriptions/listen` (a stream).
        listen: bool,
    },
    /// Not MCP: a composition, routes or decisions read — checked against the session it
    /// names, if it names one, like any request in that session.
    Read {
        /// The session id it carries.
        session: Option<String>,
    },
}

impl Kind {
    /// The session the request names.
    pub(super) fn session(&self) -> Option<&str> {
        match self {
            Kind::InSession { id, .. } => Some(id),
            Kind::Read { session } => session.as_deref(),
            Kind::Initialize | Kind::Sessionless { .. } => None,
        }
    }
}

/// Classifies an MCP request: its session id, method and message. Refuses a request the
/// sidecar serves in no way: without a session, neither `initialize` nor of 2026-07-28.
pub(super) fn classify(
    session: Option<String>,
    method: &Method,
    headers: &axum::http::HeaderMap,
    message: Option<&Message>,
) -> Result<Kind, Refused> {
    let modern = message.is_some_and(|m| is_sessionless(headers, m));
    match (session, message) {
        (Some(id), _) => Ok(Kind::InSession {
            id,
            stream: method == Method::GET,
            modern,
        }),
        (None, Some(message)) if message.is_initialize() => Ok(Kind::Initialize),
        (None, Some(message)) if modern => Ok(Kind::Sessionless {
            listen: message.single().and_then(Envelope::method) == Some("subscriptions/listen"),
        }),
        (None, Some(_)) => Err(Box::new(refusal(
            StatusCode::BAD_REQUEST,
            "forbidden",
            "no MCP session: send `initialize` first (the sidecar binds your project and \
             token to the session it creates), then the Mcp-Session-Id it returns; or speak \
             2026-07-28, whose requests each carry MCP-Protocol-Version and their _meta",
        ))),
        (None, None) => Err(Box::new(refusal(
            StatusCode::BAD_REQUEST,
            "forbidden",
            "no MCP session: send `initialize` first",
        ))),
    }
}

/// Reads and parses the JSON-RPC body of an MCP POST, once.
pub(super) async fn read_message(body: Body) -> Result<(Bytes, Message), Refused> {
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return Err(Box::new(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_input",
            &format!("the request body exceeds {MAX_BODY_BYTES} bytes"),
        )));
    };
    let parsed = if bytes.len() >= LARGE_BODY_BYTES {
        let read = bytes.clone();
        large::serve(true, async move { Message::parse(&read) }).await
    } else {
        Some(Message::parse(&bytes))
    };
    let Some(parsed) = parsed else {
        return Err(Box::new(large::stopped()));
    };
    match parsed {
        Ok(message) => Ok((bytes, message)),
        Err(error) => Err(Box::new(
            (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({
                "jsonrpc": "2.0", "id": null,
                "error": { "code": -32700, "message": format!("parse error: the body is not JSON ({error})") }
            })),
        )
            .into_response(),
        )),
    }
}

/// Whether an MCP POST without a session is of a revision without sessions (2026-07-28 on):
/// its `MCP-Protocol-Version` header or its `_meta` names one, or it is `server/discover`.
/// The edge then checks the header against the `_meta`, the method and the name
/// (`edge/protocol.rs`).
fn is_sessionless(headers: &axum::http::HeaderMap, message: &Message) -> bool {
    // Revisions are dates, so they compare as strings (as rmcp compares them).
    let modern = |version: &str| version >= ProtocolVersion::NO_INITIALIZE.as_str();
    let header = headers
        .get(MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(modern);
    let Some(message) = message.single() else {
        return header;
    };
    let meta = message.meta_str(PROTOCOL_VERSION_META).is_some_and(modern);
    header || meta || message.method() == Some("server/discover")
}

#[cfg(test)]
mod tests;
