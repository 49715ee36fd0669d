//! Composing: a project's documents → one live tool set (open upstream sessions), the
//! instructions text, the skills, and a per-binding outcome (`composition.rs` holds the data).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use capstan_api::CapabilityStatus;
use capstan_route::Catalog;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use sha2::{Digest as _, Sha256};
use thiserror::Error;
use tracing::{debug, warn};

use crate::call_error::CallError;
use crate::capabilities::{CapabilitySummary, RoutedCapability, routed_capabilities};
use crate::composition::{
    BindingOutcome, Collision, ComposedTool, Composition, SkillSummary, UpstreamFailure,
    UpstreamStage,
};
use crate::direct_call::ToolListChanges;
use crate::document::Document;
use crate::fetch::{ClientError, FetchError, Fetcher};
use crate::guard::{EndpointGuard, PatternError};
use crate::knowledge;
use crate::limits::Limits;
use crate::names::{full_name, shortened};
use crate::pins::{PinMismatch, ToolDefinition, covered_definition, definition_digest};
use crate::upstream::{ConnectError, Connector, Upstream};

/// Why a `load_skill` produced no body.
#[derive(Debug, Error)]
pub enum SkillError {
    /// No skill of that name is composed.
    #[error("no skill named {name:?} is available; the instructions list the ones that are")]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The body could not be fetched.
    #[error("skill {name} could not be loaded: {source}")]
    Fetch {
        /// The skill.
        name: String,
        /// Why.
        #[source]
        source: FetchError,
    },
}

/// A composer could not be set up from its settings; each names the setting to fix.
#[derive(Debug, Error)]
pub enum SetupError {
    /// An allow-list entry cannot be read.
    #[error("{setting}: {source}")]
    AllowList {
        /// The setting.
        setting: &'static str,
        /// The entry and why.
        #[source]
        source: PatternError,
    },
    /// An HTTP client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Why a composed tool call produced no result.
#[derive(Debug, Error)]
pub enum ToolCallError {
    /// No tool of that name is composed (including names outside every allow-list).
    #[error("no tool named {name:?} is available to this assistant")]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The upstream failed.
    #[error(transparent)]
    Upstream(#[from] CallError),
}

/// One upstream session of a composition, with what it listed and what it was opened for.
#[derive(Debug)]
struct Connected {
    /// The binding's name and whole spec, and the server's name, digested: a composition of
    /// the same task keeps this session while this stays the same.
    key: [u8; 32],
    upstream: Arc<Upstream>,
    tools: Arc<Vec<Tool>>,
}

/// What a composition keeps of an upstream's list for the next one: the tools its allow-list
/// names (all a composition reads), not the whole list.
fn allowed_only(tools: Vec<Tool>, allowed: &BTreeSet<String>) -> Arc<Vec<Tool>> {
    Arc::new(
        tools
            .into_iter()
            .filter(|tool| allowed.contains(tool.name.as_ref()))
            .collect(),
    )
}

/// The key of server `server` of a binding whose spec digests to `spec`.
fn connection_key(spec: &[u8; 32], binding: &str, server: &str) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(spec);
    digest.update(binding.as_bytes());
    digest.update([0]);
    digest.update(server.as_bytes());
    digest.finalize().into()
}

/// A live composition: the data plus the open upstream sessions that serve its tools.
#[derive(Debug)]
pub struct Composed {
    /// The composition as data.
    pub composition: Composition,
    upstreams: Vec<Connected>,
    /// Composed tool name → (index into `upstreams`, upstream tool name).
    routes: HashMap<String, (usize, String)>,
    fetcher: Fetcher,
    limits: Limits,
    capabilities: Vec<RoutedCapability>,
    changes: ToolListChanges,
}

impl Composed {
    /// A receiver whose value moves whenever one of this composition's upstreams says its
    /// tool list changed (`notifications/tools/list_changed`, from servers advertising
    /// `tools.listChanged`): the composition is then out of date.
    pub fn upstream_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether `other` notes its upstreams' list changes on the same channel as this one (it
    /// was composed reusing this one, or this one reusing it): a receiver of either serves.
    pub fn shares_changes_with(&self, other: &Composed) -> bool {
        self.changes.same_channel(&other.changes)
    }

