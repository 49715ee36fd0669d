//! Following an upstream for what it says outside any call: list changes and resource updates.
//! In a session revision that is the session's standalone stream (a GET); in 2026-07-28, a
//! `subscriptions/listen` request of Capstan's own (a POST whose response stream stays open),
//! naming what it wants told: the lists the binding selects and the resources the task's
//! sessions subscribed to — opened again whenever that set changes, so that subscriptions of
//! one task cost one stream at the provider whatever their churn (`Subscribed`).

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};
use sse_stream::SseStream;
use tracing::debug;

use super::call::{DirectCalls, Target};
use super::changes::{ResourceUpdated, UpstreamChanges, is_list_changed, updated_uri};
use super::lane::Lane;
use super::limited::limited_bytes;
use super::revision::LISTEN_ACKNOWLEDGEMENT_WAIT;
use capstan_core::error_chain::chain_text;

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

/// A stream's messages, parsed, until it ends or fails.
type Messages = BoxStream<'static, Value>;

/// The stream being heard, if any: heard until it ends.
type Heard = Option<BoxFuture<'static, ()>>;

/// What came of opening a stream.
enum Opened {
    /// The server offers none (405 to the GET; an error answer to `subscriptions/listen`).
    Refused,
    /// It failed, or was refused for now (logged).
    Failed,
    /// Open, and (2026-07-28) acknowledged: its messages from the first.
    Open(Messages),
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
    ///
    /// A 2026-07-28 stream names the task's subscriptions, so it is opened again when they
    /// change — make before break: the old stream is heard until the server has acknowledged
    /// the new one, so nothing it says of the resources both name is lost in between. The
    /// acknowledgement is what `resources/subscribe` waits for (`Subscribed::until_named`).
    pub(crate) fn listen(
        &self,
        changes: UpstreamChanges,
        upstream: u64,
        filter: Filter,
    ) -> impl Future<Output = ()> + Send + 'static {
        let target = self.target.clone();
        let stateless = target.revision.is_stateless();
        let subscriptions = self.subscribed.clone();
        let mut subscribed = subscriptions.watch();
        let server = self.server.clone();
        subscriptions.carry(stateless && filter.updates);
        async move {
            let mut pause = LISTEN_FIRST_PAUSE;
            // The stream heard now.
            let mut heard: Heard = None;
            // Whether a stream was open before: what the server said between that stream's end
            // and this one's start was not heard, so reopening notes it as missed.
            let mut reopened = false;
            for attempt in 1u64.. {
                let uris = if stateless && filter.updates {
                    subscribed.borrow_and_update().clone()
                } else {
                    BTreeSet::new()
                };
                let opening = open_one(&target, filter, &uris, attempt, &server);
                let opened = while_hearing(&mut heard, opening).await;
                match opened {
                    Opened::Refused if heard.is_none() => {
                        debug!(%server, "the server offers no stream to listen on");
                        subscriptions.carry(false);
                        return;
                    }
                    Opened::Open(messages) => {
                        pause = LISTEN_FIRST_PAUSE;
                        if heard.is_none() && std::mem::replace(&mut reopened, true) {
                            debug!(%server, "the stream was reopened; what it said meanwhile was missed");
                            changes.missed();
                        }
                        // The new stream is acknowledged: the old one goes.
                        let fresh = hear(messages, changes.clone(), upstream, server.clone());
                        heard = Some(Box::pin(fresh));
                        subscriptions.acknowledged(uris);
                        if let Some(stream) = heard.as_mut() {
                            tokio::select! {
                                () = stream => heard = None,
                                // The task's subscriptions changed: a stream naming them is
                                // opened at once (not a missed stretch: it was Capstan's doing).
                                Ok(()) = subscribed.changed(), if stateless => continue,
                            }
                        }
                    }
                    Opened::Refused | Opened::Failed => {}
                }
                while_hearing(&mut heard, tokio::time::sleep(pause)).await;
                pause = (pause * 2).min(LISTEN_MAX_PAUSE);
            }
        }
    }
}

