//! Who a caller is, as its project's plane authenticates its token (a SelfSubjectReview with
//! that token): asked at most once per task, for the audit trail (docs/audit.md).

use std::time::Duration;

use capstan_core::control_plane::ControlPlane;
use tracing::warn;

use super::identity::Identity;
use crate::observe::audit::Named;

/// How long the plane may take to say who a caller is; the call it is asked beside is not
/// held for longer.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks project planes who their callers are.
pub struct CallerNames {
    plane: Option<ControlPlane>,
}

impl CallerNames {
    /// Names asked of `plane`'s projects; without a plane (the fixture and http sources) no
    /// caller can be named.
    pub fn new(plane: Option<ControlPlane>) -> Self {
        Self { plane }
    }

    /// Who `identity` is, or why that cannot be told.
    pub async fn of(&self, identity: &Identity) -> Named {
        let Some(token) = identity.token() else {
            return Named::Unknown("no token");
        };
        let Some(plane) = &self.plane else {
            return Named::Unknown("no control plane to ask (fixture or http source)");
        };
        let asked = capstan_platform::who_is(plane, &identity.project, token);
        match tokio::time::timeout(ASK_TIMEOUT, asked).await {
            Ok(Ok(caller)) => Named::User {
                username: caller.username,
                uid: caller.uid,
            },
            Ok(Err(failure)) => {
                warn!(project = %identity.project, error = %failure, "audit: the project's control plane could not say who the caller is");
                Named::Unknown("the project's control plane could not say (SelfSubjectReview)")
            }
            Err(_) => Named::Unknown("the project's control plane did not say in time"),
        }
    }
}
