//! Guarded, capped HTTP fetches of knowledge sources and skill bodies.

use std::time::Duration;

use futures::StreamExt;
use reqwest::redirect;
use thiserror::Error;

use crate::credential::{CredentialError, SharedCredential};
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
    /// The credential its `auth` block asks for could not be had: nothing was sent.
    #[error("{url}: no credential: {failed}")]
    Credential {
        /// The URL fetched.
        url: String,
        /// Why, and what to fix.
        failed: CredentialError,
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
            FetchError::Credential { .. } => "credential",
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
/// environment, and every redirect hop checked again. A fetch carrying a credential follows no
/// redirect to another origin (docs/upstream-auth.md): the credential was decided for the
/// host the binding names, and a custom header would otherwise travel with the redirect.
#[derive(Clone, Debug)]
pub struct Fetcher {
    client: reqwest::Client,
    /// The client of fetches that carry a credential: same-origin redirects only.
    credentialed: reqwest::Client,
    /// The client of form posts (a token endpoint's): no redirect at all.
    posting: reqwest::Client,
    guard: EndpointGuard,
}

/// A form post's answer: its status and body (cut at the cap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posted {
    /// The HTTP status.
    pub status: u16,
    /// The body as text.
    pub body: Fetched,
}

/// Building a client failed (a TLS backend could not be set up).
#[derive(Debug, Error)]
#[error("building an HTTP client: {0}")]
pub struct ClientError(#[from] reqwest::Error);

impl Fetcher {
    /// A fetcher admitting what `guard` admits.
    pub fn new(guard: EndpointGuard) -> Result<Self, ClientError> {
        let client = guarded_client_builder(&guard)
            .redirect(redirects(&guard, false))
            .build()?;
        let credentialed = guarded_client_builder(&guard)
            .redirect(redirects(&guard, true))
            .build()?;
        let posting = guarded_client_builder(&guard)
            .redirect(redirect::Policy::none())
            .build()?;
        Ok(Self {
            client,
            credentialed,
            posting,
            guard,
        })
    }

    /// POSTs `form` (`application/x-www-form-urlencoded`, already encoded) to `url` with
    /// `headers`, following no redirect: an OAuth 2.0 token endpoint's request (RFC 6749
    /// section 3.2), whose answer is read whatever its status (its error is in the body), at
    /// most `cap` bytes, within `timeout`.
    pub async fn post_form(
        &self,
        url: &str,
        headers: &[(http::HeaderName, http::HeaderValue)],
        form: String,
        timeout: Duration,
        cap: usize,
    ) -> Result<Posted, FetchError> {
        let checked = self.guard.check(url)?;
        let post = async {
            let mut request = self
                .posting
                .post(checked.url)
                .header(
                    http::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .header(http::header::ACCEPT, "application/json");
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let response = request
                .body(form)
                .send()
                .await
                .map_err(|e| classify(url, &e))?;
            let status = response.status().as_u16();
            let body = read_capped(url, response, cap).await?;
            Ok(Posted { status, body })
        };
        tokio::time::timeout(timeout, post)
            .await
            .unwrap_or_else(|_| {
                Err(FetchError::Timeout {
                    url: url.to_owned(),
                    timeout,
                })
            })
    }

    /// Whether the allow-list admits `url` (its addresses are checked when it is dialed).
    pub fn admits(&self, url: &str) -> Result<(), Refusal> {
        self.guard.check(url).map(drop)
    }

    /// Fetches `url`, giving up after `timeout` and keeping at most `cap` bytes.
    pub async fn fetch(
        &self,
        url: &str,
        timeout: Duration,
        cap: usize,
    ) -> Result<Fetched, FetchError> {
        self.fetch_as(url, None, timeout, cap).await
    }

    /// [`Self::fetch`] carrying `credential`'s header: one that cannot be had stops the fetch
    /// before anything is dialed.
    pub async fn fetch_as(
        &self,
        url: &str,
        credential: Option<&SharedCredential>,
        timeout: Duration,
        cap: usize,
    ) -> Result<Fetched, FetchError> {
        let checked = self.guard.check(url)?;
        let fetch = async {
            let request = match credential {
                Some(credential) => {
                    let header =
                        credential
                            .header()
                            .await
                            .map_err(|failed| FetchError::Credential {
                                url: url.to_owned(),
                                failed,
                            })?;
                    self.credentialed
                        .get(checked.url)
                        .header(header.name, header.value)
                }
                None => self.client.get(checked.url),
            };
            let response = request.send().await.map_err(|e| classify(url, &e))?;
            let status = response.status();
            if !status.is_success() {
                return Err(FetchError::Status {
                    url: url.to_owned(),
                    status: status.as_u16(),
                });
            }
            read_capped(url, response, cap).await
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

/// The body of `response`, at most `cap` bytes of it (invalid UTF-8 replaced).
async fn read_capped(
    url: &str,
    response: reqwest::Response,
    cap: usize,
) -> Result<Fetched, FetchError> {
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
}

/// The redirect policy of a fetch: at most [`MAX_REDIRECTS`] hops, each checked by `guard`;
/// with `same_origin`, none to another scheme, host or port than the URL fetched.
fn redirects(guard: &EndpointGuard, same_origin: bool) -> redirect::Policy {
    let guard = guard.clone();
    redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        if same_origin
            && let Some(first) = attempt.previous().first()
            && first.origin() != attempt.url().origin()
        {
            let refusal = Refusal {
                url: attempt.url().to_string(),
                reason: format!(
                    "another origin than {}: a credential is sent only to the host its binding \
                     names",
                    first.origin().ascii_serialization()
                ),
            };
            return attempt.error(refusal);
        }
        match guard.check(attempt.url().as_str()) {
            Ok(_) => attempt.follow(),
            Err(refusal) => attempt.error(refusal),
        }
    })
}

/// A reqwest builder with the settings every guarded client shares: `guard`'s checking
/// resolver and no proxy taken from the environment (a proxy would dial on our behalf,
/// unchecked).
pub fn guarded_client_builder(guard: &EndpointGuard) -> reqwest::ClientBuilder {
    // reqwest is built without a default crypto provider: building a client before the
    // process installed one would panic, so every guarded client makes sure it is there.
    capstan_core::install_crypto_provider();
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

#[cfg(test)]
mod tests;
