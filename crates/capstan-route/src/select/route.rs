//! The route of one `cap.*` call: the project's qualifiers merged, then narrowed by what the
//! call asks (`route`, `requirements`); a route that cannot be followed refuses the call.

use std::collections::BTreeSet;
use std::fmt;

use capstan_api::RouteQualifierSpec;
use serde::Serialize;

use crate::qualifier_merge::{Conflict, MergedRoute, Qualifier, merge_for};
use crate::request::RouteRequest;

/// Who pinned the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PinnedBy {
    /// A RouteQualifier.
    Policy,
    /// The call's `route.pin`.
    Request,
}

/// The qualifiers merged and narrowed by the call's route.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    /// Only these targets may serve.
    pub only: Option<BTreeSet<String>>,
    /// These may not.
    pub ignore: BTreeSet<String>,
    /// Exactly this one serves, and who said so.
    pub pin: Option<(String, PinnedBy)>,
    /// Quality floor.
    pub min_quality: Option<u16>,
    /// Cost ceiling.
    pub max_cost_micros_usd: Option<i64>,
    /// Targets the caller favours.
    pub prefer: Vec<String>,
    /// The qualifiers that applied, in name order.
    pub qualifiers: Vec<String>,
}

/// A route that cannot be followed: the call is refused, never routed unconstrained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The qualifiers contradict each other.
    Conflict(Conflict),
    /// The call's `only` shares no target with the qualifiers' (or is empty).
    EmptyOnly {
        /// The qualifiers whose `only` applies.
        qualifiers: Vec<String>,
    },
    /// The call pins another target than a qualifier does.
    PinDisagrees {
        /// The call's pin.
        request: String,
        /// The qualifiers' pin.
        policy: String,
        /// The qualifiers that applied.
        qualifiers: Vec<String>,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Conflict(conflict) => write!(
                f,
                "{conflict}; calls are refused until the qualifiers agree (kubectl get \
                 routequalifiers shows which)"
            ),
            Self::EmptyOnly { qualifiers } if qualifiers.is_empty() => {
                f.write_str("route.only names no target: nothing could serve")
            }
            Self::EmptyOnly { qualifiers } => write!(
                f,
                "route.only shares no target with the `only` of qualifiers {}: nothing could \
                 serve; a call may only narrow the qualifiers",
                qualifiers.join(", ")
            ),
            Self::PinDisagrees {
                request,
                policy,
                qualifiers,
            } => write!(
                f,
                "route.pin {request:?} disagrees with the pin {policy:?} of qualifiers {}; a \
                 call may only narrow the qualifiers",
                qualifiers.join(", ")
            ),
        }
    }
}

/// The route for a call to `capability`: the qualifiers (valid ones, any order) merged in name
/// order, then narrowed by the call's `request`.
pub fn route_for(
    capability: &str,
    qualifiers: &[(String, RouteQualifierSpec)],
    request: &RouteRequest,
) -> Result<Route, Refusal> {
    let views: Vec<Qualifier<'_>> = qualifiers
        .iter()
        .map(|(name, spec)| Qualifier { name, spec })
        .collect();
    let merged = merge_for(capability, &views).map_err(Refusal::Conflict)?;
    narrow(merged, request)
}

/// The qualifiers' merged route narrowed by a call: `only` intersects (empty → refusal),
/// `ignore` unions, pins must agree, the quality floor takes the higher and the cost ceiling
/// the lower, `prefer` lists concatenate.
pub fn narrow(merged: MergedRoute, request: &RouteRequest) -> Result<Route, Refusal> {
    let only = match (merged.only, &request.only) {
        (None, None) => None,
        (Some(policy), None) => Some(policy),
        (None, Some(asked)) => Some(asked.iter().cloned().collect()),
        (Some(policy), Some(asked)) => {
            Some(policy.into_iter().filter(|t| asked.contains(t)).collect())
        }
    };
    if only.as_ref().is_some_and(BTreeSet::is_empty) {
        return Err(Refusal::EmptyOnly {
            qualifiers: merged.qualifiers,
        });
    }
    let pin = match (merged.pin, &request.pin) {
        (Some(policy), Some(asked)) if &policy != asked => {
            return Err(Refusal::PinDisagrees {
                request: asked.clone(),
                policy,
                qualifiers: merged.qualifiers,
            });
        }
        (Some(policy), _) => Some((policy, PinnedBy::Policy)),
        (None, Some(asked)) => Some((asked.clone(), PinnedBy::Request)),
        (None, None) => None,
    };
    let mut ignore = merged.ignore;
    ignore.extend(request.ignore.iter().cloned());
    let min_quality = match (merged.min_quality, request.min_quality) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let max_cost_micros_usd = match (merged.max_cost_micros_usd, request.max_cost_micros_usd) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(Route {
        only,
        ignore,
        pin,
        min_quality,
        max_cost_micros_usd,
        prefer: request.prefer.clone(),
        qualifiers: merged.qualifiers,
    })
}
