//! Whether a caller belongs to the project it names, asked of the project's own control plane
//! with the caller's token (a SelfSubjectAccessReview: may it list CapabilityBindings there).
//! The sidecar's caller check makes the question; this module only asks it.

use capstan_core::control_plane::ControlPlane;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Resource as _;
use kube::api::{Api, PostParams};

use crate::project_api::ApiFailure;

/// Whether the caller holding `token` may list CapabilityBindings in `project`, asked of the
/// project's plane (`plane`) with the caller's own token: the proof that the caller belongs to
/// the project it names. A token the plane does not know is `Forbidden` (401 there).
pub async fn may_list_bindings(
    plane: &ControlPlane,
    project: &str,
    token: &str,
) -> Result<bool, ApiFailure> {
    let config = plane
        .caller_config(project, token)
        .map_err(|e| ApiFailure::unavailable(e.to_string()))?;
    let client = kube::Client::try_from(config)
        .map_err(|e| ApiFailure::unavailable(format!("building the client: {e}")))?;
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(capstan_api::CapabilityBinding::group(&()).into_owned()),
                resource: Some("capabilitybindings".to_owned()),
                verb: Some("list".to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client);
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(ApiFailure::from_kube)?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}
