//! What an upstream offers besides tools: its prompts, resources and resource templates,
//! listed when its session opens for the kinds a binding selects, and the caller's requests
//! about them forwarded as they are (the composer checked them against the selectors,
//! `composer/offerings.rs`).

use std::time::Duration;

use rmcp::model::{ErrorCode, ErrorData, Prompt, Resource, ResourceTemplate};
use serde_json::{Value, json};

use super::{CallError, Upstream, relay};

/// The step at which an upstream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum UpstreamStage {
    /// Connecting, `initialize`, or no answer within the connect timeout.
    Connect,
    /// `tools/list`.
    List,
    /// `prompts/list` (the tools are served).
    ListPrompts,
    /// `resources/list` or `resources/templates/list` (the tools are served).
    ListResources,
    /// The credential its `auth` block asks for could not be had: nothing was sent.
    Credential,
}

/// The most pages one re-list reads: far more items than any selector names.
const MAX_LIST_PAGES: usize = 100;

/// Why one kind's list could not be read.
#[derive(Debug, thiserror::Error)]
enum ListFailed {
    /// The server answered with an error (its message).
    #[error("{0}")]
    Refused(String),
    /// No answer, or one that could not be read.
    #[error(transparent)]
    Failed(CallError),
    /// A server that pages forever.
    #[error("{method} went on for more than {MAX_LIST_PAGES} pages")]
    TooManyPages { method: String },
}

/// Which of a server's offerings besides tools a composition asks for: only the kinds its
/// binding selects are listed (a binding that selects none costs no request).
#[derive(Clone, Copy, Debug, Default)]
pub struct Wanted {
    /// Prompts (`promptSelector`).
    pub prompts: bool,
    /// Resources and resource templates (`resourceSelector`).
    pub resources: bool,
}

impl Wanted {
    /// Whether anything besides tools is asked for.
    pub fn any(self) -> bool {
        self.prompts || self.resources
    }
}

/// What a server offers besides tools, as it listed them when its session opened.
#[derive(Debug, Default)]
pub struct Offerings {
    /// Its prompts.
    pub prompts: Vec<Prompt>,
    /// Its resources.
    pub resources: Vec<Resource>,
    /// Its resource templates.
    pub templates: Vec<ResourceTemplate>,
    /// The kinds it declared but could not list (the stage), with why.
    pub failures: Vec<(UpstreamStage, String)>,
}

/// A forwarded request that produced no result.
#[derive(Debug)]
pub enum Forwarded {
    /// The provider answered with a JSON-RPC error: passed to the caller as it is.
    Refused(ErrorData),
    /// The provider could not be reached, did not answer in time, or answered with something
    /// that is not an answer.
    Failed(CallError),
}

impl Upstream {
    /// Its prompts, resources and templates listed on its session — the kinds its binding
    /// selects and the server declared (`Upstream::wanted`) — when the session opens and again
    /// after it said a list changed; a kind that cannot be listed is named in
    /// `Offerings::failures` (the tools are served all the same).
    pub async fn list_offerings(&self, timeout: Duration) -> Offerings {
        let mut offerings = Offerings::default();
        let failures = &mut offerings.failures;
        if self.wanted.prompts {
            offerings.prompts = self
                .list_kind(
                    ("prompts/list", "prompts"),
                    UpstreamStage::ListPrompts,
                    timeout,
                    failures,
                )
                .await;
        }
        if self.wanted.resources {
            let stage = UpstreamStage::ListResources;
            offerings.resources = self
                .list_kind(("resources/list", "resources"), stage, timeout, failures)
                .await;
            offerings.templates = self
                .list_kind(
                    ("resources/templates/list", "resourceTemplates"),
                    stage,
                    timeout,
                    failures,
                )
                .await;
        }
        offerings
    }

    /// One kind's list (`method`, `items`), or nothing with the failure noted at `stage`.
    async fn list_kind<T: serde::de::DeserializeOwned>(
        &self,
        (method, items): (&str, &str),
        stage: UpstreamStage,
        timeout: Duration,
        failures: &mut Vec<(UpstreamStage, String)>,
    ) -> Vec<T> {
        self.list_all(method, items, timeout)
            .await
            .unwrap_or_else(|failed| {
                failures.push((stage, format!("{method}: {failed}")));
                Vec::new()
            })
    }

    /// Every page of a list (`method`, its items under `items`), each item as `T`; an item
    /// that is not one is skipped (a valid sibling is not lost for it). A server without the
    /// method lists nothing.
    async fn list_all<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        items: &str,
        timeout: Duration,
    ) -> Result<Vec<T>, ListFailed> {
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = cursor.map_or_else(|| json!({}), |cursor| json!({ "cursor": cursor }));
            let page = match self.forward(method, params, timeout).await {
                Ok(page) => page,
                Err(Forwarded::Refused(error)) if error.code == ErrorCode::METHOD_NOT_FOUND => {
                    return Ok(listed);
                }
                Err(Forwarded::Refused(error)) => {
                    return Err(ListFailed::Refused(error.message.to_string()));
                }
                Err(Forwarded::Failed(error)) => return Err(ListFailed::Failed(error)),
            };
            listed.extend(
                page[items]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|item| serde_json::from_value::<T>(item.clone()).ok()),
            );
            match page["nextCursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(listed),
            }
        }
        Err(ListFailed::TooManyPages {
            method: method.to_owned(),
        })
    }

    /// Forwards one request of the caller's (`prompts/get`, `resources/read`,
    /// `completion/complete`, `resources/subscribe` and the like) with `params` as the composer
    /// rewrote them, and returns the provider's `result` as it is. What the request names was
    /// checked against the binding's allow-lists by the composer.
    pub async fn forward(
        &self,
        method: &str,
        mut params: Value,
        timeout: Duration,
    ) -> Result<Value, Forwarded> {
        // A 2026-07-28 caller's capabilities go to a provider of that revision in their place
        // (what it may ask in an `input_required` result); nothing else of its connection does.
        let capabilities = params
            .pointer("/_meta/io.modelcontextprotocol~1clientCapabilities")
            .cloned();
        relay::forwardable_meta(&mut params);
        let unavailable = |message: String| {
            Forwarded::Failed(CallError::Unavailable {
                server: self.server.clone(),
                message,
            })
        };
        if self.is_closed() {
            return Err(unavailable("the session with the server has ended".into()));
        }
        let forwarded = self.direct.forward(method, params, capabilities.as_ref());
        tokio::time::timeout(timeout, forwarded)
            .await
            .unwrap_or_else(|_| Err(unavailable(format!("no answer within {timeout:?}"))))
    }
}
