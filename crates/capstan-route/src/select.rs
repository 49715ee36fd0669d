//! Selection: which composed provider serves one `cap.*` call, and why every other one did
//! not. A pure function of the spec, the candidates, the merged route and the caller's
//! requirements: same inputs, same decision, whatever order the candidates come in.
//!
//! Exclusions carry closed reasons (docs/routing.md): `target_missing` (not composed
//! in this session), `quarantined`, `qualifier_pin`, `qualifier_only`, `qualifier_ignore`,
//! `cost_ceiling`, `quality_floor`, `coverage_missing`, and `candidate_cap` (ranked outside the
//! top [`CANDIDATE_CAP`]). The first that applies is the one recorded.

use std::collections::BTreeSet;

use capstan_api::{CapabilityStatus, CostHint};
use serde::Serialize;

use crate::request::{Level, Requirements};
use crate::spec::CapabilitySpec;

mod route;
mod score;

pub use self::route::{PinnedBy, Refusal, Route, narrow, route_for};
use self::score::by_score;

/// Named in every decision record, so a record can be read against the rules that made it.
pub const ALGORITHM: &str = "capstan-route/1";

/// How many candidates are ranked; the rest are excluded as `candidate_cap`.
pub const CANDIDATE_CAP: usize = 8;

/// Prices below this (micro-USD) count as this: a near-free provider does not make every
/// other one look infinitely dear.
pub const PRICE_FLOOR_MICROS: i64 = 100;

// The weights are ours (docs/routing.md). Quality weighs most because it is the
// operator's own judgement of a provider; price next, as a log ratio so 2× dearer always costs
// the same; fitness (the features the caller prefers) last, because claims are self-declared.
// A target the caller prefers gets a bonus that outweighs small differences only.
/// Weight of the price term.
pub const WEIGHT_PRICE: f64 = 0.35;
/// Weight of the fitness term.
pub const WEIGHT_FITNESS: f64 = 0.25;
/// Weight of the quality term (quality², in 0..1).
pub const WEIGHT_QUALITY: f64 = 0.40;
/// Added for a target in the caller's `prefer`.
pub const PREFER_BONUS: f64 = 0.10;
/// The price term of an unpriced candidate whose cost is bundled in a broker subscription.
pub const UNPRICED_BUNDLED: f64 = 0.5;
/// The price term of an unpriced candidate: never a fabricated zero cost.
pub const UNPRICED: f64 = 0.35;
/// The quality prior of a candidate that declares none, for scoring (a floor excludes it).
pub const DEFAULT_QUALITY: u16 = 5000;

/// One provider tool mapped onto the capability.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// The binding's id (`namespace/name`, or the document's name).
    pub binding: String,
    /// The binding's service name, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The MCP server's name in the binding.
    pub server: String,
    /// The namespaced tool (`<server>__<tool>`).
    pub tool: String,
    /// Its coverage claims.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// Its price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_hint: Option<CostHint>,
    /// Its quality prior, basis points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<u16>,
    /// Active or quarantined.
    pub status: CapabilityStatus,
    /// Whether the tool is composed in this session (its server answered, the tool is allowed
    /// and listed).
    pub composed: bool,
}

impl Candidate {
    /// Whether a qualifier or request target names this candidate: its binding (`ns/name` or
    /// `name`), its namespaced tool, its server, or its service.
    pub fn matches(&self, target: &str) -> bool {
        target == self.binding
            || self.binding.rsplit('/').next() == Some(target)
            || target == self.tool
            || target == self.server
            || self.service.as_deref() == Some(target)
    }

    #[allow(clippy::type_complexity)]
    fn order_key(
        &self,
    ) -> (
        &str,
        &str,
        bool,
        bool,
        Option<u16>,
        Option<i64>,
        bool,
        &[String],
    ) {
        (
            &self.binding,
            &self.tool,
            !self.composed,
            self.status == CapabilityStatus::Quarantined,
            self.quality,
            self.price(),
            self.bundled(),
            &self.features,
        )
    }

