//! The start-up step of the upstream-credential settings (docs/upstream-auth.md): where Secrets
//! are read, the sidecar's workload identity, the audiences it may be asked for, the token
//! endpoints it may exchange a caller's token at.

use std::sync::Arc;

use capstan_core::control_plane::ControlPlane;
use capstan_upstream::fetch::Fetcher;
use capstan_upstream::guard::EndpointGuard;

use super::RunError;
use crate::composition::composer::ProjectComposer;
use crate::config::TokenExchangeSettings;
use capstan_compose::credentials::settings::CredentialSettings;

/// `composer` authenticating to providers as `settings` and `exchange` say, reading Secrets
/// from and asking tokens of the control plane `plane` (when one is known).
pub(super) fn with_credentials(
    composer: ProjectComposer,
    settings: CredentialSettings,
    exchange: TokenExchangeSettings,
    plane: Option<&ControlPlane>,
) -> Result<ProjectComposer, RunError> {
    let TokenExchangeSettings {
        token_endpoint_hosts,
    } = exchange;
    let token_endpoints = EndpointGuard::from_list(&token_endpoint_hosts)
        .map_err(|e| RunError::Settings(format!("CAPSTAN_TOKEN_ENDPOINT_HOSTS: {e}")))?;
    let fetcher = Fetcher::new(token_endpoints)
        .map_err(|e| RunError::Settings(format!("the token endpoints' client: {e}")))?;
    let credentials = settings
        .sources(plane, fetcher)
        .map_err(RunError::Settings)?;
    Ok(composer.with_credentials(Arc::new(credentials)))
}
