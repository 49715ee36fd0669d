//! The committed CRD YAML (config/crd and the CRD chart) is what `make generate` would write, and
//! says what users rely on.

use std::path::Path;

use capstan_api::crd::{crds, to_yaml};

#[test]
fn committed_crd_yaml_should_match_generated() {
    // config/crd for kubectl, and the CRD chart's copy (charts/capstan-crds/files).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for dir in ["config/crd", "charts/capstan-crds/files"] {
        for (file, crd) in crds() {
            let path = root.join(dir).join(file);
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            let generated = to_yaml(&crd).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(
                committed == generated,
                "{} is stale or missing: run `make generate` and commit the result",
                path.display()
            );
        }
    }
}

#[test]
fn crds_should_be_cluster_scoped_in_the_capstan_category_with_status() {
    for (file, crd) in crds() {
        assert_eq!(
            crd.spec.group, "capabilities.assistant.miloapis.com",
            "{file}"
        );
        assert_eq!(crd.spec.scope, "Cluster", "{file}");
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["capstan".to_owned()]),
            "{file}"
        );
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
            "{file}"
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1", "{file}");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{file}"
        );
    }
}

#[test]
fn printer_columns_should_be_the_documented_ones() {
    let columns = |index: usize| -> Vec<String> {
        let [binding, qualifier] = crds();
        let crd = if index == 0 { binding.1 } else { qualifier.1 };
        crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.to_uppercase())
            .collect()
    };
    assert_eq!(
        columns(0),
        ["READY", "ACCEPTED", "COMPOSED", "TOOLS", "AGE"]
    );
    assert_eq!(
        columns(1),
        ["CAPABILITY", "CONSTRAINT", "READY", "ACCEPTED", "AGE"]
    );
}

#[test]
fn an_unwritten_status_should_read_as_not_yet_observed() {
    // kstatus reads an object without status.observedGeneration as Current; the schema
    // default makes one the controller has not written yet read as generation 0.
    for (file, crd) in crds() {
        let schema =
            serde_json::to_value(&crd.spec.versions[0].schema).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            schema["openAPIV3Schema"]["properties"]["status"]["default"],
            serde_json::json!({"observedGeneration": 0}),
            "{file}"
        );
    }
}

#[test]
fn binding_spec_fields_should_carry_descriptions_for_kubectl_explain() {
    let [(_, binding), _] = crds();
    let schema =
        serde_json::to_value(&binding.spec.versions[0].schema).unwrap_or_else(|e| panic!("{e}"));
    let server = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["tools"]["properties"]
        ["mcpServers"]["items"];
    for field in [
        "name",
        "endpoint",
        "toolSelector",
        "mutating",
        "capabilities",
    ] {
        let description = server["properties"][field]["description"]
            .as_str()
            .unwrap_or("");
        assert!(
            description.len() > 20,
            "mcpServers[].{field} has no description"
        );
    }
}

#[test]
fn the_unprefixed_rule_should_name_every_built_in_tool() {
    fn rules(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(rule) = map.get("rule").and_then(|r| r.as_str()) {
                    out.push(rule.to_owned());
                }
                map.values().for_each(|v| rules(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| rules(v, out)),
            _ => {}
        }
    }
    let crd =
        serde_json::to_value(<capstan_api::CapabilityBinding as kube::CustomResourceExt>::crd())
            .unwrap_or_else(|e| panic!("{e}"));
    let mut all = Vec::new();
    rules(&crd, &mut all);
    let rule = all
        .iter()
        .find(|rule| rule.contains("'Unprefixed'"))
        .unwrap_or_else(|| panic!("no rule for toolNames: Unprefixed in the CRD"));
    for name in capstan_api::patterns::BUILT_IN_TOOLS {
        assert!(
            rule.contains(&format!("'{name}'")),
            "the rule misses {name}"
        );
    }
    assert!(rule.contains("startsWith('cap__')"));
    assert!(rule.contains(capstan_api::patterns::UNPREFIXED_TOOL_PATTERN));
}
