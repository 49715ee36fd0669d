//! Routing, read back: `GET /v1/route-decisions?capability=&limit=` (the caller's project's
//! recorded decisions, newest first) and `GET /v1/routes?capability=` (candidates, exclusions
//! and the decision a call would get now, without dispatching — what `capstanctl routes`
//! shows). Both answer only for the caller's own project, with the same identity checks as
//! `/v1/composition`.

use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use capstan_compose::composer::Composed;
use capstan_compose::source::Snapshot;
use capstan_route::{Catalog, Requirements, RouteRequest};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Inspection, unavailable, withheld_from};
use crate::caller::authorization::Withheld;
use crate::caller::identity::refusal;
use crate::edge::request::Checked;
use crate::routing::decide::decide;
use crate::task::usable_candidates;

/// Decisions returned when no `limit` is given.
pub const DEFAULT_LIMIT: usize = 50;
/// The most decisions one request returns.
pub const MAX_LIMIT: usize = 1024;

fn query(parts: &Parts) -> Vec<(String, String)> {
    url::form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

fn bad_request(message: String) -> Response {
    refusal(StatusCode::BAD_REQUEST, "invalid_input", &message)
}

/// The `capability` parameter: absent, or a capability this Capstan knows. A filter naming
/// anything else is refused, never ignored: a list filtered by nothing looks complete.
fn capability_filter(params: &[(String, String)]) -> Result<Option<String>, UnknownCapability> {
    let Some((_, capability)) = params.iter().find(|(k, _)| k == "capability") else {
        return Ok(None);
    };
    let catalog = Catalog::embedded();
    if catalog.get(capability).is_none() {
        let known: Vec<&str> = catalog.ids().into_iter().collect();
        return Err(UnknownCapability {
            capability: capability.clone(),
            known: known.join(", "),
        });
    }
    Ok(Some(capability.clone()))
}

/// A `capability` filter naming no capability of the catalog.
#[derive(Debug, thiserror::Error)]
#[error("capability {capability:?} is not a capability this Capstan knows ({known})")]
struct UnknownCapability {
    capability: String,
    /// The catalog's capabilities, comma-separated.
    known: String,
}

/// `GET /v1/route-decisions`.
pub(crate) fn route_decisions(
    inspection: &Inspection,
    checked: &Checked,
    parts: &Parts,
) -> Response {
    let identity = &checked.identity;
    let params = query(parts);
    for (key, _) in &params {
        if key != "capability" && key != "limit" {
            return bad_request(format!(
                "unknown parameter {key:?}: use capability and limit"
            ));
        }
    }
    let capability = match capability_filter(&params) {
        Ok(capability) => capability,
        Err(unknown) => return bad_request(unknown.to_string()),
    };
    let limit = match params.iter().find(|(k, _)| k == "limit") {
        None => DEFAULT_LIMIT,
        Some((_, text)) => match text.parse::<usize>() {
            Ok(limit) if (1..=MAX_LIMIT).contains(&limit) => limit,
            _ => {
                return bad_request(format!("limit {text:?}: a number from 1 to {MAX_LIMIT}"));
            }
        },
    };
    // With per-tool authorization, a caller reads back its own calls' decisions only: each
    // was made among the providers that caller may use (docs/authorization.md).
    let context = inspection.composer.context();
    let caller = context.authorizer.is_some().then(|| identity.fingerprint());
    let decisions = context.decisions.recent(
        &identity.project,
        capability.as_deref(),
        caller.as_ref(),
        limit,
    );
    axum::Json(json!({
        "project": identity.project,
        "capability": capability,
        "decisions": decisions,
    }))
    .into_response()
}

/// `GET /v1/routes?capability=`: from the caller's live session when there is one, otherwise
/// composed (at most once per caller and capability every few seconds, like inspection).
pub(crate) async fn routes(inspection: &Inspection, checked: &Checked, parts: &Parts) -> Response {
    let identity = checked.identity.clone();
    let capability = match capability_filter(&query(parts)) {
        Ok(Some(capability)) => capability,
        Ok(None) => {
            return bad_request(
                "capability: required, e.g. /v1/routes?capability=cap.web.search".into(),
            );
        }
        Err(unknown) => return bad_request(unknown.to_string()),
    };
    let live = inspection.live_task(checked);
    if let Some(task) = live {
        let served = task.served();
        let withheld = match task.withheld(&served).await {
            Ok(withheld) => withheld,
            Err(undecided) => return unavailable(&undecided),
        };
        return axum::Json(routes_view(
            &identity.project,
            &capability,
            served.composed(),
            served.snapshot(),
            &withheld,
        ))
        .into_response();
    }
    let mut key = Sha256::new();
    key.update(identity.fingerprint());
    key.update(capability.as_bytes());
    let name = identity.project.clone();
    let caller = identity.clone();
    let authorizer = inspection.composer.context().authorizer.clone();
    inspection
        .composed_view(key.finalize().into(), &identity, |served| {
            Box::pin(async move {
                let composed = served.composed();
                let snapshot = served.snapshot();
                let withheld =
                    withheld_from(authorizer.as_deref(), &caller, composed, snapshot).await?;
                Ok(routes_view(
                    &name,
                    &capability,
                    composed,
                    snapshot,
                    &withheld,
                ))
            })
        })
        .await
}

/// What a call to `capability` would meet: its candidates and the decision, or why it is not
/// offered or refused.
fn routes_view(
    project: &str,
    capability: &str,
    composed: &Composed,
    snapshot: &Snapshot,
    withheld: &Withheld,
) -> Value {
    let qualifiers: Vec<&str> = snapshot
        .qualifiers
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    // A capability the caller may not use reads as one not offered, and its candidates are
    // those the caller may use, as a call's are (`task/call.rs`).
    let routed = composed
        .capabilities()
        .find(|c| c.spec.capability_id == capability)
        .filter(|c| withheld.tool(&c.tool.name))
        .map(|routed| usable_candidates(routed, withheld));
    let Some(routed) = routed else {
        return json!({
            "project": project,
            "capability": capability,
            "offered": false,
            "why": "no binding of this project maps a composed tool onto this capability, so \
                    the assistant does not see it",
            "qualifiers": qualifiers,
        });
    };
    let mut body = json!({
        "project": project,
        "capability": capability,
        "tool": routed.tool.name,
        "offered": true,
        "candidates": routed.candidates,
        "qualifiers": qualifiers,
    });
    match decide(
        &routed,
        snapshot,
        &RouteRequest::default(),
        &Requirements::new(),
    ) {
        Ok(decision) => body["decision"] = json!(decision),
        Err(why) => body["refused"] = json!(why.to_string()),
    }
    body
}
