//! Who Capstan is to a provider (docs/upstream-auth.md): the credential of every endpoint a
//! binding gives an `auth` block, for one caller of one project (the sidecar) or for none (the
//! controller's Composed probe). A Secret of the project's plane (`secrets.rs`), the process's
//! workload identity (`workload.rs`), the caller's token exchanged (`exchange.rs`); every
//! credential is decided here, where the rules that keep it where its owner meant it are
//! applied, and asked for its header by capstan-upstream on every request.

use std::sync::Arc;

use capstan_api::{AuthKind, SecretCredential, TokenExchange};
use capstan_upstream::credential::{
    Credential, CredentialError, Credentials, Dialed, HeaderFuture, SharedCredential,
    SharedCredentials, Unavailable,
};
use capstan_upstream::guard::EndpointGuard;

pub mod exchange;
mod refreshed;
pub mod secrets;
pub mod settings;
pub mod workload;

use self::exchange::{ClientProof, Exchanges};
use self::secrets::SecretWatches;
use self::workload::WorkloadTokens;

/// The credentials namespace unless `CAPSTAN_CREDENTIALS_NAMESPACE` says otherwise.
pub const DEFAULT_CREDENTIALS_NAMESPACE: &str = "capstan-credentials";

/// Every credential source of the process, shared by its compositions.
#[derive(Debug)]
pub struct UpstreamCredentials {
    secrets: Arc<SecretWatches>,
    workload: Arc<WorkloadTokens>,
    exchanges: Arc<Exchanges>,
    audiences: AudienceRule,
}

impl UpstreamCredentials {
    /// Credentials from `secrets`, `workload` and `exchanges`, tokens asked for the
    /// audiences `audiences` admits.
    pub fn new(
        secrets: SecretWatches,
        workload: WorkloadTokens,
        exchanges: Exchanges,
        audiences: AudienceRule,
    ) -> Self {
        Self {
            secrets: Arc::new(secrets),
            workload: Arc::new(workload),
            exchanges: Arc::new(exchanges),
            audiences,
        }
    }

    /// The credentials of the compositions of `caller` in `project`: its digest and token
    /// (the token exchange's subject), `None` when it sent none.
    pub fn for_caller(
        self: &Arc<Self>,
        project: &str,
        caller: Option<([u8; 32], Arc<str>)>,
    ) -> SharedCredentials {
        Arc::new(CallerCredentials {
            shared: self.clone(),
            project: project.to_owned(),
            caller: Caller::Token(caller),
        })
    }

    /// The credentials of a probe of `project`'s bindings, made for no caller: a token
    /// exchange is not made, and says it needs one ([`CredentialError::needs_caller`]).
    pub fn for_probe(self: &Arc<Self>, project: &str) -> SharedCredentials {
        Arc::new(CallerCredentials {
            shared: self.clone(),
            project: project.to_owned(),
            caller: Caller::None,
        })
    }
}

/// For whom a composition's credentials are.
#[derive(Clone)]
enum Caller {
    /// A caller: its digest and token, if it sent one.
    Token(Option<([u8; 32], Arc<str>)>),
    /// No caller (the controller's probe).
    None,
}

/// The credentials of one caller's compositions in one project.
struct CallerCredentials {
    shared: Arc<UpstreamCredentials>,
    project: String,
    caller: Caller,
}

impl std::fmt::Debug for CallerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerCredentials")
            .field("project", &self.project)
            .finish_non_exhaustive()
    }
}

impl Credentials for CallerCredentials {
    fn credential(&self, dialed: &Dialed<'_>) -> SharedCredential {
        let named = format!("{} of binding {}", dialed.what, dialed.binding);
        match self.decide(dialed) {
            Ok(credential) => Arc::new(Named { named, credential }),
            Err(error) => Arc::new(Unavailable(Named::failure(&named, error))),
        }
    }
}

/// A credential whose failures name the endpoint and binding it was decided for, so the
/// caller and the platform read where to look.
#[derive(Debug)]
struct Named {
    named: String,
    credential: SharedCredential,
}

impl Named {
    fn failure(named: &str, error: CredentialError) -> CredentialError {
        error.within(named)
    }
}

impl Credential for Named {
    fn header(&self) -> HeaderFuture<'_> {
        Box::pin(async move {
            self.credential
                .header()
                .await
                .map_err(|error| Self::failure(&self.named, error))
        })
    }
}

impl CallerCredentials {
    /// The credential `dialed`'s block asks for, or why it may not have one.
    fn decide(&self, dialed: &Dialed<'_>) -> Result<SharedCredential, CredentialError> {
        let shared = &self.shared;
        match dialed.auth.kind() {
            None => Err(CredentialError::permanent(
                "its auth block sets no kind or several",
            )),
            Some(AuthKind::Secret(secret)) => {
                let source =
                    shared
                        .secrets
                        .credential(&self.project, dialed.binding, dialed.url, secret)?;
                Ok(Arc::new(source))
            }
            Some(AuthKind::WorkloadIdentity(identity)) => {
                shared.audiences.check(&identity.audience, dialed.url)?;
                Ok(Arc::new(shared.workload.credential(&identity.audience)))
            }
            Some(AuthKind::TokenExchange(spec)) => self.exchange(dialed, spec),
        }
    }

