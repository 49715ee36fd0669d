//! Opening upstreams: the connections they share (`mcp/lane.rs`), the revision they are opened
//! in (`CallerRevision`), the handshake (`mcp/handshake.rs`) and the first list of what each
//! offers, after which every request is one of `DirectCalls` (`mcp/call.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{ServerCapabilities, Tool};

use super::call::{DirectCalls, Target};
use super::error::CallError;
use super::handshake::{self, Opened};
use super::lane::{Lane, Lanes};
use super::listen::Filter;
use super::revision::Subscribed;
use super::{
    ClientAsks, ConnectError, Listener, NEXT_UPSTREAM_ID, Offerings, Upstream, UpstreamChanges,
    Wanted,
};
use crate::credential::{CredentialError, SharedCredential};
use crate::guard::{AddressRefused, EndpointGuard, Refusal};
use capstan_core::error_chain::{chain_text, find_in_chain};

/// What of `wanted` the server declared it offers: only those kinds are listed and followed.
fn declared(capabilities: &ServerCapabilities, wanted: Wanted) -> Wanted {
    Wanted {
        prompts: wanted.prompts && capabilities.prompts.is_some(),
        resources: wanted.resources && capabilities.resources.is_some(),
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

/// The server an upstream is opened to: its entry's name, its endpoint, and the credential each
/// of its requests carries (docs/upstream-auth.md).
#[derive(Clone, Debug)]
pub struct Dial<'a> {
    /// The `mcpServers[]` entry's name.
    pub server: &'a str,
    /// Its Streamable HTTP URL.
    pub endpoint: &'a str,
    /// What its requests authenticate with; `None`: nothing.
    pub credential: Option<SharedCredential>,
}

/// Opens MCP upstream sessions through connections shared by every upstream of the process,
/// each name resolved and each address checked by the guard.
#[derive(Clone, Debug)]
pub struct Connector {
    guard: EndpointGuard,
    /// The upstreams' connections, driven in the calling task (`mcp/lane.rs`).
    lanes: Arc<Lanes>,
    timeout: Duration,
}

impl Connector {
    /// A connector admitting what `guard` admits, giving each upstream `timeout` to connect
    /// and open (and as much again to list its tools).
    pub fn new(guard: EndpointGuard, timeout: Duration) -> Self {
        Self {
            lanes: Lanes::new(guard.resolver(), timeout),
            guard,
            timeout,
        }
    }

    /// Whether the allow-list admits nothing.
    pub fn admits_nothing(&self) -> bool {
        self.guard.patterns().next().is_none()
    }

    /// Connects to `endpoint` (guard first) and lists its tools, and the prompts, resources
    /// and resource templates `wanted` asks for (only what the server declared). A server
    /// that says something selected can change — its tools, or the prompts or resources its
    /// binding selects, or that it sends resource updates — is followed, each change noted in
    /// `changes` (this upstream's own handle, `UpstreamChanges::for_upstream`): a stream to
    /// listen on is one more open connection per upstream.
    pub async fn connect(
        &self,
        dial: Dial<'_>,
        allowed: BTreeSet<String>,
        wanted: Wanted,
        changes: &UpstreamChanges,
        revision: CallerRevision,
    ) -> Result<(Upstream, Vec<Tool>, Offerings), ConnectError> {
        let Dial {
            server,
            endpoint,
            credential,
        } = dial;
        let url = self.guard.check(endpoint)?.url;
        let connect_error = |message: String| ConnectError::Connect {
            endpoint: endpoint.to_owned(),
            message,
        };
        // The guard admitted the URL: `http` or `https` with a host, which is what a lane takes.
        let Some(lane) = Lane::new(&self.lanes, &url, credential) else {
            return Err(connect_error("not an http or https URL with a host".into()));
        };
        let next_id = AtomicU64::new(1);
        let Opened {
            revision,
            capabilities,
        } = self.open(&lane, &next_id, endpoint, revision).await?;
        let wanted = declared(&capabilities, wanted);
        let (followed, filter) = what_to_follow(&capabilities, wanted);
        let direct = DirectCalls {
            server: server.to_owned(),
            target: Target {
                lane,
                url,
                revision: Arc::new(revision),
            },
            next_id,
            changes: followed.then(|| changes.clone()),
            headed: std::sync::RwLock::default(),
            subscribed: Subscribed::default(),
            log_level: std::sync::Mutex::default(),
        };
        let tools = self.first_tools(&direct, endpoint).await?;
        let id = NEXT_UPSTREAM_ID.fetch_add(1, Ordering::Relaxed);
        let listener =
            followed.then(|| Listener(tokio::spawn(direct.listen(changes.clone(), id, filter))));
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
            logging: capabilities.logging.is_some(),
        };
        let offerings = upstream.list_offerings(self.timeout).await;
        Ok((upstream, tools, offerings))
    }

    /// The tools a server just opened lists, within the connector's timeout; a server that
    /// cannot list them has its session ended (a DELETE where it has one) before the failure.
    async fn first_tools(
        &self,
        direct: &DirectCalls,
        endpoint: &str,
    ) -> Result<Vec<Tool>, ConnectError> {
        match tokio::time::timeout(self.timeout, direct.list_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(CallError::Credential { failed, .. })) => {
                direct.end().await;
                Err(ConnectError::Credential {
                    endpoint: endpoint.to_owned(),
                    failed,
                })
            }
            failed => {
                let message = match failed {
                    Ok(Err(error)) => error.to_string(),
                    _ => format!("no answer within {:?}", self.timeout),
                };
                direct.end().await;
                Err(ConnectError::List {
                    endpoint: endpoint.to_owned(),
                    message,
                })
            }
        }
    }

    /// The handshake (`mcp/handshake.rs`) in the revision `revision` names where the server
    /// offers it, within the connector's timeout; the guard's refusal of the server's address
    /// is told apart from every other failure.
    async fn open(
        &self,
        lane: &Lane,
        next_id: &AtomicU64,
        endpoint: &str,
        revision: CallerRevision,
    ) -> Result<Opened, ConnectError> {
        let caller = match revision {
            CallerRevision::Sessions(asks) => {
                Some(serde_json::to_value(asks.declared()).unwrap_or_default())
            }
            CallerRevision::Stateless => None,
        };
        let opened = tokio::time::timeout(self.timeout, handshake::open(lane, next_id, caller));
        match opened.await {
            Ok(Ok(opened)) => Ok(opened),
            Ok(Err(error)) => Err(match find_in_chain::<AddressRefused>(&error) {
                Some(refused) => ConnectError::Refused(Refusal {
                    url: endpoint.to_owned(),
                    reason: refused.to_string(),
                }),
                None if let Some(failed) = find_in_chain::<CredentialError>(&error) => {
                    ConnectError::Credential {
                        endpoint: endpoint.to_owned(),
                        failed: failed.clone(),
                    }
                }
                None => ConnectError::Connect {
                    endpoint: endpoint.to_owned(),
                    message: chain_text(&error),
                },
            }),
            Err(_) => Err(ConnectError::Connect {
                endpoint: endpoint.to_owned(),
                message: format!("no answer within {:?}", self.timeout),
            }),
        }
    }
}

/// Whether a server declaring `capabilities` is followed for changes — only one that says
/// something its binding selects can change (its tools, or the prompts or resources `wanted`
/// selects, or that it sends resource updates) — and what a 2026-07-28 listen stream asks it
/// for: every list the binding selects (a server that says anything changes may say so of a
/// list it did not declare, as it would on a session's standalone stream; it acknowledges what
/// it honors).
fn what_to_follow(capabilities: &ServerCapabilities, wanted: Wanted) -> (bool, Filter) {
    let c = capabilities;
    let prompts = c.prompts.as_ref().and_then(|p| p.list_changed) == Some(true);
    let resources = c
        .resources
        .as_ref()
        .is_some_and(|r| r.list_changed == Some(true) || r.subscribe == Some(true));
    let followed = c.tools.as_ref().and_then(|t| t.list_changed) == Some(true)
        || (wanted.prompts && prompts)
        || (wanted.resources && resources);
    let filter = Filter {
        tools: true,
        prompts: wanted.prompts,
        resources: wanted.resources,
        updates: wanted.resources
            && capabilities.resources.as_ref().and_then(|r| r.subscribe) == Some(true),
    };
    (followed, filter)
}
