//! Sources of a project's capability documents: a fixture file, the capability-provider HTTP
//! API, and CapabilityBinding objects on the project's control plane (listed per project in
//! `crd_list.rs`, watched in `crd_watch.rs`; both read objects through `documents_of` here).
//!
//! Every source reads through `capstan_api::parse`, so one schema and one validator serve all
//! three. A source answers `Err` only when it could not read at all; invalid documents are
//! skipped with a warning and the valid ones kept. What an `Err` becomes (no capabilities, or
//! the last good answer) is the reader's policy: see `read.rs` and `cache.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_api::{CapabilityDocument, Object, Parsed, RouteQualifier};
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde_json::value::RawValue;
use thiserror::Error;
use tracing::warn;

use crate::document::{Document, NamedQualifier, Snapshot};
use crate::errors::chain_text;

/// Why a source could not answer for a project.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{source_kind} source, project {project}: {message}")]
pub struct SourceError {
    /// `fixture`, `http` or `crd`.
    pub source_kind: &'static str,
    /// The project asked for.
    pub project: String,
    /// What failed.
    pub message: String,
}

impl SourceError {
    /// An error of the `source_kind` source for `project`.
    pub(crate) fn new(
        source_kind: &'static str,
        project: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            source_kind,
            project: project.to_owned(),
            message: message.into(),
        }
    }
}

/// Refuses a project that is not a project name before a source builds a path, a URL or a
/// cache key from it (`..` would otherwise be a dot-segment the URL parser resolves away).
/// The sidecar refuses such names first; this keeps every source safe on its own.
pub(crate) fn check_project(source_kind: &'static str, project: &str) -> Result<(), SourceError> {
    capstan_api::check_project_name(project)
        .map_err(|error| SourceError::new(source_kind, project, error.to_string()))
}

/// Yields the capability documents entitled to a project, in first-wins order.
pub trait DocumentSource: Send + Sync {
    /// The project's documents and route qualifiers; `Err` only when nothing could be read.
    fn documents<'a>(&'a self, project: &'a str) -> BoxFuture<'a, Result<Snapshot, SourceError>>;
}

/// The valid objects of `parsed` (invalid ones logged and skipped): documents named by
/// `metadata.name` or their position, and qualifiers with the namespace they name, if any.
struct Found {
    documents: Vec<(CapabilityDocument, String)>,
    qualifiers: Vec<(RouteQualifier, String)>,
}

fn found_in(parsed: Parsed, origin: &str) -> Found {
    for invalid in &parsed.invalid {
        for line in invalid.lines() {
            warn!(origin, error = %line, "invalid capability document or qualifier skipped");
        }
    }
    let mut found = Found {
        documents: Vec::new(),
        qualifiers: Vec::new(),
    };
    for p in parsed.objects {
        let index = p.index;
        let name = p.object.name().map(str::to_owned);
        match p.object {
            Object::Qualifier(qualifier) => {
                // A qualifier's name is its merge order key: validation requires one.
                let name = name.unwrap_or_else(|| format!("qualifier-{index}"));
                found.qualifiers.push((qualifier, name));
            }
            other => {
                if let Some(document) = other.into_document() {
                    let name = name.unwrap_or_else(|| format!("document-{index}"));
                    found.documents.push((document, name));
                }
            }
        }
    }
    found
}

/// Fixture and HTTP objects name their consumer project in `metadata.namespace`; one naming
/// another project is dropped (an object without one applies to every project).
fn scoped(found: Found, project: &str, origin: &str) -> Snapshot {
    let mine = |namespace: Option<&str>, name: &str, what: &str| match namespace {
        Some(namespace) if namespace != project => {
            warn!(
                origin,
                name, namespace, project, "{what} for another project dropped"
            );
            false
        }
        _ => true,
    };
    Snapshot {
        qualifiers_error: None,
        documents: found
            .documents
            .into_iter()
            .filter(|(document, binding)| {
                mine(document.metadata.namespace.as_deref(), binding, "document")
            })
            .map(|(document, binding)| Document {
                binding,
                spec: document.spec,
            })
            .collect(),
        qualifiers: found
            .qualifiers
            .into_iter()
            .filter(|(qualifier, name)| {
                mine(qualifier.metadata.namespace.as_deref(), name, "qualifier")
            })
            .map(|(qualifier, name)| (name, qualifier.spec))
            .collect(),
    }
}

