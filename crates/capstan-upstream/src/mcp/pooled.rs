//! The HTTP client under every MCP upstream session: reqwest with keep-alive pooling, made
//! safe for Streamable HTTP.
//!
//! rmcp's client stops reading a POST's SSE response as soon as the JSON-RPC response has
//! arrived and drops the stream; the server's end of the stream (the last chunk) is then never
//! read, hyper cannot hand the connection back to its pool, and on Linux the next request on a
//! fresh connection meets the peer's delayed ACK (the composer benchmark measured 42.8 ms per
//! forwarded call with naive pooling). rmcp's default client therefore disables pooling, at the
//! cost of a TCP connect and teardown per call. This wrapper keeps pooling and reads every
//! abandoned response stream to its end in the background (bounded by [`DRAIN_LIMIT`]), so the
//! connection returns to the pool. rmcp has no option for this, hence the wrapper.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use crate::guard::AddressRefused;
use crate::trace_context::Outgoing;
use capstan_core::error_chain::{chain_text, find_in_chain};

/// How long an abandoned response stream may take to end before its connection is closed
/// instead of reused.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// A pooled reqwest client whose abandoned SSE responses are read to their end. It also
/// notes the session id the server assigns at `initialize`, for `Upstream`'s direct calls.
#[derive(Clone, Debug)]
pub struct PooledClient {
    http: reqwest::Client,
    session: Arc<OnceLock<String>>,
    refused: Arc<OnceLock<AddressRefused>>,
    /// The whole text of the first request that failed in the client (its source chain).
    failed: Arc<OnceLock<String>>,
    /// Set once the session is handed over to direct calls: rmcp's closing DELETE is then
    /// not sent (the new holder sends its own).
    keep_session: Arc<AtomicBool>,
    /// The trace context of the span the client was made in (the server's connect): rmcp sends
    /// from a task of its own, outside that span, so it is taken here and sent as headers.
    trace: Arc<Outgoing>,
}

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

impl PooledClient {
    /// Wraps `http` (which should pool connections); its requests carry the trace context of
    /// the current span.
    pub fn new(http: reqwest::Client) -> Self {
        Self {
            http,
            session: Arc::default(),
            refused: Arc::default(),
            failed: Arc::default(),
            keep_session: Arc::default(),
            trace: Arc::new(Outgoing::current()),
        }
    }

    /// From now on, rmcp closing its client does not end the server's session.
    pub fn keep_session_on_close(&self) {
        self.keep_session.store(true, Ordering::Release);
    }

    /// The guard's refusal of the server's address, if a request failed on one. rmcp keeps
    /// only the text of a client error, not its cause, so the refusal is noted here, where
    /// the error still has its source chain.
    pub fn refused(&self) -> Option<&AddressRefused> {
        self.refused.get()
    }

    /// Why the first request that failed in the client failed, its whole source chain (an
    /// untrusted certificate, a refused connection): rmcp's error keeps only reqwest's outer
    /// "error sending request", which says nothing a provider team could act on.
    pub fn failure(&self) -> Option<&str> {
        self.failed.get().map(String::as_str)
    }

    /// The session id the server assigned, once it has answered `initialize`.
    pub fn session(&self) -> Option<&str> {
        self.session.get().map(String::as_str)
    }

    fn post(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> BoxFuture<'_, PostResult> {
        for (name, value) in self.trace.entries() {
            if let (Ok(name), Ok(value)) =
                (HeaderName::try_from(name), HeaderValue::try_from(value))
            {
                custom_headers.insert(name, value);
            }
        }
        async move {
            let response = self
                .http
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await
                .inspect_err(|error| {
                    if let StreamableHttpError::Client(error) = error {
                        if let Some(refused) = find_in_chain::<AddressRefused>(error) {
                            let _ = self.refused.set(refused.clone());
                        }
                        // Only the first is kept: its text is written once.
                        self.failed.get_or_init(|| chain_text(error));
                    }
                })?;
            if let StreamableHttpPostResponse::Sse(_, Some(session))
            | StreamableHttpPostResponse::Json(_, Some(session)) = &response
            {
                let _ = self.session.set(session.clone());
            }
            Ok(match response {
                StreamableHttpPostResponse::Sse(stream, session) => {
                    StreamableHttpPostResponse::Sse(DrainOnDrop::new(stream).boxed(), session)
                }
                other => other,
            })
        }
        .boxed()
    }
}

