//! How the candidates that survive a call's exclusions are scored against each other: price
//! (against the cheapest of them), fitness (the caller's preferred features) and the
//! operator's quality, weighted by the constants of `select.rs`.

use super::{
    Candidate, DEFAULT_QUALITY, PREFER_BONUS, PRICE_FLOOR_MICROS, Route, UNPRICED,
    UNPRICED_BUNDLED, WEIGHT_FITNESS, WEIGHT_PRICE, WEIGHT_QUALITY,
};
use crate::spec::CapabilitySpec;

/// The price term: the log ratio to the cheapest priced survivor (both floored at
/// [`PRICE_FLOOR_MICROS`]), capped at ln 4 and mapped to 1 (cheapest) … 0 (4× or dearer).
fn price_term(candidate: &Candidate, cheapest: Option<i64>) -> f64 {
    let ln4 = 4f64.ln();
    match (candidate.price(), cheapest) {
        (Some(price), Some(cheapest)) => {
            let ratio =
                price.max(PRICE_FLOOR_MICROS) as f64 / cheapest.max(PRICE_FLOOR_MICROS) as f64;
            1.0 - ratio.ln().clamp(0.0, ln4) / ln4
        }
        _ if candidate.bundled() => UNPRICED_BUNDLED,
        _ => UNPRICED,
    }
}

/// The fitness term: the share of the features the caller prefers that the candidate claims;
/// when the caller prefers none, the share of the spec's vocabulary it claims.
fn fitness_term(candidate: &Candidate, spec: &CapabilitySpec, preferred: &[&str]) -> f64 {
    let claims = |f: &&&str| candidate.features.iter().any(|c| c == **f);
    let wanted: Vec<&str> = if preferred.is_empty() {
        spec.feature_vocabulary.iter().map(String::as_str).collect()
    } else {
        preferred.to_vec()
    };
    if wanted.is_empty() {
        return 1.0;
    }
    wanted.iter().filter(claims).count() as f64 / wanted.len() as f64
}

/// A survivor's score: the weighted price, fitness and quality² terms, plus the bonus for a
/// target the caller prefers. `cheapest` is the lowest price among the survivors.
fn score(
    candidate: &Candidate,
    spec: &CapabilitySpec,
    route: &Route,
    cheapest: Option<i64>,
    preferred: &[&str],
) -> f64 {
    let quality = f64::from(candidate.quality.unwrap_or(DEFAULT_QUALITY)) / 10_000.0;
    let preferred_target = route.prefer.iter().any(|t| candidate.matches(t));
    WEIGHT_PRICE * price_term(candidate, cheapest)
        + WEIGHT_FITNESS * fitness_term(candidate, spec, preferred)
        + WEIGHT_QUALITY * quality * quality
        + if preferred_target { PREFER_BONUS } else { 0.0 }
}

/// The survivors scored against each other (the cheapest among them sets the price term),
/// best first; ties by binding, then tool: deterministic whatever the input order.
pub(super) fn by_score<'a>(
    survivors: Vec<&'a Candidate>,
    spec: &CapabilitySpec,
    route: &Route,
    preferred: &[&str],
) -> Vec<(&'a Candidate, f64)> {
    let cheapest = survivors.iter().filter_map(|c| c.price()).min();
    let mut scored: Vec<(&Candidate, f64)> = survivors
        .into_iter()
        .map(|candidate| {
            (
                candidate,
                score(candidate, spec, route, cheapest, preferred),
            )
        })
        .collect();
    scored.sort_by(|(a, a_score), (b, b_score)| {
        b_score
            .total_cmp(a_score)
            .then_with(|| a.binding.cmp(&b.binding))
            .then_with(|| a.tool.cmp(&b.tool))
    });
    scored
}
