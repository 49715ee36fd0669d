//! Ends sessions nobody uses: bound sessions idle for the idle timeout (the sidecar keeps the
//! idle clock, since tool calls served by `direct.rs` never reach rmcp's), bindings whose task
//! is gone, and rmcp sessions nobody bound (a client gone while its `initialize` was
//! composing).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};

use crate::caller_check::CallerCheck;
use crate::sessionless::SessionlessTasks;
use crate::sessions::Sessions;

/// How long an rmcp session may exist without a binding before it is closed. A binding is
/// made when `initialize` answers; a client that goes away while its `initialize` is still
/// composing leaves a session nobody bound (rmcp's own keep-alive is off, see `router`).
/// Generous: composing may wait for upstream and knowledge timeouts.
const ORPHAN_GRACE: Duration = Duration::from_secs(60);

/// Closes sessions idle for `idle`, forever: unbinds them (later requests are not served) and
/// ends the rmcp session, which drops the task and closes its upstreams.
pub async fn reap_idle(sessions: Arc<Sessions>, manager: Arc<LocalSessionManager>, idle: Duration) {
    let period = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut orphans = HashMap::new();
    loop {
        tick.tick().await;
        reap_once(&sessions, &manager, idle, &mut orphans).await;
    }
}

/// One pass of the reaper: idle bound sessions, then rmcp sessions unbound for longer than
/// [`ORPHAN_GRACE`] (`orphans` remembers since when each was seen unbound).
async fn reap_once(
    sessions: &Sessions,
    manager: &LocalSessionManager,
    idle: Duration,
    orphans: &mut HashMap<SessionId, tokio::time::Instant>,
) {
    for id in sessions.idle(idle) {
        sessions.remove(&id);
        close(manager, &id.as_str().into(), "idle").await;
    }
    for id in sessions.take_ended() {
        close(manager, &id.as_str().into(), "caller revoked").await;
    }
    let live: Vec<SessionId> = manager.sessions.read().await.keys().cloned().collect();
    orphans.retain(|id, _| live.contains(id));
    let grace = ORPHAN_GRACE.max(idle);
    for id in live {
        if sessions.is_bound(&id) {
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
pub async fn revalidate_streams(
    check: Arc<CallerCheck>,
    sessions: Arc<Sessions>,
    sessionless: Arc<SessionlessTasks>,
) {
    let period = (check.ttl() / 2).max(Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (id, task) in sessions.streaming() {
            if let Err(refused) = check.check(task.identity()).await
                && refused.is_denial()
            {
                tracing::info!(project = %task.identity().project, "a streaming session's caller is no longer admitted; ending it");
                sessions.end(&id);
            }
        }
        for task in sessionless.streaming().await {
            if let Err(refused) = check.check(task.identity()).await
                && refused.is_denial()
            {
                tracing::info!(project = %task.identity().project, "a listening task's caller is no longer admitted; ending it");
                sessionless.end(&task.identity().fingerprint()).await;
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
        let sessions = Sessions::new(
            HeaderName::from_static("x-capstan-project"),
            crate::admission::Admission::new(crate::admission::Caps::default()),
        );
        let manager = LocalSessionManager::default();
        let (id, _transport) = manager.create_session().await.unwrap();
        let mut orphans = HashMap::new();
        let idle = Duration::from_secs(1);
        reap_once(&sessions, &manager, idle, &mut orphans).await;
        assert!(manager.has_session(&id).await.unwrap(), "closed too early");
        tokio::time::advance(ORPHAN_GRACE / 2).await;
        reap_once(&sessions, &manager, idle, &mut orphans).await;
        assert!(manager.has_session(&id).await.unwrap(), "closed too early");
        tokio::time::advance(ORPHAN_GRACE / 2).await;
        reap_once(&sessions, &manager, idle, &mut orphans).await;
        assert!(!manager.has_session(&id).await.unwrap(), "still open");
        assert!(orphans.is_empty());
    }
}
