//! What Capstan tells a provider outside a call's own exchange: answers to the questions it
//! asks mid-call, the cancellation of a call given up, and the DELETE ending a session. Each
//! is sent on the upstream's lane and its answer read to the end (so that the connection goes
//! back to the pool), bounded in time; none is the caller's error when it fails.

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt as _;
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};
use tracing::debug;

use super::{DirectCalls, MAX_ANSWER_BYTES};
use crate::mcp::lane::{Lane, LaneError};
use crate::mcp::limited::limited_bytes;
use capstan_core::error_chain::chain_text;

/// How long the DELETE ending a session may take.
pub(super) const END_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `request` on `lane` and reads its answer to the end (so that the connection goes back
/// to the pool), within [`END_TIMEOUT`]: the answer's status, or why there was none. For what
/// Capstan tells a provider outside a call's own exchange: answers to its requests,
/// cancellations, the DELETE ending a session.
async fn deliver(
    lane: Lane,
    request: Result<Request<Full<Bytes>>, http::Error>,
) -> Result<http::StatusCode, Undelivered> {
    let request = request.map_err(Undelivered::Request)?;
    // Read to the end without keeping it (nothing in it is used), within the answer limit: a
    // longer one is dropped, which closes its connection.
    let exchange = lane.exchange(request, |response| async move {
        let status = response.status();
        let _ = limited_bytes(response, MAX_ANSWER_BYTES)
            .try_for_each(|_| std::future::ready(Ok(())))
            .await;
        status
    });
    match tokio::time::timeout(END_TIMEOUT, exchange).await {
        Ok(Ok(status)) => Ok(status),
        Ok(Err(error)) => Err(Undelivered::Lane(error)),
        Err(_) => Err(Undelivered::TimedOut),
    }
}

/// Why a message to a provider outside a call's own exchange was not delivered.
#[derive(Debug, thiserror::Error)]
enum Undelivered {
    /// The request could not be built (a header no request can carry).
    #[error("building the request")]
    Request(#[source] http::Error),
    /// The connection failed.
    #[error("sending it")]
    Lane(#[source] LaneError),
    /// No answer within [`END_TIMEOUT`].
    #[error("no answer within {END_TIMEOUT:?}")]
    TimedOut,
}

impl DirectCalls {
    /// POSTs a JSON-RPC response to a request of the provider's on the session. The provider
    /// answers 202; a failure only means the provider waits for its own timeout, which is not
    /// this call's error. A 2026-07-28 server without a session is never asked
    /// (`answer_in_stream` gives the call up first).
    pub(super) async fn post_answer(&self, answer: &Value) {
        if self.target.revision.answerable() {
            self.posting(answer).await;
        }
    }

    /// POSTs `message` (a response or a notification: the provider answers 202) on the session,
    /// owning what it needs (for a task of its own). Undelivered is only logged.
    fn posting(&self, message: &Value) -> impl Future<Output = ()> + Send + 'static {
        let request = self.target.post_message(message, None);
        let lane = self.target.lane.clone();
        let server = self.server.clone();
        async move {
            if let Err(error) = deliver(lane, request).await {
                let error = chain_text(&error);
                debug!(%server, %error, "a message to the server was not delivered");
            }
        }
    }
}

/// A `tools/call` in flight on a session: dropped before its answer, it tells the provider
/// with `notifications/cancelled` (sent from a task of its own, bounded by [`END_TIMEOUT`]).
pub(super) struct Abandoned<'a> {
    pub(super) calls: &'a DirectCalls,
    pub(super) id: &'a str,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let notification = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {
                "requestId": self.id,
                "reason": "the call was given up: its caller cancelled it or its time ran out",
            },
        });
        runtime.spawn(self.calls.posting(&notification));
    }
}

impl DirectCalls {
    /// Ends the session: a DELETE, answered or not within [`END_TIMEOUT`]. A server that does
    /// not let clients end sessions answers 405, which is fine: it ends them itself.
    pub(crate) async fn end(&self) {
        self.ending().await;
    }

    /// The DELETE ending the session, owning what it needs (for a task of its own); without a
    /// session (2026-07-28, or a server that assigned none) there is nothing to end.
    pub(crate) fn ending(&self) -> impl Future<Output = ()> + Send + 'static {
        let target = &self.target;
        let request = target.revision.session().is_some().then(|| {
            let request = target.lane.request(http::Method::DELETE);
            target
                .revision
                .headers(request, &Value::Null, None)
                .body(Full::default())
        });
        let lane = target.lane.clone();
        async move {
            if let Some(request) = request {
                let _ = deliver(lane, request).await;
            }
        }
    }
}
