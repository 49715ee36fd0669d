//! A live session following its composition: when its project's documents change (the project's
//! feed, `composition/feeds.rs`) or one of its upstreams says its tool list changed, the session is
//! composed again and serves the new composition; when the tools it lists differ, its client is
//! sent `notifications/tools/list_changed`. A tool that left then reads as unknown; a call already
//! running finishes on the composition it started with.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use capstan_compose::composition::Composition;
use capstan_upstream::mcp::Updated;
use rmcp::model::{Prompt, Resource, ResourceTemplate};
use tokio::sync::watch;
use tracing::{debug, info};

use crate::composition::composer::{ComposedProject, ProjectComposer};
use crate::composition::feeds::{ProjectFeeds, SETTLE};
use crate::task::{Served, Task};

/// The shortest time between two compositions of one task. 1 s: a provider announcing list
/// changes in a burst (or in a loop) costs each live task of its project at most one
/// composition a second — and, since a composition keeps the sessions of unchanged bindings,
/// one `tools/list` at that provider alone — while a single change still reaches the client
/// within the settle time.
pub const MIN_RECOMPOSE_INTERVAL: Duration = Duration::from_secs(1);

/// What woke a follower.
enum Woke {
    /// The project's documents or qualifiers changed.
    Documents,
    /// An upstream's tool list changed.
    Upstream,
    /// The composition whose upstreams were followed is gone: follow the current one.
    Resubscribe,
}

/// Follows `task` until it ends (spawned; holds the task weakly). Every session holds this
/// future while it waits, so what it awaits besides waiting is boxed: a composition's future
/// lives on the heap only while it runs, not in each idle session's.
pub fn follow(task: &Arc<Task>, composer: Arc<ProjectComposer>, feeds: &Arc<ProjectFeeds>) {
    let weak = Arc::downgrade(task);
    let mut ended = task.ended();
    let mut documents = feeds.follow(&task.identity().project, task.served().snapshot());
    tokio::spawn(async move {
        let (mut upstream, mut updates) = match weak.upgrade() {
            Some(task) => followed(&task.served()),
            None => return,
        };
        let mut last_composed: Option<tokio::time::Instant> = None;
        loop {
            let woke = tokio::select! {
                // Shut down (a change) or dropped (closed): either way, done.
                _ = ended.changed() => return,
                changed = documents.changed() => match changed {
                    Ok(()) => Woke::Documents,
                    Err(_) => return,
                },
                changed = upstream.changed() => match changed {
                    Ok(()) => Woke::Upstream,
                    Err(_) => Woke::Resubscribe,
                },
                updated = updates.changed() => match updated {
                    Ok(()) => {
                        let Some(task) = weak.upgrade() else { return };
                        Box::pin(tell_subscribers(&task)).await;
                        continue;
                    }
                    Err(_) => Woke::Resubscribe,
                },
            };
            if matches!(woke, Woke::Resubscribe) {
                let Some(task) = weak.upgrade() else { return };
                // A composition holds its own sender, so these receivers stay open.
                (upstream, updates) = followed(&task.served());
                continue;
            }
            settle(last_composed).await;
            let Some(task) = weak.upgrade() else { return };
            if task.expired() {
                return;
            }
            let snapshot = documents.borrow_and_update().clone();
            let served = task.served();
            let metrics = &composer.context().metrics;
            if matches!(woke, Woke::Documents) && served.snapshot().documents == snapshot.documents
            {
                requalify(&task, &served, snapshot, metrics);
                continue;
            }
            let project =
                Box::pin(composer.compose_snapshot(task.identity(), snapshot, Some(&served))).await;
            last_composed = Some(tokio::time::Instant::now());
            if task.expired() {
                // It ended while this composed: what was opened for it closes unused.
                return;
            }
            if let Some(receivers) = Box::pin(serve(&task, served, project, metrics)).await {
                (upstream, updates) = receivers;
            }
        }
    });
}

/// The receivers of list changes and resource updates a follower waits on.
type Followed = (watch::Receiver<u64>, watch::Receiver<u64>);

/// Serves `project`, composed again, in place of `served`: carries the session's
/// subscriptions over and tells its client what changed. Returns the receivers to follow
/// from now on when the new composition notes its changes elsewhere.
async fn serve(
    task: &Task,
    served: Arc<Served>,
    project: ComposedProject,
    metrics: &crate::observe::metrics::Metrics,
) -> Option<Followed> {
    let fresh = with_log_level(task, project).await;
    let (tools_withheld, prompts_withheld, resources_withheld) =
        task.unauthorized_changes(&served, &fresh);
    let changed = fresh.tools() != served.tools() || tools_withheld;
    let (prompts, resources) = offerings_changed(&served, &fresh);
    let (prompts, resources) = (prompts || prompts_withheld, resources || resources_withheld);
    // A composition made from this one notes list changes on the same channel: the receivers
    // carry on (a change noted while composing wakes it again).
    let receivers =
        (!fresh.composed().shares_changes_with(served.composed())).then(|| followed(&fresh));
    let subscribed = subscribed_upstreams(task, &served);
    drop(served);
    // The composition replaced closes its upstream sessions once the calls running on it have
    // finished.
    drop(task.replace(fresh));
    resubscribe(task, subscribed).await;
    tell_list_changes(task, changed, (prompts, resources), metrics).await;
    receivers
}

