//! MCP upstreams: one session per `mcpServers[]` entry, opened by rmcp's Streamable HTTP
//! client and, where the server assigned a session id, then held by Capstan alone
//! (`upstream/call.rs`): rmcp's client keeps a service loop, a transport worker and their
//! channels per session for as long as it lives, which was most of a sidecar session's memory
//! (docs/benchmarks.md: RSS per session).

mod call;
mod changes;
mod error;
mod offerings;
mod pooled;
mod relay;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ErrorCode, ErrorData, JsonObject,
    ProtocolVersion, Tool,
};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RunningService, ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tracing::debug;

use self::call::DirectCalls;
pub use self::changes::{ResourceUpdated, Updated, UpstreamChanges};
pub use self::error::{CallError, ConnectError};
pub use self::offerings::{Forwarded, Offerings, Wanted};
use self::pooled::PooledClient;
pub use self::relay::{CallTraffic, CallerSide, ClientAsks, RELAY_CAPACITY, ToCaller};
use crate::error_chain::{chain_text, find_in_chain};
use crate::fetch::{ClientError, guarded_client_builder};
use crate::guard::{AddressRefused, EndpointGuard, Refusal};

/// What of `wanted` the server declared it offers: only those kinds are listed and followed.
fn declared(client: &RunningService<RoleClient, ClientConfig>, wanted: Wanted) -> Wanted {
    let info = client.peer_info();
    let capabilities = info.as_ref().map(|info| &info.capabilities);
    Wanted {
        prompts: wanted.prompts && capabilities.is_some_and(|c| c.prompts.is_some()),
        resources: wanted.resources && capabilities.is_some_and(|c| c.resources.is_some()),
    }
}

/// The next [`Upstream::id`].
static NEXT_UPSTREAM_ID: AtomicU64 = AtomicU64::new(1);

/// What an upstream's standalone stream is followed for.
struct Followed<'a> {
    id: u64,
    wanted: Wanted,
    changes: &'a UpstreamChanges,
}

/// How long an idle upstream connection is kept for reuse.
const POOL_IDLE: Duration = Duration::from_secs(30);

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
    /// (`upstream/call.rs`); rmcp opened the session and is gone.
    Direct(DirectCalls),
    /// rmcp's client: a server that assigned no session id, or a revision without sessions.
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

/// Opens MCP upstream sessions through one shared, guarded HTTP client. One client for every
/// upstream: building a client parses the TLS root store (the sidecar benchmark measured
/// ~250 KiB and a visible share of session setup per client).
#[derive(Clone, Debug)]
pub struct Connector {
    guard: EndpointGuard,
    http: reqwest::Client,
    timeout: Duration,
}

impl Connector {
    /// A connector admitting what `guard` admits, giving each upstream `timeout` to connect,
    /// initialize and list its tools.
    pub fn new(guard: EndpointGuard, timeout: Duration) -> Result<Self, ClientError> {
        // MCP follows no redirects: a redirect would move the session somewhere unchecked.
        let http = guarded_client_builder(&guard)
            .redirect(reqwest::redirect::Policy::none())
            // Kept-alive connections are reused: `PooledClient` reads every response stream
            // to its end, which is what makes pooling safe (see pooled.rs).
            .pool_idle_timeout(POOL_IDLE)
            .connect_timeout(timeout)
            .build()?;
        Ok(Self {
            guard,
            http,
            timeout,
        })
    }

    /// Whether the allow-list admits nothing.
    pub fn admits_nothing(&self) -> bool {
        self.guard.patterns().next().is_none()
    }

    /// Connects to `endpoint` (guard first) and lists its tools, and the prompts, resources
    /// and resource templates `wanted` asks for (only what the server declared). A server
    /// that advertises `tools.listChanged` is followed on its standalone stream, each change
    /// noted in `changes` (this upstream's own handle, `UpstreamChanges::for_upstream`).
    pub async fn connect(
        &self,
        server: &str,
        endpoint: &str,
        allowed: BTreeSet<String>,
        wanted: Wanted,
        changes: &UpstreamChanges,
    ) -> Result<(Upstream, Vec<Tool>, Offerings), ConnectError> {
        let url = self.guard.check(endpoint)?.url.as_str().to_owned();
        let pooled = PooledClient::new(self.http.clone());
        let client = self.open(&pooled, endpoint, &url).await?;
        let (client, tools) = self.list(client, endpoint).await?;
        let wanted = declared(&client, wanted);
        let logging = client
            .peer_info()
            .is_some_and(|info| info.capabilities.logging.is_some());
        let id = NEXT_UPSTREAM_ID.fetch_add(1, Ordering::Relaxed);
        let followed = Followed {
            id,
            wanted,
            changes,
        };
        let (link, listener) = self.link(client, &pooled, server, url, followed).await;
        let upstream = Upstream {
            id,
            wanted,
            server: server.to_owned(),
            endpoint: endpoint.to_owned(),
            allowed,
            link,
            closed: AtomicBool::new(false),
            listener,
            changes: changes.clone(),
            logging,
        };
        // Listed on the session Capstan now holds, as a re-list after a change is.
        let offerings = upstream.list_offerings(self.timeout).await;
        Ok((upstream, tools, offerings))
    }

