//! Per-project document feeds for live sessions: while a project has a live session, one
//! follower reads its documents whenever the source says they may have changed (a watched
//! source) or every refresh interval (sources read on demand), and passes on each snapshot
//! that differs from the one before. The project's sessions share that one read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use capstan_compose::source::ProjectDocuments;
use capstan_compose::source::ReadOutcome;
use capstan_compose::source::Snapshot;
use tokio::sync::{Notify, watch};
use tracing::debug;

use crate::observe::metrics::Metrics;

/// How long a follower waits after a change before it reads. 100 ms: a burst of changes (a
/// `kubectl apply` of many bindings) is read once, and a change still reaches sessions well
/// within a second.
pub const SETTLE: Duration = Duration::from_millis(100);

/// The feeds of the projects with live sessions.
pub struct ProjectFeeds {
    documents: Arc<dyn ProjectDocuments>,
    interval: Option<Duration>,
    metrics: Metrics,
    feeds: Mutex<HashMap<String, Feed>>,
}

/// One project's feed: the latest snapshot, and a way to ask its follower to read now.
struct Feed {
    latest: watch::Sender<Arc<Snapshot>>,
    nudge: Arc<Notify>,
}

impl ProjectFeeds {
    /// Feeds reading `documents`; a source that does not report changes is read every
    /// `interval` (`None`: never, so its sessions keep what they composed).
    pub fn new(
        documents: Arc<dyn ProjectDocuments>,
        interval: Option<Duration>,
        metrics: Metrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            documents,
            interval,
            metrics,
            feeds: Mutex::default(),
        })
    }

    /// Follows `project` for a session that composed from `current`: the receiver sees every
    /// later snapshot that differs from the one before it. When the feed holds a different one,
    /// the session read either before or after it, so the follower reads again at once and
    /// tells every receiver what is current: nobody is moved back to an older state, and nobody
    /// is left on one. The project's follower runs while any receiver lives.
    pub fn follow(
        self: &Arc<Self>,
        project: &str,
        current: &Arc<Snapshot>,
    ) -> watch::Receiver<Arc<Snapshot>> {
        let mut feeds = match self.feeds.lock() {
            Ok(feeds) => feeds,
            // The map holds whole entries only; a panic elsewhere cannot leave one half made.
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(feed) = feeds.get(project)
            && !feed.latest.is_closed()
        {
            let receiver = feed.latest.subscribe();
            if !same(&receiver.borrow(), current) {
                feed.nudge.notify_one();
            }
            return receiver;
        }
        let (latest, receiver) = watch::channel(current.clone());
        let nudge = Arc::new(Notify::new());
        feeds.insert(
            project.to_owned(),
            Feed {
                latest: latest.clone(),
                nudge: nudge.clone(),
            },
        );
        let changes = self.documents.changes();
        if changes.is_some() || self.interval.is_some() {
            tokio::spawn(run(
                Arc::downgrade(self),
                project.to_owned(),
                Feed { latest, nudge },
                changes,
            ));
        }
        receiver
    }
}

