//! Opening a composition's upstream sessions: for each `mcpServers[]` entry of each document,
//! what it asks of the composition ([`ServerPlan`]) and its session — kept from the previous
//! composition of the same task when its binding is unchanged, re-listed on that session when
//! the server said its list changed, opened anew otherwise.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use capstan_api::{
    CallLimits, CapabilityStatus, McpServer, Naming, ProviderProjectArgument, ResourceUris,
};
use rmcp::model::Tool;
use sha2::{Digest as _, Sha256};
use tracing::field::Empty;
use tracing::{Instrument as _, Span, debug, debug_span};

use super::live::{Composed, Connected};
use crate::interned::{Interned, content_key};
use crate::source::snapshot::Document;
use capstan_upstream::credential::{Dialed, SharedCredential, SharedCredentials};
use capstan_upstream::mcp::{
    CallerRevision, ConnectError, Connector, Dial, Offerings, Upstream, UpstreamChanges, Wanted,
};
use capstan_upstream::trace_context::span_unless_unsampled;

/// What one `mcpServers[]` entry of a document asks of the composition.
pub(super) struct ServerPlan {
    /// The document's index.
    pub doc: usize,
    pub server: String,
    pub endpoint: String,
    /// How its tools are named (`toolNames`).
    pub naming: Naming,
    /// The tools of its allow-list (`toolSelector.include`).
    pub allowed: BTreeSet<String>,
    /// `toolSelector.pins`: tool → pinned definition digest.
    pub pins: BTreeMap<String, String>,
    pub mutating: BTreeSet<String>,
    /// Tools a quarantined capability mapping names: served only to the router (which
    /// excludes them), never called directly, so quarantine cannot be bypassed by the tool's
    /// namespaced name.
    pub quarantined: BTreeSet<String>,
    /// The prompts of its `promptSelector`, in order, how they are named, and its pins.
    pub prompts: Vec<String>,
    pub prompt_naming: Naming,
    pub prompt_pins: BTreeMap<String, String>,
    /// The resources and templates of its `resourceSelector`, in order, how their URIs are
    /// shown, and its pins.
    pub resources: Vec<String>,
    pub resource_uris: ResourceUris,
    pub resource_pins: BTreeMap<String, String>,
    /// `urlElicitationHosts`: where its URL-mode elicitations may send the person.
    pub url_elicitation_hosts: Vec<String>,
    /// `limits`: the calls it takes, carried onto each of its composed tools.
    pub limits: Option<CallLimits>,
    /// `providerProjectArgument`: the tools whose `project` argument is the provider's own.
    pub provider_project: Option<ProviderProjectArgument>,
    /// The session key ([`connection_key`]).
    pub key: [u8; 32],
    /// What its requests authenticate with (`auth`).
    pub credential: Option<SharedCredential>,
}

impl ServerPlan {
    /// What the server is asked for besides tools.
    fn wanted(&self) -> Wanted {
        Wanted {
            prompts: !self.prompts.is_empty(),
            resources: !self.resources.is_empty(),
        }
    }
}

/// An upstream's session with what it listed that its binding selects.
pub(super) type Listed = (Arc<Upstream>, Arc<Vec<Tool>>, Arc<Offerings>);

/// A server entry and its session with the tools it listed (allow-listed only), or why there
/// is none.
pub(super) struct ServerResult {
    pub plan: ServerPlan,
    pub result: Result<Listed, ConnectError>,
}

/// What a composition keeps of an upstream's list for the next one: the tools its allow-list
/// names (all a composition reads), not the whole list — one copy for every task whose
/// upstream listed the same (`interned.rs`); the composed tools share its schemas.
fn allowed_only(tools: Vec<Tool>, allowed: &BTreeSet<String>) -> Arc<Vec<Tool>> {
    static LISTINGS: std::sync::LazyLock<Interned<Vec<Tool>>> =
        std::sync::LazyLock::new(Interned::default);
    let tools: Vec<Tool> = tools
        .into_iter()
        .filter(|tool| allowed.contains(tool.name.as_ref()))
        .collect();
    match serde_json::to_vec(&tools) {
        Ok(listed) => LISTINGS.share(content_key([listed.as_slice()]), || tools),
        // A tool that does not serialize is kept as it is, unshared.
        Err(_) => Arc::new(tools),
    }
}

