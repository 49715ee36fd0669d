//! The caller's token exchanged for the provider's (docs/upstream-auth.md "Token exchange"):
//! RFC 8693 at the binding's token endpoint, the provider seeing the caller as subject and
//! itself as audience; the caller's own token goes to the token endpoint only.
//!
//! One exchanged token per (caller, token endpoint, audience, scopes, client, actor), kept
//! until 30 s before it expires and shared by every upstream of that caller that asks for the
//! same; one exchange in flight per key (the others wait for it and share its result), and a
//! failed one answers for a second before the next request asks again (`refreshed.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use capstan_api::TokenExchange;
use capstan_upstream::credential::{Credential, CredentialError, Header, HeaderFuture};
use capstan_upstream::exchange::{ClientAuth, ExchangeRequest, exchange};
use capstan_upstream::fetch::Fetcher;
use sha2::{Digest as _, Sha256};
use tokio::time::Instant;

use super::refreshed::{Held, Slot};
use super::secrets::SecretCredentialSource;
use super::workload::WorkloadCredential;

/// How long before an exchanged token expires it is exchanged anew.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// How long an exchanged token is kept when the service does not say (`expires_in`).
pub const UNSAID_LIFE: Duration = Duration::from_secs(60);

/// How long one exchange may take.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Keys past which the expired entries are swept on the next insert.
const SWEEP_AT: usize = 4096;

/// The exchanges of every caller of the sidecar: the token service's client and what is held.
#[derive(Debug)]
pub struct Exchanges {
    /// Posts to token endpoints, its guard `CAPSTAN_TOKEN_ENDPOINT_HOSTS`.
    fetcher: Fetcher,
    slots: Mutex<HashMap<[u8; 32], Slot<Header>>>,
}

/// How the sidecar proves itself to the token service.
#[derive(Debug)]
pub enum ClientProof {
    /// A client secret from a Secret.
    Secret(Box<SecretCredentialSource>),
    /// Its workload token as a client assertion.
    Assertion(WorkloadCredential),
}

/// One caller's exchange for one endpoint.
pub struct ExchangeCredential {
    exchanges: Arc<Exchanges>,
    slot: Slot<Header>,
    /// The caller's token: sent to the token endpoint only.
    subject: Arc<str>,
    spec: TokenExchange,
    client: ClientProof,
    actor: Option<WorkloadCredential>,
}

impl std::fmt::Debug for ExchangeCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeCredential")
            .field("token_endpoint", &self.spec.token_endpoint)
            .field("audience", &self.spec.audience)
            .finish_non_exhaustive()
    }
}

impl Exchanges {
    /// Exchanges through `fetcher`, whose guard admits the token endpoints.
    pub fn new(fetcher: Fetcher) -> Self {
        Self {
            fetcher,
            slots: Mutex::default(),
        }
    }

    /// Whether the token endpoint allow-list admits `endpoint` (checked again, with its
    /// addresses, when it is dialed): the first thing a binding's exchange must pass.
    pub fn admits(&self, endpoint: &str) -> Result<(), CredentialError> {
        self.fetcher.admits(endpoint).map_err(|refusal| {
            CredentialError::permanent(format!(
                "token endpoint {endpoint} is not dialed: {} (CAPSTAN_TOKEN_ENDPOINT_HOSTS)",
                refusal.reason
            ))
        })
    }

    /// The exchange of `subject` (the caller's token; `caller` its digest) as `spec` says,
    /// proving the client with `client`, the sidecar acting as `actor`.
    pub fn credential(
        self: &Arc<Self>,
        caller: [u8; 32],
        subject: Arc<str>,
        spec: &TokenExchange,
        client: ClientProof,
        actor: Option<WorkloadCredential>,
    ) -> ExchangeCredential {
        let key = key(caller, spec);
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            if slots.len() >= SWEEP_AT && !slots.contains_key(&key) {
                sweep(&mut slots);
            }
            slots.entry(key).or_default().clone()
        };
        ExchangeCredential {
            exchanges: self.clone(),
            slot,
            subject,
            spec: spec.clone(),
            client,
            actor,
        }
    }
}

/// The key of `caller`'s exchanges as `spec` says: everything that makes the issued token
/// differ.
fn key(caller: [u8; 32], spec: &TokenExchange) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(caller);
    // A spec serializes whole (the client and actor audiences included); it cannot fail.
    digest.update(serde_json::to_vec(spec).unwrap_or_default());
    digest.finalize().into()
}

/// Drops the entries no credential holds and whose token has expired (or which hold none).
fn sweep(slots: &mut HashMap<[u8; 32], Slot<Header>>) {
    let now = Instant::now();
    slots.retain(|_, slot| {
        Arc::strong_count(slot) > 1 || slot.try_lock().map(|s| s.is_fresh(now)).unwrap_or(true)
    });
}

impl ExchangeCredential {
    /// A new token from the token service.
    async fn exchange(&self) -> Result<Held<Header>, CredentialError> {
        let client_secret;
        let assertion;
        let client_auth = match &self.client {
            ClientProof::Secret(secret) => {
                client_secret = secret.value().await?;
                ClientAuth::Secret(&client_secret)
            }
            ClientProof::Assertion(workload) => {
                assertion = workload.token().await?;
                ClientAuth::Assertion(&assertion)
            }
        };
        let actor = match &self.actor {
            Some(actor) => Some(actor.token().await?),
            None => None,
        };
        let request = ExchangeRequest {
            endpoint: &self.spec.token_endpoint,
            subject_token: &self.subject,
            subject_token_type: self.spec.subject_token_type().uri(),
            audience: &self.spec.audience,
            scopes: &self.spec.scopes,
            actor_token: actor.as_deref(),
            client_id: &self.spec.client.id,
            client_auth,
        };
        let asked = Instant::now();
        let issued = exchange(&self.exchanges.fetcher, &request, EXCHANGE_TIMEOUT).await?;
        let life = issued.expires_in.unwrap_or(UNSAID_LIFE);
        let header = Header::new(
            capstan_api::binding::AUTHORIZATION,
            "Bearer ",
            &issued.access_token,
        )?;
        // A token shorter-lived than the margin is used for half its life. It is not used past
        // that, even when exchanging anew fails: the provider may already refuse it.
        let refresh_at = asked + life.checked_sub(EXPIRY_MARGIN).unwrap_or(life / 2);
        Ok(Held {
            value: header,
            refresh_at,
            expires_at: refresh_at,
        })
    }
}

impl Credential for ExchangeCredential {
    fn header(&self) -> HeaderFuture<'_> {
        Box::pin(async move {
            let mut slot = self.slot.lock().await;
            slot.get(self.exchange(), &self.spec.audience).await
        })
    }
}
