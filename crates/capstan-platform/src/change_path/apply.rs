//! The steps of `resources_apply` around the token check: read the manifests and each object
//! as it is now, dry-run every write with its precondition, then write in plan order and stop
//! (undoing what was written) at the first refusal.

use serde_json::{Value, json};

use super::prepare::{Prepared, prepare_all};
use super::report::{Report, failure_errors, refuse_unless_accepted};
use super::resource_version;
use super::step::{Step, Written};
use super::undo::failed_at;
use crate::failures::read_failure;
use crate::plan_token::{Caller, PlanPayload};
use crate::project_api::{ApiFailure, ProjectApi};
use capstan_core::tool_error::{ErrorKind, ToolError};

/// A refusal of the token or the plan: nothing was changed.
pub(super) fn stale(what: &str) -> ToolError {
    ToolError::new(
        ErrorKind::StalePlan,
        format!(
            "{what}. Nothing was changed. Plan again: call resources_plan with the manifests, \
             show the person the new plan, and apply with its token."
        ),
    )
}

/// The manifests as handed, each prepared; any that cannot even be read is a sign they are
/// not what a plan was issued for, so the token is refused as stale.
pub(super) async fn prepared_as_handed(
    api: &ProjectApi,
    manifests: &[Value],
) -> Result<Vec<Prepared>, ToolError> {
    let mut prepared = Vec::with_capacity(manifests.len());
    for item in prepare_all(api, manifests).await? {
        match item {
            Ok(item) => prepared.push(item),
            Err(_) => {
                return Err(stale(
                    "these manifests are not ones a plan was issued for (one cannot even \
                     be read as a manifest of this project)",
                ));
            }
        }
    }
    Ok(prepared)
}

/// Each object as it is now, in the order handed: the resource versions the token must
/// cover.
pub(super) async fn read_steps(
    api: &ProjectApi,
    prepared: Vec<Prepared>,
) -> Result<Vec<Step>, ToolError> {
    let mut steps = Vec::with_capacity(prepared.len());
    for item in prepared {
        let before = api
            .get(&item.kind, &item.identity.name, item.namespace())
            .await
            .map_err(|f| read_failure(f, &format!("read {}", item.identity), api.project()))?;
        steps.push(Step {
            prepared: item,
            before,
        });
    }
    Ok(steps)
}

/// What the token must cover if it is the plan for these steps: this project and plane,
/// `caller`, the manifests in the order handed, and each object's resource version now.
pub(super) fn payload(api: &ProjectApi, caller: Caller, steps: &[Step]) -> PlanPayload {
    PlanPayload {
        project: api.project().to_owned(),
        plane: api.plane().to_owned(),
        caller,
        manifests: steps.iter().map(|s| s.prepared.canonical.clone()).collect(),
        resource_versions: steps
            .iter()
            .map(|s| s.before.as_ref().and_then(resource_version))
            .collect(),
    }
}

/// Every write as a dry run, each with its precondition: what was true when the token was
/// checked is still true, the plane still accepts each object (a policy or a quota may have
/// changed), and no field of another manager is in the way. Refuses the whole apply unless
/// every step passes.
pub(super) async fn dry_run_all(api: &ProjectApi, steps: &[Step]) -> Result<(), ToolError> {
    let mut reports = Vec::with_capacity(steps.len());
    for (index, step) in steps.iter().enumerate() {
        let verdict = match step.write(api, true).await {
            Ok(object) => Ok(object),
            Err(ApiFailure::Conflict { message }) => {
                return Err(stale(&step.moved_since(&message)));
            }
            Err(
                failure @ (ApiFailure::Forbidden { .. }
                | ApiFailure::Invalid { .. }
                | ApiFailure::NotFound { .. }),
            ) => Err(failure),
            Err(failure) => {
                return Err(read_failure(
                    failure,
                    &format!("dry-run {}", step.prepared.identity),
                    api.project(),
                ));
            }
        };
        let (errors, forbidden) = match &verdict {
            Ok(_) => (Vec::new(), false),
            Err(failure) => failure_errors(index, failure),
        };
        reports.push(Report {
            index,
            manifest: step.prepared.canonical.clone(),
            identity: step.prepared.identity.clone(),
            judged: None,
            errors,
            forbidden,
        });
    }
    refuse_unless_accepted(&reports, "applied")
}

/// Writes every step in plan order; what each did, for the answer. The first step the plane
/// does not take stops the apply ([`failed_at`]: what was written before it is undone, or
/// named).
pub(super) async fn write_all(api: &ProjectApi, steps: &[Step]) -> Result<Vec<Value>, ToolError> {
    let mut written: Vec<Written> = Vec::with_capacity(steps.len());
    let mut applied: Vec<Value> = Vec::with_capacity(steps.len());
    for (index, step) in steps.iter().enumerate() {
        match step.write(api, false).await {
            Ok(object) => {
                written.push(Written::of(step, &object));
                applied.push(json!({
                    "step": index + 1,
                    "object": step.prepared.identity.to_string(),
                    "action": if step.before.is_some() { "updated" } else { "created" },
                    "resourceVersion": resource_version(&object).unwrap_or_default(),
                }));
            }
            Err(failure) => {
                return Err(failed_at(api, steps, index, &written, failure).await);
            }
        }
    }
    Ok(applied)
}

#[cfg(test)]
#[path = "apply/tests.rs"]
mod tests;
