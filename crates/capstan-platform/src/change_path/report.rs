//! What validate, plan and apply say of each manifest: one report per manifest (accepted or
//! not, each error with its field path, what applying would change), and the refusal of a
//! batch with any report not accepted.

use serde_json::{Value, json};

use super::judge::{Judged, judge};
use super::prepare::prepare_all;
use super::{item_error, resource_version};
use crate::manifest::{Identity, diff, editable};
use crate::project_api::{ApiFailure, Cause, ProjectApi};
use capstan_core::tool_error::{ErrorKind, ToolError};

/// One manifest's judgement.
pub(super) struct Report {
    pub(super) index: usize,
    pub(super) manifest: Value,
    pub(super) identity: Identity,
    pub(super) judged: Option<Judged>,
    pub(super) errors: Vec<Value>,
    pub(super) forbidden: bool,
}

/// Validates a batch: one report per manifest, in the given order.
pub(super) async fn reports(
    api: &ProjectApi,
    manifests: &[Value],
) -> Result<Vec<Report>, ToolError> {
    let mut reports = Vec::with_capacity(manifests.len());
    for (index, item) in prepare_all(api, manifests).await?.into_iter().enumerate() {
        let report = match item {
            Err(errors) => Report {
                index,
                manifest: manifests[index].clone(),
                identity: Identity::of(&manifests[index]),
                judged: None,
                errors,
                forbidden: false,
            },
            Ok(prepared) => Report::judged(index, judge(api, prepared).await?),
        };
        reports.push(report);
    }
    Ok(reports)
}

impl Report {
    /// The report of a manifest the apiserver judged (dry run), accepted or not.
    fn judged(index: usize, judged: Judged) -> Self {
        let (errors, forbidden) = match &judged.verdict {
            Ok(_) => (Vec::new(), false),
            Err(failure) => failure_errors(index, failure),
        };
        Self {
            index,
            manifest: judged.prepared.canonical.clone(),
            identity: judged.prepared.identity.clone(),
            judged: Some(judged),
            errors,
            forbidden,
        }
    }

    /// The object's resourceVersion when it was judged (`None`: it does not exist).
    pub(super) fn resource_version(&self) -> Option<String> {
        self.judged
            .as_ref()
            .and_then(|j| j.existing.as_ref())
            .and_then(resource_version)
    }

    /// The report as the tools return it.
    pub(super) fn to_json(&self) -> Value {
        let mut report = json!({
            "index": self.index,
            "apiVersion": self.manifest.get("apiVersion"),
            "kind": self.identity.kind,
            "name": self.identity.name,
            "accepted": self.errors.is_empty(),
        });
        if let Some(namespace) = &self.identity.namespace {
            report["namespace"] = json!(namespace);
        }
        if let Some(judged) = &self.judged {
            report["exists"] = json!(judged.existing.is_some());
            if let Ok(after) = &judged.verdict {
                let before = judged.existing.as_ref().map(editable);
                let (changes, omitted) = diff(before.as_ref(), &editable(after));
                report["action"] = json!(match (&judged.existing, changes.is_empty()) {
                    (None, _) => "create",
                    (Some(_), true) => "unchanged",
                    (Some(_), false) => "update",
                });
                report["changes"] = json!(changes);
                if omitted > 0 {
                    report["changesOmitted"] = json!(omitted);
                }
            }
        }
        if !self.errors.is_empty() {
            report["errors"] = json!(self.errors);
        }
        report
    }
}

/// The errors a refused manifest reports, each with its field path, and whether the refusal
/// was one of authorization.
pub(super) fn failure_errors(index: usize, failure: &ApiFailure) -> (Vec<Value>, bool) {
    match failure {
        ApiFailure::Invalid { message, causes } if !causes.is_empty() => (
            causes
                .iter()
                .map(
                    |Cause {
                         field,
                         message: what,
                     }| {
                        item_error(index, field, if what.is_empty() { message } else { what })
                    },
                )
                .collect(),
            false,
        ),
        ApiFailure::Invalid { message, .. } => {
            (vec![item_error(index, "", message.clone())], false)
        }
        ApiFailure::Forbidden { message } => (vec![item_error(index, "", message.clone())], true),
        ApiFailure::Conflict { message } => (
            vec![item_error(
                index,
                "",
                format!(
                    "{message}; Capstan never takes a field from another field manager: leave \
                     those fields out of the manifest, or have their manager change them"
                ),
            )],
            false,
        ),
        other => (vec![item_error(index, "", other.to_string())], false),
    }
}

/// Refuses unless every report was accepted: authorization first (nothing the caller may not
/// do is planned), then the rejections with every field path.
pub(super) fn refuse_unless_accepted(reports: &[Report], what: &str) -> Result<(), ToolError> {
    let refused: Vec<&Report> = reports.iter().filter(|r| !r.errors.is_empty()).collect();
    if refused.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = refused
        .iter()
        .flat_map(|r| {
            r.errors.iter().map(move |e| {
                format!(
                    "{} ({}): {}",
                    e["field"].as_str().unwrap_or_default(),
                    r.identity,
                    e["message"].as_str().unwrap_or_default()
                )
            })
        })
        .collect();
    let kind = if refused.iter().any(|r| r.forbidden) {
        ErrorKind::Forbidden
    } else {
        ErrorKind::Rejected
    };
    let first = refused[0].errors[0]["field"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Err(ToolError::new(
        kind,
        format!(
            "nothing was {what}: the platform refused {} of {} manifests — {}. Fix them \
             (resources_validate shows each) and plan again.",
            refused.len(),
            reports.len(),
            lines.join("; ")
        ),
    )
    .at(first))
}

#[cfg(test)]
#[path = "report/tests.rs"]
mod tests;
