//! What an upstream offers besides tools: its prompts, resources and resource templates,
//! listed when its session opens for the kinds a binding selects, and the caller's requests
//! about them forwarded as they are (the composer checked them against the selectors,
//! `composer/offerings.rs`).

use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    ClientConfig, ClientRequest, ErrorCode, ErrorData, Prompt, Resource, ResourceTemplate,
};
use rmcp::service::{RunningService, ServiceError};
use serde_json::{Value, json};

use super::{CallError, Connector, Link, Upstream, relay};
use crate::composition::UpstreamStage;

/// The most pages one re-list reads: far more items than any selector names.
const MAX_LIST_PAGES: usize = 100;
use crate::error_chain::chain_text;

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

impl Connector {
    /// The prompts, resources and resource templates the server offers, of the kinds `wanted`
    /// asks for and the server declared; a kind that cannot be listed is named in
    /// `Offerings::failures` (the tools are served all the same).
    pub(super) async fn list_offerings(
        &self,
        client: &RunningService<RoleClient, ClientConfig>,
        wanted: Wanted,
    ) -> Offerings {
        let info = client.peer_info();
        let declared = info.as_ref().map(|info| &info.capabilities);
        let prompts = wanted.prompts && declared.is_some_and(|c| c.prompts.is_some());
        let resources = wanted.resources && declared.is_some_and(|c| c.resources.is_some());
        let timeout = self.timeout;
        let mut offerings = Offerings::default();
        let failed =
            |stage: UpstreamStage, kind: &str, listed: Result<Result<(), ServiceError>, _>| {
                let message = match listed {
                    Ok(Ok(())) => return None,
                    Ok(Err(error)) => chain_text(&error),
                    Err(_) => format!("no answer within {timeout:?}"),
                };
                Some((stage, format!("listing its {kind}: {message}")))
            };
        if prompts {
            let listed = tokio::time::timeout(timeout, async {
                offerings.prompts = client.list_all_prompts().await?;
                Ok(())
            })
            .await;
            offerings
                .failures
                .extend(failed(UpstreamStage::ListPrompts, "prompts", listed));
        }
        if resources {
            let listed = tokio::time::timeout(timeout, async {
                offerings.resources = client.list_all_resources().await?;
                Ok(())
            })
            .await;
            offerings
                .failures
                .extend(failed(UpstreamStage::ListResources, "resources", listed));
            let listed = tokio::time::timeout(timeout, async {
                match client.list_all_resource_templates().await {
                    Ok(templates) => offerings.templates = templates,
                    // A server with resources but no templates may not know the method.
                    Err(ServiceError::McpError(data))
                        if data.code == ErrorCode::METHOD_NOT_FOUND => {}
                    Err(error) => return Err(error),
                }
                Ok(())
            })
            .await;
            offerings.failures.extend(failed(
                UpstreamStage::ListResources,
                "resource templates",
                listed,
            ));
        }
        offerings
    }
}

impl Upstream {
    /// Its prompts, resources and templates listed again on its session (the kinds it was
    /// opened for), after it said a list changed; a kind that cannot be listed is named in
    /// `Offerings::failures`, as when it opened.
    pub async fn relist_offerings(&self, timeout: Duration) -> Offerings {
        let mut offerings = Offerings::default();
        if self.wanted.prompts {
            match self.list_all("prompts/list", "prompts", timeout).await {
                Ok(prompts) => offerings.prompts = prompts,
                Err(message) => offerings.failures.push((
                    UpstreamStage::ListPrompts,
                    format!("listing its prompts: {message}"),
                )),
            }
        }
        if self.wanted.resources {
            match self.list_all("resources/list", "resources", timeout).await {
                Ok(resources) => offerings.resources = resources,
                Err(message) => offerings.failures.push((
                    UpstreamStage::ListResources,
                    format!("listing its resources: {message}"),
                )),
            }
            match self
                .list_all("resources/templates/list", "resourceTemplates", timeout)
                .await
            {
                Ok(templates) => offerings.templates = templates,
                Err(message) => offerings.failures.push((
                    UpstreamStage::ListResources,
                    format!("listing its resource templates: {message}"),
                )),
            }
        }
        offerings
    }

    /// Every page of a list (`method`, its items under `items`), each item as `T`; an item
    /// that is not one is skipped (a valid sibling is not lost for it). A server without the
    /// method lists nothing.
    async fn list_all<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        items: &str,
        timeout: Duration,
    ) -> Result<Vec<T>, String> {
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = cursor.map_or_else(|| json!({}), |cursor| json!({ "cursor": cursor }));
            let page = match self.forward(method, params, timeout).await {
                Ok(page) => page,
                Err(Forwarded::Refused(error)) if error.code == ErrorCode::METHOD_NOT_FOUND => {
                    return Ok(listed);
                }
                Err(Forwarded::Refused(error)) => return Err(error.message.to_string()),
                Err(Forwarded::Failed(error)) => return Err(error.to_string()),
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
        Err(format!(
            "{method} went on for more than {MAX_LIST_PAGES} pages"
        ))
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
        relay::forwardable_meta(&mut params);
        let unavailable = |message: String| {
            Forwarded::Failed(CallError::Unavailable {
                server: self.server.clone(),
                message,
            })
        };
        let answer = match &self.link {
            Link::Direct(_) if self.is_closed() => {
                return Err(unavailable("the session with the server has ended".into()));
            }
            Link::Direct(direct) => {
                tokio::time::timeout(timeout, direct.forward(method, params)).await
            }
            Link::Rmcp(client) => {
                tokio::time::timeout(timeout, self.forward_rmcp(client, method, params)).await
            }
        };
        answer.unwrap_or_else(|_| Err(unavailable(format!("no answer within {timeout:?}"))))
    }

    /// [`Self::forward`] through rmcp's client: the request typed by its method, the result
    /// back as JSON.
    async fn forward_rmcp(
        &self,
        client: &RunningService<RoleClient, ClientConfig>,
        method: &str,
        params: Value,
    ) -> Result<Value, Forwarded> {
        let request =
            serde_json::from_value::<ClientRequest>(json!({ "method": method, "params": params }))
                .map_err(|e| Forwarded::Refused(ErrorData::invalid_params(e.to_string(), None)))?;
        match client.send_request(request).await {
            Ok(result) => serde_json::to_value(result).map_err(|e| {
                Forwarded::Failed(CallError::Malformed {
                    server: self.server.clone(),
                    message: e.to_string(),
                })
            }),
            Err(ServiceError::McpError(data)) => Err(Forwarded::Refused(data)),
            Err(error) => Err(Forwarded::Failed(self.classify(method, &error))),
        }
    }
}
