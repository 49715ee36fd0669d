//! The time a call's questions wait for the caller's answers, kept apart from the call's own
//! time limit (docs/mcp-surface.md).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The time a call's questions wait for the caller's answers, so that the call's own time
/// limit counts only the provider's time: a person answering a form is not a slow provider.
#[derive(Debug, Default)]
pub struct QuestionClock(Mutex<AskTimes>);

#[derive(Debug, Default)]
struct AskTimes {
    /// Waited by questions already answered (or given up).
    done: Duration,
    /// Since when some question has been waiting, and how many are.
    since: Option<Instant>,
    waiting: usize,
}

impl QuestionClock {
    pub(super) fn begin(&self) {
        let mut times = lock(&self.0);
        if times.waiting == 0 {
            times.since = Some(Instant::now());
        }
        times.waiting += 1;
    }

    pub(super) fn end(&self) {
        let mut times = lock(&self.0);
        times.waiting = times.waiting.saturating_sub(1);
        if times.waiting == 0
            && let Some(since) = times.since.take()
        {
            times.done += since.elapsed();
        }
    }

    /// The time spent waiting for answers so far, and whether a question waits now.
    pub(crate) fn asked(&self) -> (Duration, bool) {
        let times = lock(&self.0);
        let ongoing = times.since.map(|since| since.elapsed()).unwrap_or_default();
        (times.done + ongoing, times.waiting > 0)
    }
}

fn lock(times: &Mutex<AskTimes>) -> std::sync::MutexGuard<'_, AskTimes> {
    times
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `call` within `limit` of its own time — the time its questions waited for the caller
/// (`clock`) not counted; `None` when the limit passed.
pub(crate) async fn within_call_time<T>(
    limit: Duration,
    clock: &QuestionClock,
    call: impl Future<Output = T>,
) -> Option<T> {
    let started = Instant::now();
    tokio::pin!(call);
    loop {
        let (asked, waiting) = clock.asked();
        let deadline = started + limit + asked;
        tokio::select! {
            out = &mut call => return Some(out),
            () = tokio::time::sleep_until(deadline.into()) => {
                let (asked_now, waiting_now) = clock.asked();
                if !waiting && !waiting_now && asked_now == asked {
                    return None;
                }
            }
        }
    }
}
