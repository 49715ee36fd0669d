//! The start-up step of the upstream-credential settings (docs/upstream-auth.md): where Secrets
//! are read, the sidecar's workload identity, the audiences it may be asked for.

use std::sync::Arc;

use capstan_core::control_plane::ControlPlane;
use capstan_upstream::fetch::Fetcher;
use capstan_upstream::guard::EndpointGuard;
use tracing::info;

use super::RunError;
use crate::composition::composer::ProjectComposer;
use crate::config::CredentialSettings;
use crate::credentials::exchange::Exchanges;
use crate::credentials::secrets::SecretWatches;
use crate::credentials::workload::{WorkloadAccount, WorkloadTokens};
use crate::credentials::{AudienceRule, UpstreamCredentials};

/// `composer` authenticating to providers as `settings` say, reading Secrets from and asking
/// tokens of the control plane `plane` (when one is known).
pub(super) fn with_credentials(
    composer: ProjectComposer,
    settings: CredentialSettings,
    plane: Option<&ControlPlane>,
) -> Result<ProjectComposer, RunError> {
    let CredentialSettings {
        credentials_namespace,
        workload_service_account,
        pod_name,
        pod_uid,
        workload_audiences,
        token_endpoint_hosts,
    } = settings;
    let audiences = AudienceRule::parse(&workload_audiences)
        .map_err(|e| RunError::Settings(format!("CAPSTAN_WORKLOAD_AUDIENCES: {e}")))?;
    let asker = match workload_service_account {
        None => Err("this sidecar has no workload identity: set \
                     CAPSTAN_WORKLOAD_SERVICE_ACCOUNT to its ServiceAccount (namespace/name)"
            .to_owned()),
        Some(account) => {
            let mut account = WorkloadAccount::parse(&account).map_err(|e| {
                RunError::Settings(format!("CAPSTAN_WORKLOAD_SERVICE_ACCOUNT: {e}"))
            })?;
            account.pod = pod_name.zip(pod_uid);
            let plane = plane.ok_or_else(|| {
                RunError::Settings(
                    "CAPSTAN_WORKLOAD_SERVICE_ACCOUNT needs a cluster to request tokens of: a \
                     kubeconfig, or the pod's own"
                        .into(),
                )
            })?;
            let client = kube::Client::try_from(plane.own_cluster_config()).map_err(|e| {
                RunError::Settings(format!("a client for the workload identity's cluster: {e}"))
            })?;
            info!(namespace = %account.namespace, account = %account.name, bound = account.pod.is_some(), "workload identity");
            Ok((client, account))
        }
    };
    let token_endpoints = EndpointGuard::from_list(&token_endpoint_hosts)
        .map_err(|e| RunError::Settings(format!("CAPSTAN_TOKEN_ENDPOINT_HOSTS: {e}")))?;
    let fetcher = Fetcher::new(token_endpoints)
        .map_err(|e| RunError::Settings(format!("the token endpoints' client: {e}")))?;
    Ok(composer.with_credentials(Arc::new(UpstreamCredentials::new(
        SecretWatches::new(plane.cloned(), credentials_namespace),
        WorkloadTokens::new(asker),
        Exchanges::new(fetcher),
        audiences,
    ))))
}
