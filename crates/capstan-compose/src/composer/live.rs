//! A live composition: the composition as data plus the open upstream sessions that serve its
//! tools, the routes from composed names to them, and the skill fetcher.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::Value;

use super::{SkillError, ToolCallError};
use crate::capabilities::RoutedCapability;
use crate::composition::{ComposedTool, Composition};
use crate::fetch::Fetcher;
use crate::knowledge;
use crate::limits::Limits;
use crate::upstream::{CallTraffic, ToolListChanges, Upstream};

/// One upstream session of a composition, with what it listed and what it was opened for.
#[derive(Debug)]
pub(super) struct Connected {
    /// The binding's name and whole spec, and the server's name, digested: a composition of
    /// the same task keeps this session while this stays the same.
    pub(super) key: [u8; 32],
    pub(super) upstream: Arc<Upstream>,
    pub(super) tools: Arc<Vec<Tool>>,
}

/// A live composition: the data plus the open upstream sessions that serve its tools.
#[derive(Debug)]
pub struct Composed {
    /// The composition as data.
    pub composition: Composition,
    pub(super) upstreams: Vec<Connected>,
    /// Composed tool name → (index into `upstreams`, upstream tool name).
    pub(super) routes: HashMap<String, (usize, String)>,
    pub(super) fetcher: Fetcher,
    pub(super) limits: Limits,
    pub(super) capabilities: Vec<RoutedCapability>,
    pub(super) changes: ToolListChanges,
}

impl Composed {
    /// A composition with nothing in it yet, fetching skills with `fetcher` and noting its
    /// upstreams' list changes on `changes`.
    pub(super) fn empty(fetcher: Fetcher, limits: Limits, changes: ToolListChanges) -> Self {
        Self {
            composition: Composition::default(),
            upstreams: Vec::new(),
            routes: HashMap::new(),
            fetcher,
            limits,
            capabilities: Vec::new(),
            changes,
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

    /// Calls a composed tool by its composed name.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, ToolCallError> {
        self.call_tool_with(name, arguments, &CallTraffic::default())
            .await
    }

    /// [`Self::call_tool`] carrying the caller's `_meta`, the provider's messages about the
    /// call going to `traffic` (`upstream/relay.rs`).
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        traffic: &CallTraffic,
    ) -> Result<CallToolResult, ToolCallError> {
        let Some((index, tool)) = self.routes.get(name) else {
            return Err(ToolCallError::Unknown {
                name: name.to_owned(),
            });
        };
        let upstream = &self.upstreams[*index].upstream;
        Ok(upstream
            .call(tool, arguments, self.limits.call_timeout, traffic)
            .await?)
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
