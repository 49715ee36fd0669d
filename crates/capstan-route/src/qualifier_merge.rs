//! RouteQualifier merge: which qualifiers take effect, which contradict each other, and the
//! merged constraint for one capability.
//!
//! Rules (docs/routing.md, "Merge"): qualifiers merge in name order; at
//! most [`MAX_QUALIFIERS`] take effect and the rest are refused as LimitExceeded; a qualifier
//! without a capability id applies to every capability; `only` target sets intersect and an
//! empty intersection is a contradiction; `ignore` sets union; pins must agree; `minQuality`
//! takes the maximum and `maxCostMicrosUsd` the minimum. A contradiction is never read as
//! "unconstrained": every qualifier in it is refused, naming the others, and calls to the
//! capability are refused.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use capstan_api::{RouteConstraint, RouteQualifierSpec};

/// How many qualifiers take effect; the rest, in name order, are refused. 32: enough for
/// per-capability rules on a large catalog, small enough that a merge stays readable in one
/// condition message.
pub const MAX_QUALIFIERS: usize = 32;

/// A valid qualifier as the merge sees it.
#[derive(Clone, Copy, Debug)]
pub struct Qualifier<'a> {
    /// The qualifier's name (its `metadata.name`), the merge order key.
    pub name: &'a str,
    /// Its validated spec.
    pub spec: &'a RouteQualifierSpec,
}

/// Which capabilities a conflict is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every capability: the conflict is among qualifiers without a capability id.
    Every,
    /// One capability.
    Capability(String),
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Every => f.write_str("every capability"),
            Self::Capability(id) => f.write_str(id),
        }
    }
}

/// What makes a merge contradictory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ConflictKind {
    /// The `only` target sets have no target in common: nothing could serve.
    EmptyOnlyIntersection,
    /// Two pins name different targets.
    DifferentPins,
}

impl fmt::Display for ConflictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::EmptyOnlyIntersection => "their `only` targets have none in common",
            Self::DifferentPins => "they pin different targets",
        })
    }
}

/// A contradictory merge: the qualifiers involved, for one scope.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Conflict {
    /// The capability (or every capability) the contradiction concerns.
    pub scope: Scope,
    /// What contradicts.
    pub kind: ConflictKind,
    /// Every qualifier involved, in name order.
    pub qualifiers: Vec<String>,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "qualifiers {} contradict on {}: {}",
            self.qualifiers.join(", "),
            self.scope,
            self.kind
        )
    }
}

/// The set-level verdict on one valid qualifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It takes effect.
    Accepted,
    /// It is beyond the [`MAX_QUALIFIERS`]th in name order and does not take effect.
    LimitExceeded {
        /// Its 1-based position in name order.
        position: usize,
    },
    /// It contradicts other qualifiers; each conflict it is part of, in scope order.
    Conflict(Vec<Conflict>),
}

impl Verdict {
    /// A condition message for a qualifier named `name`; empty for [`Verdict::Accepted`].
    pub fn message(&self, name: &str) -> String {
        match self {
            Self::Accepted => String::new(),
            Self::LimitExceeded { position } => format!(
                "qualifier {position} in name order; only the first {MAX_QUALIFIERS} take \
                 effect: delete or merge qualifiers, or rename this one to sort earlier"
            ),
            Self::Conflict(conflicts) => {
                let parts: Vec<String> = conflicts
                    .iter()
                    .map(|c| {
                        let others: Vec<&str> = c
                            .qualifiers
                            .iter()
                            .map(String::as_str)
                            .filter(|q| *q != name)
                            .collect();
                        format!(
                            "conflicts with {} on {}: {}",
                            others.join(", "),
                            c.scope,
                            c.kind
                        )
                    })
                    .collect();
                format!(
                    "{}; calls to the capability are refused until one side changes",
                    parts.join("; ")
                )
            }
        }
    }
}