/// Tells the session's client which of its lists changed with a new composition: its tools
/// (also every listen stream), its prompts, its resources.
async fn tell_list_changes(
    task: &Task,
    tools: bool,
    (prompts, resources): (bool, bool),
    metrics: &crate::observe::metrics::Metrics,
) {
    task.notify_offerings_changed(prompts, resources);
    if !tools {
        metrics.session_refresh("unchanged");
        debug!(project = %task.identity().project, "composed again; the same tools");
        return;
    }
    metrics.session_refresh("list_changed");
    info!(project = %task.identity().project, tools = task.served().tools().len(), "the session's tools changed; telling its client");
    task.notify_tool_list_changed();
}

/// Qualifiers alone changed (or nothing did): no composition needed, only the routes' view.
fn requalify(
    task: &Task,
    served: &Served,
    snapshot: Arc<capstan_compose::source::Snapshot>,
    metrics: &crate::observe::metrics::Metrics,
) {
    if served.snapshot().qualifiers != snapshot.qualifiers
        || served.snapshot().qualifiers_error != snapshot.qualifiers_error
    {
        task.replace(served.requalified(snapshot));
        metrics.session_refresh("requalified");
    }
}

/// The session's subscriptions, each with the upstream session it reaches in `served`.
fn subscribed_upstreams(task: &Task, served: &Served) -> Vec<(String, Option<u64>)> {
    let composed = served.composed();
    task.subscriptions()
        .into_iter()
        .map(|uri| {
            let upstream = composed.resource_upstream(&uri);
            (uri, upstream)
        })
        .collect()
}

/// Carries the session's subscriptions over to the composition it serves now: each resource reached
/// on another upstream session than before (a binding changed, its server's session was opened
/// again) is subscribed to there, and told once. A resource no longer offered stays subscribed in
/// the session, and is subscribed to again should a later composition offer it.
async fn resubscribe(task: &Task, subscribed: Vec<(String, Option<u64>)>) {
    let served = task.served();
    let composed = served.composed();
    let moved = subscribed
        .into_iter()
        .filter(|(uri, before)| {
            let now = composed.resource_upstream(uri);
            now.is_some() && now != *before
        })
        .map(|(uri, _)| uri)
        .collect();
    drop(served);
    // What the new upstream said before it followed them was heard by no one: each is told
    // once, as "read it again".
    // Only those the caller may still use (docs/authorization.md).
    let moved = task.usable_uris(moved).await;
    let carried = task.subscribe_upstream("resources/subscribe", moved).await;
    task.notify_resource_updated(carried.into_iter().collect());
}

/// Tells the session of the updates of resources it subscribed to, by the URIs it knows them
/// by, each once however often its provider repeated it; when more were noted than could be
/// held, of every resource it subscribed to (an update only says "read it again").
async fn tell_subscribers(task: &Task) {
    let served = task.served();
    let composed = served.composed();
    let uris: BTreeSet<String> = match composed.take_resource_updates() {
        Updated::Resources(updates) => updates
            .iter()
            .flat_map(|update| composed.shown_uris(update))
            .collect(),
        Updated::Any => task.subscriptions(),
    };
    task.notify_resource_updated(uris);
}

/// Waits so that a burst (several upstreams, several bindings) is composed once, and never
/// sooner than the interval after the last composition.
async fn settle(last_composed: Option<tokio::time::Instant>) {
    let earliest = last_composed.map(|at| at + MIN_RECOMPOSE_INTERVAL);
    let settled = tokio::time::Instant::now() + SETTLE;
    tokio::time::sleep_until(earliest.map_or(settled, |at| at.max(settled))).await;
}

/// The upstream list changes of what `served` composed, including any noted before this
/// receiver was made (the composition's upstreams start listening while it is composed).
fn upstream_changes(served: &Served) -> watch::Receiver<u64> {
    let mut changes = served.composed().upstream_changes();
    if *changes.borrow() != 0 {
        changes.mark_changed();
    }
    changes
}

/// The list changes and resource updates of what `served` composed (updates noted before
/// this receiver was made are taken at once).
fn followed(served: &Served) -> Followed {
    let mut updates = served.composed().resource_updates();
    updates.mark_changed();
    (upstream_changes(served), updates)
}

/// Whether the prompts, and the resources or templates, `fresh` lists differ from what
/// `served` listed.
fn offerings_changed(served: &Served, fresh: &Served) -> (bool, bool) {
    fn prompts(c: &Composition) -> Vec<&Prompt> {
        c.prompts.iter().map(|p| &p.prompt).collect()
    }
    fn resources(c: &Composition) -> Vec<(&Option<Resource>, &Option<ResourceTemplate>)> {
        c.resources
            .iter()
            .map(|r| (&r.resource, &r.resource_template))
            .collect()
    }
    let (old, new) = (
        &served.composed().composition,
        &fresh.composed().composition,
    );
    (
        prompts(old) != prompts(new),
        resources(old) != resources(new),
    )
}

/// What `task` serves next, from `project`; the level its client set with `logging/setLevel`
/// holds for the upstream sessions opened since.
async fn with_log_level(task: &Task, project: ComposedProject) -> Served {
    let fresh = Served::new(project.composed, project.base, project.snapshot);
    if let Some(level) = task.log_level() {
        fresh.composed().set_log_level(&level).await;
    }
    fresh
}