impl StreamableHttpClient for PooledClient {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = PostResult> + Send + '_ {
        self.post(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
    }

    fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = PostResult> + Send + '_ {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = PostResult> + Send + '_ {
        self.post(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<(), StreamableHttpError<Self::Error>>> + Send + '_ {
        let keep = self.keep_session.load(Ordering::Acquire);
        async move {
            if keep {
                return Ok(());
            }
            self.http
                .delete_session(uri, session_id, auth_header, custom_headers)
                .await
        }
    }

    // No standalone GET stream through rmcp: it is one more kept-open connection (and rmcp's
    // tasks and buffers behind it) per upstream session, for server-initiated messages —
    // sampling, elicitation, logging — that the sidecar does not consume. Answering as a
    // server without one makes rmcp skip it (docs/benchmarks.md: RSS per session). List
    // changes are the exception: once the session is Capstan's, a server advertising
    // `tools.listChanged` is followed on a stream of Capstan's own (direct_call.rs `listen`).
    fn get_stream(
        &self,
        _uri: Arc<str>,
        _session_id: Option<Arc<str>>,
        _last_event_id: Option<String>,
        _auth_header: Option<String>,
        _custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<
        Output = Result<
            BoxStream<'static, Result<sse_stream::Sse, SseError>>,
            StreamableHttpError<Self::Error>,
        >,
    > + Send
    + '_ {
        futures::future::ready(Err(StreamableHttpError::ServerDoesNotSupportSse))
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        _uri: Arc<str>,
        _session_id: Option<Arc<str>>,
        _last_event_id: Option<String>,
        _auth_header: Option<String>,
        _custom_headers: HashMap<HeaderName, HeaderValue>,
        _max_sse_event_size: usize,
    ) -> impl Future<
        Output = Result<
            BoxStream<'static, Result<sse_stream::Sse, SseError>>,
            StreamableHttpError<Self::Error>,
        >,
    > + Send
    + '_ {
        futures::future::ready(Err(StreamableHttpError::ServerDoesNotSupportSse))
    }
}

/// A response stream that, dropped before its end, is read to the end on a background task
/// (within [`DRAIN_LIMIT`]) so that its connection can be reused.
pub struct DrainOnDrop<S: Stream + Send + Unpin + 'static> {
    inner: Option<S>,
    /// Whether a drop reads it to the end (else it is closed: how a 2026-07-28 request is
    /// cancelled).
    drain: bool,
}

impl<S: Stream + Send + Unpin + 'static> DrainOnDrop<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner: Some(inner),
            drain: true,
        }
    }

    /// Whether dropping it from now on reads it to its end (`true`) or closes it.
    pub fn drain(&mut self, drain: bool) {
        self.drain = drain;
    }
}

impl<S: Stream + Send + Unpin + 'static> Stream for DrainOnDrop<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let next = inner.poll_next_unpin(cx);
        if let Poll::Ready(None) = next {
            // Ended: nothing left to drain.
            self.inner = None;
        }
        next
    }
}

impl<S: Stream + Send + Unpin + 'static> Drop for DrainOnDrop<S> {
    fn drop(&mut self) {
        let Some(mut inner) = self.inner.take().filter(|_| self.drain) else {
            return;
        };
        // Outside a runtime (a test tearing down) the connection is simply closed.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(DRAIN_LIMIT, async {
                    while inner.next().await.is_some() {}
                })
                .await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn an_abandoned_stream_should_be_read_to_its_end() {
        let read = Arc::new(AtomicUsize::new(0));
        let counter = read.clone();
        let stream = futures::stream::iter(0..5).inspect(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let mut wrapped = DrainOnDrop::new(stream);
        assert_eq!(wrapped.next().await, Some(0));
        drop(wrapped);
        for _ in 0..100 {
            if read.load(Ordering::SeqCst) == 5 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("only {} of 5 items were read", read.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_finished_stream_should_need_no_draining() {
        let mut wrapped = DrainOnDrop::new(futures::stream::iter(0..2));
        assert_eq!(wrapped.next().await, Some(0));
        assert_eq!(wrapped.next().await, Some(1));
        assert_eq!(wrapped.next().await, None);
        assert!(wrapped.inner.is_none());
        assert_eq!(wrapped.next().await, None);
    }
}
