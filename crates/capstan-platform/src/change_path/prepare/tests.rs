//! The preconditions a manifest meets before the plane is asked about it: the batch's size,
//! the fields a plan names, the namespace as the kind's scope has it, one manifest per object.
//! Every expected error is written out here as the tool returns it.

#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::*;
use crate::change_path::fixtures::core_kind as kind;

fn config_map(name: &str, namespace: Option<&str>) -> Value {
    let mut manifest = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"a": "1"},
    });
    if let Some(namespace) = namespace {
        manifest["metadata"]["namespace"] = json!(namespace);
    }
    manifest
}

fn prepared(manifest: &Value) -> Result<Prepared, Vec<Value>> {
    canonical(0, manifest, kind("ConfigMap", true))
}

#[test]
fn a_batch_should_hold_one_to_fifty_manifests() {
    for count in [1, 2, MAX_MANIFESTS] {
        assert!(check_count(count).is_ok(), "{count}");
    }
    for (count, given) in [(0, "0 given"), (MAX_MANIFESTS + 1, "51 given")] {
        let refused = check_count(count).unwrap_err();
        assert_eq!(refused.kind, ErrorKind::InvalidInput);
        assert_eq!(
            refused.message,
            format!("manifests: between 1 and 50 manifests per call ({given})")
        );
        assert_eq!(refused.field.as_deref(), Some("manifests"), "{count}");
    }
}

#[test]
fn every_missing_field_should_be_named_with_its_path() {
    assert_eq!(
        named(3, &json!("ConfigMap")).unwrap_err(),
        [json!({"field": "manifests[3]", "message": "must be an object (a manifest)"})]
    );
    let api_version =
        json!({"field": "manifests[0].apiVersion", "message": "required (e.g. v1 or apps/v1)"});
    let kind_ = json!({"field": "manifests[0].kind", "message": "required"});
    let name = json!({
        "field": "manifests[0].metadata.name",
        "message": "required (generateName is not supported: a plan names what it changes)",
    });
    assert_eq!(
        named(0, &json!({})).unwrap_err(),
        [api_version.clone(), kind_.clone(), name.clone()]
    );
    // Empty reads as missing.
    assert_eq!(
        named(
            0,
            &json!({"apiVersion": "", "kind": "", "metadata": {"name": ""}})
        )
        .unwrap_err(),
        [api_version.clone(), kind_.clone(), name.clone()]
    );
    // Each alone.
    let mut manifest = config_map("a", None);
    manifest.as_object_mut().unwrap().remove("apiVersion");
    assert_eq!(named(0, &manifest).unwrap_err(), [api_version]);
    let mut manifest = config_map("a", None);
    manifest["kind"] = json!("");
    assert_eq!(named(0, &manifest).unwrap_err(), [kind_]);
    let mut manifest = config_map("", None);
    manifest["metadata"]["generateName"] = json!("a-");
    assert_eq!(named(0, &manifest).unwrap_err(), [name]);
    assert_eq!(
        named(0, &config_map("a", None)).unwrap(),
        Named {
            api_version: "v1",
            kind: "ConfigMap"
        }
    );
}

#[test]
fn a_namespaced_kind_without_a_namespace_should_be_judged_in_default() {
    for manifest in [config_map("a", None), config_map("a", Some(""))] {
        let found = prepared(&manifest).unwrap();
        assert_eq!(found.namespace(), Some("default"));
        assert_eq!(found.canonical["metadata"]["namespace"], "default");
        assert_eq!(found.identity.to_string(), "ConfigMap default/a");
    }
    let found = prepared(&config_map("a", Some("team-a"))).unwrap();
    assert_eq!(found.namespace(), Some("team-a"));
    assert_eq!(found.identity.to_string(), "ConfigMap team-a/a");
    // What the plane keeps for itself is not part of what is judged.
    let mut manifest = config_map("a", Some("team-a"));
    manifest["status"] = json!({"phase": "x"});
    assert!(
        prepared(&manifest)
            .unwrap()
            .canonical
            .get("status")
            .is_none()
    );
}

