//! Opening an upstream: the handshake that settles the revision its requests are addressed in
//! (`mcp/revision.rs`) and what the server declared it offers, sent on the upstream's lane as
//! every later request is (`mcp/call.rs`).
//!
//! - A session-revision caller opens with `initialize`, declaring what the caller declared it
//!   can be asked, then `notifications/initialized`. A server that refuses `initialize` as a
//!   server of 2026-07-28 alone does (an unsupported version, an unknown method) is asked
//!   `server/discover` instead.
//! - A 2026-07-28 caller opens with `server/discover`. A server that answers it as a server
//!   without it does (a JSON-RPC error other than the two a 2026-07-28 server refuses with, or
//!   an HTTP 4xx other than 401 and 403), or says nothing within [`DISCOVER_WAIT`], is opened
//!   with `initialize` in 2025-11-25.
//! - A server that answers `initialize` with a revision that has no handshake (after
//!   2025-11-25) is spoken to in that revision, on the session it assigned if it assigned one.
//!
//! These are the rules of rmcp's client (its lifecycle modes `Initialize`, `Discover` and
//! `Auto`), which opened upstreams before; rmcp offers them only inside its own transport and
//! service loop, which would be a second way to a provider beside the lane, hence this module.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use rmcp::model::{DiscoverResult, ErrorCode, ErrorData, InitializeResult, ServerCapabilities};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use thiserror::Error;

use super::lane::{Lane, LaneError, Watched};
use super::limited::read_limited;
use super::revision::{Revision, SESSION_REVISIONS_UP_TO, client_info};
use crate::trace_context::Outgoing;

mod answer;

use self::answer::{is_event_stream, media_type, quoted_body, read_answer};

/// The revision a session-revision caller's `initialize` names (rmcp's newest, as its client
/// named it): a server answers with the newest it speaks.
const INITIALIZE_VERSION: &str = "2026-07-28";

/// The revision `initialize` names after a `server/discover` that found a server without it.
const LEGACY_VERSION: &str = "2025-11-25";

/// The revisions a `server/discover` asks for, preferred first.
const DISCOVER_VERSIONS: [&str; 1] = ["2026-07-28"];

/// How long a 2026-07-28 caller's `server/discover` waits before the server is taken for one
/// without it and opened with `initialize` (rmcp's wait).
pub(crate) const DISCOVER_WAIT: Duration = Duration::from_secs(10);

/// The most of a refusal's body an error quotes.
pub(crate) const QUOTED_BODY_BYTES: usize = 1024;

/// What a handshake settled.
pub(crate) struct Opened {
    /// How the upstream's requests are addressed from now on.
    pub(crate) revision: Revision,
    /// What the server declared it offers.
    pub(crate) capabilities: ServerCapabilities,
}

