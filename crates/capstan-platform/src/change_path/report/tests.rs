//! What validate, plan and apply say of a manifest once the plane has judged it: each
//! refusal's errors with their paths, the batch's refusal (authorization first), and a
//! report's action. The plane's answers are given as the client reads them (`ApiFailure`,
//! the object after a dry run); what the plane answers itself is e2e/tests/base_tools.rs's.
//! Every expected text is written out here.

#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::*;
use crate::change_path::fixtures::prepared_config_map;

fn config_map(name: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": data,
    })
}

fn judged(manifest: &Value, existing: Option<Value>, verdict: Result<Value, ApiFailure>) -> Judged {
    Judged {
        prepared: prepared_config_map(manifest),
        existing,
        verdict,
    }
}

fn refused(index: usize, name: &str, failure: ApiFailure) -> Report {
    let manifest = config_map(name, json!({"a": "1"}));
    Report::judged(index, judged(&manifest, None, Err(failure)))
}

#[test]
fn each_refusal_should_report_its_errors_at_their_paths() {
    let invalid = ApiFailure::Invalid {
        message: "ConfigMap \"a\" is invalid".into(),
        causes: vec![
            Cause {
                field: "data.a".into(),
                message: "must be a string".into(),
            },
            Cause {
                field: "metadata.labels".into(),
                message: String::new(),
            },
        ],
    };
    assert_eq!(
        failure_errors(1, &invalid),
        (
            vec![
                json!({"field": "manifests[1].data.a", "message": "must be a string"}),
                json!({"field": "manifests[1].metadata.labels", "message": "ConfigMap \"a\" is invalid"}),
            ],
            false
        )
    );
    let whole = ApiFailure::Invalid {
        message: "no fields named".into(),
        causes: Vec::new(),
    };
    assert_eq!(
        failure_errors(0, &whole),
        (
            vec![json!({"field": "manifests[0]", "message": "no fields named"})],
            false
        )
    );
    let forbidden = ApiFailure::Forbidden {
        message: "configmaps is forbidden".into(),
    };
    assert_eq!(
        failure_errors(2, &forbidden),
        (
            vec![json!({"field": "manifests[2]", "message": "configmaps is forbidden"})],
            true
        )
    );
    let conflict = ApiFailure::Conflict {
        message: "Apply failed with 1 conflict".into(),
    };
    assert_eq!(
        failure_errors(0, &conflict),
        (
            vec![json!({
                "field": "manifests[0]",
                "message": "Apply failed with 1 conflict; Capstan never takes a field from \
                            another field manager: leave those fields out of the manifest, or \
                            have their manager change them",
            })],
            false
        )
    );
    let gone = ApiFailure::NotFound {
        message: "namespaces \"x\" not found".into(),
    };
    assert_eq!(
        failure_errors(0, &gone),
        (
            vec![json!({"field": "manifests[0]", "message": "namespaces \"x\" not found"})],
            false
        )
    );
}

#[test]
fn a_batch_should_be_refused_with_every_error_and_authorization_first() {
    let accepted = |index| {
        let manifest = config_map("ok", json!({"a": "1"}));
        Report::judged(index, judged(&manifest, None, Ok(manifest.clone())))
    };
    assert!(refuse_unless_accepted(&[accepted(0), accepted(1)], "planned").is_ok());

    let invalid = ApiFailure::Invalid {
        message: "invalid".into(),
        causes: vec![Cause {
            field: "data.a".into(),
            message: "must be a string".into(),
        }],
    };
    let forbidden = ApiFailure::Forbidden {
        message: "configmaps is forbidden".into(),
    };
    let reports = [
        accepted(0),
        refused(1, "b", invalid.clone()),
        refused(2, "c", forbidden),
    ];
    let error = refuse_unless_accepted(&reports, "planned").unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::Forbidden,
        "authorization comes first"
    );
    assert_eq!(error.field.as_deref(), Some("manifests[1].data.a"));
    assert_eq!(
        error.message,
        "nothing was planned: the platform refused 2 of 3 manifests — manifests[1].data.a \
         (ConfigMap default/b): must be a string; manifests[2] (ConfigMap default/c): \
         configmaps is forbidden. Fix them (resources_validate shows each) and plan again."
    );
    let error =
        refuse_unless_accepted(&[refused(0, "b", invalid), accepted(1)], "applied").unwrap_err();
    assert_eq!(error.kind, ErrorKind::Rejected);
    assert!(
        error
            .message
            .starts_with("nothing was applied: the platform refused 1 of 2 manifests"),
        "{}",
        error.message
    );
}

