//! Reading a provider's answer within a size limit: whole (a JSON answer) or as a stream (an
//! SSE answer, a listen stream), failing once more than the limit has come.

use futures::StreamExt as _;
use thiserror::Error;

/// Why an answer could not be read.
#[derive(Debug, Error)]
pub(crate) enum ReadError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("the answer exceeds {0} bytes")]
    TooLarge(usize),
}

/// The body of `response` as a stream that fails once more than `limit` bytes have come.
pub(crate) fn limited_bytes(
    response: reqwest::Response,
    limit: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, ReadError>> + Send + 'static {
    let mut size = 0usize;
    response.bytes_stream().map(move |chunk| {
        let chunk = chunk?;
        size += chunk.len();
        if size > limit {
            return Err(ReadError::TooLarge(limit));
        }
        Ok(chunk)
    })
}

/// The whole body of `response`, refused past `limit` bytes.
pub(crate) async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
