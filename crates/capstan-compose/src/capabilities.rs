//! The routed capabilities of a composition: for each capability spec some binding maps a tool
//! onto, its `cap__<job>` tool and its candidates — one per mapping, marked composed when the
//! mapped tool is served in this composition by that binding (docs/routing.md).
//!
//! Selection itself is `capstan_route::select`; this module only gathers what it chooses from.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use capstan_api::CapabilityStatus;
use capstan_route::{Candidate, CapabilitySpec, Catalog, SpecStatus};
use rmcp::model::{Tool, ToolAnnotations};
use serde::Serialize;
use serde_json::{Value, json};

use crate::names::composed_name_as;
use crate::source::snapshot::Document;

/// The longest `intent` a call may carry (it is kept only as a digest).
pub const MAX_INTENT_LEN: u64 = 512;

/// One routed capability of a composition.
#[derive(Clone, Debug)]
pub struct RoutedCapability {
    /// Its spec.
    pub spec: &'static CapabilitySpec,
    /// Its `cap__<job>` tool as `tools/list` shows it.
    pub tool: Tool,
    /// Every mapping onto it, composed or not, in document order.
    pub candidates: Vec<Candidate>,
}

impl RoutedCapability {
    /// Whether any candidate is composed: only then is the capability listed.
    pub fn offered(&self) -> bool {
        self.candidates.iter().any(|c| c.composed)
    }
}

/// A routed capability as `/v1/composition` shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilitySummary {
    /// The capability id.
    pub capability: String,
    /// Its tool name.
    pub tool: String,
    /// Its effect kind.
    pub effect: capstan_route::EffectKind,
    /// Its candidates.
    pub candidates: Vec<Candidate>,
}

/// The `cap__<job>` tool of `spec`: its input schema plus an optional `intent`; `route` and
/// `requirements` are accepted on a call but never shown (developer-facing, not the model's).
pub fn capability_tool(spec: &CapabilitySpec) -> Tool {
    let mut schema = spec.input_schema.clone();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert(
            "intent".into(),
            json!({
                "type": "string",
                "maxLength": MAX_INTENT_LEN,
                "description": "Optional: what this call is for, in a few words. Recorded only as a digest; it never chooses the provider."
            }),
        );
    }
    let mut tool = Tool::new(spec.tool_name(), spec.description.clone(), Arc::new(schema));
    let destructive = spec.effect.kind.is_destructive();
    let mut annotations = ToolAnnotations::new().read_only(!destructive);
    if destructive {
        annotations = annotations.destructive(true);
    }
    annotations.title = Some(spec.display_name.clone());
    tool.annotations = Some(annotations);
    tool
}

/// [`capability_tool`] of `spec`, built once per spec: every task's copy shares its schema.
fn shared_capability_tool(spec: &'static CapabilitySpec) -> Tool {
    static TOOLS: std::sync::LazyLock<std::sync::Mutex<HashMap<usize, Tool>>> =
        std::sync::LazyLock::new(Default::default);
    // A catalog lives for the process (`&'static`), so a spec's address names it.
    let key = std::ptr::from_ref(spec) as usize;
    let mut tools = TOOLS.lock().unwrap_or_else(|p| p.into_inner());
    tools
        .entry(key)
        .or_insert_with(|| capability_tool(spec))
        .clone()
}

/// The routed capabilities of `documents` against `catalog`, given which composed names are
/// served and by which binding (`owners`: composed name → binding). A mapping onto a capability
/// the catalog lacks (or retired) is left out: `capstan_route::mapping_warnings` reports it.
pub fn routed_capabilities(
    documents: &[Document],
    catalog: &'static Catalog,
    owners: &HashMap<String, String>,
) -> Vec<RoutedCapability> {
    let mut by_id: BTreeMap<&str, RoutedCapability> = BTreeMap::new();
    for document in documents {
        let servers = document
            .spec
            .tools
            .iter()
            .flat_map(|t| t.mcp_servers.iter());
        for server in servers {
            for mapping in &server.capabilities {
                let Some(spec) = catalog.get(&mapping.capability_id) else {
                    continue;
                };
                if spec.status == SpecStatus::Retired {
                    continue;
                }
                let naming = server.tool_names.unwrap_or_default();
                let tool = composed_name_as(naming, &server.name, &mapping.tool);
                let composed = owners.get(&tool) == Some(&document.binding);
                let entry =
                    by_id
                        .entry(spec.capability_id.as_str())
                        .or_insert_with(|| RoutedCapability {
                            spec,
                            tool: shared_capability_tool(spec),
                            candidates: Vec::new(),
                        });
                entry.candidates.push(Candidate {
                    binding: document.binding.clone(),
                    service: Some(document.spec.service_name.clone()),
                    server: server.name.clone(),
                    tool,
                    features: mapping.features.clone(),
                    cost_hint: mapping.cost_hint.clone(),
                    quality: mapping.quality,
                    status: mapping.status.unwrap_or(CapabilityStatus::Active),
                    composed,
                });
            }
        }
    }
    by_id.into_values().collect()
}

impl From<&RoutedCapability> for CapabilitySummary {
    fn from(routed: &RoutedCapability) -> Self {
        Self {
            capability: routed.spec.capability_id.clone(),
            tool: routed.spec.tool_name(),
            effect: routed.spec.effect.kind,
            candidates: routed.candidates.clone(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn document(binding: &str, server: &str, status: &str) -> Document {
        Document {
            binding: binding.into(),
            spec: serde_json::from_value(json!({
                "serviceRef": {"name": binding}, "serviceName": format!("{binding}.example"),
                "serviceAgentRef": {"name": "a"}, "configurationVersion": "v1",
                "tools": {"mcpServers": [{
                    "name": server, "endpoint": "http://x/mcp",
                    "toolSelector": {"include": ["search", "other"]},
                    "capabilities": [
                        {"capabilityId": "cap.web.search", "tool": "search", "quality": 7000, "status": status},
                        {"capabilityId": "cap.unknown.job", "tool": "other"}
                    ]
                }]}
            }))
            .unwrap(),
        }
    }

    #[test]
    fn candidates_should_be_composed_only_when_their_binding_serves_the_tool() {
        let documents = [
            document("a", "web", "active"),
            document("b", "web", "quarantined"),
            document("c", "down", "active"),
        ];
        // `web__search` is served, by binding a (b lost the name); `down` did not answer.
        let owners = HashMap::from([("web__search".to_owned(), "a".to_owned())]);
        let routed = routed_capabilities(&documents, Catalog::embedded(), &owners);
        assert_eq!(routed.len(), 1, "the unknown capability is left out");
        let search = &routed[0];
        assert_eq!(search.tool.name, "cap__web_search");
        let composed: Vec<(&str, bool)> = search
            .candidates
            .iter()
            .map(|c| (c.binding.as_str(), c.composed))
            .collect();
        assert_eq!(composed, [("a", true), ("b", false), ("c", false)]);
        assert_eq!(search.candidates[1].status, CapabilityStatus::Quarantined);
        assert!(search.offered());
        let properties = &search.tool.input_schema["properties"];
        assert!(properties.get("intent").is_some() && properties.get("query").is_some());
        assert!(properties.get("route").is_none() && properties.get("requirements").is_none());
        assert_eq!(
            search
                .tool
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint),
            Some(true)
        );
        let nothing = routed_capabilities(&documents[2..], Catalog::embedded(), &owners);
        assert!(!nothing[0].offered());
    }
}
