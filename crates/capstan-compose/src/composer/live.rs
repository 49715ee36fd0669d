//! A live composition: the composition as data plus the open upstream sessions that serve its
//! tools, the routes from composed names to them, and the skill fetcher with the bodies it
//! fetched (`skill_bodies.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::{CallToolResponse, CallToolResult, JsonObject, Tool};
use serde_json::Value;

use super::offerings::{Offered, Route, Unread, UriScope};
use super::{OfferingError, ToolCallError};
use crate::capabilities::RoutedCapability;
use crate::composition::{ComposedTool, Composition};
use crate::limits::Limits;
use capstan_upstream::fetch::Fetcher;
use capstan_upstream::mcp::{
    CallError, CallTraffic, Forwarded, Offerings, Origin, ResourceUpdated, Upstream,
    UpstreamChanges,
};

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
}

impl Composed {
    /// A composition with nothing in it yet, fetching skills with `fetcher` and noting its
    /// upstreams' list changes on `changes`.
    pub(super) fn empty(
        fetcher: Fetcher,
        limits: Limits,
        changes: UpstreamChanges,
        revision: capstan_upstream::mcp::CallerRevision,
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

/// Prompts, resources and completion (`composer/offerings.rs` resolves what they name).
impl Composed {
    /// `prompts/get` of a composed prompt, with the caller's `params` (its name replaced by
    /// the upstream's).
    pub async fn get_prompt(&self, mut params: Value) -> Result<Value, OfferingError> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(route) = self.offered.prompts.get(name).cloned() else {
            return Err(OfferingError::UnknownPrompt {
                name: name.to_owned(),
            });
        };
        params["name"] = Value::String(route.upstream.clone());
        let mut result = self.forward(&route, "prompts/get", params).await?;
        self.confine_prompt(route.index, &mut result)?;
        Ok(result)
    }

    /// `resources/read` of a composed resource or of a URI a composed template produces; the
    /// contents' URIs come back in the answering server's URI space (`uri_scope.rs`): under
    /// its prefix, or as listed when no other upstream serves them.
    pub async fn read_resource(&self, params: Value) -> Result<Value, OfferingError> {
        let (route, params) = self.resolved(params)?;
        let mut result = self.forward(&route, "resources/read", params).await?;
        self.confine_contents(route.index, &mut result)?;
        Ok(result)
    }

    /// `resources/subscribe` or `resources/unsubscribe` (`method`) of a composed resource, or
    /// of a URI a composed template produces.
    pub async fn subscription(&self, method: &str, params: Value) -> Result<Value, OfferingError> {
        let (route, params) = self.resolved(params)?;
        self.forward(&route, method, params).await
    }

    /// The upstream session (`Upstream::id`) a resource URI, as the assistant names it,
    /// reaches in this composition; `None` when it offers no such resource.
    pub fn resource_upstream(&self, uri: &str) -> Option<u64> {
        let route = self.offered.resolve(uri)?;
        Some(self.upstreams[route.index].upstream.id)
    }

    /// A receiver that moves when this composition's upstreams pass on a resource update
    /// (shared with the compositions composed from it, like [`Self::upstream_changes`]); the
    /// updates themselves are taken with [`Self::take_resource_updates`].
    pub fn resource_updates(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.resource_updates()
    }

    /// The resource updates passed on since the last call, coalesced (`Updated`).
    pub fn take_resource_updates(&self) -> capstan_upstream::mcp::Updated {
        self.changes.take_updates()
    }

    /// The URIs the assistant knows an updated resource by in this composition: every composed
    /// resource of that upstream session with that URI, and the URI under every composed
    /// template of it that produces it. Empty when this composition does not offer it.
    pub fn shown_uris(&self, update: &ResourceUpdated) -> Vec<String> {
        self.offered.shown(update.uri.as_str(), |index| {
            self.upstreams[index].upstream.id == update.upstream
        })
    }

    /// `completion/complete` for a composed prompt or template; a reference to anything else is
    /// refused as unknown.
    pub async fn complete(&self, mut params: Value) -> Result<Value, OfferingError> {
        let reference = params.get("ref").cloned().unwrap_or(Value::Null);
        let Some(route) = self.offered.reference(&reference) else {
            let name = reference
                .get("name")
                .or_else(|| reference.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(OfferingError::UnknownReference {
                name: name.to_owned(),
            });
        };
        let member = if reference["type"] == "ref/prompt" {
            "name"
        } else {
            "uri"
        };
        params["ref"][member] = Value::String(route.upstream.clone());
        self.forward(&route, "completion/complete", params).await
    }

    /// The route of `params.uri` and the params with the upstream's URI in its place.
    fn resolved(&self, mut params: Value) -> Result<(Route, Value), OfferingError> {
        let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
        let route = match self.offered.read(uri) {
            Ok(route) => route,
            Err(Unread::Unsafe(holds)) => {
                return Err(OfferingError::UnsafeUri {
                    uri: uri.to_owned(),
                    holds,
                });
            }
            Err(Unread::Unknown) => {
                return Err(OfferingError::UnknownResource {
                    uri: uri.to_owned(),
                });
            }
        };
        params["uri"] = Value::String(route.upstream.clone());
        Ok((route, params))
    }

    async fn forward(
        &self,
        route: &Route,
        method: &str,
        params: Value,
    ) -> Result<Value, OfferingError> {
        let connected = &self.upstreams[route.index];
        let mut result = connected
            .upstream
            .forward(method, params, self.limits.call_timeout)
            .await
            .map_err(|forwarded| match forwarded {
                Forwarded::Refused(error) => OfferingError::Refused(error),
                Forwarded::Failed(error) => OfferingError::Upstream(error),
            })?;
        // A 2026-07-28 provider's questions (`input_required`) reach the caller in its name.
        if let Some(requests) = result
            .get_mut("inputRequests")
            .and_then(Value::as_object_mut)
        {
            for request in requests.values_mut() {
                connected
                    .origin
                    .attribute(request)
                    .map_err(|why| forbidden(&connected.upstream, why.to_string()))?;
            }
        }
        Ok(result)
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
fn forbidden(upstream: &Upstream, message: String) -> CallError {
    CallError::Forbidden {
        server: upstream.server.clone(),
        message,
    }
}
