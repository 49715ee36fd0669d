//! The credential settings the sidecar and the controller's probe share, and the credential
//! sources they name (docs/upstream-auth.md "Settings").

use capstan_core::control_plane::ControlPlane;
use capstan_upstream::fetch::Fetcher;
use capstan_upstream::guard::EndpointGuard;
use tracing::info;

use super::exchange::Exchanges;
use super::secrets::SecretWatches;
use super::workload::{WorkloadAccount, WorkloadTokens};
use super::{AudienceRule, DEFAULT_CREDENTIALS_NAMESPACE, UpstreamCredentials};

/// Who the process is to providers whose binding gives an endpoint an `auth` block.
#[derive(Debug, clap::Args)]
pub struct CredentialSettings {
    /// The namespace of each project's plane whose Secrets `auth.secret` (and a token
    /// exchange's client secret) may name. Only the Secrets RBAC names there are read, and
    /// one is sent only for the bindings and hosts the Secret's own annotations name.
    #[arg(long, env = "CAPSTAN_CREDENTIALS_NAMESPACE", default_value = DEFAULT_CREDENTIALS_NAMESPACE)]
    pub credentials_namespace: String,

    /// The process's own ServiceAccount, `namespace/name`, whose tokens `auth.workloadIdentity`
    /// sends (asked of the TokenRequest API on the cluster of the kubeconfig, or the pod's
    /// own). Unset: no workload identity, and such endpoints are not dialed.
    #[arg(long, env = "CAPSTAN_WORKLOAD_SERVICE_ACCOUNT")]
    pub workload_service_account: Option<String>,

    /// The pod the workload tokens are bound to (with `--pod-uid`): they stop being valid when
    /// it is deleted. The chart sets both from the downward API.
    #[arg(long, env = "CAPSTAN_POD_NAME", requires = "pod_uid")]
    pub pod_name: Option<String>,

    /// The uid of the pod named by `--pod-name`.
    #[arg(long, env = "CAPSTAN_POD_UID", requires = "pod_name")]
    pub pod_uid: Option<String>,

    /// Audiences a workload or exchanged token may be asked for besides the host of the URL it
    /// is sent to: comma-separated `audience=host` pairs, the host in the allow-lists' form
    /// (`mcp.example.com`, `*.example.com`). Keep the apiserver's own audiences out.
    #[arg(long, env = "CAPSTAN_WORKLOAD_AUDIENCES", default_value = "")]
    pub workload_audiences: String,
}

impl CredentialSettings {
    /// The credential sources of the controller's probe: as [`Self::sources`], but no token
    /// endpoint is admitted (the probe exchanges no caller's token).
    pub fn probe_sources(self, plane: &ControlPlane) -> Result<UpstreamCredentials, String> {
        let none = Fetcher::new(EndpointGuard::default())
            .map_err(|e| format!("the token endpoints' client: {e}"))?;
        self.sources(Some(plane), none)
    }

    /// The credential sources these settings name: Secrets read from and tokens asked of
    /// `plane` (when one is known), exchanges made through `token_endpoints`. The error names
    /// the setting at fault.
    pub fn sources(
        self,
        plane: Option<&ControlPlane>,
        token_endpoints: Fetcher,
    ) -> Result<UpstreamCredentials, String> {
        let Self {
            credentials_namespace,
            workload_service_account,
            pod_name,
            pod_uid,
            workload_audiences,
        } = self;
        let audiences = AudienceRule::parse(&workload_audiences)
            .map_err(|e| format!("CAPSTAN_WORKLOAD_AUDIENCES: {e}"))?;
        let asker = match workload_service_account {
            None => Err("this process has no workload identity: set \
                         CAPSTAN_WORKLOAD_SERVICE_ACCOUNT to its ServiceAccount (namespace/name)"
                .to_owned()),
            Some(account) => {
                let mut account = WorkloadAccount::parse(&account)
                    .map_err(|e| format!("CAPSTAN_WORKLOAD_SERVICE_ACCOUNT: {e}"))?;
                account.pod = pod_name.zip(pod_uid);
                let plane = plane.ok_or_else(|| {
                    "CAPSTAN_WORKLOAD_SERVICE_ACCOUNT needs a cluster to request tokens of: a \
                     kubeconfig, or the pod's own"
                        .to_owned()
                })?;
                let client = kube::Client::try_from(plane.own_cluster_config())
                    .map_err(|e| format!("a client for the workload identity's cluster: {e}"))?;
                info!(namespace = %account.namespace, account = %account.name, bound = account.pod.is_some(), "workload identity");
                Ok((client, account))
            }
        };
        Ok(UpstreamCredentials::new(
            SecretWatches::new(plane.cloned(), credentials_namespace),
            WorkloadTokens::new(asker),
            Exchanges::new(token_endpoints),
            audiences,
        ))
    }
}
