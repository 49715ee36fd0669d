//! How a failed request to the project's control plane reads as a tool error: each
//! `ApiFailure` class onto the error kind a consumer acts on (README, "Errors").

use crate::project_api::ApiFailure;
use capstan_core::tool_error::{ErrorKind, ToolError};

/// A read that failed, as the error a consumer can act on. `doing` completes "you may not …".
pub fn read_failure(failure: ApiFailure, doing: &str, project: &str) -> ToolError {
    match failure {
        ApiFailure::NotServed { api_version, kind } => ToolError::new(
            ErrorKind::InvalidInput,
            format!(
                "project {project} does not serve {kind} ({api_version}); check the group, \
                 version and kind"
            ),
        )
        .at("kind")
        .with_code("kind_not_served"),
        ApiFailure::Forbidden { message } => ToolError::new(
            ErrorKind::Forbidden,
            format!("you may not {doing} in project {project}: {message}"),
        ),
        ApiFailure::NotFound { message } => {
            ToolError::new(ErrorKind::InvalidInput, message).with_code("not_found")
        }
        ApiFailure::Invalid { message, .. } | ApiFailure::Conflict { message } => {
            ToolError::new(ErrorKind::Rejected, message)
        }
        ApiFailure::Unavailable { message } | ApiFailure::TimedOut { message } => ToolError::new(
            ErrorKind::UpstreamUnavailable,
            format!("project {project}'s control plane could not {doing}: {message}"),
        ),
        ApiFailure::Malformed { message } => ToolError::new(ErrorKind::UpstreamMalformed, message),
    }
}