    /// Opens a session with rmcp's client: a session revision first — its session is what
    /// direct calls ride on (`upstream/call.rs`). A server of 2026-07-28 alone refuses
    /// `initialize`; it is spoken to in its revision, by rmcp's client (no session to hold).
    /// One deadline covers both attempts.
    async fn open(
        &self,
        pooled: &PooledClient,
        endpoint: &str,
        url: &str,
    ) -> Result<RunningService<RoleClient, ClientConfig>, ConnectError> {
        let timeout = self.timeout;
        let transport = || {
            StreamableHttpClientTransport::with_client(
                pooled.clone(),
                StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
            )
        };
        let started = tokio::time::Instant::now();
        let opened =
            match tokio::time::timeout(timeout, ClientConfig::default().serve(transport())).await {
                Ok(Err(error)) if refuses_initialize(&error) => {
                    let lifecycle = ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    };
                    let left = timeout.saturating_sub(started.elapsed());
                    tokio::time::timeout(
                        left,
                        ClientConfig::default().serve_with_lifecycle(transport(), lifecycle),
                    )
                    .await
                }
                other => other,
            };
        let connect_error = |message: String| ConnectError::Connect {
            endpoint: endpoint.to_owned(),
            message,
        };
        match opened {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(error)) => {
                if let Some(refused) = pooled
                    .refused()
                    .or_else(|| find_in_chain::<AddressRefused>(&error))
                {
                    return Err(ConnectError::Refused(Refusal {
                        url: endpoint.to_owned(),
                        reason: refused.to_string(),
                    }));
                }
                Err(connect_error(chain_text(&error)))
            }
            Err(_) => Err(connect_error(format!("no answer within {timeout:?}"))),
        }
    }

    /// Every tool the server lists, with the client; on failure the session is ended.
    async fn list(
        &self,
        client: RunningService<RoleClient, ClientConfig>,
        endpoint: &str,
    ) -> Result<(RunningService<RoleClient, ClientConfig>, Vec<Tool>), ConnectError> {
        let timeout = self.timeout;
        let message = match tokio::time::timeout(timeout, client.list_all_tools()).await {
            Ok(Ok(tools)) => return Ok((client, tools)),
            Ok(Err(error)) => chain_text(&error),
            Err(_) => format!("no answer within {timeout:?}"),
        };
        let _ = client.cancel().await;
        Err(ConnectError::List {
            endpoint: endpoint.to_owned(),
            message,
        })
    }

    /// Who holds the session from now on. Direct calls need a session: every revision up to
    /// 2025-11-25 has one, and rmcp lets go of it without ending it — the DELETE is Capstan's
    /// then. A server that assigned none (or a revision without sessions) stays with rmcp and
    /// is not followed; its changes are seen by the next composition. Only a server that says
    /// something selected can change — its tools, or the prompts or resources its binding
    /// selects, or that it sends resource updates — is followed: a standalone stream is one
    /// more open connection per upstream session.
    async fn link(
        &self,
        client: RunningService<RoleClient, ClientConfig>,
        pooled: &PooledClient,
        server: &str,
        url: String,
        followed: Followed<'_>,
    ) -> (Link, Option<Listener>) {
        let Followed {
            id,
            wanted,
            changes,
        } = followed;
        let info = client.peer_info();
        let version = info
            .as_ref()
            .map(|info| info.protocol_version.as_str().to_owned());
        let capabilities = info.as_ref().map(|info| &info.capabilities);
        let advertises_changes = capabilities.is_some_and(|c| {
            let prompts = c.prompts.as_ref().and_then(|p| p.list_changed) == Some(true);
            let resources = c
                .resources
                .as_ref()
                .is_some_and(|r| r.list_changed == Some(true) || r.subscribe == Some(true));
            c.tools.as_ref().and_then(|t| t.list_changed) == Some(true)
                || (wanted.prompts && prompts)
                || (wanted.resources && resources)
        });
        drop(info);
        let (Some(session), Some(version)) = (pooled.session(), version) else {
            return (Link::Rmcp(client), None);
        };
        if version.as_str() > SESSION_REVISIONS_UP_TO {
            return (Link::Rmcp(client), None);
        }
        let direct = DirectCalls {
            server: server.to_owned(),
            http: self.http.clone(),
            url,
            session: session.to_owned(),
            version,
            next_id: AtomicU64::new(1),
            changes: advertises_changes.then(|| changes.clone()),
        };
        pooled.keep_session_on_close();
        let _ = tokio::time::timeout(self.timeout, client.cancel()).await;
        let listener =
            advertises_changes.then(|| Listener(tokio::spawn(direct.listen(changes.clone(), id))));
        (Link::Direct(direct), listener)
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
    pub(crate) fn take_stale(&self) -> bool {
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
    /// about the call to the caller's side (`upstream/relay.rs`). The allow-list is checked
    /// here again, whatever the caller checked. Through rmcp's client (a server without a
    /// session) the `_meta` goes up with rmcp's own progress token, and nothing is relayed
    /// back yet.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
        traffic: &CallTraffic,
    ) -> Result<CallToolResult, CallError> {
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
            Link::Direct(direct) => {
                tokio::time::timeout(timeout, direct.call(tool, arguments, traffic)).await
            }
            Link::Rmcp(client) => {
                let mut params = CallToolRequestParams::new(tool.to_owned());
                params.arguments = arguments;
                params.meta = traffic.meta.clone();
                tokio::time::timeout(timeout, async {
                    client
                        .call_tool(params)
                        .await
                        .map_err(|error| self.classify(tool, &error))
                })
                .await
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

/// Whether a server refused `initialize` as a server of a revision without it does: no
/// version in common (-32022) or no such method (-32601).
fn refuses_initialize(error: &ClientInitializeError) -> bool {
    let code = match error {
        ClientInitializeError::JsonRpcError(data) => Some(data.code),
        other => find_in_chain::<ErrorData>(other).map(|data| data.code),
    };
    code.is_some_and(|code| {
        code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION || code == ErrorCode::METHOD_NOT_FOUND
    })
}

/// The newest protocol revision with sessions (later ones are served through rmcp only).
const SESSION_REVISIONS_UP_TO: &str = "2025-11-25";

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