/// Opens one stream to listen on: in 2026-07-28 a `subscriptions/listen` naming `uris`
/// (attempt `attempt`), else the session's standalone GET stream. A server that never
/// acknowledges is given up on like one that fails: the stream heard now stays, and a changed
/// set is asked for again after the pause.
async fn open_one(
    target: &Target,
    filter: Filter,
    uris: &BTreeSet<String>,
    attempt: u64,
    server: &str,
) -> Opened {
    let stateless = target.revision.is_stateless();
    let request = if stateless {
        listen_request(target, filter, uris, attempt)
    } else {
        standalone_stream_request(target)
    };
    let opening = open(&target.lane, request, stateless, server);
    tokio::time::timeout(LISTEN_ACKNOWLEDGEMENT_WAIT, opening)
        .await
        .unwrap_or_else(|_| {
            debug!(%server, "the stream was not acknowledged in time");
            Opened::Failed
        })
}

/// Runs `work` while the stream being heard (if any) goes on being heard; a stream that ends
/// meanwhile is gone (`None`).
async fn while_hearing<T>(heard: &mut Heard, work: impl Future<Output = T>) -> T {
    tokio::pin!(work);
    loop {
        let Some(stream) = heard.as_mut() else {
            return work.await;
        };
        tokio::select! {
            out = &mut work => return out,
            () = stream => *heard = None,
        }
    }
}

/// Opens one stream: sent, answered with a stream, and — a 2026-07-28 `subscriptions/listen` —
/// its first message read (the acknowledgement, after which the server tells what the request
/// named), so that the stream it replaces is given up only then.
async fn open(
    lane: &Lane,
    request: Result<Request<Full<Bytes>>, http::Error>,
    stateless: bool,
    server: &str,
) -> Opened {
    let sent = match request {
        Ok(request) => lane
            .stream(request)
            .await
            .map_err(|error| chain_text(&error)),
        Err(error) => Err(chain_text(&error)),
    };
    let response = match sent {
        Ok(response) => response,
        Err(error) => {
            debug!(%server, %error, "the stream failed");
            return Opened::Failed;
        }
    };
    if refuses_streams(&response) {
        return Opened::Refused;
    }
    if !response.status().is_success() {
        debug!(%server, status = %response.status(), "the stream was refused");
        return Opened::Failed;
    }
    let bytes = limited_bytes(response, LISTEN_MAX_BYTES);
    let mut messages: Messages = SseStream::from_bytes_stream(bytes)
        .take_while(|event| std::future::ready(event.is_ok()))
        .filter_map(|event| {
            let message = event
                .ok()
                .and_then(|event| event.data)
                .and_then(|data| serde_json::from_str::<Value>(&data).ok());
            std::future::ready(message)
        })
        .boxed();
    if !stateless {
        return Opened::Open(messages);
    }
    match messages.next().await {
        // Acknowledged (or, from a server that sends no acknowledgement, told something
        // already: heard like the rest).
        Some(first) => {
            let acknowledgement = first.get("method").and_then(Value::as_str) == Some(ACKNOWLEDGED);
            let first = (!acknowledgement).then_some(first);
            Opened::Open(futures::stream::iter(first).chain(messages).boxed())
        }
        None => {
            debug!(%server, "the stream ended before it was acknowledged");
            Opened::Failed
        }
    }
}

/// The GET opening a session's standalone stream.
fn standalone_stream_request(target: &Target) -> Result<Request<Full<Bytes>>, http::Error> {
    let get = target
        .lane
        .request(http::Method::GET)
        .header(http::header::ACCEPT, "text/event-stream");
    target
        .revision
        .headers(get, &Value::Null, None)
        .body(Full::default())
}

/// The first message of a `subscriptions/listen` stream.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

/// The `subscriptions/listen` request (the `attempt`th) naming what `filter` asks for and the
/// resource URIs `uris`.
fn listen_request(
    target: &Target,
    filter: Filter,
    uris: &BTreeSet<String>,
    attempt: u64,
) -> Result<Request<Full<Bytes>>, http::Error> {
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
    target.post_message(&message, None)
}

/// Whether the server answered that it offers no stream: 405 to the GET, or an error answer
/// (JSON, not a stream) to `subscriptions/listen`.
fn refuses_streams<B>(response: &http::Response<B>) -> bool {
    let json = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    response.status() == http::StatusCode::METHOD_NOT_ALLOWED
        || (response.status().is_success() && json)
}

/// Reads one stream to its end, noting what it says.
async fn hear(mut messages: Messages, changes: UpstreamChanges, upstream: u64, server: String) {
    while let Some(message) = messages.next().await {
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
