//! Ends tasks nobody uses, in one pass over the task registry: sessions idle for the idle
//! limit (the sidecar keeps the idle clock: a running call keeps a session busy) and tasks
//! without a session past their lifetime. Beside it, the re-check of callers whose tasks hold
//! streams.

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use crate::caller::check::CallerCheck;
use crate::tasks::Tasks;

/// Reaps forever, every quarter of the shortest lifetime (100 ms to 5 s).
pub async fn reap(tasks: Arc<Tasks>) {
    let lifetimes = tasks.lifetimes();
    let shortest = lifetimes.session_idle.min(lifetimes.sessionless);
    let period = (shortest / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (sessions, ended) = tasks.reap();
        if sessions > 0 {
            info!(sessions, "idle sessions ended");
        }
        if ended > 0 {
            info!(
                ended,
                "tasks without a session ended (unused or past their time limit)"
            );
        }
    }
}

/// Re-checks, every half of the caller check's TTL, the callers of tasks that hold open
/// streams — a stream receives without sending requests, so no request would re-check them —
/// and ends the tasks of callers the project's plane now denies: their streams close, and a
/// session's next request is 404. With per-tool authorization, what an admitted caller may
/// use is decided again once its decision expires, and a change is told on its streams as
/// the lists' changes (`task/authorized.rs`). Answers come from the caches, so a caller is
/// asked at most once per TTL.
pub async fn revalidate_streams(check: Arc<CallerCheck>, tasks: Arc<Tasks>) {
    let mut tick = tokio::time::interval(check.revalidation_period());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (key, task) in tasks.streaming() {
            if let Err(refused) = check.check(task.identity()).await
                && refused.is_denial()
            {
                info!(project = %task.identity().project, "a streaming task's caller is no longer admitted; ending it");
                tasks.end(&key);
                continue;
            }
            // A plane that cannot be asked leaves the decision as it was; the next request
            // asks again and is refused until it can be.
            let _ = task.withheld(&task.served()).await;
        }
    }
}
