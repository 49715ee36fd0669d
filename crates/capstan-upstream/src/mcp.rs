//! MCP upstreams: one per `mcpServers[]` entry, opened by rmcp's Streamable HTTP client in the
//! best revision both sides speak (2026-07-28 where the server offers it, else a session
//! revision) and then held by Capstan alone (`mcp/call.rs`, `mcp/revision.rs`):
//! rmcp's client keeps a service loop, a transport worker and their channels per session for
//! as long as it lives, which was most of a sidecar session's memory (docs/benchmarks.md: RSS
//! per session).

mod call;
mod call_span;
mod changes;
mod connector;
mod error;
mod lane;
mod limited;
mod listen;
mod offerings;
mod origin;
mod pooled;
mod relay;
mod revision;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientConfig, ErrorCode, JsonObject, Tool,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpError;
use serde_json::{Value, json};
use tracing::debug;

use self::call::DirectCalls;
pub use self::changes::{ResourceUpdated, Updated, UpstreamChanges};
pub use self::connector::{CallerRevision, Connector};
pub use self::error::{CallError, ConnectError};
pub use self::offerings::{Forwarded, Offerings, UpstreamStage, Wanted};
pub use self::origin::{ORIGIN_META, Origin};
pub use self::relay::{
    CallTraffic, CallerSide, ClientAsks, DEFAULT_QUESTION_TIMEOUT, RELAY_CAPACITY, ToCaller,
};
use capstan_core::error_chain::{chain_text, find_in_chain};

/// The next [`Upstream::id`].
static NEXT_UPSTREAM_ID: AtomicU64 = AtomicU64::new(1);

/// An initialized client of one MCP server, limited to its allow-list. Shared by the
/// compositions of one task that keep it (`Composer::compose_reusing`); its session ends when
/// it is shut down or the last holder lets go.
pub struct Upstream {
    /// This session among every upstream session the process opened: what a resource update
    /// names it by.
    pub id: u64,
    /// What its composition asked of it besides tools and the server declared (listed when
    /// the session opens, re-listed with its tools).
    wanted: Wanted,
    /// The `mcpServers[].name` entry.
    pub server: String,
    /// The endpoint URL.
    pub endpoint: String,
    allowed: BTreeSet<String>,
    link: Link,
    closed: AtomicBool,
    /// The standalone stream followed for list changes (servers advertising
    /// `tools.listChanged`), stopped when the session ends.
    listener: Option<Listener>,
    /// Where this upstream's list changes are noted (and whether one was since the last list).
    changes: UpstreamChanges,
    /// Whether the server declared `logging`: only then is `logging/setLevel` sent to it.
    logging: bool,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        // The last composition holding it let go: end the session with the server.
        self.shutdown();
    }
}

