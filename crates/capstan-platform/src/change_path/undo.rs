//! When apply stops at a step: undoing the writes before it, and the error the person reads
//! (what was refused, what was undone, what is left written, what was not reached).

use super::step::{Step, Written};
use crate::manifest::Identity;
use crate::project_api::{ApiFailure, ProjectApi};
use capstan_core::tool_error::{ErrorKind, ToolError};

/// Apply stopped at step `index`: the writes before it are undone when the plane refused the
/// step outright (a conflict, a rejection, a refusal), so nothing of the plan is left
/// written; when the step's outcome is unknown (no answer) or the plane failed, they are
/// named instead, for the person to read before planning again.
pub(super) async fn failed_at(
    api: &ProjectApi,
    steps: &[Step],
    index: usize,
    written: &[Written],
    failure: ApiFailure,
) -> ToolError {
    let stop = Stop::at(steps, index);
    let (kind, what) = match failure {
        ApiFailure::TimedOut { message } => return stop.no_answer(&message),
        ApiFailure::Unavailable { message } => return stop.plane_unavailable(&message),
        refused => refusal(&steps[index], refused),
    };
    let (undone, left) = undo(api, steps, &written[..index.min(written.len())]).await;
    let undone_text = if undone.is_empty() {
        String::new()
    } else {
        format!(" (undone: {})", undone.join(", "))
    };
    if !left.is_empty() {
        return stop.partially_applied(&what, &left, &undone_text);
    }
    let before = if written
        .iter()
        .take(index)
        .all(|w| matches!(w, Written::Unchanged))
    {
        "no write before it changed anything"
    } else {
        "every write before it was undone"
    };
    stop.nothing_changed(kind, &what, before, &undone_text)
}

/// How the plane refused `step` outright: the error kind and what the person reads of it.
fn refusal(step: &Step, failure: ApiFailure) -> (ErrorKind, String) {
    let object = &step.prepared.identity;
    match failure {
        ApiFailure::Conflict { message } => (ErrorKind::StalePlan, step.moved_since(&message)),
        ApiFailure::Forbidden { message } => (
            ErrorKind::Forbidden,
            format!("{object} was refused: {message}"),
        ),
        other => (
            ErrorKind::Rejected,
            format!("{object} was refused: {other}"),
        ),
    }
}

/// Where apply stopped: the step (counted from 1) and its object, and the text naming the
/// steps applied before it and those not reached.
struct Stop<'a> {
    step: usize,
    object: &'a Identity,
    /// What was applied before the step, or that nothing was.
    so_far: String,
    /// `; not applied: …` naming the steps after it, or empty.
    rest: String,
}

impl<'a> Stop<'a> {
    /// Stopped at `steps[index]`.
    fn at(steps: &'a [Step], index: usize) -> Self {
        let names = |range: &[Step]| -> Vec<String> {
            range
                .iter()
                .map(|s| s.prepared.identity.to_string())
                .collect()
        };
        let not_done = names(&steps[index + 1..]);
        let rest = if not_done.is_empty() {
            String::new()
        } else {
            format!("; not applied: {}", not_done.join(", "))
        };
        let done = names(&steps[..index]);
        let so_far = if done.is_empty() {
            "nothing was applied before it".to_owned()
        } else {
            format!("applied before it: {}", done.join(", "))
        };
        Self {
            step: index + 1,
            object: &steps[index].prepared.identity,
            so_far,
            rest,
        }
    }

    /// The step got no answer: whether it was applied is unknown, so nothing is undone.
    fn no_answer(&self, message: &str) -> ToolError {
        let Self {
            step,
            object,
            so_far,
            rest,
        } = self;
        ToolError::new(
            ErrorKind::OutcomeUnknown,
            format!(
                "step {step} ({object}) got no answer, so whether it was applied is \
                 unknown ({message}); {so_far}{rest}. Read it with resources_get before \
                 planning again."
            ),
        )
    }

    /// The plane failed on the step: whether it was applied is unknown, so nothing is undone.
    fn plane_unavailable(&self, message: &str) -> ToolError {
        let Self {
            step,
            object,
            so_far,
            rest,
        } = self;
        ToolError::new(
            ErrorKind::UpstreamUnavailable,
            format!(
                "step {step} ({object}) failed: the control plane is unavailable \
                 ({message}); whether it was applied is unknown; {so_far}{rest}. Read \
                 them with resources_get before planning again."
            ),
        )
    }

    /// The step was refused and every write before it undone (or none changed anything):
    /// the plan left nothing written.
    fn nothing_changed(
        &self,
        kind: ErrorKind,
        what: &str,
        before: &str,
        undone_text: &str,
    ) -> ToolError {
        let Self { step, rest, .. } = self;
        ToolError::new(
            kind,
            format!(
                "step {step}: {what}. Nothing was changed: {before}{undone_text}{rest}. Plan again."
            ),
        )
    }

    /// The step was refused and undoing some write before it was refused too: those left
    /// written are named, for the person to read before planning again.
    fn partially_applied(&self, what: &str, left: &[String], undone_text: &str) -> ToolError {
        let Self { step, rest, .. } = self;
        ToolError::new(
            ErrorKind::Rejected,
            format!(
                "step {step}: {what}. Some of the plan is left written, because undoing it was \
                 refused (someone changed the object since, or you may not delete or update it): \
                 {}{undone_text}{rest}. Read them with resources_get before planning again.",
                left.join(", ")
            ),
        )
        .with_code("partially_applied")
    }
}

/// Undoes `written` (the writes of `steps` before the one that failed), newest first: a
/// created object is deleted if it is still exactly the one created, an updated one is put
/// back as apply read it if nobody changed it since. Returns the objects undone and those
/// left as written (with why).
async fn undo(api: &ProjectApi, steps: &[Step], written: &[Written]) -> (Vec<String>, Vec<String>) {
    let mut undone = Vec::new();
    let mut left = Vec::new();
    for (step, write) in steps.iter().zip(written).rev() {
        let object = &step.prepared.identity;
        let outcome = match (write, &step.before) {
            (Written::Unchanged, _) => continue,
            (
                Written::Created {
                    uid,
                    resource_version,
                },
                _,
            ) => {
                api.delete_exactly(
                    &step.prepared.kind,
                    &object.name,
                    step.prepared.namespace(),
                    uid,
                    resource_version,
                )
                .await
            }
            (Written::Updated { resource_version }, Some(before)) => api
                .restore(&step.prepared.kind, before, resource_version)
                .await
                .map(drop),
            (Written::Updated { .. }, None) => continue,
        };
        match outcome {
            Ok(()) => undone.push(object.to_string()),
            Err(failure) => left.push(format!("{object} ({failure})")),
        }
    }
    undone.reverse();
    left.reverse();
    (undone, left)
}

#[cfg(test)]
#[path = "undo/tests.rs"]
mod tests;