    /// Whether any target in `targets` names this candidate: a lookup per name it answers to,
    /// not a scan of the set.
    fn named_in(&self, targets: &BTreeSet<String>) -> bool {
        let name = self.binding.rsplit('/').next();
        targets.contains(&self.binding)
            || name.is_some_and(|n| targets.contains(n))
            || targets.contains(&self.tool)
            || targets.contains(&self.server)
            || self.service.as_ref().is_some_and(|s| targets.contains(s))
    }

    fn price(&self) -> Option<i64> {
        self.cost_hint.as_ref().and_then(|c| c.base_micros_usd)
    }

    fn bundled(&self) -> bool {
        self.cost_hint.as_ref().is_some_and(|c| c.bundled_in_broker)
    }
}

/// Why a candidate was not chosen from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Not composed in this session (its server did not answer, or the tool is not listed).
    TargetMissing,
    /// The mapping's status is `quarantined`.
    Quarantined,
    /// A pin names another target.
    QualifierPin,
    /// Outside the `only` set.
    QualifierOnly,
    /// In the `ignore` set.
    QualifierIgnore,
    /// Dearer than the ceiling, or unpriced and not bundled while a ceiling is set.
    CostCeiling,
    /// Under the quality floor, or without a quality prior while a floor is set.
    QualityFloor,
    /// Lacks a feature the call requires.
    CoverageMissing,
    /// Ranked outside the top [`CANDIDATE_CAP`].
    CandidateCap,
    /// Ranked, but a limit on calls to its server was reached for this call (the sidecar's
    /// call limits, applied after selection): the next ranked candidate served.
    RateLimited,
}

impl Reason {
    /// The reason as records spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TargetMissing => "target_missing",
            Self::Quarantined => "quarantined",
            Self::QualifierPin => "qualifier_pin",
            Self::QualifierOnly => "qualifier_only",
            Self::QualifierIgnore => "qualifier_ignore",
            Self::CostCeiling => "cost_ceiling",
            Self::QualityFloor => "quality_floor",
            Self::CoverageMissing => "coverage_missing",
            Self::CandidateCap => "candidate_cap",
            Self::RateLimited => "rate_limited",
        }
    }
}

/// How the winner was picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteReason {
    /// The call pinned it.
    PinnedByRequest,
    /// A qualifier pinned it.
    PinnedByPolicy,
    /// It was the one survivor: not a choice.
    OnlyCandidate,
    /// It scored best.
    BestScore,
}

/// A candidate left out, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Exclusion {
    /// The binding.
    pub binding: String,
    /// The namespaced tool.
    pub tool: String,
    /// Why.
    pub reason: Reason,
}

/// A ranked candidate and its score.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ranked {
    /// The candidate.
    #[serde(flatten)]
    pub candidate: Candidate,
    /// Its score (higher is better).
    pub score: f64,
}

/// One routing decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The capability.
    pub capability: String,
    /// The ranked candidates, best first (at most [`CANDIDATE_CAP`]); the first is chosen.
    pub ranked: Vec<Ranked>,
    /// How the first was picked; `None` when nothing is eligible.
    pub route_reason: Option<RouteReason>,
    /// Every candidate left out.
    pub exclusions: Vec<Exclusion>,
    /// The qualifiers that applied, in name order.
    pub qualifiers: Vec<String>,
    /// [`ALGORITHM`].
    pub algorithm: &'static str,
}

impl Decision {
    /// The chosen candidate.
    pub fn selected(&self) -> Option<&Candidate> {
        self.ranked.first().map(|r| &r.candidate)
    }

    /// How many candidates were ranked.
    pub fn eligible(&self) -> usize {
        self.ranked.len()
    }
}