/// Whether two snapshots hold the same documents and qualifiers (the same `Arc` is).
fn same(a: &Arc<Snapshot>, b: &Arc<Snapshot>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

/// One project's follower: waits for a change (or the interval), settles, reads, and passes
/// on a snapshot that differs; ends when no session follows the project any more.
async fn run(
    feeds: Weak<ProjectFeeds>,
    project: String,
    feed: Feed,
    mut changes: Option<watch::Receiver<u64>>,
) {
    let Feed {
        latest: sender,
        nudge,
    } = feed;
    loop {
        let Some(interval) = feeds.upgrade().map(|f| f.interval) else {
            return;
        };
        // A source that reports changes is not polled.
        let poll = interval.filter(|_| changes.is_none());
        let mut nudged = false;
        tokio::select! {
            () = sender.closed() => {
                if unfollowed(&feeds, &project, &sender) {
                    return;
                }
                continue;
            }
            changed = async {
                match changes.as_mut() {
                    Some(changes) => changes.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            } => {
                if !changed {
                    // The source is gone (shutting down): fall back to the interval.
                    changes = None;
                }
            }
            () = async {
                match poll {
                    Some(interval) => tokio::time::sleep(interval).await,
                    None => std::future::pending().await,
                }
            } => {}
            () = nudge.notified() => nudged = true,
        }
        tokio::time::sleep(SETTLE).await;
        let Some(this) = feeds.upgrade() else { return };
        this.read_into(&project, &sender, nudged).await;
    }
}

/// Whether no session follows `project` any more, its feed then taken out of the map (under
/// the map's lock, so that a session starting to follow meanwhile keeps it).
fn unfollowed(
    feeds: &Weak<ProjectFeeds>,
    project: &str,
    sender: &watch::Sender<Arc<Snapshot>>,
) -> bool {
    let Some(feeds) = feeds.upgrade() else {
        return true;
    };
    let mut map = match feeds.feeds.lock() {
        Ok(map) => map,
        Err(poisoned) => poisoned.into_inner(),
    };
    if sender.receiver_count() > 0 {
        return false;
    }
    if map
        .get(project)
        .is_some_and(|f| f.latest.same_channel(sender))
    {
        map.remove(project);
    }
    debug!(%project, "no live session follows the project's documents");
    true
}

impl ProjectFeeds {
    /// Reads `project`'s documents and passes the snapshot on: to every follower when one was
    /// `nudged` (it composed from another state than the feed held), else only if it differs.
    /// An outage is not a change: sessions keep what they have until the source answers.
    async fn read_into(&self, project: &str, sender: &watch::Sender<Arc<Snapshot>>, nudged: bool) {
        let (snapshot, outcome) = self.documents.read(project).await;
        self.metrics.source_read(outcome.label());
        if outcome == ReadOutcome::Error {
            return;
        }
        if nudged {
            // Newer or older, all are told what is current, and each compares it with what it
            // serves.
            sender.send_replace(snapshot);
            return;
        }
        sender.send_if_modified(|current| {
            if same(current, &snapshot) {
                return false;
            }
            *current = snapshot;
            true
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use capstan_compose::source::Document;
    use futures::future::BoxFuture;

    use super::*;

    /// A watched source held in memory: `set` changes what it answers and says so.
    struct Memory {
        now: StdMutex<Arc<Snapshot>>,
        changed: watch::Sender<u64>,
    }

    impl Memory {
        fn new(snapshot: Arc<Snapshot>) -> Arc<Self> {
            Arc::new(Self {
                now: StdMutex::new(snapshot),
                changed: watch::channel(0).0,
            })
        }

        fn set(&self, snapshot: Arc<Snapshot>) {
            *self.now.lock().unwrap() = snapshot;
            self.changed.send_modify(|v| *v += 1);
        }
    }

    impl ProjectDocuments for Memory {
        fn read<'a>(&'a self, _: &'a str) -> BoxFuture<'a, (Arc<Snapshot>, ReadOutcome)> {
            let snapshot = self.now.lock().unwrap().clone();
            Box::pin(async move { (snapshot, ReadOutcome::Hit) })
        }

        fn changes(&self) -> Option<watch::Receiver<u64>> {
            Some(self.changed.subscribe())
        }
    }

    fn snapshot(binding: &str) -> Arc<Snapshot> {
        let spec = serde_json::from_value(serde_json::json!({
            "serviceRef": {"name": "s"}, "serviceName": "s",
            "serviceAgentRef": {"name": "a"}, "configurationVersion": "1"
        }))
        .unwrap();
        Arc::new(Snapshot::of(vec![Document {
            binding: binding.to_owned(),
            spec,
        }]))
    }

    /// Waits (on the paused clock) until `receiver` is told of a change; fails, never hangs.
    async fn told(receiver: &mut watch::Receiver<Arc<Snapshot>>) {
        tokio::time::timeout(Duration::from_secs(60), receiver.changed())
            .await
            .expect("told of the change")
            .unwrap();
    }

    fn feeds(source: &Arc<Memory>) -> Arc<ProjectFeeds> {
        let mut registry = prometheus_client::registry::Registry::default();
        ProjectFeeds::new(source.clone(), None, Metrics::register(&mut registry))
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_should_reach_every_follower_of_the_project_once_read() {
        let (a, b) = (snapshot("a"), snapshot("b"));
        let source = Memory::new(a.clone());
        let feeds = feeds(&source);
        let mut first = feeds.follow("p", &a);
        let mut second = feeds.follow("p", &a);
        source.set(b.clone());
        told(&mut first).await;
        told(&mut second).await;
        assert_eq!(**first.borrow_and_update(), *b);
        assert_eq!(**second.borrow_and_update(), *b);
        // The same state read again is not a change.
        source.set(b.clone());
        tokio::time::sleep(SETTLE * 3).await;
        assert!(!first.has_changed().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_should_never_be_moved_back_to_an_older_state() {
        let (a, b) = (snapshot("a"), snapshot("b"));
        let source = Memory::new(a.clone());
        let feeds = feeds(&source);
        let _first = feeds.follow("p", &a);
        // The source moves on; a session composed from the new state before the feed read it.
        *source.now.lock().unwrap() = b.clone();
        let mut late = feeds.follow("p", &b);
        told(&mut late).await;
        assert_eq!(
            **late.borrow_and_update(),
            *b,
            "told the state it has, not the old one"
        );
        // One that composed from the old state while the feed holds the new one is told too.
        let mut early = feeds.follow("p", &a);
        told(&mut early).await;
        assert_eq!(**early.borrow_and_update(), *b);
    }
}