    /// The exchange of the caller's token for `dialed`: its audience the endpoint's, the
    /// client's and the actor's proofs for the token endpoint's host.
    fn exchange(
        &self,
        dialed: &Dialed<'_>,
        spec: &TokenExchange,
    ) -> Result<SharedCredential, CredentialError> {
        let shared = &self.shared;
        let (caller, subject) = match self.caller.clone() {
            Caller::Token(Some(caller)) => caller,
            Caller::Token(None) => {
                return Err(CredentialError::permanent(
                    "its token exchange needs the caller's token, and this caller sent none",
                ));
            }
            Caller::None => {
                return Err(CredentialError::needs_caller(
                    "its token exchange is made for each caller with the caller's token, so \
                     it is not probed here",
                ));
            }
        };
        shared.exchanges.admits(&spec.token_endpoint)?;
        shared.audiences.check(&spec.audience, dialed.url)?;
        let for_endpoint = |audience: &str| -> Result<_, CredentialError> {
            shared.audiences.check(audience, &spec.token_endpoint)?;
            Ok(shared.workload.credential(audience))
        };
        let client = match (&spec.client.secret, &spec.client.workload_identity) {
            (Some(secret), _) => ClientProof::Secret(Box::new(shared.secrets.credential(
                &self.project,
                dialed.binding,
                &spec.token_endpoint,
                &SecretCredential {
                    name: secret.name.clone(),
                    key: secret.key.clone(),
                    header: None,
                    prefix: None,
                },
            )?)),
            (None, Some(identity)) => ClientProof::Assertion(for_endpoint(&identity.audience)?),
            (None, None) => {
                return Err(CredentialError::permanent(
                    "its token exchange names no way for the client to prove itself",
                ));
            }
        };
        let actor = spec
            .actor
            .as_ref()
            .map(|actor| for_endpoint(&actor.audience))
            .transpose()?;
        Ok(Arc::new(
            shared
                .exchanges
                .credential(caller, subject, spec, client, actor),
        ))
    }
}

/// Which audiences a token may be asked for, for a URL: the URL's host, or one the platform
/// allows for it (`CAPSTAN_WORKLOAD_AUDIENCES`: `audience=host` pairs, the host in the form of
/// the endpoint allow-lists). A binding cannot have the sidecar mint a token one service
/// accepts and send it to another.
#[derive(Debug, Default)]
pub struct AudienceRule {
    allowed: Vec<(String, EndpointGuard)>,
}

impl AudienceRule {
    /// The rule of a `CAPSTAN_WORKLOAD_AUDIENCES` value: comma-separated `audience=host`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut allowed = Vec::new();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((audience, host)) = pair.split_once('=') else {
                return Err(format!(
                    "{pair:?} is not audience=host, e.g. https://mcp.example.com=mcp.example.com"
                ));
            };
            let guard = EndpointGuard::from_list(host.trim())
                .map_err(|e| format!("{pair:?}: the host is not one an allow-list takes: {e}"))?;
            allowed.push((audience.trim().to_owned(), guard));
        }
        Ok(Self { allowed })
    }

    /// Whether a token for `audience` may be sent to `url`.
    pub fn check(&self, audience: &str, url: &str) -> Result<(), CredentialError> {
        let host = url::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_owned()))
            .unwrap_or_default();
        let own = !host.is_empty() && audience.eq_ignore_ascii_case(&host);
        let allowed = self
            .allowed
            .iter()
            .any(|(allowed, guard)| allowed == audience && guard.check(url).is_ok());
        if own || allowed {
            return Ok(());
        }
        Err(CredentialError::permanent(format!(
            "a token for audience {audience} may not be sent to {host}: the audience must be the \
             host of the URL it is sent to, or allowed for that host by the platform \
             (CAPSTAN_WORKLOAD_AUDIENCES={audience}={host})"
        )))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_token_should_go_only_to_its_audiences_host_or_where_the_platform_allows() {
        let rule =
            AudienceRule::parse("https://mcp.example.com=mcp.example.com, billing=*.corp").unwrap();
        assert!(
            rule.check("mcp.example.com", "https://mcp.example.com/mcp")
                .is_ok()
        );
        assert!(
            rule.check("MCP.example.com", "https://mcp.example.com:8443/mcp")
                .is_ok()
        );
        assert!(rule.check("127.0.0.1", "http://127.0.0.1:7810/mcp").is_ok());
        assert!(
            rule.check("https://mcp.example.com", "https://mcp.example.com/mcp")
                .is_ok()
        );
        assert!(rule.check("billing", "https://api.corp/x").is_ok());

        let refused = rule
            .check("mcp.example.com", "https://attacker.example/mcp")
            .unwrap_err();
        assert!(refused.message.contains("attacker.example"), "{refused}");
        assert!(!refused.transient);
        assert!(
            rule.check("https://mcp.example.com", "https://evil.example/")
                .is_err()
        );
        assert!(rule.check("billing", "https://api.corp.evil/x").is_err());
        assert!(rule.check("", "https://mcp.example.com/").is_err());
        assert!(AudienceRule::parse("no-pair").is_err());
    }
}