    /// How many of this composition's upstream sessions `other` holds too.
    pub fn shared_upstreams(&self, other: &Composed) -> usize {
        self.upstreams
            .iter()
            .filter(|c| {
                other
                    .upstreams
                    .iter()
                    .any(|o| Arc::ptr_eq(&o.upstream, &c.upstream))
            })
            .count()
    }

    /// The routed capabilities offered (at least one candidate composed), in id order.
    pub fn capabilities(&self) -> impl Iterator<Item = &RoutedCapability> {
        self.capabilities.iter().filter(|c| c.offered())
    }

    /// The offered routed capability whose tool is `name` (`cap__web_search`).
    pub fn capability(&self, name: &str) -> Option<&RoutedCapability> {
        self.capabilities().find(|c| c.tool.name == name)
    }

    /// Calls a composed tool by its composed name.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, ToolCallError> {
        let Some((index, tool)) = self.routes.get(name) else {
            return Err(ToolCallError::Unknown {
                name: name.to_owned(),
            });
        };
        let upstream = &self.upstreams[*index].upstream;
        Ok(upstream
            .call(tool, arguments, self.limits.call_timeout)
            .await?)
    }

    /// The tool of a composed name.
    pub fn tool(&self, name: &str) -> Option<&ComposedTool> {
        self.composition.tools.iter().find(|t| t.name == name)
    }

    /// Fetches a skill's body and frames it with its provenance.
    pub async fn load_skill(&self, name: &str) -> Result<String, SkillError> {
        let Some(skill) = self.composition.skills.iter().find(|s| s.name == name) else {
            return Err(SkillError::Unknown {
                name: name.to_owned(),
            });
        };
        let fetched = self
            .fetcher
            .fetch(
                &skill.source,
                self.limits.skill_timeout,
                self.limits.skill_cap,
            )
            .await
            .map_err(|source| SkillError::Fetch {
                name: name.to_owned(),
                source,
            })?;
        Ok(knowledge::frame_skill(skill, &fetched))
    }

    /// Ends every upstream session without waiting (usable from `Drop`), shared or not: the
    /// task they serve has ended.
    pub fn shutdown(&self) {
        for connected in &self.upstreams {
            connected.upstream.shutdown();
        }
    }

    /// Ends every upstream session this composition alone holds and waits until the servers
    /// were told.
    pub async fn close(self) {
        futures::future::join_all(self.upstreams.into_iter().map(|connected| async move {
            if let Some(upstream) = Arc::into_inner(connected.upstream) {
                upstream.close().await;
            }
        }))
        .await;
    }
}

/// Composes documents into tool sets.
#[derive(Clone, Debug)]
pub struct Composer {
    connector: Connector,
    fetcher: Fetcher,
    limits: Limits,
}

/// Whether an input schema has a top-level property named `project` (in any case).
pub fn takes_project(schema: &JsonObject) -> bool {
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .is_some_and(|properties| properties.keys().any(|k| k.eq_ignore_ascii_case("project")))
}

struct ServerResult {
    doc: usize,
    server: String,
    endpoint: String,
    allowed: BTreeSet<String>,
    pins: BTreeMap<String, String>,
    mutating: BTreeSet<String>,
    quarantined: BTreeSet<String>,
    key: [u8; 32],
    result: Result<(Arc<Upstream>, Arc<Vec<Tool>>), ConnectError>,
}

impl Composer {
    /// A composer dialing MCP endpoints admitted by `mcp_guard` and fetching knowledge and
    /// skills through `fetcher`.
    pub fn new(
        mcp_guard: EndpointGuard,
        fetcher: Fetcher,
        limits: Limits,
    ) -> Result<Self, ClientError> {
        Ok(Self {
            connector: Connector::new(mcp_guard, limits.connect_timeout)?,
            fetcher,
            limits,
        })
    }

