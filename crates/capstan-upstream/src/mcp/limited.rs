//! Reading a provider's answer within a size limit: whole (a JSON answer) or as a stream (an
//! SSE answer, a listen stream), failing once more than the limit has come. Any response body
//! (a lane's, `mcp/lane.rs`, or a test's).

use futures::StreamExt as _;
use http_body::Body;
use http_body_util::{BodyDataStream, BodyExt as _};
use thiserror::Error;

/// Why an answer could not be read.
#[derive(Debug, Error)]
pub(crate) enum ReadError {
    #[error(transparent)]
    Body(Box<dyn std::error::Error + Send + Sync>),
    #[error("the answer exceeds {0} bytes")]
    TooLarge(usize),
}

/// The body of `response` as a stream that fails once more than `limit` bytes have come.
pub(crate) fn limited_bytes<B>(
    response: http::Response<B>,
    limit: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, ReadError>> + Send + 'static
where
    B: Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut size = 0usize;
    BodyDataStream::new(response.into_body()).map(move |chunk| {
        let chunk = chunk.map_err(|e| ReadError::Body(e.into()))?;
        size += chunk.len();
        if size > limit {
            return Err(ReadError::TooLarge(limit));
        }
        Ok(chunk)
    })
}

/// The whole body of `response`, refused past `limit` bytes.
pub(crate) async fn read_limited<B>(
    response: http::Response<B>,
    limit: usize,
) -> Result<Vec<u8>, ReadError>
where
    B: Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut body = response.into_body();
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Body(e.into()))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        if read.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge(limit));
        }
        read.extend_from_slice(&chunk);
    }
    Ok(read)
}