/// Why a handshake failed.
#[derive(Debug, Error)]
pub(crate) enum HandshakeError {
    /// The request could not be built (a header no request can carry).
    #[error("building {method}")]
    Request {
        method: &'static str,
        #[source]
        source: http::Error,
    },
    /// The request was not sent or its answer not received (the guard's refusal of the
    /// server's address is in this chain).
    #[error("sending {method}")]
    Send {
        method: &'static str,
        #[source]
        source: LaneError,
    },
    /// The answer could not be read to its end.
    #[error("reading the answer to {method}")]
    Read {
        method: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server answered with an HTTP error and no JSON-RPC error.
    #[error("{method} was answered HTTP {status}: {body}")]
    Status {
        method: &'static str,
        status: StatusCode,
        body: String,
    },
    /// The answer is not what the request asks for.
    #[error("the answer to {method} {problem}")]
    Malformed {
        method: &'static str,
        problem: String,
    },
    /// The server refused the request with a JSON-RPC error.
    #[error("{method} was refused: {} (error {})", error.message, error.code.0)]
    Refused {
        method: &'static str,
        error: ErrorData,
    },
    /// The server speaks no revision Capstan asked for.
    #[error("the server speaks {theirs:?}, none of the revisions Capstan asked for ({ours:?})")]
    NoCommonVersion {
        ours: Vec<String>,
        theirs: Vec<String>,
    },
    /// `server/discover` found a server without it, and `initialize` then failed too.
    #[error("server/discover was refused as a server without it refuses it ({discover}); then")]
    Fallback {
        discover: Box<HandshakeError>,
        #[source]
        fallback: Box<HandshakeError>,
    },
}

impl HandshakeError {
    /// The JSON-RPC error code of a refusal.
    fn refusal_code(&self) -> Option<ErrorCode> {
        match self {
            Self::Refused { error, .. } => Some(error.code),
            _ => None,
        }
    }
}

/// What a 2026-07-28 caller's `server/discover` found.
enum Discovered {
    /// A server of 2026-07-28.
    Modern(Opened),
    /// A server without `server/discover`: its refusal.
    Legacy(HandshakeError),
}

/// Opens the upstream on `lane` for a caller of `caller` (`Some`: a session-revision caller
/// declaring those capabilities; `None`: a 2026-07-28 caller), numbering its requests from
/// `next_id` (the session's own counter, so that no id is used twice). Unbounded in time: the
/// caller sets the deadline.
pub(crate) async fn open(
    lane: &Lane,
    next_id: &AtomicU64,
    caller: Option<Value>,
) -> Result<Opened, HandshakeError> {
    let handshake = Handshake {
        lane,
        next_id,
        // The span of the upstream's opening: the provider's spans of the handshake join it.
        trace: Outgoing::current(),
    };
    match caller {
        Some(capabilities) => {
            let refused = match handshake
                .initialize(INITIALIZE_VERSION, &capabilities)
                .await
            {
                Err(refused) if refuses_initialize(&refused) => refused,
                other => return other,
            };
            match handshake.discover(&capabilities).await? {
                Discovered::Modern(opened) => Ok(opened),
                // Neither handshake: the first refusal says most.
                Discovered::Legacy(_) => Err(refused),
            }
        }
        None => {
            let capabilities = json!({});
            match tokio::time::timeout(DISCOVER_WAIT, handshake.discover(&capabilities)).await {
                Ok(Ok(Discovered::Modern(opened))) => Ok(opened),
                Ok(Ok(Discovered::Legacy(discover))) => handshake
                    .initialize(LEGACY_VERSION, &capabilities)
                    .await
                    .map_err(|fallback| HandshakeError::Fallback {
                        discover: Box::new(discover),
                        fallback: Box::new(fallback),
                    }),
                Ok(Err(error)) => Err(error),
                Err(_) => handshake.initialize(LEGACY_VERSION, &capabilities).await,
            }
        }
    }
}

/// Whether `initialize` was refused as a server of 2026-07-28 alone refuses it.
fn refuses_initialize(error: &HandshakeError) -> bool {
    error.refusal_code().is_some_and(|code| {
        code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION || code == ErrorCode::METHOD_NOT_FOUND
    })
}

/// Whether a refusal of `server/discover` is one a 2026-07-28 server makes (anything else
/// says the server is one without it). Version negotiation is handled before this is asked.
fn is_modern_refusal(code: ErrorCode) -> bool {
    code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY || code == ErrorCode::HEADER_MISMATCH
}

/// One upstream's handshake in progress.
struct Handshake<'a> {
    lane: &'a Lane,
    next_id: &'a AtomicU64,
    trace: Outgoing,
}