/// Documents from a local JSON or YAML file (a bare array or a `{"items": […]}` List), read
/// on every call so an edited fixture takes effect without a restart.
#[derive(Clone, Debug)]
pub struct FixtureSource {
    path: PathBuf,
}

impl FixtureSource {
    /// A source reading `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl DocumentSource for FixtureSource {
    fn documents<'a>(&'a self, project: &'a str) -> BoxFuture<'a, Result<Snapshot, SourceError>> {
        Box::pin(async move {
            check_project("fixture", project)?;
            let error = |message: String| SourceError::new("fixture", project, message);
            let origin = self.path.display().to_string();
            let text = tokio::fs::read_to_string(&self.path)
                .await
                .map_err(|e| error(format!("reading {origin}: {e}")))?;
            let parsed = capstan_api::parse(&text).map_err(|e| error(format!("{origin}: {e}")))?;
            Ok(scoped(found_in(parsed, &origin), project, &origin))
        })
    }
}

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
    async fn body(&self, response: reqwest::Response) -> Result<String, String> {
        let too_long = |size: String| {
            format!(
                "the answer is {size}, over the {} byte limit (CAPABILITY_PROVIDER_MAX_BYTES)",
                self.max_body
            )
        };
        if let Some(length) = response.content_length()
            && length > u64::try_from(self.max_body).unwrap_or(u64::MAX)
        {
            return Err(too_long(format!("{length} bytes")));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("reading the body: {e}"))?;
            if body.len() + chunk.len() > self.max_body {
                return Err(too_long(format!(
                    "more than {} bytes",
                    body.len() + chunk.len()
                )));
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body).map_err(|e| format!("the body is not UTF-8: {e}"))
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
            let text = self.body(response).await.map_err(error)?;
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

/// One object as `capstan_api::parse` reads it from a list: its name and its spec, the spec
/// text passed through as it is (the watching source keeps specs as text).
#[derive(Serialize)]
struct Item<'a> {
    #[serde(rename = "apiVersion", skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    metadata: ItemName<'a>,
    spec: &'a RawValue,
}

#[derive(Serialize)]
struct ItemName<'a> {
    name: Option<&'a str>,
}

/// `items` as one list through `capstan_api::parse`: the valid objects (`found_in`).
fn found_in_items(items: &[Item<'_>]) -> Result<Found, String> {
    #[derive(Serialize)]
    struct List<'a, 'b> {
        items: &'a [Item<'b>],
    }
    let text = serde_json::to_string(&List { items }).map_err(|e| e.to_string())?;
    let parsed = capstan_api::parse(&text).map_err(|e| e.to_string())?;
    Ok(found_in(parsed, "crd"))
}

/// CapabilityBindings (metadata and spec text) as documents in first-wins order — creation
/// order, then name, the order the controller's probe uses for collisions —, each spec through
/// the same parse and validation as every source. Shared by the listing and the watching crd
/// source (`crd_watch.rs`).
pub(crate) fn documents_of<'a>(
    objects: impl Iterator<Item = (&'a ObjectMeta, &'a RawValue)>,
) -> Result<Vec<Document>, String> {
    let mut objects: Vec<(&ObjectMeta, &RawValue)> = objects.collect();
    objects.sort_by(|a, b| capstan_api::binding::first_wins_order(a.0, b.0));
    let items: Vec<Item<'_>> = objects
        .into_iter()
        .map(|(metadata, spec)| Item {
            api_version: None,
            kind: None,
            metadata: ItemName {
                name: metadata.name.as_deref(),
            },
            spec,
        })
        .collect();
    Ok(found_in_items(&items)?
        .documents
        .into_iter()
        .map(|(document, binding)| Document {
            binding,
            spec: document.spec,
        })
        .collect())
}

/// RouteQualifiers (metadata and spec text), the valid ones, through the same parse and
/// validation as every source.
pub(crate) fn qualifiers_of<'a>(
    objects: impl Iterator<Item = (&'a ObjectMeta, &'a RawValue)>,
) -> Result<Vec<NamedQualifier>, String> {
    let items: Vec<Item<'_>> = objects
        .map(|(metadata, spec)| Item {
            api_version: Some(capstan_api::API_VERSION),
            kind: Some("RouteQualifier"),
            metadata: ItemName {
                name: metadata.name.as_deref(),
            },
            spec,
        })
        .collect();
    Ok(found_in_items(&items)?
        .qualifiers
        .into_iter()
        .map(|(qualifier, name)| (name, qualifier.spec))
        .collect())
}
