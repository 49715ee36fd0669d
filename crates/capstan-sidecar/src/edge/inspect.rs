//! `GET /v1/composition`: a caller's composition as JSON, for inspection (`capstanctl compose`)
//! and non-MCP clients — from the caller's live session when there is one, otherwise composed
//! at most once per (project, caller) every few seconds, so inspection cannot be made to open
//! upstream connections at will.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use capstan_compose::composer::Composed;
use capstan_compose::composition::BindingOutcome;
use capstan_compose::source::Snapshot;
use capstan_upstream::mcp::CallerRevision;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::request::Checked;
use crate::caller::authorization::{
    Offered, ToolAuthorizer, Undecided, Withheld, without_authorization,
};
use crate::caller::identity::Identity;
use crate::caller::identity::refusal;
use crate::composition::composer::ProjectComposer;
use crate::task::{Served, Task};
use crate::tasks::Tasks;

pub(super) mod routes;

/// What inspection reads: live sessions first, else the composer.
pub struct Inspection {
    /// The live tasks (their compositions).
    pub tasks: Arc<Tasks>,
    /// Composes for callers without a live session.
    pub composer: Arc<ProjectComposer>,
    /// Compositions made for inspection, per caller.
    pub views: CompositionViews,
}

impl Inspection {
    /// The live task a read is answered from: the session the request names (the gate
    /// checked it is the caller's), else the caller's own live task, if any.
    pub(crate) fn live_task(&self, checked: &Checked) -> Option<Arc<Task>> {
        checked
            .session
            .clone()
            .or_else(|| self.tasks.live_task(&checked.identity.fingerprint()))
    }

    /// A read answered without a live session: `identity`'s project composed for it and
    /// rendered by `render`, at most once per `key` every [`VIEW_TTL`] (concurrent reads share
    /// the one composition), its upstream sessions closed once rendered; 503 while as many
    /// other callers hold fresh views as there are places.
    pub(crate) async fn composed_view<F>(
        &self,
        key: [u8; 32],
        identity: &Identity,
        render: F,
    ) -> Response
    where
        F: for<'a> FnOnce(&'a Served) -> BoxFuture<'a, Result<Value, Undecided>>,
    {
        let Some(cell) = self.views.cell(key).await else {
            return refusal(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "too many callers are inspecting compositions at once; retry in a few seconds",
            );
        };
        let body = cell
            .get_or_init(|| async {
                let project = self
                    .composer
                    .compose(identity, CallerRevision::default())
                    .await;
                // Served as a session would be, so the view shows what its lists would.
                let served = Served::new(project.composed, project.base, project.snapshot);
                let body = render(&served).await;
                served.close().await;
                body
            })
            .await;
        match body {
            Ok(body) => axum::Json(body.clone()).into_response(),
            Err(undecided) => unavailable(undecided),
        }
    }
}

/// What `composed` (made from `snapshot`) withholds from `identity`, asked of `authorizer`
/// (without one, what bindings requiring it offer): an inspection outside a live session shows
/// what the caller's own session would.
pub(crate) async fn withheld_from(
    authorizer: Option<&ToolAuthorizer>,
    identity: &Identity,
    composed: &Composed,
    snapshot: &Snapshot,
) -> Result<Arc<Withheld>, Undecided> {
    let Some(authorizer) = authorizer else {
        return Ok(Arc::new(without_authorization(composed, snapshot)));
    };
    let (withheld, _) = authorizer
        .withheld(identity, &Offered::of(composed))
        .await?;
    Ok(Arc::new(withheld))
}

/// The answer when what the caller may use could not be decided: 503, nothing shown.
pub(crate) fn unavailable(undecided: &Undecided) -> Response {
    refusal(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "upstream_unavailable",
        &undecided.to_string(),
    )
}

/// `GET /v1/composition`: the caller's composition as JSON (tools with `mutating`,
/// per-binding outcomes with `degraded` and `reasons`, instructions, skills).
///
/// Served from the caller's live session when there is one (the session named by
/// `Mcp-Session-Id`, else the caller's newest session): no new upstream connection. Otherwise
/// composed at most once per (project, caller) per [`VIEW_TTL`]; concurrent requests share
/// that one composition.
pub(crate) async fn composition(inspection: &Inspection, checked: &Checked) -> Response {
    let identity = checked.identity.clone();
    let live = inspection.live_task(checked);
    if let Some(task) = live {
        let served = task.served();
        let withheld = match task.withheld(&served).await {
            Ok(withheld) => withheld,
            Err(undecided) => return unavailable(&undecided),
        };
        let outcomes = served.composed().outcomes_with_skill_digests().await;
        let built_ins = task.built_ins(&served, &withheld);
        return axum::Json(composition_view(
            &identity.project,
            &served,
            &outcomes,
            &withheld,
            &built_ins,
        ))
        .into_response();
    }
    let key = identity.fingerprint();
    let name = identity.project.clone();
    let caller = identity.clone();
    let context = inspection.composer.context().clone();
    inspection
        .composed_view(key, &identity, |served| {
            Box::pin(async move {
                let composed = served.composed();
                let authorizer = context.authorizer.as_deref();
                let withheld =
                    withheld_from(authorizer, &caller, composed, served.snapshot()).await?;
                let outcomes = composed.outcomes_with_skill_digests().await;
                let built_ins = context.built_ins(served, &withheld);
                Ok(composition_view(
                    &name, served, &outcomes, &withheld, &built_ins,
                ))
            })
        })
        .await
}

