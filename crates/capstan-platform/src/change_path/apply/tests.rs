//! What apply re-derives for the token check: exactly what a plan of these objects, at these
//! versions, by this caller signed — written out by hand as the plan builds it — and nothing
//! that has moved since.

#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;
use crate::change_path::fixtures::{step, unreachable};

#[tokio::test]
async fn apply_should_rederive_exactly_what_the_plan_signed() {
    let api = unreachable();
    let alice = Caller {
        username: "alice@example.com".into(),
        uid: "u-1".into(),
    };
    let manifest = |name: &str| {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
        })
    };
    let signed = PlanPayload {
        project: "acme".into(),
        plane: "https://127.0.0.1:1/".into(),
        caller: alice.clone(),
        manifests: vec![manifest("a"), manifest("b")],
        resource_versions: vec![None, Some("7".into())],
    };
    let steps = [step("a", None), step("b", Some("7"))];
    assert_eq!(payload(&api, alice.clone(), &steps), signed);
    // An object moved since, another caller, another order: another payload, so the token
    // does not verify.
    let moved = [step("a", None), step("b", Some("8"))];
    assert_ne!(payload(&api, alice.clone(), &moved), signed);
    let bob = Caller {
        username: "bob@example.com".into(),
        uid: "u-2".into(),
    };
    assert_ne!(payload(&api, bob, &steps), signed);
    let reordered = [step("b", Some("7")), step("a", None)];
    assert_ne!(payload(&api, alice, &reordered), signed);
}