    /// A composer from the two allow-list settings both binaries share
    /// (`CAPABILITY_MCP_ENDPOINT_HOSTS`, `CAPABILITY_FETCH_HOSTS`: comma-separated entries).
    pub fn from_allow_lists(
        mcp_endpoint_hosts: &str,
        fetch_hosts: &str,
        limits: Limits,
    ) -> Result<Self, SetupError> {
        let allow_list = |setting: &'static str, list: &str| {
            EndpointGuard::from_list(list)
                .map_err(|source| SetupError::AllowList { setting, source })
        };
        let mcp = allow_list("CAPABILITY_MCP_ENDPOINT_HOSTS", mcp_endpoint_hosts)?;
        let fetch = allow_list("CAPABILITY_FETCH_HOSTS", fetch_hosts)?;
        Ok(Self::new(mcp, Fetcher::new(fetch)?, limits)?)
    }

    /// The MCP allow-list admits nothing (the binaries warn about it).
    pub fn dials_nothing(&self) -> bool {
        self.connector.admits_nothing()
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Composes `documents` (already validated, in first-wins order). Upstreams are connected
    /// and knowledge fetched concurrently; the result depends only on the inputs and what the
    /// servers answer, never on which answered first.
    pub async fn compose(&self, documents: &[Document]) -> Composed {
        self.compose_reusing(documents, None).await
    }

    /// Composes `documents` again for the task that holds `previous`: an upstream session of
    /// `previous` whose binding is unchanged (the same name and spec) is kept — re-listed on
    /// its own session if the server said its list changed — and only the others are opened.
    /// A binding edited, added or removed reopens (or closes) its own servers' sessions only,
    /// and a provider's list change costs one `tools/list` at that provider.
    pub async fn compose_reusing(
        &self,
        documents: &[Document],
        previous: Option<&Composed>,
    ) -> Composed {
        let changes = previous.map(|p| p.changes.clone()).unwrap_or_default();
        let kept: HashMap<[u8; 32], &Connected> = previous
            .map(|p| p.upstreams.iter().map(|c| (c.key, c)).collect())
            .unwrap_or_default();
        let specs: Vec<[u8; 32]> = documents
            .iter()
            .map(|d| {
                // Serializing a parsed spec cannot fail; an empty digest would only reopen.
                Sha256::digest(serde_json::to_vec(&d.spec).unwrap_or_default()).into()
            })
            .collect();
        let connects = documents.iter().enumerate().flat_map(|(doc, d)| {
            d.spec
                .tools
                .iter()
                .flat_map(|t| t.mcp_servers.iter())
                .map(move |server| (doc, server))
        });
        let connects = futures::future::join_all(connects.map(|(doc, server)| {
            let allowed: BTreeSet<String> = server
                .tool_selector
                .iter()
                .flat_map(|s| s.include.iter().cloned())
                .collect();
            let pins = server
                .tool_selector
                .as_ref()
                .map(|s| s.pins.clone())
                .unwrap_or_default();
            let mutating: BTreeSet<String> = server.mutating.iter().cloned().collect();
            // A quarantined mapping's tool is served only to the router (which excludes it):
            // never called directly, so quarantine cannot be bypassed by its namespaced name.
            let quarantined: BTreeSet<String> = server
                .capabilities
                .iter()
                .filter(|m| m.status == Some(CapabilityStatus::Quarantined))
                .map(|m| m.tool.clone())
                .collect();
            let changes = &changes;
            let key = connection_key(&specs[doc], &documents[doc].binding, &server.name);
            let reusable = kept.get(&key).filter(|c| !c.upstream.is_closed());
            async move {
                let relisted = match reusable {
                    // Listed again on its own session when the server said its list changed
                    // (the mark is cleared first, so a change meanwhile is not lost).
                    Some(kept) if kept.upstream.take_stale() => {
                        match kept.upstream.relist(self.limits.connect_timeout).await {
                            Ok(tools) => {
                                debug!(server = %server.name, tools = tools.len(), "the server's tools listed again on its session");
                                Some((kept.upstream.clone(), allowed_only(tools, &allowed)))
                            }
                            Err(error) => {
                                debug!(server = %server.name, %error, "re-listing failed; opening a new session");
                                None
                            }
                        }
                    }
                    Some(kept) => {
                        debug!(server = %server.name, "the server's session is kept");
                        Some((kept.upstream.clone(), kept.tools.clone()))
                    }
                    None => None,
                };
                let result = match relisted {
                    Some(kept) => Ok(kept),
                    None => self
                        .connector
                        .connect(
                            &server.name,
                            &server.endpoint,
                            allowed.clone(),
                            &changes.for_upstream(),
                        )
                        .await
                        .map(|(upstream, tools)| (Arc::new(upstream), allowed_only(tools, &allowed))),
                };
                ServerResult {
                    doc,
                    server: server.name.clone(),
                    endpoint: server.endpoint.clone(),
                    allowed,
                    pins,
                    mutating,
                    quarantined,
                    key,
                    result,
                }
            }
        }));
        let knowledge = knowledge::fetch_all(&self.fetcher, documents, &self.limits);
        let (servers, knowledge) = futures::join!(connects, knowledge);

        let mut outcomes: Vec<BindingOutcome> = documents
            .iter()
            .map(|d| BindingOutcome {
                binding: d.binding.clone(),
                service_name: d.spec.service_name.clone(),
                ..BindingOutcome::default()
            })
            .collect();
        let mut composed = Composed {
            composition: Composition::default(),
            upstreams: Vec::new(),
            routes: HashMap::new(),
            fetcher: self.fetcher.clone(),
            limits: self.limits.clone(),
            capabilities: Vec::new(),
            changes: changes.clone(),
        };
        let mut owners: HashMap<String, String> = HashMap::new();
        for server in servers {
            let document = &documents[server.doc];
            let outcome = &mut outcomes[server.doc];
            let (upstream, listed) = match server.result {
                Ok(ok) => ok,
                Err(ConnectError::Refused(refusal)) => {
                    warn!(binding = %document.binding, %refusal, "MCP endpoint refused");
                    outcome.refused.push(refusal.to_string());
                    continue;
                }
                Err(error) => {
                    warn!(binding = %document.binding, %error, "MCP upstream failed");
                    outcome.upstream_failures.push(UpstreamFailure {
                        server: server.server.clone(),
                        endpoint: server.endpoint.clone(),
                        stage: match error {
                            ConnectError::List { .. } => UpstreamStage::List,
                            _ => UpstreamStage::Connect,
                        },
                    });
                    outcome.upstream_errors.push(error.to_string());
                    continue;
                }
            };
            let mut offered: HashMap<&str, &Tool> =
                listed.iter().map(|t| (t.name.as_ref(), t)).collect();
            let index = composed.upstreams.len();
            for tool in &server.allowed {
                let Some(listed) = offered.remove(tool.as_str()) else {
                    outcome.missing.push(format!("{}/{tool}", server.server));
                    continue;
                };
                let digest = definition_digest(listed);
                let pinned = server.pins.get(tool).cloned();
                outcome.definitions.push(ToolDefinition {
                    server: server.server.clone(),
                    tool: tool.clone(),
                    digest: digest.clone(),
                    pinned: pinned.clone(),
                });
                // A pinned tool whose definition moved is neither listed nor routed: to the
                // assistant it does not exist until someone reviews it and re-pins.
                if let Some(pinned) = pinned
                    && pinned != digest
                {
                    outcome.pin_mismatches.push(PinMismatch {
                        server: server.server.clone(),
                        tool: tool.clone(),
                        pinned,
                        live: digest,
                        listed: covered_definition(listed),
                    });
                    continue;
                }
                if takes_project(&listed.input_schema) {
                    outcome
                        .project_arguments
                        .push(format!("{}/{tool}", server.server));
                    continue;
                }
                let full = full_name(&server.server, tool);
                let name = shortened(&full);
                if let Some(winner) = owners.get(&name) {
                    outcome.collisions.push(Collision {
                        name,
                        won_by: winner.clone(),
                    });
                    continue;
                }
                owners.insert(name.clone(), document.binding.clone());
                let mutating = server.mutating.contains(tool);
                let mut annotations = listed.annotations.clone();
                if mutating {
                    let mut a = annotations.unwrap_or_default();
                    a.read_only_hint = Some(false);
                    annotations = Some(a);
                }
                composed.routes.insert(name.clone(), (index, tool.clone()));
                if server.quarantined.contains(tool) {
                    outcome.quarantined.push(name);
                    continue;
                }
                outcome.exposed.push(name.clone());
                if mutating {
                    composed.composition.mutating.push(name.clone());
                }
                composed.composition.tools.push(ComposedTool {
                    shortened_from: (full != name).then_some(full),
                    name,
                    binding: document.binding.clone(),
                    service_name: document.spec.service_name.clone(),
                    server: server.server.clone(),
                    upstream_tool: tool.clone(),
                    description: listed.description.as_ref().map(ToString::to_string),
                    input_schema: listed.input_schema.clone(),
                    annotations,
                    mutating,
                });
            }
            debug!(binding = %document.binding, server = %server.server, "upstream composed");
            composed.upstreams.push(Connected {
                key: server.key,
                upstream,
                tools: listed,
            });
        }

        // Skills: first wins by name, like tools.
        let mut skill_owners: HashMap<String, String> = HashMap::new();
        for (doc, document) in documents.iter().enumerate() {
            for skill in &document.spec.skills {
                if let Some(winner) = skill_owners.get(&skill.name) {
                    outcomes[doc].skill_collisions.push(Collision {
                        name: skill.name.clone(),
                        won_by: winner.clone(),
                    });
                    continue;
                }
                skill_owners.insert(skill.name.clone(), document.binding.clone());
                composed.composition.skills.push(SkillSummary {
                    name: skill.name.clone(),
                    description: skill.description.clone(),
                    binding: document.binding.clone(),
                    service_name: document.spec.service_name.clone(),
                    source: skill.source.clone(),
                    configuration_version: document.spec.configuration_version.clone(),
                });
            }
        }

        for item in &knowledge {
            let outcome = &mut outcomes[item.doc];
            outcome.knowledge_total += 1;
            match &item.result {
                Ok(fetched) if fetched.truncated => outcome.knowledge_truncated += 1,
                Ok(_) => {}
                Err(error) => outcome.knowledge_errors.push(error.to_string()),
            }
        }
        composed.composition.instructions = knowledge::instructions(
            documents,
            &knowledge,
            &composed.composition.skills,
            self.limits.knowledge_total_cap,
        );
        for outcome in &outcomes {
            if outcome.degraded() {
                warn!(binding = %outcome.binding, reasons = ?outcome.reasons(), "binding degraded");
            }
        }
        composed.composition.bindings = outcomes;
        composed.capabilities = routed_capabilities(documents, Catalog::embedded(), &owners);
        let offered: Vec<&RoutedCapability> = composed.capabilities().collect();
        let destructive: Vec<String> = offered
            .iter()
            .filter(|c| c.spec.effect.kind.is_destructive())
            .map(|c| c.tool.name.to_string())
            .collect();
        let summaries: Vec<CapabilitySummary> =
            offered.into_iter().map(CapabilitySummary::from).collect();
        composed.composition.mutating.extend(destructive);
        composed.composition.capabilities = summaries;
        composed
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn degradation_should_follow_the_contract() {
        let mut outcome = BindingOutcome {
            knowledge_total: 2,
            knowledge_errors: vec!["a failed".into()],
            knowledge_truncated: 1,
            ..BindingOutcome::default()
        };
        assert!(
            !outcome.degraded(),
            "one of two sources lost, one truncated"
        );
        outcome.knowledge_errors.push("b failed".into());
        assert_eq!(
            outcome.reasons(),
            ["all 2 knowledge sources failed: a failed; b failed"]
        );
        let refused = BindingOutcome {
            refused: vec!["endpoint http://x/ was not dialed: …".into()],
            ..BindingOutcome::default()
        };
        assert!(refused.degraded());
    }
}
