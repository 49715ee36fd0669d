//! What reconciles a binding: a change the watch reports, a probe's finding, the status queue
//! handing back a dropped update, the resync walk, and gaining leadership. Each is a stream of
//! names, all marked due on one task (`due.rs`); none keeps a timer per binding.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tracing::warn;

use crate::cached::CachedBinding;
use crate::due::Due;
use crate::leader::became_leader;
use crate::status::{Kind, ObjectKey};
use crate::status_queue::Released;

/// Marks due every binding the watch reports applied and every name `triggers` name, on one
/// task, until it is aborted.
pub(crate) fn spawn_marker(
    changes: impl Stream<Item = Result<ObjectRef<CachedBinding>, watcher::Error>> + Send + 'static,
    triggers: Vec<BoxStream<'static, ObjectRef<CachedBinding>>>,
    due: Arc<Due>,
) -> JoinHandle<()> {
    let changed = changes
        .filter_map(|change| async move {
            match change {
                Ok(binding) => Some(binding),
                // The watcher retries with backoff; the error is only reported.
                Err(error) => {
                    warn!(%error, "binding watch");
                    None
                }
            }
        })
        .boxed();
    let all = futures::stream::select_all(std::iter::once(changed).chain(triggers));
    tokio::spawn(all.for_each(move |object| {
        due.mark(&object.name);
        futures::future::ready(())
    }))
}

/// The bindings a watch event names for a reconcile: an applied one; every one in the store
/// once a (re-)list has been swapped in (`every_binding`); none for a listed one before that,
/// or a delete.
pub(crate) fn named_for_reconcile(
    store: Store<CachedBinding>,
) -> impl FnMut(
    Result<watcher::Event<CachedBinding>, watcher::Error>,
) -> futures::stream::Iter<NamedBindings> {
    move |event| {
        let named: NamedBindings = match event {
            Ok(watcher::Event::Apply(binding)) => {
                Box::new(std::iter::once(Ok(ObjectRef::new(&binding.name_any()))))
            }
            Ok(watcher::Event::InitDone) => Box::new(every_binding(&store).map(Ok)),
            Ok(_) => Box::new(std::iter::empty()),
            Err(error) => Box::new(std::iter::once(Err(error))),
        };
        futures::stream::iter(named)
    }
}

/// What one watch event names (`named_for_reconcile`).
pub(crate) type NamedBindings =
    Box<dyn Iterator<Item = Result<ObjectRef<CachedBinding>, watcher::Error>> + Send>;

/// Every binding in the store now, named one at a time from the store's handles: 100,000
/// names are never held at once.
fn every_binding(
    store: &Store<CachedBinding>,
) -> impl Iterator<Item = ObjectRef<CachedBinding>> + Send + use<> {
    store
        .state()
        .into_iter()
        .map(|binding| ObjectRef::new(&binding.name_any()))
}

/// Every binding in the cache, each time this replica becomes leader (the standby's statuses
/// were never written).
pub(crate) fn all_on_leadership(
    store: Store<CachedBinding>,
    leader: watch::Receiver<bool>,
) -> BoxStream<'static, ObjectRef<CachedBinding>> {
    became_leader(leader)
        .flat_map(move |()| futures::stream::iter(every_binding(&store)))
        .boxed()
}

/// The names of the bindings whose status a probe's finding may change.
pub(crate) type ProbedNames = mpsc::UnboundedReceiver<String>;

/// The bindings to reconcile because a probe's finding may change their status; none when
/// probing is off.
pub(crate) fn probed_bindings(
    probed: Option<ProbedNames>,
) -> BoxStream<'static, ObjectRef<CachedBinding>> {
    match probed {
        Some(rx) => futures::stream::unfold(rx, |mut rx| async move {
            let name = rx.recv().await?;
            Some((ObjectRef::<CachedBinding>::new(&name), rx))
        })
        .boxed(),
        None => futures::stream::pending().boxed(),
    }
}

/// The overflowed objects the status queue hands back when it has room: bindings as reconcile
/// requests, qualifiers as a wake-up of the qualifier loop (which reconciles them all at once).
pub(crate) fn split_released(
    released: Released<ObjectKey>,
) -> (BoxStream<'static, ObjectRef<CachedBinding>>, Arc<Notify>) {
    let qualifiers = Arc::new(Notify::new());
    let wake = qualifiers.clone();
    let bindings = futures::stream::unfold(released, move |mut released| {
        let wake = wake.clone();
        async move {
            loop {
                let key = released.recv().await?;
                match key.kind {
                    Kind::Binding => return Some((ObjectRef::new(&key.name), released)),
                    Kind::Qualifier => wake.notify_one(),
                }
            }
        }
    })
    .boxed();
    (bindings, qualifiers)
}

/// Ticks a pass of the resync walk is spread over: each visits its share of the bindings.
const WALK_TICK: Duration = Duration::from_millis(100);