/// Verdicts for a set of valid qualifiers (in any order), keyed by name.
pub fn verdicts(qualifiers: &[Qualifier<'_>]) -> BTreeMap<String, Verdict> {
    let mut ordered: Vec<Qualifier<'_>> = qualifiers.to_vec();
    ordered.sort_by(|a, b| a.name.cmp(b.name));
    let mut result: BTreeMap<String, Verdict> = BTreeMap::new();
    for (index, qualifier) in ordered.iter().enumerate().skip(MAX_QUALIFIERS) {
        result.insert(
            qualifier.name.to_owned(),
            Verdict::LimitExceeded {
                position: index + 1,
            },
        );
    }
    let effective = &ordered[..ordered.len().min(MAX_QUALIFIERS)];

    let mut conflicts: BTreeMap<String, BTreeSet<Conflict>> = BTreeMap::new();
    for scope in scopes(effective) {
        for conflict in scope_conflicts(&scope, effective) {
            for name in &conflict.qualifiers {
                conflicts
                    .entry(name.clone())
                    .or_default()
                    .insert(conflict.clone());
            }
        }
    }
    for qualifier in effective {
        let verdict = match conflicts.remove(qualifier.name) {
            Some(found) => Verdict::Conflict(found.into_iter().collect()),
            None => Verdict::Accepted,
        };
        result.insert(qualifier.name.to_owned(), verdict);
    }
    result
}

/// The merged constraint for one capability.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergedRoute {
    /// Only these targets may serve; `None` when no qualifier restricts to a set.
    pub only: Option<BTreeSet<String>>,
    /// These targets may not serve.
    pub ignore: BTreeSet<String>,
    /// Exactly this target serves.
    pub pin: Option<String>,
    /// The highest `minQuality` among the qualifiers.
    pub min_quality: Option<u16>,
    /// The lowest `maxCostMicrosUsd` among the qualifiers.
    pub max_cost_micros_usd: Option<i64>,
    /// The qualifiers merged, in name order.
    pub qualifiers: Vec<String>,
}

