//! The edge's JSON-RPC answers: a request's result shaped for the revision it speaks, or its
//! error, as one `application/json` body with the HTTP status that revision gives it — the
//! shaping and statuses rmcp's server gives the answers it sends.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::ErrorData as McpError;
use rmcp::model::{ErrorCode, ServerResult};
use serde_json::Value;

use crate::observe::request_span;

/// How a message that passed the checks is answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Revision {
    /// The request names its revision in its `_meta` (2026-07-28 on), or is
    /// `server/discover`: the errors its revision answers with an HTTP status get one.
    pub(crate) per_request: bool,
    /// Its revision is 2026-07-28 or later: results carry `resultType` and cache hints.
    pub(crate) modern: bool,
    /// Its `_meta` lacks or garbles what 2026-07-28 requires of it.
    pub(crate) meta_malformed: bool,
}

/// The JSON-RPC answer to one request, serialized straight into its body: a `Value` built
/// first would be a second tree of maps per call on the hot path.
#[derive(serde::Serialize)]
pub(super) struct Answer<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<ServerResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<McpError>,
}

/// The answer to request `id`, shaped for `revision`. A session's revision has no
/// `resultType: complete` and takes a tool's output only as an object (older clients parse no
/// other); 2026-07-28 has every cacheable result carry its hints, calls an unknown resource
/// invalid params, and takes an `input_required` result, which no session revision does.
pub(super) fn answer(
    id: &Value,
    answer: Result<ServerResult, McpError>,
    revision: Revision,
) -> Answer<'_> {
    let shaped = answer.and_then(|mut result| {
        if revision.modern {
            result.fill_missing_cache_hints();
        } else if matches!(result, ServerResult::InputRequiredResult(_)) {
            return Err(McpError::invalid_request(
                "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
                None,
            ));
        } else {
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
        }
        Ok(result)
    });
    let (result, error) = match shaped {
        Ok(result) => (Some(result), None),
        Err(mut error) => {
            if revision.modern && error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            request_span::failed(&error.code.0.to_string());
            (None, Some(error))
        }
    };
    Answer {
        jsonrpc: "2.0",
        id,
        result,
        error,
    }
}

/// `error` as the answer to request `id`, in one body.
pub(super) fn error(id: &Value, error: McpError, revision: Revision) -> Response {
    json(&answer(id, Err(error), revision), revision)
}

/// A request refused before it is served, whatever its revision: `error` as a JSON-RPC
/// answer to request `id` (null when its id is unknown or unusable), 400.
pub(super) fn refusal(id: Option<&Value>, error: McpError) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": error })),
    )
        .into_response()
}

/// The answer as one `application/json` body, with its status (`status`).
pub(super) fn json(answer: &Answer<'_>, revision: Revision) -> Response {
    (
        status(answer, revision),
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        serde_json::to_vec(answer).unwrap_or_default(),
    )
        .into_response()
}

/// The answer serialized alone (an event of a stream).
pub(super) fn text(answer: &Answer<'_>) -> String {
    serde_json::to_string(answer).unwrap_or_default()
}

/// The HTTP status of an answer: 200, but for a request that named its revision itself
/// (2026-07-28) the status its errors carry — 400 for a missing client capability, an
/// unsupported revision, a header that contradicts the body, or params whose `_meta` lacks
/// what the revision requires; 404 for an unknown method.
fn status(answer: &Answer<'_>, revision: Revision) -> StatusCode {
    let Some(error) = answer.error.as_ref().filter(|_| revision.per_request) else {
        return StatusCode::OK;
    };
    match error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::INVALID_PARAMS if revision.meta_malformed => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}
