//! Ends tasks nobody uses, in one pass over the task registry: sessions idle for the idle
//! limit (the sidecar keeps the idle clock, since tool calls served by `call_fast_path.rs` never reach
//! rmcp's), bindings whose task is gone, sessions the caller check ended, tasks without a
//! session past their lifetime — and rmcp sessions nobody bound (a client gone while its
//! `initialize` was composing). Beside it, the re-check of callers whose tasks hold streams.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};
use tracing::info;

use crate::caller_check::CallerCheck;
use crate::tasks::Tasks;

/// How long an rmcp session may exist without a binding before it is closed. A binding is
/// made when `initialize` answers; a client that goes away while its `initialize` is still
/// composing leaves a session nobody bound (rmcp's own keep-alive is off, see `router`).
/// Generous: composing may wait for upstream and knowledge timeouts.
const ORPHAN_GRACE: Duration = Duration::from_secs(60);

/// Reaps forever, every quarter of the shortest lifetime (100 ms to 5 s).
pub async fn reap(tasks: Arc<Tasks>, manager: Arc<LocalSessionManager>) {
    let lifetimes = tasks.lifetimes();
    let shortest = lifetimes.session_idle.min(lifetimes.sessionless);
    let period = (shortest / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut orphans = HashMap::new();
    loop {
        tick.tick().await;
        reap_once(&tasks, &manager, &mut orphans).await;
    }
}

/// One pass: the registry's (idle sessions closed in rmcp, tasks without a session ended),
/// sessions the sidecar ended, then rmcp sessions unbound for longer than [`ORPHAN_GRACE`]
/// (`orphans` remembers since when each was seen unbound).
async fn reap_once(
    tasks: &Tasks,
    manager: &LocalSessionManager,
    orphans: &mut HashMap<SessionId, tokio::time::Instant>,
) {
    let (idle, ended) = tasks.reap();
    for id in idle {
        close(manager, &id.as_str().into(), "idle").await;
    }
    if ended > 0 {
        info!(
            ended,
            "tasks without a session ended (unused or past their time limit)"
        );
    }
    for id in tasks.take_ended() {
        close(manager, &id.as_str().into(), "caller revoked").await;
    }
    let live: Vec<SessionId> = manager.sessions.read().await.keys().cloned().collect();
    orphans.retain(|id, _| live.contains(id));
    let grace = ORPHAN_GRACE.max(tasks.lifetimes().session_idle);
    for id in live {
        if tasks.is_session(&id) {
            orphans.remove(&id);
            continue;
        }
        let since = *orphans
            .entry(id.clone())
            .or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= grace {
            orphans.remove(&id);
            close(manager, &id, "never bound").await;
        }
    }
}

/// Re-checks, every half of the caller check's TTL, the callers of tasks that hold open
/// streams — a stream receives without sending requests, so no request would re-check them —
/// and ends the tasks of callers the project's plane now denies: their streams close, and a
/// session's next request is 404. Answers come from the caller check's cache, so a caller is
/// asked at most once per TTL.
pub async fn revalidate_streams(check: Arc<CallerCheck>, tasks: Arc<Tasks>) {
    let period = (check.ttl() / 2).max(Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (key, task) in tasks.streaming() {
            if let Err(refused) = check.check(task.identity()).await
                && refused.is_denial()
            {
                info!(project = %task.identity().project, "a streaming task's caller is no longer admitted; ending it");
                tasks.end(&key);
            }
        }
    }
}

async fn close(manager: &LocalSessionManager, id: &SessionId, why: &str) {
    if let Err(error) = manager.close_session(id).await {
        tracing::warn!(%error, why, "closing a session");
    }
    tracing::info!(why, "session closed");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::http::HeaderName;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_session_nobody_bound_should_be_closed_after_the_grace() {
        let tasks = Tasks::new(
            crate::admission::Admission::new(
                HeaderName::from_static("x-capstan-project"),
                crate::admission::Caps::default(),
            ),
            crate::tasks::Lifetimes {
                session_idle: Duration::from_secs(1),
                ..crate::tasks::Lifetimes::default()
            },
        );
        let manager = LocalSessionManager::default();
        let (id, _transport) = manager.create_session().await.unwrap();
        let mut orphans = HashMap::new();
        reap_once(&tasks, &manager, &mut orphans).await;
        assert!(manager.has_session(&id).await.unwrap(), "closed too early");
        tokio::time::advance(ORPHAN_GRACE / 2).await;
        reap_once(&tasks, &manager, &mut orphans).await;
        assert!(manager.has_session(&id).await.unwrap(), "closed too early");
        tokio::time::advance(ORPHAN_GRACE / 2).await;
        reap_once(&tasks, &manager, &mut orphans).await;
        assert!(!manager.has_session(&id).await.unwrap(), "still open");
        assert!(orphans.is_empty());
    }
}
