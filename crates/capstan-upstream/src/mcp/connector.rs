//! Opening upstreams: the guarded HTTP client they share, the revision they are opened in
//! (`CallerRevision`), and the hand-over of each to Capstan's direct path once it is open.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{ClientConfig, ErrorCode, ErrorData, ProtocolVersion, ServerCapabilities, Tool};
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use super::call::{DirectCalls, Target};
use super::lane::{Lane, Lanes, POOL_IDLE};
use super::listen::Filter;
use super::pooled::PooledClient;
use super::revision::{Revision, Subscribed};
use super::{
    ClientAsks, ConnectError, Listener, NEXT_UPSTREAM_ID, Offerings, Upstream, UpstreamChanges,
    Wanted,
};
use crate::fetch::{ClientError, guarded_client_builder};
use crate::guard::{AddressRefused, EndpointGuard, Refusal};
use capstan_core::error_chain::{chain_text, find_in_chain};

/// What of `wanted` the server declared it offers: only those kinds are listed and followed.
fn declared(client: &RunningService<RoleClient, ClientConfig>, wanted: Wanted) -> Wanted {
    let info = client.peer_info();
    let capabilities = info.as_ref().map(|info| &info.capabilities);
    Wanted {
        prompts: wanted.prompts && capabilities.is_some_and(|c| c.prompts.is_some()),
        resources: wanted.resources && capabilities.is_some_and(|c| c.resources.is_some()),
    }
}

/// The revisions a task's caller speaks: its upstreams are opened in the same kind where the
/// server offers it, so that what the provider sends reaches the caller as the provider meant
/// it (docs/mcp-surface.md "Upstreams in their best revision"). A session-revision caller can
/// be asked questions mid-call, which a 2026-07-28 server cannot send; a 2026-07-28 caller can
/// take `input_required` results, which a session revision cannot carry. A server offering only
/// the other kind is spoken to in it all the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallerRevision {
    /// A session revision (up to 2025-11-25): `initialize` first, declaring what the caller
    /// declared it can be asked (Capstan relays those questions to it, `mcp/relay.rs`).
    Sessions(ClientAsks),
    /// 2026-07-28: `server/discover` first; each request carries the caller's capabilities.
    Stateless,
}

impl Default for CallerRevision {
    fn default() -> Self {
        Self::Sessions(ClientAsks::default())
    }
}

/// What an upstream's standalone stream is followed for.
struct Followed<'a> {
    id: u64,
    wanted: Wanted,
    changes: &'a UpstreamChanges,
    /// The tools it listed (their argument headers, in 2026-07-28).
    tools: &'a [Tool],
}