/// The resync: every binding visited once each `revisit`, spread evenly over it in name order
/// (so each comes by about `revisit` after its last visit), the first pass one `revisit` after
/// start, since the first list reconciles every binding. It holds the names of one pass and
/// nothing else per binding: a requeue per object in kube-runtime's scheduler holds ~1 KB a
/// binding.
pub(crate) fn resync_walk(
    store: Store<CachedBinding>,
    revisit: Duration,
) -> BoxStream<'static, ObjectRef<CachedBinding>> {
    struct Walk {
        /// This pass's names still to visit, the next at the end.
        names: Vec<String>,
        /// How many the pass began with, and its ticks so far.
        total: usize,
        ticks_done: usize,
        tick: tokio::time::Interval,
    }
    let ticks = usize::try_from(revisit.as_millis() / WALK_TICK.as_millis())
        .unwrap_or(usize::MAX)
        .max(1);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + revisit, WALK_TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let walk = Walk {
        names: Vec::new(),
        total: 0,
        ticks_done: ticks,
        tick,
    };
    futures::stream::unfold(walk, move |mut walk| {
        let store = store.clone();
        async move {
            walk.tick.tick().await;
            if walk.ticks_done == ticks {
                walk.names = store.state().iter().map(|b| b.name_any()).collect();
                // Taken from the end: sorted backwards, visited in name order.
                walk.names.sort_unstable_by(|a, b| b.cmp(a));
                walk.total = walk.names.len();
                walk.ticks_done = 0;
            }
            walk.ticks_done += 1;
            // After tick t of the pass, t / ticks of its names have been visited.
            let visited = walk.total - walk.names.len();
            let due = walk.total.saturating_mul(walk.ticks_done) / ticks;
            let from = walk.names.len() - due.saturating_sub(visited).min(walk.names.len());
            let visits: Vec<ObjectRef<CachedBinding>> = walk
                .names
                .drain(from..)
                .rev()
                .map(|name| ObjectRef::new(&name))
                .collect();
            Some((futures::stream::iter(visits), walk))
        }
    })
    .flatten()
    .boxed()
}

#[cfg(test)]
mod tests {
    use kube::runtime::{reflector, watcher};

    use super::*;

    fn binding(name: &str) -> CachedBinding {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The names the walk visits from now until `until` (paused time).
    async fn visits(
        walk: &mut BoxStream<'static, ObjectRef<CachedBinding>>,
        until: tokio::time::Instant,
    ) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(Some(visit)) = tokio::time::timeout_at(until, walk.next()).await {
            seen.push(visit.name);
        }
        seen
    }

    /// The names `event` hands to reconciles, once the reflector has applied it to `writer`
    /// (as the reflector does before passing it on).
    fn named(
        writer: &mut reflector::store::Writer<CachedBinding>,
        event: watcher::Event<CachedBinding>,
    ) -> Vec<String> {
        writer.apply_watcher_event(&event);
        let mut named = named_for_reconcile(writer.as_reader());
        futures::executor::block_on_stream(named(Ok(event)))
            .map(|named| named.map(|object| object.name).unwrap_or_default())
            .collect()
    }

    /// A re-list (after a broken watch, an apiserver restart) is swapped into the store only
    /// at its end: a binding named for a reconcile before then would be read as it was, or
    /// not found at all if it was created while the watch was down — and not reconciled until
    /// the resync walk. Every name handed out must be in the store when it is handed out.
    #[test]
    fn a_relisted_binding_should_be_named_only_once_the_store_holds_the_new_list() {
        let mut writer = reflector::store::Writer::<CachedBinding>::default();
        let store = writer.as_reader();
        assert_eq!(
            named(&mut writer, watcher::Event::Init),
            Vec::<String>::new()
        );
        assert!(named(&mut writer, watcher::Event::InitApply(binding("old"))).is_empty());
        assert_eq!(named(&mut writer, watcher::Event::InitDone), ["old"]);
        assert_eq!(
            named(&mut writer, watcher::Event::Apply(binding("live"))),
            ["live"]
        );

        // The watch broke; while it was down `old` was deleted and `created` made.
        assert!(named(&mut writer, watcher::Event::Init).is_empty());
        let listed = named(&mut writer, watcher::Event::InitApply(binding("created")));
        for name in &listed {
            assert!(
                store.get(&ObjectRef::new(name)).is_some(),
                "{name} named for a reconcile before the store holds it"
            );
        }
        assert!(listed.is_empty(), "{listed:?}");
        assert!(named(&mut writer, watcher::Event::InitApply(binding("live"))).is_empty());
        let mut relisted = named(&mut writer, watcher::Event::InitDone);
        relisted.sort();
        assert_eq!(relisted, ["created", "live"]);
        for name in &relisted {
            assert!(store.get(&ObjectRef::new(name)).is_some(), "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_resync_walk_should_visit_every_binding_once_a_revisit_in_name_order() {
        let mut writer = reflector::store::Writer::<CachedBinding>::default();
        let store = writer.as_reader();
        // 250 bindings over 10 s: 100 ticks, 2 or 3 a tick.
        let mut names: Vec<String> = (0..250).map(|i| format!("b-{i:03}")).collect();
        for name in names.iter().rev() {
            writer.apply_watcher_event(&watcher::Event::Apply(binding(name)));
        }
        let start = tokio::time::Instant::now();
        let revisit = Duration::from_secs(10);
        let mut walk = resync_walk(store, revisit);
        // Nothing before the first revisit: the first list reconciled them all. (Windows end
        // between the walk's 100 ms ticks.)
        let between = Duration::from_millis(50);
        assert_eq!(
            visits(&mut walk, start + revisit - between).await,
            Vec::<String>::new()
        );
        // The first pass, spread over the whole revisit: half of them in its first half.
        let first_half = visits(&mut walk, start + revisit + revisit / 2 - between).await;
        assert_eq!(first_half.len(), 125, "visits in the first half of a pass");
        let mut pass = first_half;
        pass.extend(visits(&mut walk, start + revisit * 2 - between).await);
        assert_eq!(pass, names, "the first pass");
        // A binding added meanwhile is in the next pass, in its place.
        writer.apply_watcher_event(&watcher::Event::Apply(binding("b-1000")));
        names.push("b-1000".to_owned());
        names.sort();
        assert_eq!(
            visits(&mut walk, start + revisit * 3 - between).await,
            names,
            "the second pass"
        );
    }
}
