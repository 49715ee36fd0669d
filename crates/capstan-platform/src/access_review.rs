//! Questions about the caller asked of the project's own control plane with the caller's token
//! (SelfSubjectAccessReviews): whether it belongs to the project it names (may it list
//! CapabilityBindings there), and whether it may use a tool, a prompt or a binding's offerings
//! (docs/authorization.md); and who the caller is (a SelfSubjectReview), for the audit trail
//! and the change path. The sidecar decides what to ask and caches the answers; this module
//! only asks.

use capstan_core::control_plane::ControlPlane;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Resource as _;
use kube::api::{Api, PostParams};

use crate::plan_token::Caller;
use crate::project_api::ApiFailure;

/// Who the caller holding `token` is, as `project`'s plane authenticates the token.
pub async fn who_is(
    plane: &ControlPlane,
    project: &str,
    token: &str,
) -> Result<Caller, ApiFailure> {
    crate::project_api::self_subject(caller_client(plane, project, token)?).await
}

/// A client of `project`'s plane that authenticates with the caller's `token`.
fn caller_client(
    plane: &ControlPlane,
    project: &str,
    token: &str,
) -> Result<kube::Client, ApiFailure> {
    let config = plane
        .caller_config(project, token)
        .map_err(|e| ApiFailure::unavailable(e.to_string()))?;
    kube::Client::try_from(config)
        .map_err(|e| ApiFailure::unavailable(format!("building the client: {e}")))
}

/// Whether the caller holding `token` may list CapabilityBindings in `project`, asked of the
/// project's plane (`plane`) with the caller's own token: the proof that the caller belongs to
/// the project it names. A token the plane does not know is `Forbidden` (401 there).
pub async fn may_list_bindings(
    plane: &ControlPlane,
    project: &str,
    token: &str,
) -> Result<bool, ApiFailure> {
    AccessReviewer::new(plane, project, token)?
        .may("list", "capabilitybindings", None)
        .await
}

/// Asks one project's plane, as one caller, what that caller may do in Capstan's API group:
/// one client for a batch of questions (a first `tools/list` may ask hundreds, concurrently,
/// over one connection pool).
#[derive(Clone)]
pub struct AccessReviewer {
    api: Api<SelfSubjectAccessReview>,
}

impl AccessReviewer {
    /// A reviewer asking `project`'s plane with `token`.
    pub fn new(plane: &ControlPlane, project: &str, token: &str) -> Result<Self, ApiFailure> {
        Ok(Self {
            api: Api::all(caller_client(plane, project, token)?),
        })
    }

    /// Whether the caller may `verb` the `resource` of Capstan's group, cluster-wide (a
    /// project is a whole control plane), named `name` or — without one — every object of it.
    /// A token the plane does not know is `Forbidden` (401 there).
    pub async fn may(
        &self,
        verb: &str,
        resource: &str,
        name: Option<&str>,
    ) -> Result<bool, ApiFailure> {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(capstan_api::CapabilityBinding::group(&()).into_owned()),
                    resource: Some(resource.to_owned()),
                    verb: Some(verb.to_owned()),
                    name: name.map(str::to_owned),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let answer = self
            .api
            .create(&PostParams::default(), &review)
            .await
            .map_err(ApiFailure::from_kube)?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}
