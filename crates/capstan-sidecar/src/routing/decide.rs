//! Deciding a routed (`cap.*`) call: the project's qualifiers from the same snapshot the session
//! composed, narrowed by the call's routing arguments, then selection (`capstan_route`). Used by a
//! call (`task.rs`) and by `GET /v1/routes` (`edge/inspect/routes.rs`), so what `capstanctl routes`
//! shows is what a call would get.

use capstan_compose::capabilities::RoutedCapability;
use capstan_compose::source::Snapshot;
use capstan_route::{Decision, Refusal, Requirements, RouteRequest, route_for, select};

/// Why a routed call is refused before any candidate is looked at.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotRouted {
    /// The project's qualifiers could not be read: no call is routed around an operator's
    /// rule nobody could read.
    #[error(
        "the project's route qualifiers could not be read ({0}); routed calls are refused until \
         they can be, so no operator's rule is skipped"
    )]
    QualifiersUnread(String),
    /// The qualifiers and the call's routing arguments admit no route.
    #[error("{0}")]
    Refused(Refusal),
}

/// The decision for a call to `routed` under `snapshot`'s qualifiers with the call's `request`
/// and `requirements`, or why the route is refused before any candidate is looked at.
pub fn decide(
    routed: &RoutedCapability,
    snapshot: &Snapshot,
    request: &RouteRequest,
    requirements: &Requirements,
) -> Result<Decision, NotRouted> {
    if let Some(error) = &snapshot.qualifiers_error {
        return Err(NotRouted::QualifiersUnread(error.clone()));
    }
    let route = route_for(&routed.spec.capability_id, &snapshot.qualifiers, request)
        .map_err(NotRouted::Refused)?;
    Ok(select(
        routed.spec,
        &routed.candidates,
        &route,
        requirements,
    ))
}

/// "No eligible provider", with every exclusion: the capability exists (it is listed), so
/// saying why is safe and what the caller needs to change the route.
pub fn no_eligible_provider(decision: &Decision) -> String {
    let reasons: Vec<String> = decision
        .exclusions
        .iter()
        .map(|e| format!("{} ({}): {}", e.tool, e.binding, e.reason.as_str()))
        .collect();
    let qualifiers = if decision.qualifiers.is_empty() {
        String::new()
    } else {
        format!(" under qualifiers {}", decision.qualifiers.join(", "))
    };
    format!(
        "no eligible provider for {}{qualifiers}: {}",
        decision.capability,
        reasons.join("; ")
    )
}
