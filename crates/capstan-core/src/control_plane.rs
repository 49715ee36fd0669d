//! Where a project's control plane is, and how to reach it as whom: with the sidecar's own
//! credential (the crd source's reads) or with the caller's bearer token and nothing else (the
//! platform tools and the caller check, in `capstan-platform`). The project's URL comes from a
//! template holding `{project}`; without one, the cluster of the sidecar's kubeconfig is every
//! project's plane.

use kube::config::AuthInfo;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use secrecy::SecretString;

/// Bytes escaped in a project name placed in a URL path: everything but RFC 3986 unreserved.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A project's control-plane URL, made from the template, that does not parse as a URL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("control-plane URL {url:?}: {reason}")]
pub struct PlaneUrlError {
    /// The URL the template made.
    pub url: String,
    /// Why it is no URL.
    pub reason: String,
}

/// The control planes of projects: a base configuration (cluster URL, CA, the sidecar's
/// credential) and an optional URL template.
#[derive(Clone)]
pub struct ControlPlane {
    base: kube::Config,
    url_template: Option<String>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("cluster_url", &self.base.cluster_url.to_string())
            .field("url_template", &self.url_template)
            .finish()
    }
}

impl ControlPlane {
    /// Control planes reached with `base`, at `url_template` (holding `{project}`) when given.
    pub fn new(base: kube::Config, url_template: Option<String>) -> Self {
        Self { base, url_template }
    }

    /// The URL template, if any.
    pub fn url_template(&self) -> Option<&str> {
        self.url_template.as_deref()
    }

    /// The configuration of the cluster the sidecar's kubeconfig (or its pod) names, with its
    /// own credential, whatever the URL template: where its own ServiceAccount lives.
    pub fn own_cluster_config(&self) -> kube::Config {
        self.base.clone()
    }

    /// Without a URL template, the configuration of the one cluster every project reads.
    pub fn cluster_config(&self) -> Option<kube::Config> {
        self.url_template.is_none().then(|| self.base.clone())
    }

    /// The configuration for `project`'s plane with the sidecar's own credential.
    pub fn config(&self, project: &str) -> Result<kube::Config, PlaneUrlError> {
        let mut config = self.base.clone();
        if let Some(template) = &self.url_template {
            let escaped = utf8_percent_encode(project, PATH_SEGMENT).to_string();
            let url = template.replace("{project}", &escaped);
            config.cluster_url = url
                .parse()
                .map_err(|e: http::uri::InvalidUri| PlaneUrlError {
                    reason: e.to_string(),
                    url,
                })?;
        }
        Ok(config)
    }

    /// The configuration for `project`'s plane carrying the caller's `token` and nothing of
    /// the sidecar's identity: the same URL and CA, no client certificate, no token file, no
    /// exec plugin, no impersonation.
    pub fn caller_config(&self, project: &str, token: &str) -> Result<kube::Config, PlaneUrlError> {
        let mut config = self.config(project)?;
        config.auth_info = AuthInfo {
            token: Some(SecretString::from(token.to_owned())),
            ..AuthInfo::default()
        };
        config.headers.clear();
        Ok(config)
    }
}