/// Opens MCP upstream sessions through one shared, guarded HTTP client. One client for every
/// upstream: building a client parses the TLS root store (the sidecar benchmark measured
/// ~250 KiB and a visible share of session setup per client).
#[derive(Clone, Debug)]
pub struct Connector {
    guard: EndpointGuard,
    http: reqwest::Client,
    /// Plain-HTTP upstreams' connections for direct calls, driven in the calling task
    /// (`mcp/lane.rs`).
    lanes: Arc<Lanes>,
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
            lanes: Lanes::new(guard.resolver(), timeout),
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
        revision: CallerRevision,
    ) -> Result<(Upstream, Vec<Tool>, Offerings), ConnectError> {
        let url = self.guard.check(endpoint)?.url;
        let pooled = PooledClient::new(self.http.clone());
        let client = self.open(&pooled, endpoint, url.as_str(), revision).await?;
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
            tools: &tools,
        };
        let (direct, listener) = self
            .hand_over(client, &pooled, server, url, followed)
            .await?;
        let upstream = Upstream {
            id,
            wanted,
            server: server.to_owned(),
            endpoint: endpoint.to_owned(),
            allowed,
            direct,
            closed: AtomicBool::new(false),
            listener,
            changes: changes.clone(),
            logging,
        };
        // Listed on the session Capstan now holds, as a re-list after a change is.
        let offerings = upstream.list_offerings(self.timeout).await;
        Ok((upstream, tools, offerings))
    }

    /// Opens the upstream with rmcp's client in the revision `revision` names where the server
    /// offers it: for a session-revision caller `initialize` first, falling back to
    /// `server/discover` when the server refuses it (it speaks 2026-07-28 alone); for a
    /// 2026-07-28 caller `server/discover` first, which rmcp falls back from to `initialize` in
    /// 2025-11-25 when the server answers as a legacy one. One deadline covers both attempts.
    async fn open(
        &self,
        pooled: &PooledClient,
        endpoint: &str,
        url: &str,
        revision: CallerRevision,
    ) -> Result<RunningService<RoleClient, ClientConfig>, ConnectError> {
        let timeout = self.timeout;
        let transport = || {
            StreamableHttpClientTransport::with_client(
                pooled.clone(),
                StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
            )
        };
        let mut config = ClientConfig::default();
        if let CallerRevision::Sessions(asks) = revision {
            config.capabilities = asks.declared();
        }
        let serve = |lifecycle| config.clone().serve_with_lifecycle(transport(), lifecycle);
        let started = tokio::time::Instant::now();
        let opened = match revision {
            CallerRevision::Stateless => {
                let lifecycle = ClientLifecycleMode::Auto {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    legacy_version: Some(ProtocolVersion::V_2025_11_25),
                };
                tokio::time::timeout(timeout, serve(lifecycle)).await
            }
            CallerRevision::Sessions(_) => {
                match tokio::time::timeout(timeout, serve(ClientLifecycleMode::Initialize)).await {
                    Ok(Err(error)) if refuses_initialize(&error) => {
                        let lifecycle = ClientLifecycleMode::Discover {
                            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                        };
                        let left = timeout.saturating_sub(started.elapsed());
                        tokio::time::timeout(left, serve(lifecycle)).await
                    }
                    other => other,
                }
            }
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
                // The client's own failure says why; rmcp's error, only that a send failed.
                let message = pooled
                    .failure()
                    .map_or_else(|| chain_text(&error), str::to_owned);
                Err(connect_error(message))
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

    /// The session handed over from rmcp's client to Capstan's direct path: in a session
    /// revision the session rmcp opened (rmcp lets go of it without ending it — the DELETE is
    /// Capstan's then; a server that assigned none is sent requests without one), in
    /// 2026-07-28 self-contained requests. Only a server that says something selected can
    /// change — its tools, or the prompts or resources its binding selects, or that it sends
    /// resource updates — is followed: a stream to listen on is one more open connection per
    /// upstream.
    async fn hand_over(
        &self,
        client: RunningService<RoleClient, ClientConfig>,
        pooled: &PooledClient,
        server: &str,
        url: reqwest::Url,
        followed: Followed<'_>,
    ) -> Result<(DirectCalls, Option<Listener>), ConnectError> {
        let Followed {
            id,
            wanted,
            changes,
            tools,
        } = followed;
        let info = client.peer_info();
        let version = info
            .as_ref()
            .map(|info| info.protocol_version.as_str().to_owned());
        let capabilities = info.as_ref().map(|info| &info.capabilities);
        let (followed, filter) = what_to_follow(capabilities, wanted);
        drop(info);
        let Some(version) = version else {
            // rmcp keeps the server's answer to every handshake that succeeds (`initialize` or
            // `server/discover`): a connected client without one is rmcp's defect.
            return Err(ConnectError::Connect {
                endpoint: url.to_string(),
                message: "the handshake ended without the server's answer".into(),
            });
        };
        let revision = if version.as_str() > SESSION_REVISIONS_UP_TO {
            // A server that answered `initialize` with this revision may have assigned a
            // session all the same: kept, so that what it asks mid-call can be answered.
            Revision::stateless(version, json!({}), pooled.session().map(str::to_owned))
        } else {
            // A server that assigned no session keeps none: its requests go without the header
            // (it was once left with rmcp's client, at twice the memory and more CPU per call:
            // docs/performance.md, "Two harnesses").
            Revision::Session {
                id: pooled.session().map(str::to_owned),
                version,
            }
        };
        // The guard admitted the URL: `http` or `https` with a host, which is what a lane takes.
        let Some(lane) = Lane::new(&self.lanes, &url) else {
            return Err(ConnectError::Connect {
                endpoint: url.to_string(),
                message: "not an http or https URL with a host".into(),
            });
        };
        let direct = DirectCalls {
            server: server.to_owned(),
            target: Target {
                lane,
                url,
                revision: Arc::new(revision),
            },
            next_id: AtomicU64::new(1),
            changes: followed.then(|| changes.clone()),
            headed: std::sync::RwLock::default(),
            subscribed: Subscribed::default(),
            log_level: std::sync::Mutex::default(),
        };
        direct.headed_by(tools);
        pooled.keep_session_on_close();
        let _ = tokio::time::timeout(self.timeout, client.cancel()).await;
        let listener =
            followed.then(|| Listener(tokio::spawn(direct.listen(changes.clone(), id, filter))));
        Ok((direct, listener))
    }
}

/// Whether a server declaring `capabilities` is followed for changes — only one that says
/// something its binding selects can change (its tools, or the prompts or resources `wanted`
/// selects, or that it sends resource updates) — and what a 2026-07-28 listen stream asks it
/// for: every list the binding selects (a server that says anything changes may say so of a
/// list it did not declare, as it would on a session's standalone stream; it acknowledges what
/// it honors).
fn what_to_follow(capabilities: Option<&ServerCapabilities>, wanted: Wanted) -> (bool, Filter) {
    let followed = capabilities.is_some_and(|c| {
        let prompts = c.prompts.as_ref().and_then(|p| p.list_changed) == Some(true);
        let resources = c
            .resources
            .as_ref()
            .is_some_and(|r| r.list_changed == Some(true) || r.subscribe == Some(true));
        c.tools.as_ref().and_then(|t| t.list_changed) == Some(true)
            || (wanted.prompts && prompts)
            || (wanted.resources && resources)
    });
    let filter = Filter {
        tools: true,
        prompts: wanted.prompts,
        resources: wanted.resources,
        updates: wanted.resources
            && capabilities
                .and_then(|c| c.resources.as_ref())
                .and_then(|r| r.subscribe)
                == Some(true),
    };
    (followed, filter)
}

/// Whether `initialize` was refused as a server of 2026-07-28 alone refuses it.
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
