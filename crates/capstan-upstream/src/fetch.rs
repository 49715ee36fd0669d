//! Guarded, capped HTTP fetches of knowledge sources and skill bodies.

use std::time::Duration;

use futures::StreamExt;
use reqwest::redirect;
use thiserror::Error;

use crate::guard::{AddressRefused, EndpointGuard, Refusal};
use capstan_core::error_chain::{chain_text, find_in_chain};

/// Redirects followed per fetch: enough for a moved document, few enough to bound a loop.
pub const MAX_REDIRECTS: usize = 5;

/// Why a fetch produced nothing.
#[derive(Debug, Error)]
pub enum FetchError {
    /// The guard refused the URL or an address it resolved to (never dialed).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Connecting or reading failed.
    #[error("{url}: {message}")]
    Transport {
        /// The URL fetched.
        url: String,
        /// What failed.
        message: String,
    },
    /// The server answered with a non-success status.
    #[error("{url}: HTTP {status}")]
    Status {
        /// The URL fetched.
        url: String,
        /// The status code.
        status: u16,
    },
    /// No answer within the timeout.
    #[error("{url}: no answer within {timeout:?}")]
    Timeout {
        /// The URL fetched.
        url: String,
        /// The limit.
        timeout: Duration,
    },
}

impl FetchError {
    /// The failure's kind, as a span's `error.type` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            FetchError::Refused(_) => "refused",
            FetchError::Transport { .. } => "transport",
            FetchError::Status { .. } => "http_status",
            FetchError::Timeout { .. } => "timeout",
        }
    }
}

/// A fetched body, cut at the cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The text (invalid UTF-8 replaced).
    pub text: String,
    /// Whether the body was longer than the cap.
    pub truncated: bool,
}

/// An HTTP client for provider content: the guard's allow-list and resolver, no proxy from the
/// environment, and every redirect hop checked again.
#[derive(Clone, Debug)]
pub struct Fetcher {
    client: reqwest::Client,
    guard: EndpointGuard,
}

/// Building a client failed (a TLS backend could not be set up).
#[derive(Debug, Error)]
#[error("building an HTTP client: {0}")]
pub struct ClientError(#[from] reqwest::Error);

impl Fetcher {
    /// A fetcher admitting what `guard` admits.
    pub fn new(guard: EndpointGuard) -> Result<Self, ClientError> {
        let hop_guard = guard.clone();
        let policy = redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match hop_guard.check(attempt.url().as_str()) {
                Ok(_) => attempt.follow(),
                Err(refusal) => attempt.error(refusal),
            }
        });
        let client = guarded_client_builder(&guard).redirect(policy).build()?;
        Ok(Self { client, guard })
    }

    /// Fetches `url`, giving up after `timeout` and keeping at most `cap` bytes.
    pub async fn fetch(
        &self,
        url: &str,
        timeout: Duration,
        cap: usize,
    ) -> Result<Fetched, FetchError> {
        let checked = self.guard.check(url)?;
        let fetch = async {
            let response = self
                .client
                .get(checked.url)
                .send()
                .await
                .map_err(|e| classify(url, &e))?;
            let status = response.status();
            if !status.is_success() {
                return Err(FetchError::Status {
                    url: url.to_owned(),
                    status: status.as_u16(),
                });
            }
            let mut body = Vec::new();
            let mut truncated = false;
            let mut stream = response.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| classify(url, &e))?;
                let room = cap - body.len();
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            Ok(Fetched {
                text: String::from_utf8_lossy(&body).into_owned(),
                truncated,
            })
        };
        tokio::time::timeout(timeout, fetch)
            .await
            .unwrap_or_else(|_| {
                Err(FetchError::Timeout {
                    url: url.to_owned(),
                    timeout,
                })
            })
    }
}

/// A reqwest builder with the settings every guarded client shares: `guard`'s checking
/// resolver and no proxy taken from the environment (a proxy would dial on our behalf,
/// unchecked).
pub fn guarded_client_builder(guard: &EndpointGuard) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .dns_resolver(std::sync::Arc::new(guard.resolver()))
        .no_proxy()
}

/// Turns a reqwest error into a refusal when the guard was behind it.
fn classify(url: &str, error: &reqwest::Error) -> FetchError {
    if let Some(refusal) = find_in_chain::<Refusal>(error) {
        return FetchError::Refused(Refusal {
            url: url.to_owned(),
            reason: format!("redirected to {}: {}", refusal.url, refusal.reason),
        });
    }
    if let Some(refused) = find_in_chain::<AddressRefused>(error) {
        return FetchError::Refused(Refusal {
            url: url.to_owned(),
            reason: refused.to_string(),
        });
    }
    FetchError::Transport {
        url: url.to_owned(),
        message: chain_text(error),
    }
}
