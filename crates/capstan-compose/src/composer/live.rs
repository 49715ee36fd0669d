//! A live composition: the composition as data plus the open upstream sessions that serve its
//! tools, the routes from composed names to them, and the skill fetcher with the bodies it
//! fetched (`skill_bodies.rs`); its tool calls and its lifecycle. Its prompts, resources and
//! completion are `composer/forwarding.rs`, its skills `skill_files.rs`, the URIs its answers
//! may name `uri_scope.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::{CallToolResponse, CallToolResult, JsonObject, Tool};
use serde_json::Value;

use super::ToolCallError;
use super::offerings::{Offered, UriScope};
use crate::capabilities::RoutedCapability;
use crate::composition::{ComposedTool, Composition};
use crate::limits::Limits;
use capstan_upstream::credential::SharedCredentials;
use capstan_upstream::fetch::Fetcher;
use capstan_upstream::mcp::{CallError, CallTraffic, Offerings, Origin, Upstream, UpstreamChanges};

/// One upstream session of a composition, with what it listed and what it was opened for.
#[derive(Debug)]
pub(super) struct Connected {
    /// The binding's name and whole spec, and the server's name, digested: a composition of
    /// the same task keeps this session while this stays the same.
    pub(super) key: [u8; 32],
    /// The binding whose server it is.
    pub(super) binding: String,
    /// Who its requests to the person come from (capstan-upstream `mcp/origin.rs`).
    pub(super) origin: Arc<Origin>,
    /// Whose URIs its answers may name (`composer/uri_scope.rs`).
    pub(super) scope: UriScope,
    pub(super) upstream: Arc<Upstream>,
    pub(super) tools: Arc<Vec<Tool>>,
    /// Its prompts, resources and templates its selectors name.
    pub(super) offerings: Arc<Offerings>,
}

/// A live composition: the data plus the open upstream sessions that serve its tools.
#[derive(Debug)]
pub struct Composed {
    /// The composition as data.
    pub composition: Composition,
    pub(super) upstreams: Vec<Connected>,
    /// Composed tool name → (index into `upstreams`, upstream tool name).
    pub(super) routes: HashMap<String, (usize, String)>,
    /// Where composed prompt names, resource URIs and templates lead.
    pub(super) offered: Offered,
    pub(super) fetcher: Fetcher,
    pub(super) limits: Limits,
    pub(super) capabilities: Vec<RoutedCapability>,
    pub(super) changes: UpstreamChanges,
    /// The skills' bodies, each fetched once for `load_skill` and the skills extension alike
    /// (`skill_bodies.rs`).
    pub(super) skill_bodies: super::skill_bodies::SkillBodies,
    /// The revisions its upstreams were opened for (kept by later compositions of the task).
    pub(super) revision: capstan_upstream::mcp::CallerRevision,
    /// What its endpoints authenticate with (docs/upstream-auth.md).
    pub(super) credentials: SharedCredentials,
    /// The names a server whose credential could not be had would have served, with its
    /// binding and the failure: a call of one is told why, not that the tool is unknown.
    pub(super) unavailable: HashMap<String, (String, CallError)>,
}

impl Composed {
    /// A composition with nothing in it yet, fetching skills with `fetcher` and noting its
    /// upstreams' list changes on `changes`.
    pub(super) fn empty(
        fetcher: Fetcher,
        limits: Limits,
        changes: UpstreamChanges,
        revision: capstan_upstream::mcp::CallerRevision,
        credentials: SharedCredentials,
    ) -> Self {
        Self {
            composition: Composition::default(),
            upstreams: Vec::new(),
            routes: HashMap::new(),
            offered: Offered::default(),
            fetcher,
            limits,
            capabilities: Vec::new(),
            changes,
            skill_bodies: Default::default(),
            revision,
            credentials,
            unavailable: HashMap::new(),
        }
    }

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

    /// Calls a composed tool by its composed name, for a caller that cannot be asked anything
    /// (a provider's `input_required` result is its error).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, ToolCallError> {
        match self
            .call_tool_with(name, arguments, CallTraffic::default())
            .await?
        {
            CallToolResponse::Complete(result) => Ok(result),
            _ => Err(ToolCallError::Upstream(CallError::Malformed {
                server: self
                    .routes
                    .get(name)
                    .map(|(index, _)| self.upstreams[*index].upstream.server.clone())
                    .unwrap_or_default(),
                message: "it asked for input, which this caller cannot give".into(),
            })),
        }
    }

    /// [`Self::call_tool`] carrying the caller's `_meta`, the provider's messages about the
    /// call going to `traffic` (capstan-upstream `mcp/relay.rs`) in the provider's name.
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        mut traffic: CallTraffic,
    ) -> Result<CallToolResponse, ToolCallError> {
        let Some((index, tool)) = self.routes.get(name) else {
            return Err(ToolCallError::Unknown {
                name: name.to_owned(),
            });
        };
        let connected = &self.upstreams[*index];
        traffic.origin = Some(connected.origin.clone());
        traffic.question_timeout = self.limits.question_timeout;
        let mut response = connected
            .upstream
            .call(tool, arguments, self.limits.call_timeout, &traffic)
            .await?;
        match &mut response {
            CallToolResponse::Complete(result) => self.confine_tool_result(*index, result)?,
            CallToolResponse::InputRequired(asked) => {
                if let Some(requests) = &mut asked.input_requests {
                    attribute_input_requests(&connected.origin, requests, &connected.upstream)?;
                }
            }
            _ => {}
        }
        Ok(response)
    }

    /// Sends `logging/setLevel` with `level` to every upstream session of this composition
    /// whose server declared `logging`, all at once, each within the call timeout.
    pub async fn set_log_level(&self, level: &Value) {
        let timeout = self.limits.call_timeout;
        futures::future::join_all(
            self.upstreams
                .iter()
                .map(|connected| connected.upstream.set_log_level(level, timeout)),
        )
        .await;
    }

    /// The binding and the failure of a name its server would have served, had its credential
    /// been had (no tool of the composition has the name).
    pub fn unavailable(&self, name: &str) -> Option<(&str, &CallError)> {
        self.unavailable
            .get(name)
            .map(|(binding, error)| (binding.as_str(), error))
    }

    /// The tool of a composed name.
    pub fn tool(&self, name: &str) -> Option<&ComposedTool> {
        self.composition.tools.iter().find(|t| t.name == name)
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

/// Puts every question of an `input_required` result of `upstream`'s in `origin`'s name; one
/// that may not reach the person (a URL elicitation to a host its binding does not admit)
/// refuses the whole result.
fn attribute_input_requests(
    origin: &Origin,
    requests: &mut rmcp::model::InputRequests,
    upstream: &Upstream,
) -> Result<(), CallError> {
    for request in requests.values_mut() {
        let mut asked = serde_json::to_value(&*request)
            .map_err(|e| forbidden(upstream, format!("a question Capstan cannot read: {e}")))?;
        origin
            .attribute(&mut asked)
            .map_err(|why| forbidden(upstream, why.to_string()))?;
        *request = serde_json::from_value(asked)
            .map_err(|e| forbidden(upstream, format!("a question Capstan cannot carry: {e}")))?;
    }
    Ok(())
}

/// A provider's act the platform does not allow.
pub(super) fn forbidden(upstream: &Upstream, message: String) -> CallError {
    CallError::Forbidden {
        server: upstream.server.clone(),
        message,
    }
}