/// What a composition keeps of an upstream's prompts, resources and templates: those its
/// selectors name, and the kinds it could not list.
fn selected_only(offerings: Offerings, plan: &ServerPlan) -> Arc<Offerings> {
    // Most servers are asked for nothing besides tools: they share one empty value rather
    // than holding an allocation each, per session.
    static NOTHING: std::sync::LazyLock<Arc<Offerings>> = std::sync::LazyLock::new(Arc::default);
    if !plan.wanted().any() {
        return NOTHING.clone();
    }
    let prompt = |name: &str| plan.prompts.iter().any(|p| p == name);
    let resource = |uri: &str| plan.resources.iter().any(|r| r == uri);
    Arc::new(Offerings {
        prompts: offerings
            .prompts
            .into_iter()
            .filter(|p| prompt(&p.name))
            .collect(),
        resources: offerings
            .resources
            .into_iter()
            .filter(|r| resource(&r.uri))
            .collect(),
        templates: offerings
            .templates
            .into_iter()
            .filter(|t| resource(&t.uri_template))
            .collect(),
        failures: offerings.failures,
    })
}

/// The key of server `server` of binding `binding`: what its session and what was listed on
/// it depend on — its endpoint and its selectors (what is allowed, pinned, selected) — and
/// nothing else of the binding, so an edit of the binding's knowledge, skills, other servers or
/// this server's naming, routing or `mutating` keeps the session; the plan built from the new
/// spec applies those.
pub(super) fn connection_key(binding: &str, server: &McpServer) -> [u8; 32] {
    let mut digest = Sha256::new();
    for part in [binding, server.name.as_str(), server.endpoint.as_str()] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    // Serializing a parsed spec cannot fail; an empty digest would only reopen.
    let selectors = (
        &server.tool_selector,
        &server.prompt_selector,
        &server.resource_selector,
        &server.resource_uris,
        &server.auth,
    );
    digest.update(serde_json::to_vec(&selectors).unwrap_or_default());
    digest.finalize().into()
}

/// Connects every server of `documents`, concurrently, reusing the sessions of `previous`
/// whose key ([`connection_key`]) is unchanged. The results come in document and server order, whichever
/// answered first.
pub(super) async fn connect_all(
    connector: &Connector,
    connect_timeout: std::time::Duration,
    documents: &[Document],
    previous: Option<&Composed>,
    changes: &UpstreamChanges,
    revision: CallerRevision,
    credentials: &SharedCredentials,
) -> Vec<ServerResult> {
    let kept: HashMap<[u8; 32], &Connected> = previous
        .map(|p| p.upstreams.iter().map(|c| (c.key, c)).collect())
        .unwrap_or_default();
    let servers = documents.iter().enumerate().flat_map(|(doc, d)| {
        d.spec
            .tools
            .iter()
            .flat_map(|t| t.mcp_servers.iter())
            .map(move |server| (doc, server))
    });
    futures::future::join_all(servers.map(|(doc, server)| {
        let binding = &documents[doc].binding;
        let key = connection_key(binding, server);
        let mut plan = plan(doc, server, key);
        plan.credential = server.auth.as_ref().map(|auth| {
            credentials.credential(&Dialed {
                binding,
                what: &format!("MCP server {}", server.name),
                url: &server.endpoint,
                auth,
            })
        });
        let reusable = kept.get(&key).copied().filter(|c| !c.upstream.is_closed());
        let span = connect_span(&documents[doc].binding, &plan, reusable.is_some());
        async move {
            let result = match reuse(reusable, &plan, connect_timeout).await {
                Some(kept) => Ok(kept),
                None => connector
                    .connect(
                        Dial {
                            server: &plan.server,
                            endpoint: &plan.endpoint,
                            credential: plan.credential.clone(),
                        },
                        plan.allowed.clone(),
                        plan.wanted(),
                        &changes.for_upstream(),
                        revision,
                    )
                    .await
                    .map(|(upstream, tools, offerings)| {
                        (
                            Arc::new(upstream),
                            allowed_only(tools, &plan.allowed),
                            selected_only(offerings, &plan),
                        )
                    }),
            };
            if let Err(error) = &result {
                let span = Span::current();
                span.record("otel.status_code", "error");
                span.record("error.type", connect_error_kind(error));
            }
            ServerResult { plan, result }
        }
        .instrument(span)
    }))
    .await
}

