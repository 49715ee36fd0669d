//! The http source: the capability-provider API, its answers capped in size.

use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;

use super::objects::{found_in, scoped};
use super::snapshot::Snapshot;
use super::{DocumentSource, SourceError, check_project};
use capstan_core::error_chain::chain_text;

/// The capability-provider API: `GET {base}/projects/{project}/capability-documents`.
#[derive(Clone, Debug)]
pub struct HttpSource {
    base: reqwest::Url,
    client: reqwest::Client,
    max_body: usize,
}

/// Per-request limit of the provider API. 5 s: the contract's number.
pub const HTTP_SOURCE_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest provider API answer read. 8 MiB: ~7,000 documents of the StreamCo example's size,
/// far more than one project is entitled to, and small enough that a broken or hostile
/// provider cannot make every sidecar buffer without bound.
pub const DEFAULT_PROVIDER_MAX_BODY: usize = 8 * 1024 * 1024;

impl HttpSource {
    /// A source for the provider API at `base` (the configured, trusted provider URL), reading
    /// answers of at most `max_body` bytes.
    pub fn new(base: &str, max_body: usize) -> Result<Self, SourceError> {
        let error = |message: String| SourceError::new("http", "", message);
        let base =
            reqwest::Url::parse(base).map_err(|e| error(format!("provider URL {base:?}: {e}")))?;
        // reqwest has no default crypto provider here; building without one panics.
        capstan_core::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(HTTP_SOURCE_TIMEOUT)
            .build()
            .map_err(|e| error(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            base,
            client,
            max_body,
        })
    }

    /// Reads the body up to the cap: a longer answer is refused whole (a cut JSON list would
    /// not parse, and a silently shortened one would drop documents).
    async fn body(&self, response: reqwest::Response) -> Result<String, BodyError> {
        let limit = self.max_body;
        if let Some(length) = response.content_length()
            && length > u64::try_from(limit).unwrap_or(u64::MAX)
        {
            return Err(BodyError::TooLong {
                size: format!("{length} bytes"),
                limit,
            });
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(BodyError::Read)?;
            if body.len() + chunk.len() > limit {
                return Err(BodyError::TooLong {
                    size: format!("more than {} bytes", body.len() + chunk.len()),
                    limit,
                });
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body).map_err(BodyError::NotUtf8)
    }

    /// The provider API's base URL.
    pub fn base(&self) -> &reqwest::Url {
        &self.base
    }

    fn url(&self, project: &str) -> reqwest::Url {
        let mut url = self.base.clone();
        // path_segments_mut escapes the project as one segment ("a/b" stays one segment).
        if let Ok(mut segments) = url.path_segments_mut() {
            segments
                .pop_if_empty()
                .extend(["projects", project, "capability-documents"]);
        }
        url
    }
}

/// Why the provider API's answer could not be read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// Longer than the limit: refused whole.
    #[error("the answer is {size}, over the {limit} byte limit (CAPABILITY_PROVIDER_MAX_BYTES)")]
    TooLong {
        /// As far as it is known: the declared length, or how much had arrived.
        size: String,
        limit: usize,
    },
    #[error("reading the body: {0}")]
    Read(reqwest::Error),
    #[error("the body is not UTF-8: {0}")]
    NotUtf8(std::string::FromUtf8Error),
}

impl DocumentSource for HttpSource {
    fn documents<'a>(&'a self, project: &'a str) -> BoxFuture<'a, Result<Snapshot, SourceError>> {
        Box::pin(async move {
            check_project("http", project)?;
            let url = self.url(project);
            let error =
                |message: String| SourceError::new("http", project, format!("{url}: {message}"));
            let response = self
                .client
                .get(url.clone())
                .header(reqwest::header::ACCEPT, "application/json")
                .send()
                .await
                .map_err(|e| error(chain_text(&e)))?;
            let status = response.status();
            if !status.is_success() {
                return Err(error(format!("HTTP {status}")));
            }
            let text = self
                .body(response)
                .await
                .map_err(|e| error(e.to_string()))?;
            let trimmed = text.trim_start();
            if !(trimmed.starts_with('[') || trimmed.starts_with('{')) {
                return Err(error("the body is not a JSON array or List".into()));
            }
            let parsed = capstan_api::parse(&text).map_err(|e| error(e.to_string()))?;
            Ok(scoped(
                found_in(parsed, url.as_str()),
                project,
                url.as_str(),
            ))
        })
    }
}
