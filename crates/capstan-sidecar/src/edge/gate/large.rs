//! Requests with a large body, served on a thread of their own.
//!
//! The sidecar runs on one worker thread by default (`config.rs` `DEFAULT_WORKER_THREADS`:
//! less CPU per call, docs/performance.md "One thread by default"). A body near the cap
//! (4 MiB) is parsed, its arguments checked, serialized to the provider, the provider's answer
//! parsed and serialized to the caller — each a few milliseconds of CPU in one piece, during
//! which no other session's request moves. So on that runtime a request whose body reaches
//! [`LARGE_BODY_BYTES`] is served, from its parse to its answer, by a second current-thread
//! runtime on a thread of its own (started with the first such request), and every other
//! session keeps the worker (docs/performance.md "No head-of-line blocking"). A runtime of
//! several workers needs no lane: their other tasks are taken by the workers that are free.
//!
//! What the request does is unchanged: the same future, with its span and its sampling
//! decision, runs to its end there; it is stopped when the caller goes away (its connection's
//! future dropped), as it would be on the worker; a panic in it reaches the caller's future
//! as it would have.

use std::future::Future;
use std::sync::OnceLock;

use futures::FutureExt as _;
use futures::future::Either;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::task::JoinHandle;
use tracing::warn;

use crate::caller::identity::refusal;

/// A body this large or larger is served on the lane. 256 KiB is parsed in a fraction of a
/// millisecond on this project's bench machine; far larger bodies are what holds the worker.
pub(crate) const LARGE_BODY_BYTES: usize = 256 * 1024;

/// The lane's runtime, once started (`None` when its thread could not be started: the
/// request is then served where it arrived, as before).
static LANE: OnceLock<Option<Handle>> = OnceLock::new();

/// Runs `work` to its end on the lane when the request is `large` and the sidecar serves on a
/// current-thread runtime; otherwise where it is. `None` only when the lane stopped running
/// it before its end (the lane never shuts down while the process runs).
///
/// A plain function returning either future rather than an `async fn`: awaiting its argument
/// would hold `work` twice over, and every request's future passes here (docs/performance.md
/// "A request's future, once"). On the lane, `work` is spawned at once.
pub(crate) fn serve<F>(large: bool, work: F) -> impl Future<Output = Option<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let on_one_thread = Handle::try_current()
        .is_ok_and(|current| current.runtime_flavor() == RuntimeFlavor::CurrentThread);
    let lane = (large && on_one_thread)
        .then(|| LANE.get_or_init(start).as_ref())
        .flatten();
    let Some(lane) = lane else {
        return Either::Left(work.map(Some));
    };
    let mut running = AbortOnDrop(lane.spawn(work));
    Either::Right(async move {
        match (&mut running.0).await {
            Ok(output) => Some(output),
            Err(error) => match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => None,
            },
        }
    })
}

/// What a request is answered when the lane stopped it before its end: the process is
/// stopping, and the request can be sent again (to the next sidecar).
pub(crate) fn stopped() -> axum::response::Response {
    refusal(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "the sidecar is stopping: send the request again",
    )
}

/// Starts the lane: a current-thread runtime whose thread only ever runs what is spawned on it.
fn start() -> Option<Handle> {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            warn!(%error, "no runtime for large requests; they are served on the worker");
            return None;
        }
    };
    let handle = runtime.handle().clone();
    let started = std::thread::Builder::new()
        .name("capstan-large".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()));
    match started {
        Ok(_) => Some(handle),
        Err(error) => {
            warn!(%error, "no thread for large requests; they are served on the worker");
            None
        }
    }
}

/// A request running on the lane, stopped when its caller's future is dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A future as large as a request's (kilobytes of state), ready at once.
    async fn large_request() -> usize {
        let state = [1u8; 8192];
        tokio::task::yield_now().await;
        state.iter().map(|byte| usize::from(*byte)).sum()
    }

    #[tokio::test]
    async fn a_small_request_should_be_served_where_it_is_and_held_once() {
        let alone = std::mem::size_of_val(&large_request());
        let served = serve(false, large_request());
        let size = std::mem::size_of_val(&served);
        assert!(
            size < alone + 1024,
            "{size} bytes for a {alone}-byte future"
        );
        assert_eq!(served.await, Some(8192));
    }
}
