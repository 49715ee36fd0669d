//! Reading an answer's stream to its end when its reader stops early: the lane that carried
//! it (`mcp/lane.rs`) can then put its connection back in the pool instead of closing it. A
//! server's SSE answer ends after the response Capstan waited for (its last chunk), and a
//! connection whose response was not read to the end cannot be reused.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};

/// How long an abandoned response stream may take to end before its connection is closed
/// instead of reused.
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// A response stream that, dropped before its end, is read to the end on a background task
/// (within [`DRAIN_LIMIT`]) so that its connection can be reused.
pub(crate) struct DrainOnDrop<S: Stream + Send + Unpin + 'static> {
    inner: Option<S>,
    /// Whether a drop reads it to the end (else it is closed: how a 2026-07-28 request is
    /// cancelled).
    drain: bool,
}

impl<S: Stream + Send + Unpin + 'static> DrainOnDrop<S> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner: Some(inner),
            drain: true,
        }
    }

    /// Whether dropping it from now on reads it to its end (`true`) or closes it.
    pub(crate) fn drain(&mut self, drain: bool) {
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
    use std::sync::Arc;
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
