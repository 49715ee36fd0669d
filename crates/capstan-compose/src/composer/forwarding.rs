//! A live composition's prompts, resources and completion: what a caller names is resolved to
//! the upstream that offers it (`composer/offerings.rs`), checked against the binding's
//! selectors whatever the caller sent, and forwarded; a 2026-07-28 provider's questions in the
//! answer reach the caller in its binding's name.

use capstan_upstream::mcp::{Forwarded, ResourceUpdated};
use serde_json::Value;

use super::OfferingError;
use super::live::{Composed, forbidden};
use super::offerings::{Route, Unread};

impl Composed {
    /// `prompts/get` of a composed prompt, with the caller's `params` (its name replaced by
    /// the upstream's).
    pub async fn get_prompt(&self, mut params: Value) -> Result<Value, OfferingError> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(route) = self.offered.prompts.get(name).cloned() else {
            return Err(OfferingError::UnknownPrompt {
                name: name.to_owned(),
            });
        };
        params["name"] = Value::String(route.upstream.clone());
        let mut result = self.forward(&route, "prompts/get", params).await?;
        self.confine_prompt(route.index, &mut result)?;
        Ok(result)
    }

    /// `resources/read` of a composed resource or of a URI a composed template produces; the
    /// contents' URIs come back in the answering server's URI space (`uri_scope.rs`): under
    /// its prefix, or as listed when no other upstream serves them.
    pub async fn read_resource(&self, params: Value) -> Result<Value, OfferingError> {
        let (route, params) = self.resolved(params)?;
        let mut result = self.forward(&route, "resources/read", params).await?;
        self.confine_contents(route.index, &mut result)?;
        Ok(result)
    }

    /// `resources/subscribe` or `resources/unsubscribe` (`method`) of a composed resource, or
    /// of a URI a composed template produces.
    pub async fn subscription(&self, method: &str, params: Value) -> Result<Value, OfferingError> {
        let (route, params) = self.resolved(params)?;
        self.forward(&route, method, params).await
    }

    /// The upstream session (`Upstream::id`) a resource URI, as the assistant names it,
    /// reaches in this composition; `None` when it offers no such resource.
    pub fn resource_upstream(&self, uri: &str) -> Option<u64> {
        let route = self.offered.resolve(uri)?;
        Some(self.upstreams[route.index].upstream.id)
    }

    /// A receiver that moves when this composition's upstreams pass on a resource update
    /// (shared with the compositions composed from it, like [`Self::upstream_changes`]); the
    /// updates themselves are taken with [`Self::take_resource_updates`].
    pub fn resource_updates(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.resource_updates()
    }

    /// The resource updates passed on since the last call, coalesced (`Updated`).
    pub fn take_resource_updates(&self) -> capstan_upstream::mcp::Updated {
        self.changes.take_updates()
    }

    /// The URIs the assistant knows an updated resource by in this composition: every composed
    /// resource of that upstream session with that URI, and the URI under every composed
    /// template of it that produces it. Empty when this composition does not offer it.
    pub fn shown_uris(&self, update: &ResourceUpdated) -> Vec<String> {
        self.offered.shown(update.uri.as_str(), |index| {
            self.upstreams[index].upstream.id == update.upstream
        })
    }

    /// The binding whose server offers the resource a caller names by `uri` (a composed
    /// resource, or a URI a composed template produces), if this composition offers it: what
    /// the caller's grant is asked of (docs/authorization.md).
    pub fn resource_binding(&self, uri: &str) -> Option<&str> {
        let route = self.offered.resolve(uri)?;
        Some(self.upstreams[route.index].binding.as_str())
    }

    /// The binding whose server offers what a completion's reference names (a composed prompt
    /// or template), if this composition offers it.
    pub fn reference_binding(&self, reference: &Value) -> Option<&str> {
        let route = self.offered.reference(reference)?;
        Some(self.upstreams[route.index].binding.as_str())
    }

    /// `completion/complete` for a composed prompt or template; a reference to anything else is
    /// refused as unknown.
    pub async fn complete(&self, mut params: Value) -> Result<Value, OfferingError> {
        let reference = params.get("ref").cloned().unwrap_or(Value::Null);
        let Some(route) = self.offered.reference(&reference) else {
            let name = reference
                .get("name")
                .or_else(|| reference.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(OfferingError::UnknownReference {
                name: name.to_owned(),
            });
        };
        let member = if reference["type"] == "ref/prompt" {
            "name"
        } else {
            "uri"
        };
        params["ref"][member] = Value::String(route.upstream.clone());
        self.forward(&route, "completion/complete", params).await
    }

    /// The route of `params.uri` and the params with the upstream's URI in its place.
    fn resolved(&self, mut params: Value) -> Result<(Route, Value), OfferingError> {
        let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
        let route = match self.offered.read(uri) {
            Ok(route) => route,
            Err(Unread::Unsafe(holds)) => {
                return Err(OfferingError::UnsafeUri {
                    uri: uri.to_owned(),
                    holds,
                });
            }
            Err(Unread::Unknown) => {
                return Err(OfferingError::UnknownResource {
                    uri: uri.to_owned(),
                });
            }
        };
        params["uri"] = Value::String(route.upstream.clone());
        Ok((route, params))
    }

    async fn forward(
        &self,
        route: &Route,
        method: &str,
        params: Value,
    ) -> Result<Value, OfferingError> {
        let connected = &self.upstreams[route.index];
        let mut result = connected
            .upstream
            .forward(method, params, self.limits.call_timeout)
            .await
            .map_err(|forwarded| match forwarded {
                Forwarded::Refused(error) => OfferingError::Refused(error),
                Forwarded::Failed(error) => OfferingError::Upstream(error),
            })?;
        // A 2026-07-28 provider's questions (`input_required`) reach the caller in its name.
        if let Some(requests) = result
            .get_mut("inputRequests")
            .and_then(Value::as_object_mut)
        {
            for request in requests.values_mut() {
                connected
                    .origin
                    .attribute(request)
                    .map_err(|why| forbidden(&connected.upstream, why.to_string()))?;
            }
        }
        Ok(result)
    }
}