/// The span of one server of a composition: opened, or its session kept (`capstan.reused`,
/// the session there was to keep).
fn connect_span(binding: &str, plan: &ServerPlan, reusable: bool) -> Span {
    let span = span_unless_unsampled(|| {
        debug_span!(
            "capstan.upstream.connect",
            otel.name = %format_args!("connect {}", plan.server),
            otel.status_code = Empty,
            capstan.binding = binding,
            capstan.server = %plan.server,
            capstan.reused = reusable,
            server.address = Empty,
            error.type = Empty,
        )
    });
    if !span.is_disabled()
        && let Some(host) = url::Url::parse(&plan.endpoint)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
    {
        span.record("server.address", host);
    }
    span
}

/// A connect failure's kind, as a span's `error.type` names it.
fn connect_error_kind(error: &ConnectError) -> &'static str {
    match error {
        ConnectError::Refused(_) => "refused",
        ConnectError::Connect { .. } => "connect",
        ConnectError::List { .. } => "list",
        ConnectError::Credential { .. } => "credential",
    }
}

/// What `server` of document `doc` asks of the composition.
fn plan(doc: usize, server: &McpServer, key: [u8; 32]) -> ServerPlan {
    ServerPlan {
        doc,
        server: server.name.clone(),
        endpoint: server.endpoint.clone(),
        naming: server.tool_names.unwrap_or_default(),
        allowed: server
            .tool_selector
            .iter()
            .flat_map(|s| s.include.iter().cloned())
            .collect(),
        pins: server
            .tool_selector
            .as_ref()
            .map(|s| s.pins.clone())
            .unwrap_or_default(),
        prompts: server
            .prompt_selector
            .iter()
            .flat_map(|s| s.include.iter().cloned())
            .collect(),
        prompt_naming: server.prompt_names.unwrap_or_default(),
        prompt_pins: server
            .prompt_selector
            .as_ref()
            .map(|s| s.pins.clone())
            .unwrap_or_default(),
        resources: server
            .resource_selector
            .iter()
            .flat_map(|s| s.include.iter().cloned())
            .collect(),
        resource_uris: server.resource_uris.unwrap_or_default(),
        url_elicitation_hosts: server.url_elicitation_hosts.clone(),
        limits: server.limits,
        provider_project: server.provider_project_argument.clone(),
        resource_pins: server
            .resource_selector
            .as_ref()
            .map(|s| s.pins.clone())
            .unwrap_or_default(),
        mutating: server.mutating.iter().cloned().collect(),
        quarantined: server
            .capabilities
            .iter()
            .filter(|m| m.status == Some(CapabilityStatus::Quarantined))
            .map(|m| m.tool.clone())
            .collect(),
        key,
        credential: None,
    }
}

/// The kept session of an unchanged binding with its tools, listed again on its own session
/// when the server said its list changed (the mark is cleared first, so a change meanwhile is
/// not lost); `None` when there is none to keep or re-listing failed (a new one is opened).
/// Its selected prompts and resources are listed again with its tools.
async fn reuse(
    kept: Option<&Connected>,
    plan: &ServerPlan,
    connect_timeout: std::time::Duration,
) -> Option<Listed> {
    let kept = kept?;
    if !kept.upstream.take_stale() {
        debug!(server = %plan.server, "the server's session is kept");
        return Some((
            kept.upstream.clone(),
            kept.tools.clone(),
            kept.offerings.clone(),
        ));
    }
    match kept.upstream.relist(connect_timeout).await {
        Ok(tools) => {
            debug!(server = %plan.server, tools = tools.len(), "the server's tools listed again on its session");
            let offerings = if plan.wanted().any() {
                selected_only(kept.upstream.list_offerings(connect_timeout).await, plan)
            } else {
                kept.offerings.clone()
            };
            Some((
                kept.upstream.clone(),
                allowed_only(tools, &plan.allowed),
                offerings,
            ))
        }
        Err(error) => {
            debug!(server = %plan.server, %error, "re-listing failed; opening a new session");
            None
        }
    }
}