/// The task following a standalone stream, stopped when dropped (with its upstream).
struct Listener(tokio::task::JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Who holds the session with the upstream.
enum Link {
    /// Capstan: calls are POSTed straight to the server and the end is a DELETE
    /// (`mcp/call.rs`); rmcp opened the session and is gone.
    Direct(DirectCalls),
    /// rmcp's client: a server whose answer to `initialize` named no protocol version.
    Rmcp(RunningService<RoleClient, ClientConfig>),
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("server", &self.server)
            .field("endpoint", &self.endpoint)
            .field("allowed", &self.allowed)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Whether `tool` (the upstream's own name) is on the allow-list.
    pub fn allows(&self, tool: &str) -> bool {
        self.allowed.contains(tool)
    }

    /// Whether the session with the server has ended.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether the server said its tool list changed since the last list (the mark is
    /// cleared: a change noted from now on marks it again).
    pub fn take_stale(&self) -> bool {
        self.changes.take_stale()
    }

    /// The server's tools, listed again on the open session.
    pub async fn relist(&self, timeout: Duration) -> Result<Vec<Tool>, ConnectError> {
        let error = |message: String| ConnectError::List {
            endpoint: self.endpoint.clone(),
            message,
        };
        let listed = match &self.link {
            Link::Direct(direct) => tokio::time::timeout(timeout, direct.list_tools())
                .await
                .map(|r| r.map_err(|e| e.to_string())),
            Link::Rmcp(client) => tokio::time::timeout(timeout, client.list_all_tools())
                .await
                .map(|r| r.map_err(|e| chain_text(&e))),
        };
        match listed {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(message)) => Err(error(message)),
            Err(_) => Err(error(format!("no answer within {timeout:?}"))),
        }
    }

    /// Forwards one call, carrying the caller's `_meta` and relaying the provider's messages
    /// about the call to the caller's side (`mcp/relay.rs`). The allow-list is checked
    /// here again, whatever the caller checked. Through rmcp's client (a server without a
    /// session) the `_meta` goes up with rmcp's own progress token, and nothing is relayed
    /// back yet.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
        traffic: &CallTraffic,
    ) -> Result<CallToolResponse, CallError> {
        if !self.allows(tool) {
            return Err(CallError::NotAllowed {
                server: self.server.clone(),
                tool: tool.to_owned(),
            });
        }
        let answer = match &self.link {
            Link::Direct(_) if self.closed.load(Ordering::Acquire) => {
                return Err(CallError::Unavailable {
                    server: self.server.clone(),
                    message: "the session with the server has ended".into(),
                });
            }
            // The call's own time: its questions' wait for the caller is not the provider's.
            Link::Direct(direct) => relay::within_call_time(
                timeout,
                &traffic.asking,
                direct.call(tool, arguments, traffic),
            )
            .await
            .ok_or(()),
            Link::Rmcp(client) => {
                let mut params = CallToolRequestParams::new(tool.to_owned());
                params.arguments = arguments;
                params.meta = traffic.upstream_meta_for_rmcp();
                params.input_responses = traffic.input_responses.clone();
                params.request_state = traffic.request_state.clone();
                tokio::time::timeout(timeout, async {
                    client
                        .call_tool_once(params)
                        .await
                        .map_err(|error| self.classify(tool, &error))
                })
                .await
                .map_err(drop)
            }
        };
        answer.unwrap_or_else(|_| {
            Err(CallError::Unavailable {
                server: self.server.clone(),
                message: format!("no answer within {timeout:?}"),
            })
        })
    }

    /// Sends `logging/setLevel` with `level` (a level as the protocol spells it) to a server
    /// that declared `logging`; a server that did not is not asked. A server that refuses is
    /// logged, not an error of the caller's request: its messages are its own.
    pub async fn set_log_level(&self, level: &Value, timeout: Duration) {
        if !self.logging || self.is_closed() {
            return;
        }
        let params = json!({ "level": level });
        let sent = match &self.link {
            Link::Direct(direct) => tokio::time::timeout(timeout, direct.set_log_level(params))
                .await
                .map(|r| r.map_err(|e| e.to_string())),
            Link::Rmcp(client) => {
                tokio::time::timeout(timeout, rmcp_set_level(client, params)).await
            }
        };
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(message)) => debug!(server = %self.server, %message, "logging/setLevel refused"),
            Err(_) => {
                debug!(server = %self.server, "logging/setLevel: no answer within {timeout:?}")
            }
        }
    }

    fn classify(&self, tool: &str, error: &ServiceError) -> CallError {
        let server = self.server.clone();
        match error {
            ServiceError::McpError(data) if data.code == ErrorCode::INVALID_PARAMS => {
                CallError::InvalidInput {
                    server,
                    tool: tool.to_owned(),
                    message: data.message.to_string(),
                }
            }
            ServiceError::McpError(data)
                if data.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY =>
            {
                CallError::Refused {
                    server,
                    message: data.message.to_string(),
                    required: error::required_capabilities(data.data.as_ref()),
                }
            }
            ServiceError::UnexpectedResponse => CallError::Malformed {
                server,
                message: "the answer to tools/call is not a tool result".into(),
            },
            other if is_malformed(other) => CallError::Malformed {
                server,
                message: chain_text(other),
            },
            other => CallError::Unavailable {
                server,
                message: chain_text(other),
            },
        }
    }

    /// Ends the session with the upstream and waits until the server was told.
    pub async fn close(&self) {
        if let Some(listener) = &self.listener {
            listener.0.abort();
        }
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        match &self.link {
            Link::Direct(direct) => direct.end().await,
            Link::Rmcp(client) => client.cancellation_token().cancel(),
        }
    }

    /// Ends the session with the upstream without waiting (usable from `Drop`, on a task of
    /// the current runtime); calls made afterwards fail as unavailable.
    pub fn shutdown(&self) {
        if let Some(listener) = &self.listener {
            listener.0.abort();
        }
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        match &self.link {
            Link::Direct(direct) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(direct.ending());
                }
            }
            Link::Rmcp(client) => client.cancellation_token().cancel(),
        }
    }
}

/// `logging/setLevel` through rmcp's client. Logging is deprecated in rmcp (the 2026-07-28
/// revision drops it, SEP-2577), but the session revisions Capstan serves have it.
#[allow(deprecated)]
async fn rmcp_set_level(
    client: &RunningService<RoleClient, ClientConfig>,
    params: Value,
) -> Result<(), String> {
    let params = serde_json::from_value::<rmcp::model::SetLevelRequestParams>(params)
        .map_err(|e| e.to_string())?;
    client.set_level(params).await.map_err(|e| chain_text(&e))
}

/// Whether an rmcp error is an answer that could not be read (rather than no answer): its
/// cause is a JSON error or one of the transport's decoding failures.
fn is_malformed(error: &ServiceError) -> bool {
    find_in_chain::<serde_json::Error>(error).is_some()
        || find_in_chain::<StreamableHttpError<reqwest::Error>>(error).is_some_and(|error| {
            matches!(
                error,
                StreamableHttpError::Deserialize(_)
                    | StreamableHttpError::UnexpectedContentType(_)
                    | StreamableHttpError::UnexpectedServerResponse(_)
                    | StreamableHttpError::ResponseBodyTooLarge { .. }
            )
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rmcp::transport::DynamicTransportError;

    use super::*;

    fn transport_error(error: StreamableHttpError<reqwest::Error>) -> ServiceError {
        ServiceError::TransportSend(DynamicTransportError::from_parts(
            "streamable-http",
            std::any::TypeId::of::<()>(),
            Box::new(error),
        ))
    }

    #[test]
    fn an_answer_that_cannot_be_read_should_be_malformed_and_no_answer_unavailable() {
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        for malformed in [
            StreamableHttpError::Deserialize(json),
            StreamableHttpError::UnexpectedContentType(Some("text/html".into())),
        ] {
            assert!(is_malformed(&transport_error(malformed)));
        }
        for unavailable in [
            StreamableHttpError::Io(std::io::Error::other("connection reset")),
            StreamableHttpError::TransportChannelClosed,
        ] {
            assert!(!is_malformed(&transport_error(unavailable)));
        }
        assert!(!is_malformed(&ServiceError::TransportClosed));
    }
}
