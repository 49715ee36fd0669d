//! Counting the bytes a kube client reads, for the crd source's metrics: what its watches cost
//! the apiserver to send. kube keeps no such count; a response-body wrapper applied as a layer
//! on the client is the smallest way to get one.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use kube::client::DynBody;

/// A response body that adds the length of every data frame it yields to `bytes`.
pub(crate) struct Counted<B> {
    inner: B,
    bytes: Arc<AtomicU64>,
}

impl<B: Body<Data = Bytes> + Unpin> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.bytes.fetch_add(
                u64::try_from(data.len()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
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

/// A kube client for `config` that adds every response byte it reads to `bytes`.
pub(crate) fn counting_client(
    config: kube::Config,
    bytes: Arc<AtomicU64>,
) -> Result<kube::Client, kube::Error> {
    let layer =
        tower::util::MapResponseLayer::new(move |response: http::Response<Box<DynBody>>| {
            let bytes = bytes.clone();
            response.map(|inner| Counted { inner, bytes })
        });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}