impl Handshake<'_> {
    /// `initialize` naming `version` and declaring `capabilities`, then
    /// `notifications/initialized` on the session the server assigned, if any.
    async fn initialize(
        &self,
        version: &str,
        capabilities: &Value,
    ) -> Result<Opened, HandshakeError> {
        const METHOD: &str = "initialize";
        let params = json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "clientInfo": client_info(),
        });
        // The first request: no revision and no session yet.
        let (result, session) = self.ask(METHOD, params, None).await?;
        let result: InitializeResult = parse(METHOD, &result, "an initialize result")?;
        let version = result.protocol_version.as_str().to_owned();
        let revision = if version.as_str() > SESSION_REVISIONS_UP_TO {
            // A revision without a handshake: every request carries the client context; a
            // session assigned all the same is kept, so that what the server asks mid-call
            // can be answered.
            Revision::stateless(version, json!({}), session)
        } else {
            Revision::Session {
                id: session,
                version,
            }
        };
        self.tell_initialized(&revision).await?;
        Ok(Opened {
            revision,
            capabilities: result.capabilities,
        })
    }

    /// `notifications/initialized`, addressed as `revision` says. The server answers 202; a
    /// server that answers 200 with JSON (even an error) is taken as having heard it.
    async fn tell_initialized(&self, revision: &Revision) -> Result<(), HandshakeError> {
        const METHOD: &str = "notifications/initialized";
        let message = json!({ "jsonrpc": "2.0", "method": METHOD });
        let request = self.request(METHOD, &message, Some(revision))?;
        let read = |response: http::Response<Watched>| async move {
            let status = response.status();
            let json = media_type(&response) == "application/json";
            if status.is_success() && !is_event_stream(&response) || json {
                // Read to its end (nothing in it is used) so that the connection is reused.
                let _ = read_limited(response, QUOTED_BODY_BYTES).await;
                return Ok(());
            }
            Err(HandshakeError::Status {
                method: METHOD,
                status,
                body: quoted_body(response).await,
            })
        };
        self.lane
            .exchange(request, read)
            .await
            .map_err(|source| HandshakeError::Send {
                method: METHOD,
                source,
            })?
    }

    /// `server/discover` declaring `capabilities`, in each revision it asks for in turn.
    async fn discover(&self, capabilities: &Value) -> Result<Discovered, HandshakeError> {
        const METHOD: &str = "server/discover";
        let ours = DISCOVER_VERSIONS.map(str::to_owned).to_vec();
        let mut attempted: Vec<String> = Vec::new();
        let mut candidate = ours[0].clone();
        loop {
            attempted.push(candidate.clone());
            let revision = Revision::stateless(candidate.clone(), capabilities.clone(), None);
            let mut params = json!({});
            revision.stamp(&mut params, None, None);
            let refusal = match self.ask(METHOD, params, Some(&revision)).await {
                Ok((result, _)) => {
                    let result: DiscoverResult = parse(METHOD, &result, "a discover result")?;
                    let theirs: Vec<String> = result
                        .supported_versions
                        .iter()
                        .map(|v| v.as_str().to_owned())
                        .collect();
                    let Some(selected) = ours.iter().find(|v| theirs.contains(v)) else {
                        return Err(HandshakeError::NoCommonVersion { ours, theirs });
                    };
                    return Ok(Discovered::Modern(Opened {
                        revision: Revision::stateless(selected.clone(), json!({}), None),
                        capabilities: result.capabilities,
                    }));
                }
                Err(refusal) => refusal,
            };
            let Some(code) = refusal.refusal_code() else {
                return Err(refusal);
            };
            if code != ErrorCode::UNSUPPORTED_PROTOCOL_VERSION {
                return if is_modern_refusal(code) {
                    Err(refusal)
                } else {
                    Ok(Discovered::Legacy(refusal))
                };
            }
            // The server names the revisions it speaks: the next one asked for among them (the
            // same one once more, at most, when it refused one it says it speaks).
            let theirs = supported(&refusal);
            let tried_once = attempted.iter().filter(|v| **v == candidate).count() == 1;
            let next = ours.iter().find(|v| {
                theirs.contains(v) && (!attempted.contains(v) || (tried_once && **v == candidate))
            });
            let Some(next) = next else {
                return Err(HandshakeError::NoCommonVersion { ours, theirs });
            };
            candidate = next.clone();
        }
    }

    /// Sends `method` with `params` as a request (addressed as `revision` says; the first
    /// `initialize` has none) and reads its answer: the `result` and the session the server
    /// assigned with it.
    async fn ask(
        &self,
        method: &'static str,
        params: Value,
        revision: Option<&Revision>,
    ) -> Result<(Box<RawValue>, Option<String>), HandshakeError> {
        let id = format!("capstan-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let request = self.request(method, &message, revision)?;
        // A server without `server/discover` may refuse it with an HTTP error alone.
        let legacy_status = method == "server/discover";
        let answer = self.lane.exchange(request, |response| {
            read_answer(response, method, &id, legacy_status)
        });
        let (answer, session) = Box::pin(answer)
            .await
            .map_err(|source| HandshakeError::Send { method, source })??;
        if let Some(error) = answer.error {
            let error = serde_json::from_value::<ErrorData>(error).map_err(|e| {
                HandshakeError::Malformed {
                    method,
                    problem: format!("is an error that is not one: {e}"),
                }
            })?;
            return Err(HandshakeError::Refused { method, error });
        }
        let result = answer.result.ok_or_else(|| HandshakeError::Malformed {
            method,
            problem: "has neither a result nor an error".into(),
        })?;
        Ok((result, session))
    }

    /// A POST of `message` with the headers of `revision` (none for the first `initialize`)
    /// and the trace context of the upstream's opening.
    fn request(
        &self,
        method: &'static str,
        message: &Value,
        revision: Option<&Revision>,
    ) -> Result<http::Request<Full<Bytes>>, HandshakeError> {
        let mut request = self
            .lane
            .post()
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream");
        if let Some(revision) = revision {
            request = revision.headers(request, message, None);
        }
        for (name, value) in self.trace.entries() {
            request = request.header(name, value);
        }
        let body = Full::new(Bytes::from(serde_json::to_vec(message).unwrap_or_default()));
        request
            .body(body)
            .map_err(|source| HandshakeError::Request { method, source })
    }
}
/// The revisions a refusal with `UNSUPPORTED_PROTOCOL_VERSION` says the server speaks.
fn supported(refusal: &HandshakeError) -> Vec<String> {
    let HandshakeError::Refused { error, .. } = refusal else {
        return Vec::new();
    };
    error
        .data
        .as_ref()
        .and_then(|data| data.get("supported"))
        .and_then(|supported| serde_json::from_value::<Vec<String>>(supported.clone()).ok())
        .unwrap_or_default()
}

/// `text` parsed as `T` (`what` names it in the error).
fn parse<T: serde::de::DeserializeOwned>(
    method: &'static str,
    text: &RawValue,
    what: &str,
) -> Result<T, HandshakeError> {
    serde_json::from_str(text.get()).map_err(|e| HandshakeError::Malformed {
        method,
        problem: format!("is not {what}: {e}"),
    })
}

#[cfg(test)]
mod tests;