/// The merged constraint for `capability` from the qualifiers that take effect, or the
/// contradiction that makes calls to it refused.
pub fn merge_for(capability: &str, qualifiers: &[Qualifier<'_>]) -> Result<MergedRoute, Conflict> {
    let mut ordered: Vec<Qualifier<'_>> = qualifiers.to_vec();
    ordered.sort_by(|a, b| a.name.cmp(b.name));
    ordered.truncate(MAX_QUALIFIERS);
    let scope = Scope::Capability(capability.to_owned());
    if let Some(conflict) = scope_conflicts(&scope, &ordered).into_iter().next() {
        return Err(conflict);
    }
    let mut merged = MergedRoute::default();
    for qualifier in ordered.iter().filter(|q| applies(q, &scope)) {
        merged.qualifiers.push(qualifier.name.to_owned());
        match &qualifier.spec.constraint {
            RouteConstraint::None => {}
            RouteConstraint::Only { targets } => {
                let targets: BTreeSet<String> = targets.iter().cloned().collect();
                merged.only = Some(match merged.only.take() {
                    Some(current) => current.intersection(&targets).cloned().collect(),
                    None => targets,
                });
            }
            RouteConstraint::Ignore { targets } => merged.ignore.extend(targets.iter().cloned()),
            RouteConstraint::Pin { target } => merged.pin = Some(target.clone()),
        }
        if let Some(min) = qualifier.spec.min_quality {
            merged.min_quality = Some(merged.min_quality.map_or(min, |m| m.max(min)));
        }
        if let Some(max) = qualifier.spec.max_cost_micros_usd {
            merged.max_cost_micros_usd =
                Some(merged.max_cost_micros_usd.map_or(max, |m| m.min(max)));
        }
    }
    Ok(merged)
}

/// Every scope a conflict can arise in: every capability (qualifiers without an id among
/// themselves), and each capability a qualifier names (together with the global ones).
fn scopes(qualifiers: &[Qualifier<'_>]) -> BTreeSet<Scope> {
    let mut scopes: BTreeSet<Scope> = qualifiers
        .iter()
        .filter_map(|q| q.spec.capability_id.clone().map(Scope::Capability))
        .collect();
    scopes.insert(Scope::Every);
    scopes
}

fn applies(qualifier: &Qualifier<'_>, scope: &Scope) -> bool {
    match (&qualifier.spec.capability_id, scope) {
        (None, _) => true,
        (Some(id), Scope::Capability(capability)) => id == capability,
        (Some(_), Scope::Every) => false,
    }
}

/// The contradictions among the qualifiers that apply in `scope`. Every `only` qualifier is
/// part of an empty intersection and every pin of a pin disagreement: no one of them alone is
/// "the" wrong one, and each owner must see the others named.
fn scope_conflicts(scope: &Scope, qualifiers: &[Qualifier<'_>]) -> Vec<Conflict> {
    let applicable: Vec<&Qualifier<'_>> = qualifiers.iter().filter(|q| applies(q, scope)).collect();
    let mut found = Vec::new();

    let only: Vec<(&str, BTreeSet<&str>)> = applicable
        .iter()
        .filter_map(|q| match &q.spec.constraint {
            RouteConstraint::Only { targets } => {
                Some((q.name, targets.iter().map(String::as_str).collect()))
            }
            _ => None,
        })
        .collect();
    if only.len() > 1 {
        let mut common = only[0].1.clone();
        for (_, targets) in &only[1..] {
            common = common.intersection(targets).copied().collect();
        }
        if common.is_empty() {
            found.push(Conflict {
                scope: scope.clone(),
                kind: ConflictKind::EmptyOnlyIntersection,
                qualifiers: only.iter().map(|(name, _)| (*name).to_owned()).collect(),
            });
        }
    }

    let pins: Vec<(&str, &str)> = applicable
        .iter()
        .filter_map(|q| match &q.spec.constraint {
            RouteConstraint::Pin { target } => Some((q.name, target.as_str())),
            _ => None,
        })
        .collect();
    let targets: BTreeSet<&str> = pins.iter().map(|(_, target)| *target).collect();
    if targets.len() > 1 {
        found.push(Conflict {
            scope: scope.clone(),
            kind: ConflictKind::DifferentPins,
            qualifiers: pins.iter().map(|(name, _)| (*name).to_owned()).collect(),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(capability: Option<&str>, constraint: RouteConstraint) -> RouteQualifierSpec {
        RouteQualifierSpec {
            capability_id: capability.map(str::to_owned),
            constraint,
            ..Default::default()
        }
    }

    fn only(targets: &[&str]) -> RouteConstraint {
        RouteConstraint::Only {
            targets: targets.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    fn pin(target: &str) -> RouteConstraint {
        RouteConstraint::Pin {
            target: target.to_owned(),
        }
    }

    fn qualifiers<'a>(specs: &'a [(String, RouteQualifierSpec)]) -> Vec<Qualifier<'a>> {
        specs
            .iter()
            .map(|(name, spec)| Qualifier { name, spec })
            .collect()
    }

    fn named(specs: Vec<(&str, RouteQualifierSpec)>) -> Vec<(String, RouteQualifierSpec)> {
        specs.into_iter().map(|(n, s)| (n.to_owned(), s)).collect()
    }

    #[test]
    fn agreeing_qualifiers_should_all_be_accepted() {
        let specs = named(vec![
            ("a", spec(Some("cap.web.search"), only(&["exa", "brave"]))),
            ("b", spec(Some("cap.web.search"), only(&["exa"]))),
            ("c", spec(None, RouteConstraint::None)),
        ]);
        let verdicts = verdicts(&qualifiers(&specs));
        assert!(
            verdicts.values().all(|v| *v == Verdict::Accepted),
            "{verdicts:?}"
        );
    }

    #[test]
    fn empty_only_intersection_should_refuse_every_side_naming_the_others() {
        let specs = named(vec![
            ("a", spec(Some("cap.web.search"), only(&["exa"]))),
            ("b", spec(Some("cap.web.search"), only(&["brave"]))),
            ("c", spec(Some("cap.web.scrape"), only(&["firecrawl"]))),
        ]);
        let verdicts = verdicts(&qualifiers(&specs));
        assert_eq!(verdicts["c"], Verdict::Accepted);
        assert_eq!(
            verdicts["a"].message("a"),
            "conflicts with b on cap.web.search: their `only` targets have none in common; \
             calls to the capability are refused until one side changes"
        );
        assert!(matches!(&verdicts["b"], Verdict::Conflict(c) if c[0].qualifiers == ["a", "b"]));
    }

    #[test]
    fn qualifier_without_capability_should_conflict_with_a_specific_one() {
        let specs = named(vec![
            ("global-pin", spec(None, pin("exa"))),
            ("search-pin", spec(Some("cap.web.search"), pin("brave"))),
        ]);
        let verdicts = verdicts(&qualifiers(&specs));
        let expected = Conflict {
            scope: Scope::Capability("cap.web.search".into()),
            kind: ConflictKind::DifferentPins,
            qualifiers: vec!["global-pin".into(), "search-pin".into()],
        };
        assert_eq!(
            verdicts["global-pin"],
            Verdict::Conflict(vec![expected.clone()])
        );
        assert_eq!(verdicts["search-pin"], Verdict::Conflict(vec![expected]));
    }

    #[test]
    fn same_pin_twice_should_agree() {
        let specs = named(vec![
            ("a", spec(None, pin("exa"))),
            ("b", spec(Some("cap.web.search"), pin("exa"))),
        ]);
        assert!(
            verdicts(&qualifiers(&specs))
                .values()
                .all(|v| *v == Verdict::Accepted)
        );
    }

    #[test]
    fn qualifiers_beyond_the_limit_should_be_refused_in_name_order() {
        let specs: Vec<(String, RouteQualifierSpec)> = (0..40)
            .rev()
            .map(|i| (format!("q{i:02}"), spec(None, RouteConstraint::None)))
            .collect();
        let verdicts = verdicts(&qualifiers(&specs));
        assert_eq!(verdicts["q31"], Verdict::Accepted);
        assert_eq!(verdicts["q32"], Verdict::LimitExceeded { position: 33 });
        assert_eq!(
            verdicts
                .values()
                .filter(|v| **v == Verdict::Accepted)
                .count(),
            32
        );
    }

    #[test]
    fn a_conflict_beyond_the_limit_should_not_refuse_an_effective_qualifier() {
        let mut specs: Vec<(String, RouteQualifierSpec)> = (0..32)
            .map(|i| (format!("q{i:02}"), spec(None, RouteConstraint::None)))
            .collect();
        specs[0].1 = spec(None, pin("exa"));
        specs.push(("zz-late".into(), spec(None, pin("brave"))));
        let verdicts = verdicts(&qualifiers(&specs));
        assert_eq!(verdicts["q00"], Verdict::Accepted);
        assert_eq!(verdicts["zz-late"], Verdict::LimitExceeded { position: 33 });
    }

    #[test]
    fn merge_should_intersect_union_and_take_the_strictest_bounds() {
        let mut a = spec(Some("cap.web.search"), only(&["exa", "brave", "tavily"]));
        a.min_quality = Some(5000);
        a.max_cost_micros_usd = Some(30_000);
        let mut b = spec(
            None,
            RouteConstraint::Ignore {
                targets: vec!["tavily".into()],
            },
        );
        b.min_quality = Some(7000);
        let mut c = spec(Some("cap.web.search"), only(&["exa", "brave"]));
        c.max_cost_micros_usd = Some(20_000);
        let other = spec(Some("cap.web.scrape"), pin("firecrawl"));
        let specs = named(vec![("a", a), ("b", b), ("c", c), ("d", other)]);
        let merged =
            merge_for("cap.web.search", &qualifiers(&specs)).unwrap_or_else(|c| panic!("{c}"));
        assert_eq!(
            merged,
            MergedRoute {
                only: Some(["brave".to_owned(), "exa".to_owned()].into()),
                ignore: ["tavily".to_owned()].into(),
                pin: None,
                min_quality: Some(7000),
                max_cost_micros_usd: Some(20_000),
                qualifiers: vec!["a".into(), "b".into(), "c".into()],
            }
        );
    }

    #[test]
    fn merge_should_refuse_a_contradiction_rather_than_route_unconstrained() {
        let specs = named(vec![
            ("a", spec(Some("cap.web.search"), only(&["exa"]))),
            ("b", spec(None, only(&["brave"]))),
        ]);
        let conflict = merge_for("cap.web.search", &qualifiers(&specs)).err();
        assert_eq!(
            conflict.map(|c| c.to_string()).as_deref(),
            Some(
                "qualifiers a, b contradict on cap.web.search: their `only` targets have none in common"
            )
        );
        // Another capability only sees the global qualifier.
        assert!(merge_for("cap.web.scrape", &qualifiers(&specs)).is_ok());
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        const CAPABILITIES: [&str; 3] = ["cap.web.search", "cap.web.scrape", "cap.issue.create"];
        const TARGETS: [&str; 4] = ["exa", "brave", "tavily", "firecrawl"];

        fn arbitrary_spec() -> impl Strategy<Value = RouteQualifierSpec> {
            let capability = proptest::option::of(proptest::sample::select(&CAPABILITIES[..]));
            let targets = proptest::sample::subsequence(&TARGETS[..], 1..=3)
                .prop_map(|t| t.into_iter().map(str::to_owned).collect::<Vec<_>>());
            let constraint = prop_oneof![
                Just(RouteConstraint::None),
                targets
                    .clone()
                    .prop_map(|targets| RouteConstraint::Only { targets }),
                targets.prop_map(|targets| RouteConstraint::Ignore { targets }),
                proptest::sample::select(&TARGETS[..]).prop_map(|t| RouteConstraint::Pin {
                    target: t.to_owned()
                }),
            ];
            (capability, constraint)
                .prop_map(|(capability, constraint)| spec(capability, constraint))
        }

        proptest! {
            /// The controller's verdicts and the sidecar's merge agree: a capability refuses
            /// calls exactly when some effective qualifier is marked conflicting on it, or on
            /// every capability.
            #[test]
            fn verdicts_and_merge_should_agree(specs in proptest::collection::vec(arbitrary_spec(), 0..40)) {
                let specs: Vec<(String, RouteQualifierSpec)> =
                    specs.into_iter().enumerate().map(|(i, s)| (format!("q{i:02}"), s)).collect();
                let qualifiers = qualifiers(&specs);
                let verdicts = verdicts(&qualifiers);
                prop_assert_eq!(verdicts.len(), specs.len());
                for capability in CAPABILITIES {
                    let scoped_conflict = verdicts.values().any(|v| matches!(v, Verdict::Conflict(cs)
                        if cs.iter().any(|c| c.scope == Scope::Every || c.scope == Scope::Capability(capability.into()))));
                    prop_assert_eq!(merge_for(capability, &qualifiers).is_err(), scoped_conflict, "{}", capability);
                }
                let accepted = verdicts.values().filter(|v| !matches!(v, Verdict::LimitExceeded { .. })).count();
                prop_assert_eq!(accepted, specs.len().min(MAX_QUALIFIERS));
            }
        }
    }
}
