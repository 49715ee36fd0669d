//! Reading the answer to a handshake request: a JSON body, or the first answer on an SSE
//! stream, and what an HTTP error without a JSON-RPC error means.

use futures::StreamExt as _;
use http::StatusCode;
use rmcp::model::ErrorData;
use serde_json::Value;
use sse_stream::SseStream;

use super::{HandshakeError, QUOTED_BODY_BYTES};
use crate::mcp::call::Answer;
use crate::mcp::call::MAX_ANSWER_BYTES;
use crate::mcp::drain::DrainOnDrop;
use crate::mcp::lane::Watched;
use crate::mcp::limited::{ReadError, limited_bytes, read_limited};
use capstan_api::wire::MCP_SESSION_ID;

/// The answer to request `id`: a JSON body, or the first answer on an SSE stream (the server's
/// other messages before it are not read: pings and logs before a session exists), with the
/// session the response assigns. With `legacy_status`, an HTTP 4xx other than 401 and 403 is
/// a refusal (how a server without `server/discover` may refuse it).
pub(super) async fn read_answer(
    response: http::Response<Watched>,
    method: &'static str,
    id: &str,
    legacy_status: bool,
) -> Result<(Answer, Option<String>), HandshakeError> {
    let status = response.status();
    let session = response
        .headers()
        .get(MCP_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let read_error = |source: ReadError| HandshakeError::Read {
        method,
        source: Box::new(source),
    };
    let malformed = |problem: String| HandshakeError::Malformed { method, problem };
    let json = media_type(&response) == "application/json";
    let answer = if json {
        let body = read_limited(response, MAX_ANSWER_BYTES)
            .await
            .map_err(read_error)?;
        match serde_json::from_slice::<Answer>(&body) {
            Ok(answer) if status.is_success() || answer.error.is_some() => answer,
            Err(e) if status.is_success() => return Err(malformed(format!("is not JSON: {e}"))),
            _ => {
                let body = String::from_utf8_lossy(&body[..body.len().min(QUOTED_BODY_BYTES)]);
                return Err(refused_by_status(
                    method,
                    status,
                    body.into_owned(),
                    legacy_status,
                ));
            }
        }
    } else if status.is_success() && is_event_stream(&response) {
        first_answer_in_stream(response, method).await?
    } else if status.is_success() {
        return Err(malformed(format!(
            "came as {:?}, neither JSON nor an event stream (HTTP {status})",
            media_type(&response)
        )));
    } else {
        let body = quoted_body(response).await;
        return Err(refused_by_status(method, status, body, legacy_status));
    };
    // An error answer may name no id (a server that could not read the request's).
    let unnamed = answer.id.as_ref().is_none_or(Value::is_null);
    match &answer.id {
        _ if unnamed && answer.error.is_some() => Ok((answer, session)),
        Some(answered) if answered.as_str() == Some(id) => Ok((answer, session)),
        Some(answered) if !unnamed => {
            Err(malformed(format!("answers another request ({answered})")))
        }
        _ => Err(malformed("names no request".into())),
    }
}

/// An HTTP error without a JSON-RPC error: with `legacy_status` and a 4xx other than 401 and
/// 403, the refusal of a server without the method; otherwise the status itself.
fn refused_by_status(
    method: &'static str,
    status: StatusCode,
    body: String,
    legacy_status: bool,
) -> HandshakeError {
    let legacy = legacy_status
        && status.is_client_error()
        && status != StatusCode::UNAUTHORIZED
        && status != StatusCode::FORBIDDEN;
    if legacy {
        return HandshakeError::Refused {
            method,
            error: ErrorData::invalid_request(
                format!("{method} rejected with HTTP {status}: {body}"),
                None,
            ),
        };
    }
    HandshakeError::Status {
        method,
        status,
        body,
    }
}

/// The first answer (a message with a `result` or an `error`) on an SSE stream; the stream is
/// then read to its end elsewhere, so that its connection is reused.
async fn first_answer_in_stream(
    response: http::Response<Watched>,
    method: &'static str,
) -> Result<Answer, HandshakeError> {
    let bytes = limited_bytes(response, MAX_ANSWER_BYTES);
    let mut events = DrainOnDrop::new(SseStream::from_bytes_stream(bytes).boxed());
    while let Some(event) = events.next().await {
        let event = event.map_err(|source| HandshakeError::Read {
            method,
            source: Box::new(source),
        })?;
        let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
            continue;
        };
        let answer =
            serde_json::from_str::<Answer>(&data).map_err(|e| HandshakeError::Malformed {
                method,
                problem: format!("has an event that is not JSON: {e}"),
            })?;
        if answer.result.is_some() || answer.error.is_some() {
            return Ok(answer);
        }
    }
    Err(HandshakeError::Malformed {
        method,
        problem: "is a stream that ended without it".into(),
    })
}

/// The response's media type, lowercased, without parameters.
pub(super) fn media_type<B>(response: &http::Response<B>) -> String {
    response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

pub(super) fn is_event_stream<B>(response: &http::Response<B>) -> bool {
    media_type(response) == "text/event-stream"
}

/// The start of a response's body as text, for an error (the rest is not read).
pub(super) async fn quoted_body(response: http::Response<Watched>) -> String {
    let mut body = Vec::new();
    let mut chunks = limited_bytes(response, usize::MAX).boxed();
    while body.len() < QUOTED_BODY_BYTES
        && let Some(Ok(chunk)) = chunks.next().await
    {
        body.extend_from_slice(&chunk);
    }
    body.truncate(QUOTED_BODY_BYTES);
    String::from_utf8_lossy(&body).into_owned()
}
