//! The sidecar's workload identity as a credential (docs/upstream-auth.md "Workload
//! identity"): a token of its own ServiceAccount for one audience, from the TokenRequest API,
//! kept in memory per audience and asked anew once 80 % of its life has passed. Never written
//! to disk.
//!
//! TokenRequest, not a projected volume: the audiences come from bindings at run time, and a
//! projected volume fixes them when the pod is created.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use capstan_upstream::credential::{Credential, CredentialError, Header, HeaderFuture};

use super::refreshed::{Held, Slot};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use tokio::time::Instant;

/// The life asked for each token: an hour (the apiserver may shorten it; its answer's expiry
/// is what counts).
pub const TOKEN_LIFE: Duration = Duration::from_secs(3600);

/// The share of a token's life after which it is asked anew.
const REFRESH_AT: f64 = 0.8;

/// Who the sidecar is: its ServiceAccount, and the pod its tokens are bound to when known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadAccount {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub name: String,
    /// The pod (name, uid) tokens are bound to, so they die with it.
    pub pod: Option<(String, String)>,
}

impl WorkloadAccount {
    /// `namespace/name`, as `CAPSTAN_WORKLOAD_SERVICE_ACCOUNT` names it.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(Self {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    pod: None,
                })
            }
            _ => Err(format!(
                "{text:?} is not namespace/name of a ServiceAccount, e.g. capstan-system/capstan-sidecar"
            )),
        }
    }
}

/// A workload token: the header it is sent in, and itself (an actor token or a client
/// assertion is sent in a form, not a header).
#[derive(Clone)]
struct Token {
    header: Header,
    token: Arc<str>,
}

/// The sidecar's tokens, per audience.
pub struct WorkloadTokens {
    /// Who asks, on which cluster; `None` when the sidecar has no workload identity (why).
    asker: Result<(kube::Client, WorkloadAccount), String>,
    held: Mutex<HashMap<String, Slot<Token>>>,
}

impl std::fmt::Debug for WorkloadTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadTokens")
            .field("account", &self.asker.as_ref().map(|(_, account)| account))
            .finish_non_exhaustive()
    }
}

impl WorkloadTokens {
    /// Tokens of `account`, asked of the cluster `client` reaches; or none, for `why`.
    pub fn new(asker: Result<(kube::Client, WorkloadAccount), String>) -> Self {
        Self {
            asker,
            held: Mutex::default(),
        }
    }

    /// The credential of a token for `audience`.
    pub fn credential(self: &Arc<Self>, audience: &str) -> WorkloadCredential {
        let slot = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(audience.to_owned())
            .or_default()
            .clone();
        WorkloadCredential {
            tokens: self.clone(),
            audience: audience.to_owned(),
            slot,
        }
    }

    /// A new token for `audience` from the TokenRequest API.
    async fn request(&self, audience: &str) -> Result<Held<Token>, CredentialError> {
        let (client, account) = self
            .asker
            .as_ref()
            .map_err(|why| CredentialError::permanent(why.clone()))?;
        let api = kube::Api::<ServiceAccount>::namespaced(client.clone(), &account.namespace);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![audience.to_owned()],
                expiration_seconds: i64::try_from(TOKEN_LIFE.as_secs()).ok(),
                bound_object_ref: account
                    .pod
                    .as_ref()
                    .map(|(name, uid)| BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(name.clone()),
                        uid: Some(uid.clone()),
                    }),
            },
            ..TokenRequest::default()
        };
        let asked = Instant::now();
        let answer = api
            .create_token_request(&account.name, &PostParams::default(), &request)
            .await
            .map_err(|error| refused(account, audience, &error))?;
        let status = answer.status.ok_or_else(|| {
            CredentialError::transient("the TokenRequest answer carried no token".to_owned())
        })?;
        let life = (status.expiration_timestamp.0 - k8s_openapi::jiff::Timestamp::now())
            .total(k8s_openapi::jiff::Unit::Second)
            .map_or(Duration::ZERO, |s| Duration::from_secs_f64(s.max(0.0)));
        let header = Header::new(
            capstan_api::binding::AUTHORIZATION,
            "Bearer ",
            &status.token,
        )?;
        Ok(Held {
            value: Token {
                header,
                token: Arc::from(status.token.as_str()),
            },
            refresh_at: asked + life.mul_f64(REFRESH_AT),
            expires_at: asked + life,
        })
    }
}

/// Why a TokenRequest failed, in words that say what to fix.
fn refused(account: &WorkloadAccount, audience: &str, error: &kube::Error) -> CredentialError {
    let who = format!("ServiceAccount {}/{}", account.namespace, account.name);
    match error {
        kube::Error::Api(status) if status.code == 403 => CredentialError::permanent(format!(
            "the sidecar may not request tokens of {who}: grant it create on serviceaccounts/token \
             for that account by name (the chart does)"
        )),
        kube::Error::Api(status) if status.code == 404 => CredentialError::permanent(format!(
            "{who} does not exist (CAPSTAN_WORKLOAD_SERVICE_ACCOUNT)"
        )),
        other => CredentialError::transient(format!(
            "a token of {who} for audience {audience} could not be requested: {other}"
        )),
    }
}

/// A workload token for one audience.
#[derive(Debug)]
pub struct WorkloadCredential {
    tokens: Arc<WorkloadTokens>,
    audience: String,
    /// The token held for this audience, shared with every credential of it; locked while one
    /// is asked, so one request asks at a time.
    slot: Slot<Token>,
}

impl WorkloadCredential {
    /// The token itself, for a form (an actor token, a client assertion).
    pub async fn token(&self) -> Result<Arc<str>, CredentialError> {
        self.held().await.map(|held| held.token)
    }

    /// The token held for the audience: the one held while fresh, else a new one (the held
    /// one while it still holds if asking failed).
    async fn held(&self) -> Result<Token, CredentialError> {
        let mut slot = self.slot.lock().await;
        slot.get(self.tokens.request(&self.audience), &self.audience)
            .await
    }
}

impl Credential for WorkloadCredential {
    fn header(&self) -> HeaderFuture<'_> {
        Box::pin(async move { self.held().await.map(|held| held.header) })
    }
}
