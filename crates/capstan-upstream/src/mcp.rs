//! MCP upstreams: one per `mcpServers[]` entry, opened (`mcp/handshake.rs`) in the best revision
//! both sides speak — 2026-07-28 where the server offers it, else a session revision — and
//! then spoken to by `DirectCalls` (`mcp/call.rs`), addressed as `mcp/revision.rs` says. Every
//! request goes on the upstream's lane (`mcp/lane.rs`): one way to a provider. rmcp is the
//! model library here; its client (a service loop, a transport worker and their channels per
//! session) is not used.

mod call;
mod call_span;
mod changes;
mod connector;
mod drain;
mod error;
mod handshake;
mod lane;
mod limited;
mod listen;
mod offerings;
mod origin;
mod param_headers;
mod relay;
mod revision;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{CallToolResponse, JsonObject, Tool};
use serde_json::{Value, json};
use tracing::debug;

use self::call::DirectCalls;
pub use self::changes::{ResourceUpdated, Updated, UpstreamChanges};
pub use self::connector::{CallerRevision, Connector, Dial};
pub use self::error::{CallError, ConnectError};
pub use self::offerings::{Forwarded, Offerings, UpstreamStage, Wanted};
pub use self::origin::{NotAttributable, ORIGIN_META, Origin};
pub use self::param_headers::{
    ParamHeader, argument_header_mismatch, decoded_header_value, param_headers,
};
pub use self::relay::{
    CallTraffic, CallerSide, ClientAsks, DEFAULT_QUESTION_TIMEOUT, RELAY_CAPACITY, ToCaller,
};

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
    /// The session, held by Capstan: every request after the handshake goes through it.
    direct: DirectCalls,
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
        match tokio::time::timeout(timeout, self.direct.list_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(failed)) => Err(error(failed.to_string())),
            Err(_) => Err(error(format!("no answer within {timeout:?}"))),
        }
    }

    /// Forwards one call, carrying the caller's `_meta` and relaying the provider's messages
    /// about the call to the caller's side (`mcp/relay.rs`). The allow-list is checked
    /// here again, whatever the caller checked.
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
        if self.is_closed() {
            return Err(CallError::Unavailable {
                server: self.server.clone(),
                message: "the session with the server has ended".into(),
            });
        }
        // The call's own time: its questions' wait for the caller is not the provider's.
        relay::within_call_time(
            timeout,
            &traffic.asking,
            self.direct.call(tool, arguments, traffic),
        )
        .await
        .unwrap_or_else(|| {
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
        match tokio::time::timeout(timeout, self.direct.set_log_level(params)).await {
            Ok(Ok(())) => {}
            Ok(Err(refused)) => {
                debug!(server = %self.server, message = %refused, "logging/setLevel refused")
            }
            Err(_) => {
                debug!(server = %self.server, "logging/setLevel: no answer within {timeout:?}")
            }
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
        self.direct.end().await;
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
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.direct.ending());
        }
    }
}