#[test]
fn a_report_should_say_what_applying_would_do() {
    let manifest = config_map("a", json!({"a": "2"}));
    let existing = |data: Value| {
        let mut object = config_map("a", data);
        object["metadata"]["resourceVersion"] = json!("41");
        object
    };
    let create = Report::judged(0, judged(&manifest, None, Ok(manifest.clone())));
    assert_eq!(create.resource_version(), None);
    assert_eq!(
        create.to_json(),
        json!({
            "index": 0,
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "a",
            "namespace": "default",
            "accepted": true,
            "exists": false,
            "action": "create",
            // A create adds each top-level field whole.
            "changes": [
                {"path": "apiVersion", "op": "add", "after": "v1"},
                {"path": "data", "op": "add", "after": {"a": "2"}},
                {"path": "kind", "op": "add", "after": "ConfigMap"},
                {"path": "metadata", "op": "add", "after": {"name": "a", "namespace": "default"}},
            ],
        })
    );
    let update = Report::judged(
        3,
        judged(
            &manifest,
            Some(existing(json!({"a": "1"}))),
            Ok(manifest.clone()),
        ),
    );
    assert_eq!(update.resource_version().as_deref(), Some("41"));
    let shown = update.to_json();
    assert_eq!(
        (shown["index"].clone(), shown["exists"].clone()),
        (json!(3), json!(true))
    );
    assert_eq!(shown["action"], "update");
    assert_eq!(
        shown["changes"],
        json!([{"path": "data.a", "op": "replace", "before": "1", "after": "2"}])
    );
    let unchanged = Report::judged(
        0,
        judged(
            &manifest,
            Some(existing(json!({"a": "2"}))),
            Ok(manifest.clone()),
        ),
    );
    assert_eq!(unchanged.to_json()["action"], "unchanged");
    assert_eq!(unchanged.to_json()["changes"], json!([]));
    let refused = refused(
        4,
        "a",
        ApiFailure::Forbidden {
            message: "no".into(),
        },
    );
    let shown = refused.to_json();
    assert_eq!(shown["accepted"], false);
    assert_eq!(shown["exists"], false);
    assert!(shown.get("action").is_none(), "{shown}");
    assert_eq!(
        shown["errors"],
        json!([{"field": "manifests[4]", "message": "no"}])
    );
}

/// An update of more leaves than a report lists names the first 100 and counts the rest.
#[test]
fn a_report_should_count_the_changes_it_leaves_out() {
    let data = |value: &str| -> Value {
        (0..105)
            .map(|i| (format!("k{i:03}"), json!(value)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let manifest = config_map("a", data("new"));
    let mut existing = config_map("a", data("old"));
    existing["metadata"]["resourceVersion"] = json!("41");
    let shown =
        Report::judged(0, judged(&manifest, Some(existing), Ok(manifest.clone()))).to_json();
    assert_eq!(shown["changes"].as_array().map(Vec::len), Some(100));
    assert_eq!(shown["changesOmitted"], 5);
    // Within the limit nothing is said to be left out.
    let small = config_map("a", json!({"a": "2"}));
    let shown = Report::judged(0, judged(&small, None, Ok(small.clone()))).to_json();
    assert!(shown.get("changesOmitted").is_none(), "{shown}");
}
