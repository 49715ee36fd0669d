//! What apply says when it stops at a step, for the stops that need no undoing: no answer,
//! a plane that failed, a refusal with nothing written before it; and what a write did.
//! Undoing writes goes through the plane (e2e/tests/base_tools.rs). Every expected text is
//! written out here.

#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::*;
use crate::change_path::fixtures::{step, unreachable};

fn steps() -> Vec<Step> {
    vec![step("a", None), step("b", Some("7")), step("c", None)]
}

#[tokio::test]
async fn a_step_without_an_answer_should_say_its_outcome_is_unknown_and_undo_nothing() {
    let api = unreachable();
    let error = failed_at(
        &api,
        &steps(),
        1,
        &[Written::Unchanged],
        ApiFailure::TimedOut {
            message: "no answer in 10 s".into(),
        },
    )
    .await;
    assert_eq!(error.kind, ErrorKind::OutcomeUnknown);
    assert_eq!(
        error.message,
        "step 2 (ConfigMap default/b) got no answer, so whether it was applied is unknown (no \
         answer in 10 s); applied before it: ConfigMap default/a; not applied: ConfigMap \
         default/c. Read it with resources_get before planning again."
    );
    let error = failed_at(
        &api,
        &steps()[..1],
        0,
        &[],
        ApiFailure::unavailable("503 from the apiserver"),
    )
    .await;
    assert_eq!(error.kind, ErrorKind::UpstreamUnavailable);
    assert_eq!(
        error.message,
        "step 1 (ConfigMap default/a) failed: the control plane is unavailable (503 from the \
         apiserver); whether it was applied is unknown; nothing was applied before it. Read \
         them with resources_get before planning again."
    );
}

#[tokio::test]
async fn a_refused_step_with_nothing_written_before_it_should_say_nothing_changed() {
    let api = unreachable();
    let conflict = ApiFailure::Conflict {
        message: "the object has been modified".into(),
    };
    let error = failed_at(&api, &steps(), 1, &[Written::Unchanged], conflict).await;
    assert_eq!(error.kind, ErrorKind::StalePlan);
    assert_eq!(
        error.message,
        "step 2: ConfigMap default/b was changed by someone else after the plan was checked, \
         or another field manager owns a field the plan sets (the object has been modified). \
         Nothing was changed: no write before it changed anything; not applied: ConfigMap \
         default/c. Plan again."
    );
    let taken = ApiFailure::Conflict {
        message: "already exists".into(),
    };
    let error = failed_at(&api, &steps(), 0, &[], taken).await;
    assert_eq!(error.kind, ErrorKind::StalePlan);
    assert!(
        error.message.starts_with(
            "step 1: ConfigMap default/a was created by someone else after the plan was \
             checked, so creating it would overwrite theirs (already exists). Nothing was \
             changed: no write before it changed anything; not applied: ConfigMap default/b, \
             ConfigMap default/c. Plan again."
        ),
        "{}",
        error.message
    );
    let forbidden = ApiFailure::Forbidden {
        message: "configmaps is forbidden".into(),
    };
    let error = failed_at(&api, &steps()[2..], 0, &[], forbidden).await;
    assert_eq!(error.kind, ErrorKind::Forbidden);
    assert_eq!(
        error.message,
        "step 1: ConfigMap default/c was refused: configmaps is forbidden. Nothing was changed: \
         no write before it changed anything. Plan again."
    );
    let invalid = ApiFailure::Invalid {
        message: "data: must be a map".into(),
        causes: Vec::new(),
    };
    let error = failed_at(&api, &steps()[2..], 0, &[], invalid).await;
    assert_eq!(error.kind, ErrorKind::Rejected);
    assert!(
        error
            .message
            .starts_with("step 1: ConfigMap default/c was refused: data: must be a map."),
        "{}",
        error.message
    );
}

#[test]
fn a_write_should_be_read_as_a_create_an_update_or_no_change() {
    let answer = |version: &str| -> Value {
        json!({"metadata": {"uid": "u-1", "resourceVersion": version}})
    };
    assert!(matches!(
        Written::of(&step("a", None), &answer("8")),
        Written::Created { uid, resource_version } if uid == "u-1" && resource_version == "8"
    ));
    assert!(matches!(
        Written::of(&step("b", Some("7")), &answer("8")),
        Written::Updated { resource_version } if resource_version == "8"
    ));
    assert!(matches!(
        Written::of(&step("b", Some("7")), &answer("7")),
        Written::Unchanged
    ));
}
