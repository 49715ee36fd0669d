//! One HTTP/1 connection of a lane: the handle requests are sent on and the connection
//! itself, polled by whoever holds it, and the body of a response read elsewhere, which tells
//! the connection's carrier when it has been read to the end or dropped.

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::task::AtomicWaker;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;

use super::tls::Stream;
use super::{Key, LaneError, Lanes};

/// A connection to an upstream server.
pub(super) type Connection = http1::Connection<TokioIo<Stream>, Full<Bytes>>;

/// One HTTP/1 connection: the handle requests are sent on and the connection itself, polled
/// by whoever holds it. Held boxed: an exchange holding it inline would be that much larger,
/// and every future around a call moves it.
pub(super) struct Conn {
    pub(super) sender: SendRequest<Full<Bytes>>,
    /// `None` once it has finished (closed, or failed): dropped then, so that whatever waits
    /// on it (the sender's readiness, a response, a body) learns so at once.
    pub(super) connection: Option<Connection>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("open", &self.connection.is_some())
            .finish()
    }
}

/// A request that did not get its response.
pub(super) enum Unsent {
    /// Never written: the connection was not ready (it closed while idle). Boxed: the rare
    /// case, and a request is large.
    Returned(Box<Request<Full<Bytes>>>),
    Failed(hyper::Error),
}

impl Unsent {
    pub(super) fn into_error(self) -> LaneError {
        match self {
            Self::Returned(_) => LaneError::NotReady,
            Self::Failed(error) => error.into(),
        }
    }
}

impl Conn {
    /// Whether the connection is still open: polled once, so that a close the server sent
    /// while it was idle is seen.
    pub(super) fn is_open(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        poll_connection(&mut self.connection, &mut cx);
        self.connection.is_some() && !self.sender.is_closed()
    }

    /// Sends `request` once the connection is ready, and waits for the response's head.
    pub(super) async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, Unsent> {
        let Self { sender, connection } = self;
        let ready = std::pin::pin!(std::future::poll_fn(|cx| sender.poll_ready(cx)));
        if drive(connection, ready).await.is_err() {
            return Err(Unsent::Returned(Box::new(request)));
        }
        drive(connection, std::pin::pin!(sender.try_send_request(request)))
            .await
            .map_err(|mut error| match error.take_message() {
                Some(request) => Unsent::Returned(Box::new(request)),
                None => Unsent::Failed(error.into_error()),
            })
    }

    /// Polls the connection until the body being read elsewhere ends (then back to the pool),
    /// is dropped, or `limit` (when given) passes.
    pub(super) async fn carry(
        mut self: Box<Self>,
        state: Arc<BodyState>,
        lanes: Weak<Lanes>,
        key: Arc<Key>,
        limit: Option<Duration>,
    ) {
        let carried = std::future::poll_fn(|cx| {
            state.waker.register(cx.waker());
            match state.get() {
                BODY_ENDED => return Poll::Ready(true),
                BODY_DROPPED => return Poll::Ready(false),
                _ => {}
            }
            poll_connection(&mut self.connection, cx);
            if self.connection.is_none() {
                Poll::Ready(false)
            } else {
                Poll::Pending
            }
        });
        let ended = match limit {
            Some(limit) => tokio::time::timeout(limit, carried).await,
            None => Ok(carried.await),
        };
        if ended == Ok(true)
            && let Some(lanes) = lanes.upgrade()
        {
            lanes.put(&key, self);
        }
    }
}

/// Polls `connection`, dropping it once it has finished.
pub(super) fn poll_connection(connection: &mut Option<Connection>, cx: &mut Context<'_>) {
    if let Some(open) = connection
        && open.poll_without_shutdown(cx).is_ready()
    {
        *connection = None;
    }
}

/// `future` polled with `connection` beside it. A connection that finishes is dropped, which
/// ends whatever of the future waited on it (hyper answers a request the connection took with
/// it an error, and ends its body). The future is pinned by the caller, so that it is kept
/// once, in the caller's own state, not copied into this one's too.
pub(super) async fn drive<T>(
    connection: &mut Option<Connection>,
    mut future: Pin<&mut impl Future<Output = T>>,
) -> T {
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = future.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        if connection.is_none() {
            return Poll::Pending;
        }
        poll_connection(connection, cx);
        // What the connection just read (or its end) is the future's to take now, not after
        // a wake-up of this task by itself.
        future.as_mut().poll(cx)
    })
    .await
}

pub(super) const BODY_READING: u8 = 0;
pub(super) const BODY_ENDED: u8 = 1;
pub(super) const BODY_DROPPED: u8 = 2;

/// Whether a response body was read to its end, dropped before it, or is still being read.
#[derive(Debug, Default)]
pub(super) struct BodyState {
    state: AtomicU8,
    /// The task carrying the connection while another reads the body.
    waker: AtomicWaker,
}

impl BodyState {
    pub(super) fn get(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    pub(super) fn set(&self, state: u8) {
        if self
            .state
            .compare_exchange(BODY_READING, state, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.waker.wake();
        }
    }
}

/// `response` with its body watched, and the state its connection learns the body's fate from.
pub(super) fn watched(response: Response<Incoming>) -> (Response<Watched>, Arc<BodyState>) {
    let state = Arc::new(BodyState::default());
    let response = response.map(|body| Watched {
        inner: body,
        state: state.clone(),
    });
    (response, state)
}

/// A response body that tells its connection whether it was read to its end.
#[derive(Debug)]
pub(crate) struct Watched {
    inner: Incoming,
    state: Arc<BodyState>,
}

impl Body for Watched {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.state.set(BODY_ENDED),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.state.set(BODY_ENDED),
            Poll::Ready(Some(Err(_))) => self.state.set(BODY_DROPPED),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.state.set(BODY_DROPPED);
    }
}