#[test]
fn a_cluster_scoped_kind_should_refuse_a_namespace_and_take_none() {
    let namespace = |name: &str, ns: Option<&str>| {
        let mut manifest =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        if let Some(ns) = ns {
            manifest["metadata"]["namespace"] = json!(ns);
        }
        canonical(2, &manifest, kind("Namespace", false))
    };
    assert_eq!(
        namespace("team-b", Some("team-a")).err().unwrap(),
        [json!({
            "field": "manifests[2].metadata.namespace",
            "message": "Namespace is cluster-scoped: remove the namespace",
        })]
    );
    // An empty namespace is none: the object is read where it lives and is one object with
    // the same manifest without it.
    let mut batch = Vec::new();
    for ns in [None, Some("")] {
        let found = namespace("team-b", ns).unwrap();
        assert_eq!(found.namespace(), None, "{ns:?}");
        assert!(
            found.canonical["metadata"].get("namespace").is_none(),
            "{ns:?}"
        );
        assert_eq!(found.identity.to_string(), "Namespace team-b");
        batch.push(Ok(found));
    }
    refuse_duplicates(&mut batch);
    assert!(
        batch[1].is_err(),
        "the same Namespace twice was not refused"
    );
}

#[test]
fn a_second_manifest_for_one_object_should_be_refused_naming_the_first() {
    let mut batch = vec![
        prepared(&config_map("a", None)),
        prepared(&config_map("b", None)),
        Err(vec![
            json!({"field": "manifests[2].kind", "message": "required"}),
        ]),
        prepared(&config_map("a", Some("default"))),
        prepared(&config_map("a", Some("team-a"))),
        prepared(&config_map("b", None)),
    ];
    refuse_duplicates(&mut batch);
    let outcome: Vec<Result<String, Vec<Value>>> = batch
        .into_iter()
        .map(|p| p.map(|p| p.identity.to_string()))
        .collect();
    assert_eq!(
        outcome,
        [
            Ok("ConfigMap default/a".to_owned()),
            Ok("ConfigMap default/b".to_owned()),
            Err(vec![
                json!({"field": "manifests[2].kind", "message": "required"})
            ]),
            Err(vec![json!({
                "field": "manifests[3].metadata.name",
                "message": "ConfigMap default/a is also manifests[0]: one manifest per object",
            })]),
            Ok("ConfigMap team-a/a".to_owned()),
            Err(vec![json!({
                "field": "manifests[5].metadata.name",
                "message": "ConfigMap default/b is also manifests[1]: one manifest per object",
            })]),
        ]
    );
}

/// One kind's name in two API groups is two kinds (`Widget` of `a.example` and of `b.example`
/// are different objects), so neither manifest is refused as the other; two versions of one
/// group serve the same object, so the second of those is.
#[test]
fn one_object_should_be_one_group_kind_namespace_and_name_whatever_the_version() {
    let widget = |api_version: &str| {
        let (group, version) = api_version.split_once('/').unwrap();
        let kind = Kind {
            resource: kube::api::ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: api_version.into(),
                kind: "Widget".into(),
                plural: "widgets".into(),
            },
            namespaced: true,
        };
        let manifest = json!({
            "apiVersion": api_version,
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": "team-a"},
        });
        canonical(0, &manifest, kind)
    };
    let mut batch = vec![
        widget("a.example/v1"),
        widget("b.example/v1"),
        widget("a.example/v2"),
    ];
    refuse_duplicates(&mut batch);
    let outcome: Vec<Result<String, Vec<Value>>> = batch
        .into_iter()
        .map(|p| p.map(|p| p.canonical["apiVersion"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        outcome,
        [
            Ok("a.example/v1".to_owned()),
            Ok("b.example/v1".to_owned()),
            Err(vec![json!({
                "field": "manifests[2].metadata.name",
                "message": "Widget team-a/w is also manifests[0]: one manifest per object",
            })]),
        ]
    );
}