/// The JSON view of what `served` composes, its bindings' `outcomes` (with every skill's
/// digest: `Composed::outcomes_with_skill_digests`), the platform tools beside it (their names
/// under `baseTools`, the change path's among the `mutating`) and the `built_ins` the caller
/// is listed. What the caller may not use (`withheld`) is left out of the tools, prompts,
/// resources and capabilities, as `tools/list` leaves it out; the bindings' outcomes are their
/// status, which every admitted caller may read (docs/authorization.md).
fn composition_view(
    project: &str,
    served: &Served,
    outcomes: &[BindingOutcome],
    withheld: &Withheld,
    built_ins: &[&str],
) -> Value {
    let composition = &served.composed().composition;
    let base = served.base();
    let mut body = serde_json::to_value(composition).unwrap_or(Value::Null);
    if !withheld.is_empty() {
        leave_out(&mut body, withheld);
    }
    body["bindings"] = serde_json::to_value(outcomes).unwrap_or(Value::Null);
    let names: Vec<&str> = base
        .map(|base| base.tools().iter().map(|t| t.name.as_ref()).collect())
        .unwrap_or_default();
    body["baseTools"] = json!(names);
    if let (Some(base), Some(mutating)) = (base, body["mutating"].as_array_mut()) {
        mutating.extend(base.mutating().into_iter().map(Value::from));
    }
    if let Some(bindings) = body.get_mut("bindings").and_then(Value::as_array_mut) {
        for (view, outcome) in bindings.iter_mut().zip(outcomes) {
            view["degraded"] = json!(outcome.degraded());
            view["reasons"] = json!(outcome.reasons());
        }
    }
    body["project"] = json!(project);
    body["builtins"] = json!(built_ins);
    body
}

/// Leaves what `withheld` holds out of a composition's JSON view.
fn leave_out(body: &mut Value, withheld: &Withheld) {
    let named = |item: &Value, key: &str| item[key].as_str().unwrap_or_default().to_owned();
    let mut keep = |list: &str, usable: &dyn Fn(&Value) -> bool| {
        if let Some(items) = body.get_mut(list).and_then(Value::as_array_mut) {
            items.retain(|item| usable(item));
        }
    };
    keep("tools", &|t| withheld.tool(&named(t, "name")));
    keep("mutating", &|name| {
        withheld.tool(name.as_str().unwrap_or_default())
    });
    keep("prompts", &|p| withheld.prompt(&named(p, "name")));
    keep("resources", &|r| withheld.binding(&named(r, "binding")));
    keep("capabilities", &|c| withheld.tool(&named(c, "tool")));
}

/// How long a composition made for inspection answers the same caller. 5 s: long enough that
/// a burst of inspections (a dashboard, a retry loop) composes once, short enough that an
/// edited binding shows on the next look.
pub const VIEW_TTL: Duration = Duration::from_secs(5);

/// Compositions made for `GET /v1/composition` outside a session, per caller (digest of
/// project and token), each kept for [`VIEW_TTL`] from the moment it was started.
pub struct CompositionViews {
    entries: tokio::sync::Mutex<HashMap<[u8; 32], View>>,
    /// Callers held at most (the session cap: no more callers than sessions are expected).
    capacity: usize,
}

struct View {
    started: tokio::time::Instant,
    answer: Arc<tokio::sync::OnceCell<Result<Value, Undecided>>>,
}

impl CompositionViews {
    /// Views for at most `capacity` callers at once.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: tokio::sync::Mutex::default(),
            capacity: capacity.max(1),
        }
    }

    /// The caller's composition in the making or made within [`VIEW_TTL`], or a new empty
    /// one; none when `capacity` other callers hold fresh ones.
    pub(crate) async fn cell(
        &self,
        caller: [u8; 32],
    ) -> Option<Arc<tokio::sync::OnceCell<Result<Value, Undecided>>>> {
        let mut entries = self.entries.lock().await;
        if let Some(view) = entries.get(&caller)
            && view.started.elapsed() < VIEW_TTL
        {
            return Some(view.answer.clone());
        }
        entries.retain(|_, view| view.started.elapsed() < VIEW_TTL);
        if entries.len() >= self.capacity {
            return None;
        }
        let answer = Arc::new(tokio::sync::OnceCell::new());
        entries.insert(
            caller,
            View {
                started: tokio::time::Instant::now(),
                answer: answer.clone(),
            },
        );
        Some(answer)
    }
}