/// The first reason `candidate` may not serve under `route` and the caller's `required`
/// features, or none.
fn exclusion(candidate: &Candidate, route: &Route, required: &[&str]) -> Option<Reason> {
    if !candidate.composed {
        return Some(Reason::TargetMissing);
    }
    if candidate.status == CapabilityStatus::Quarantined {
        return Some(Reason::Quarantined);
    }
    if let Some((target, _)) = &route.pin
        && !candidate.matches(target)
    {
        return Some(Reason::QualifierPin);
    }
    if let Some(only) = &route.only
        && !candidate.named_in(only)
    {
        return Some(Reason::QualifierOnly);
    }
    if candidate.named_in(&route.ignore) {
        return Some(Reason::QualifierIgnore);
    }
    if let Some(ceiling) = route.max_cost_micros_usd {
        let over = match candidate.price() {
            Some(price) => price > ceiling,
            None => !candidate.bundled(),
        };
        if over {
            return Some(Reason::CostCeiling);
        }
    }
    if let Some(floor) = route.min_quality
        && candidate.quality.is_none_or(|q| q < floor)
    {
        return Some(Reason::QualityFloor);
    }
    if required
        .iter()
        .any(|f| !candidate.features.iter().any(|c| c == f))
    {
        return Some(Reason::CoverageMissing);
    }
    None
}

/// Why the first of `ranked` candidates was chosen: a pin, being the only one, or the best
/// score; `None` when none is eligible.
fn route_reason(route: &Route, ranked: usize) -> Option<RouteReason> {
    match (&route.pin, ranked) {
        (_, 0) => None,
        (Some((_, PinnedBy::Policy)), _) => Some(RouteReason::PinnedByPolicy),
        (Some((_, PinnedBy::Request)), _) => Some(RouteReason::PinnedByRequest),
        (None, 1) => Some(RouteReason::OnlyCandidate),
        (None, _) => Some(RouteReason::BestScore),
    }
}

/// The features of `requirements` at `level` that the spec's vocabulary knows.
fn known_features<'a>(
    spec: &CapabilitySpec,
    requirements: &'a Requirements,
    level: Level,
) -> Vec<&'a str> {
    requirements
        .iter()
        .filter(|(feature, l)| **l == level && spec.knows(feature))
        .map(|(feature, _)| feature.as_str())
        .collect()
}

/// `candidates` in a fixed order, one per (binding, tool) pair: should a pair appear twice,
/// the copy kept is chosen by its contents, never by input order.
fn distinct(candidates: &[Candidate]) -> Vec<&Candidate> {
    let mut ordered: Vec<&Candidate> = candidates.iter().collect();
    ordered.sort_by_key(|c| c.order_key());
    ordered.dedup_by(|a, b| a.binding == b.binding && a.tool == b.tool);
    ordered
}

/// Parts `candidates` into those left out, each with its first reason, and the survivors that
/// may serve, both in the order given.
fn sift<'a>(
    candidates: Vec<&'a Candidate>,
    route: &Route,
    required: &[&str],
) -> (Vec<Exclusion>, Vec<&'a Candidate>) {
    let mut exclusions = Vec::new();
    let mut survivors = Vec::new();
    for candidate in candidates {
        match exclusion(candidate, route, required) {
            Some(reason) => exclusions.push(Exclusion {
                binding: candidate.binding.clone(),
                tool: candidate.tool.clone(),
                reason,
            }),
            None => survivors.push(candidate),
        }
    }
    (exclusions, survivors)
}

/// Chooses among `candidates` for a call to `spec` under `route` with the caller's
/// `requirements` (keys outside the spec's vocabulary are ignored: they are model-written and
/// must not steer).
pub fn select(
    spec: &CapabilitySpec,
    candidates: &[Candidate],
    route: &Route,
    requirements: &Requirements,
) -> Decision {
    let required = known_features(spec, requirements, Level::Require);
    let preferred = known_features(spec, requirements, Level::Prefer);
    let (mut exclusions, survivors) = sift(distinct(candidates), route, &required);
    let scored = by_score(survivors, spec, route, &preferred);
    let cut = scored.len().min(CANDIDATE_CAP);
    for (capped, _) in &scored[cut..] {
        exclusions.push(Exclusion {
            binding: capped.binding.clone(),
            tool: capped.tool.clone(),
            reason: Reason::CandidateCap,
        });
    }
    let ranked: Vec<Ranked> = scored[..cut]
        .iter()
        .map(|(candidate, score)| Ranked {
            candidate: (*candidate).clone(),
            score: *score,
        })
        .collect();
    Decision {
        capability: spec.capability_id.clone(),
        route_reason: route_reason(route, ranked.len()),
        ranked,
        exclusions,
        qualifiers: route.qualifiers.clone(),
        algorithm: ALGORITHM,
    }
}
