//! Following an upstream for what it says outside any call: list changes and resource updates.
//! In a session revision that is the session's standalone stream (a GET); in 2026-07-28, a
//! `subscriptions/listen` request of Capstan's own (a POST whose response stream stays open),
//! naming what it wants told: the lists the binding selects and the resources the task's
//! sessions subscribed to — opened again whenever that set changes, so that subscriptions of
//! one task cost one stream at the provider whatever their churn (`Subscribed`).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use sse_stream::SseStream;
use tracing::debug;

use super::call::{DirectCalls, Target};
use super::changes::{ResourceUpdated, UpstreamChanges, is_list_changed, updated_uri};
use super::limited::limited_bytes;
use crate::error_chain::chain_text;

/// The first pause before a stream is opened again.
const LISTEN_FIRST_PAUSE: Duration = Duration::from_millis(500);

/// The longest pause between attempts at a stream. 30 s: a server restarting is followed again
/// soon after, and one refusing streams is asked twice a minute at most.
const LISTEN_MAX_PAUSE: Duration = Duration::from_secs(30);

/// The most one stream connection is read before it is opened again. 1 MiB: list changes are
/// a few dozen bytes each; anything larger is not what the sidecar listens for.
const LISTEN_MAX_BYTES: usize = 1024 * 1024;

/// What a 2026-07-28 listen stream asks to be told.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Filter {
    pub(crate) tools: bool,
    pub(crate) prompts: bool,
    pub(crate) resources: bool,
    /// Whether the server declared `resources.subscribe` (resource URIs are named only then).
    pub(crate) updates: bool,
}

impl DirectCalls {
    /// Follows the upstream for as long as it is polled, noting each list change in `changes`
    /// and passing on each `notifications/resources/updated` (as coming from upstream
    /// `upstream`); other messages are read and dropped. A stream that ends or fails is opened
    /// again after a pause that grows to [`LISTEN_MAX_PAUSE`], and what the server said in
    /// between counts as missed (its lists re-read, every subscription told); a server that
    /// offers no stream (405, or -32601 to `subscriptions/listen`) is not asked again. Each
    /// connection reads at most [`LISTEN_MAX_BYTES`], so a server cannot make the sidecar
    /// buffer without bound.
    pub(crate) fn listen(
        &self,
        changes: UpstreamChanges,
        upstream: u64,
        filter: Filter,
    ) -> impl Future<Output = ()> + Send + 'static {
        let target = self.target.clone();
        let stateless = target.revision.is_stateless();
        let mut subscribed = self.subscribed.watch();
        let server = self.server.clone();
        async move {
            let mut pause = LISTEN_FIRST_PAUSE;
            // Whether a stream was open before: what the server said between that stream's end
            // and this one's start was not heard, so reopening notes it as missed.
            let mut reopened = false;
            for attempt in 1u64.. {
                let request = if stateless {
                    let uris = subscribed.borrow_and_update().clone();
                    listen_request(&target, filter, &uris, attempt)
                } else {
                    let get = target
                        .http
                        .get(target.url.clone())
                        .header(http::header::ACCEPT, "text/event-stream");
                    target.revision.headers(get, &Value::Null, None)
                };
                match request.send().await {
                    Ok(response) if refuses_streams(&response) => {
                        debug!(%server, "the server offers no stream to listen on");
                        return;
                    }
                    Ok(response) if response.status().is_success() => {
                        pause = LISTEN_FIRST_PAUSE;
                        if std::mem::replace(&mut reopened, true) {
                            debug!(%server, "the stream was reopened; what it said meanwhile was missed");
                            changes.missed();
                        }
                        let heard = hear(response, &changes, upstream, &server);
                        tokio::select! {
                            () = heard => {}
                            // The task's subscriptions changed: the stream is opened again at
                            // once, naming them (not a missed stretch: it was Capstan's doing).
                            Ok(()) = subscribed.changed(), if stateless => {
                                reopened = false;
                                continue;
                            }
                        }
                    }
                    Ok(response) => {
                        debug!(%server, status = %response.status(), "the stream was refused");
                    }
                    Err(error) => {
                        debug!(%server, error = %chain_text(&error), "the stream failed");
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LISTEN_MAX_PAUSE);
            }
        }
    }
}

/// The `subscriptions/listen` request (the `attempt`th) naming what `filter` asks for and the
/// resource URIs `uris`.
fn listen_request(
    target: &Target,
    filter: Filter,
    uris: &BTreeSet<String>,
    attempt: u64,
) -> reqwest::RequestBuilder {
    let mut notifications = json!({});
    for (member, wanted) in [
        ("toolsListChanged", filter.tools),
        ("promptsListChanged", filter.prompts),
        ("resourcesListChanged", filter.resources),
    ] {
        if wanted {
            notifications[member] = json!(true);
        }
    }
    if filter.updates && !uris.is_empty() {
        notifications["resourceSubscriptions"] = json!(uris);
    }
    let mut params = json!({ "notifications": notifications });
    target.revision.stamp(&mut params, None, None);
    let message = json!({
        "jsonrpc": "2.0",
        "id": format!("capstan-listen-{attempt}"),
        "method": "subscriptions/listen",
        "params": params,
    });
    target.post(&message, None)
}

/// Whether the server answered that it offers no stream: 405 to the GET, or an error answer
/// (JSON, not a stream) to `subscriptions/listen`.
fn refuses_streams(response: &reqwest::Response) -> bool {
    let json = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED
        || (response.status().is_success() && json)
}

/// Reads one stream to its end, noting what it says.
async fn hear(response: reqwest::Response, changes: &UpstreamChanges, upstream: u64, server: &str) {
    let bytes = limited_bytes(http::Response::from(response), LISTEN_MAX_BYTES);
    let mut events = std::pin::pin!(SseStream::from_bytes_stream(bytes));
    while let Some(Ok(event)) = events.next().await {
        let message = event
            .data
            .and_then(|data| serde_json::from_str::<Value>(&data).ok());
        let Some(message) = message else { continue };
        if is_list_changed(&message) {
            debug!(%server, "a list of the server's changed");
            changes.note();
        } else if let Some(uri) = updated_uri(&message) {
            changes.updated(ResourceUpdated {
                upstream,
                uri: uri.to_owned(),
            });
        }
    }
}
