//! What a binding's capability mappings mean against the installed catalog. A mapping to a
//! capability this Capstan has no spec for, or a feature outside a spec's vocabulary, is a
//! **warning**, never a refusal: the binding's other tools, knowledge and skills stay valid (a
//! provider may be ahead of the Capstan a cluster runs), the mapping is simply not routed, or
//! the claim not counted. `capstanctl validate`, the controller's `Accepted` message and the
//! sidecar apply this one function (docs/routing.md).

use capstan_api::{CapabilityBindingSpec, FieldError};

use crate::spec::Catalog;

/// The warnings of `spec`'s capability mappings against `catalog`, path-qualified from `spec`.
pub fn mapping_warnings(spec: &CapabilityBindingSpec, catalog: &Catalog) -> Vec<FieldError> {
    let mut warnings = Vec::new();
    let servers = spec
        .tools
        .as_ref()
        .map(|t| t.mcp_servers.as_slice())
        .unwrap_or_default();
    for (s, server) in servers.iter().enumerate() {
        for (c, mapping) in server.capabilities.iter().enumerate() {
            let path = format!("spec.tools.mcpServers[{s}].capabilities[{c}]");
            let Some(capability) = catalog.get(&mapping.capability_id) else {
                let known: Vec<&str> = catalog.ids().into_iter().collect();
                warnings.push(FieldError::new(
                    format!("{path}.capabilityId"),
                    format!(
                        "no capability spec {} is installed in this Capstan (it knows {}): the \
                         mapping is not routed until one is",
                        mapping.capability_id,
                        known.join(", ")
                    ),
                ));
                continue;
            };
            for (f, feature) in mapping.features.iter().enumerate() {
                if !capability.knows(feature) {
                    warnings.push(FieldError::new(
                        format!("{path}.features[{f}]"),
                        format!(
                            "{feature} is not in {}'s feature vocabulary ({}): the claim is \
                             ignored",
                            capability.capability_id,
                            capability.feature_vocabulary.join(", ")
                        ),
                    ));
                }
            }
        }
    }
    warnings
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_capabilities_and_features_should_be_warnings_with_paths() {
        let spec: CapabilityBindingSpec = serde_json::from_value(json!({
            "serviceRef": {"name": "search"},
            "serviceName": "search.example",
            "serviceAgentRef": {"name": "agent"},
            "configurationVersion": "v1",
            "tools": {"mcpServers": [{
                "name": "web",
                "endpoint": "https://search.example/mcp",
                "toolSelector": {"include": ["search", "fetch", "dream"]},
                "capabilities": [
                    {"capabilityId": "cap.web.search", "tool": "search", "features": ["search.fresh", "search.telepathy"]},
                    {"capabilityId": "cap.web.scrape", "tool": "fetch"},
                    {"capabilityId": "cap.dream.weave", "tool": "dream"}
                ]
            }]}
        }))
        .unwrap();
        let warnings = mapping_warnings(&spec, Catalog::embedded());
        let text: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        assert_eq!(warnings.len(), 2, "{text:?}");
        assert!(text[0].starts_with(
            "spec.tools.mcpServers[0].capabilities[0].features[1]: search.telepathy is not in cap.web.search's"
        ), "{text:?}");
        assert!(text[1].starts_with(
            "spec.tools.mcpServers[0].capabilities[2].capabilityId: no capability spec cap.dream.weave"
        ), "{text:?}");
    }
}
