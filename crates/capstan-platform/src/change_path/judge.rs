//! Judging one prepared manifest without keeping anything: the object as it is now, and the
//! plane's verdict on a dry-run server-side apply.

use serde_json::Value;

use super::prepare::Prepared;
use crate::failures::read_failure;
use crate::project_api::{ApiFailure, ProjectApi};
use capstan_core::tool_error::ToolError;

/// What the plane said of one prepared manifest.
pub(super) struct Judged {
    pub(super) prepared: Prepared,
    pub(super) existing: Option<Value>,
    pub(super) verdict: Result<Value, ApiFailure>,
}

/// Reads the object and dry-runs the manifest. Failures that keep the plane from judging at
/// all (unavailable, timed out) end the call; the rest are verdicts.
pub(super) async fn judge(api: &ProjectApi, prepared: Prepared) -> Result<Judged, ToolError> {
    let existing = match api
        .get(
            &prepared.kind,
            &prepared.identity.name,
            prepared.namespace(),
        )
        .await
    {
        Ok(existing) => existing,
        Err(failure @ (ApiFailure::Forbidden { .. } | ApiFailure::Invalid { .. })) => {
            return Ok(Judged {
                prepared,
                existing: None,
                verdict: Err(failure),
            });
        }
        Err(failure) => {
            return Err(read_failure(
                failure,
                &format!("read {}", prepared.identity),
                api.project(),
            ));
        }
    };
    // Server-side apply as a dry run (never forced), for a create too: it names the field
    // of a type error, which a create's decoding error does not. Apply then creates with
    // a create, whose dry run it repeats with the preconditions.
    let verdict = match api.apply(&prepared.kind, &prepared.canonical, true).await {
        Ok(object) => Ok(object),
        Err(
            failure @ (ApiFailure::Forbidden { .. }
            | ApiFailure::Invalid { .. }
            | ApiFailure::Conflict { .. }
            | ApiFailure::NotFound { .. }),
        ) => Err(failure),
        Err(failure) => {
            return Err(read_failure(
                failure,
                &format!("dry-run {}", prepared.identity),
                api.project(),
            ));
        }
    };
    Ok(Judged {
        prepared,
        existing,
        verdict,
    })
}
