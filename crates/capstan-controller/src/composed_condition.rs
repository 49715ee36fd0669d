//! The `Composed` condition from what the probes found: one record per accepted binding, the
//! damping of flips, and collisions across bindings. Pure: no I/O, no clock of its own.
//!
//! A probe composes one binding alone, so it cannot see a name another binding took. The sidecar
//! composes every binding of a project together and the first in `first_wins_order` keeps a
//! contested name; here each binding's exposed names are indexed by owner in that same order,
//! and a binding's `Composed` subtracts the names an older binding's last probe exposed.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use capstan_api::conditions::composed;

use crate::status::{ConditionStatus, DesiredCondition, MAX_MESSAGE_LEN, bounded_message};

/// Where a binding stands in first-wins order (`capstan_api::binding::first_wins_key`).
pub type OrderKey = capstan_api::binding::FirstWinsKey;

/// What one probe found, in the terms status shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finding {
    /// The names an assistant would see from this binding alone.
    pub tools: Vec<String>,
    /// Why the binding is degraded, in stable sentences (empty: composed).
    pub reasons: Vec<String>,
    /// Whether a credential that could not be had is among the reasons: the condition's
    /// reason is then `CredentialUnavailable`, so the fix is looked for in the right place.
    pub credential: bool,
    /// What the probe could not look at without a caller (a token exchange), in sentences the
    /// condition carries beside "composed".
    pub unprobed: Vec<String>,
}

impl Finding {
    fn composed(&self) -> bool {
        self.reasons.is_empty()
    }
}

/// How a reported verdict changed with a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The first finding of this generation, reported at once.
    First,
    /// The verdict (composed or degraded) is unchanged; reasons or tools may differ.
    Same,
    /// The verdict differs from the reported one for the first time: held until a second
    /// probe agrees.
    Held,
    /// A second probe agreed: the verdict flipped.
    Flipped,
}

struct Record {
    key: OrderKey,
    generation: i64,
    reported: Finding,
    /// A finding whose verdict differs from the reported one, seen once.
    held: Option<Finding>,
    probed_at: Instant,
}

/// Every accepted binding's latest probe, and which binding owns each exposed name.
#[derive(Default)]
pub struct Findings {
    records: HashMap<String, Record>,
    /// How many records report a binding not composed (kept as records change, for the
    /// `bindings_not_composed` gauge).
    not_composed: usize,
    /// Exposed name → the bindings whose reported finding exposes it, in first-wins order.
    owners: HashMap<String, BTreeSet<OrderKey>>,
}

impl Findings {
    /// Records the finding of a probe of generation `generation` of binding `key.1`, finished
    /// at `now`. Returns how the report changed and the bindings whose status may change with
    /// it (those sharing a name with the old or the new report, this one included).
    pub fn record(
        &mut self,
        key: OrderKey,
        generation: i64,
        finding: Finding,
        now: Instant,
    ) -> (Report, Vec<String>) {
        let name = key.1.clone();
        let previous = self.records.remove(&name);
        if previous.as_ref().is_some_and(|r| !r.reported.composed()) {
            self.not_composed -= 1;
        }
        let mut affected: HashSet<String> = HashSet::from([name.clone()]);
        if let Some(old) = &previous {
            affected.extend(self.unindex(&old.key, &old.reported.tools));
        }
        let (report, reported, held) = match previous {
            Some(record) if record.generation == generation => {
                if finding.composed() == record.reported.composed() {
                    (Report::Same, finding, None)
                } else if record
                    .held
                    .as_ref()
                    .is_some_and(|held| held.composed() == finding.composed())
                {
                    (Report::Flipped, finding, None)
                } else {
                    (Report::Held, record.reported, Some(finding))
                }
            }
            _ => (Report::First, finding, None),
        };
        affected.extend(self.index(&key, &reported.tools));
        if !reported.composed() {
            self.not_composed += 1;
        }
        self.records.insert(
            name,
            Record {
                key,
                generation,
                reported,
                held,
                probed_at: now,
            },
        );
        let mut affected: Vec<String> = affected.into_iter().collect();
        affected.sort();
        (report, affected)
    }

    /// How many bindings are reported not composed.
    pub fn not_composed(&self) -> usize {
        self.not_composed
    }

    /// Forgets binding `name` (deleted, or no longer accepted). Returns the bindings whose
    /// status may change (those that shared a name with it).
    pub fn forget(&mut self, name: &str) -> Vec<String> {
        let Some(record) = self.records.remove(name) else {
            return Vec::new();
        };
        if !record.reported.composed() {
            self.not_composed -= 1;
        }
        let mut affected = self.unindex(&record.key, &record.reported.tools);
        affected.retain(|n| n != name);
        affected.sort();
        affected.dedup();
        affected
    }

    /// Drops `key`'s ownership of its names; the other owners of those names.
    fn unindex(&mut self, key: &OrderKey, tools: &[String]) -> Vec<String> {
        let mut affected = Vec::new();
        for tool in tools {
            if let Some(owners) = self.owners.get_mut(tool) {
                owners.remove(key);
                affected.extend(owners.iter().map(|(_, name)| name.clone()));
                if owners.is_empty() {
                    self.owners.remove(tool);
                }
            }
        }
        affected
    }

    /// Indexes `key` as an owner of `tools`; the other owners of those names.
    fn index(&mut self, key: &OrderKey, tools: &[String]) -> Vec<String> {
        let mut affected = Vec::new();
        for tool in tools {
            let owners = self.owners.entry(tool.clone()).or_default();
            affected.extend(owners.iter().map(|(_, name)| name.clone()));
            owners.insert(key.clone());
        }
        affected
    }

    /// When binding `name` at `generation` should be probed next: now when it has no finding
    /// for this generation; soon (a tenth of the interval) while a flip is held; else one
    /// `interval` after its last probe.
    pub fn next_probe(
        &self,
        name: &str,
        generation: i64,
        interval: Duration,
        now: Instant,
    ) -> Duration {
        match self.records.get(name) {
            Some(record) if record.generation == generation => {
                let wait = if record.held.is_some() {
                    interval / 10
                } else {
                    interval
                };
                (record.probed_at + wait).saturating_duration_since(now)
            }
            _ => Duration::ZERO,
        }
    }

    /// The `Composed` condition and tools of binding `name` at `generation`, or none when it
    /// has no finding for this generation yet. Names an older binding exposes are lost to it,
    /// each loss a reason naming the winner.
    pub fn condition(
        &self,
        name: &str,
        generation: i64,
    ) -> Option<(DesiredCondition, Vec<String>)> {
        let record = self
            .records
            .get(name)
            .filter(|r| r.generation == generation)?;
        let mut reasons = record.reported.reasons.clone();
        let mut tools = Vec::new();
        for tool in &record.reported.tools {
            let winner = self
                .owners
                .get(tool)
                .and_then(|owners| owners.iter().next())
                .filter(|winner| **winner != record.key);
            match winner {
                Some((_, winner)) => reasons.push(format!(
                    "tool name {tool} is already taken by binding {winner}"
                )),
                None => tools.push(tool.clone()),
            }
        }
        let condition = if reasons.is_empty() {
            let mut said = vec![format!("{} tools composed", tools.len())];
            said.extend(record.reported.unprobed.iter().cloned());
            DesiredCondition {
                type_: composed::TYPE,
                status: ConditionStatus::True,
                reason: composed::COMPOSED,
                message: bounded_message(&said, MAX_MESSAGE_LEN),
            }
        } else {
            DesiredCondition {
                type_: composed::TYPE,
                status: ConditionStatus::False,
                reason: if record.reported.credential {
                    composed::CREDENTIAL_UNAVAILABLE
                } else {
                    composed::COMPOSITION_DEGRADED
                },
                message: bounded_message(&reasons, MAX_MESSAGE_LEN),
            }
        };
        Some((condition, tools))
    }

    /// The names of every binding with a record.
    pub fn bindings(&self) -> impl Iterator<Item = &str> {
        self.records.keys().map(String::as_str)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(created: i64, name: &str) -> OrderKey {
        (Some(created), name.to_owned())
    }

    fn healthy(tools: &[&str]) -> Finding {
        Finding {
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            ..Finding::default()
        }
    }

    fn degraded(reason: &str) -> Finding {
        Finding {
            tools: Vec::new(),
            reasons: vec![reason.to_owned()],
            ..Finding::default()
        }
    }

    #[test]
    fn a_healthy_finding_should_read_composed_with_its_tools() {
        let mut findings = Findings::default();
        let now = Instant::now();
        findings.record(key(1, "a"), 1, healthy(&["s__x", "s__y"]), now);
        let (condition, tools) = findings.condition("a", 1).unwrap();
        assert_eq!(
            (condition.status, condition.reason),
            (ConditionStatus::True, "Composed")
        );
        assert_eq!(tools, ["s__x", "s__y"]);
        // Another generation has no finding yet.
        assert!(findings.condition("a", 2).is_none());
    }

    #[test]
    fn the_younger_binding_should_lose_a_contested_name_to_the_older() {
        let mut findings = Findings::default();
        let now = Instant::now();
        // Probed young first: order is by creation, not by probe.
        findings.record(key(20, "young"), 1, healthy(&["s__x", "s__only"]), now);
        let (_, affected) = findings.record(key(10, "old"), 1, healthy(&["s__x"]), now);
        assert_eq!(affected, ["old", "young"]);
        let (old, old_tools) = findings.condition("old", 1).unwrap();
        assert_eq!(old.status, ConditionStatus::True);
        assert_eq!(old_tools, ["s__x"]);
        let (young, young_tools) = findings.condition("young", 1).unwrap();
        assert_eq!(young.reason, "CompositionDegraded");
        assert_eq!(
            young.message,
            "tool name s__x is already taken by binding old"
        );
        assert_eq!(young_tools, ["s__only"]);
        // The older one goes away: the younger one keeps the name.
        assert_eq!(findings.forget("old"), ["young"]);
        let (young, young_tools) = findings.condition("young", 1).unwrap();
        assert_eq!(young.status, ConditionStatus::True);
        assert_eq!(young_tools, ["s__x", "s__only"]);
    }

    #[test]
    fn the_not_composed_count_should_follow_what_is_reported() {
        let mut findings = Findings::default();
        let now = Instant::now();
        findings.record(key(1, "a"), 1, degraded("down"), now);
        findings.record(key(2, "b"), 1, healthy(&["s__x"]), now);
        assert_eq!(findings.not_composed(), 1);
        // One degraded probe of a composed binding is held: still reported composed.
        findings.record(key(2, "b"), 1, degraded("down"), now);
        assert_eq!(findings.not_composed(), 1);
        findings.record(key(2, "b"), 1, degraded("down"), now);
        assert_eq!(findings.not_composed(), 2);
        // A new generation reports its first finding at once.
        findings.record(key(1, "a"), 2, healthy(&["s__y"]), now);
        assert_eq!(findings.not_composed(), 1);
        findings.forget("b");
        assert_eq!(findings.not_composed(), 0);
        findings.forget("b");
        assert_eq!(findings.not_composed(), 0);
    }

    #[test]
    fn a_flip_should_wait_for_a_second_probe_and_the_first_finding_should_not() {
        let mut findings = Findings::default();
        let now = Instant::now();
        let (report, _) = findings.record(key(1, "a"), 1, healthy(&["s__x"]), now);
        assert_eq!(report, Report::First);
        let (report, _) = findings.record(key(1, "a"), 1, degraded("down"), now);
        assert_eq!(report, Report::Held);
        assert_eq!(
            findings.condition("a", 1).unwrap().0.status,
            ConditionStatus::True
        );
        // Held: the next probe comes at a tenth of the interval.
        let interval = Duration::from_secs(100);
        assert_eq!(
            findings.next_probe("a", 1, interval, now),
            Duration::from_secs(10)
        );
        // A healthy probe in between cancels the held flip.
        let (report, _) = findings.record(key(1, "a"), 1, healthy(&["s__x"]), now);
        assert_eq!(report, Report::Same);
        findings.record(key(1, "a"), 1, degraded("down"), now);
        let (report, _) = findings.record(key(1, "a"), 1, degraded("still down"), now);
        assert_eq!(report, Report::Flipped);
        let (condition, tools) = findings.condition("a", 1).unwrap();
        assert_eq!(
            (condition.status, condition.message.as_str()),
            (ConditionStatus::False, "still down")
        );
        assert!(tools.is_empty());
        // A new generation reports at once.
        let (report, _) = findings.record(key(1, "a"), 2, healthy(&["s__x"]), now);
        assert_eq!(report, Report::First);
        assert_eq!(
            findings.condition("a", 2).unwrap().0.status,
            ConditionStatus::True
        );
    }

    #[test]
    fn the_next_probe_should_be_due_now_without_a_finding_and_after_the_interval_with_one() {
        let mut findings = Findings::default();
        let now = Instant::now();
        let interval = Duration::from_secs(300);
        assert_eq!(findings.next_probe("a", 1, interval, now), Duration::ZERO);
        findings.record(key(1, "a"), 1, healthy(&[]), now);
        assert_eq!(findings.next_probe("a", 1, interval, now), interval);
        assert_eq!(findings.next_probe("a", 2, interval, now), Duration::ZERO);
    }

    #[test]
    fn a_credential_failure_should_be_the_reason_and_an_unprobed_server_a_note() {
        let mut findings = Findings::default();
        let now = Instant::now();
        let failed = Finding {
            reasons: vec![
                "MCP server s at u was not dialed: its credential could not be had".into(),
            ],
            credential: true,
            ..Finding::default()
        };
        findings.record(key(1, "keyed"), 1, failed, now);
        let (condition, _) = findings.condition("keyed", 1).unwrap();
        assert_eq!(
            (condition.status, condition.reason),
            (ConditionStatus::False, "CredentialUnavailable")
        );
        let unprobed = Finding {
            tools: vec!["a__t".into()],
            unprobed: vec![
                "not probed without a caller: MCP server x of binding exchanged: …".into(),
            ],
            ..Finding::default()
        };
        findings.record(key(2, "exchanged"), 1, unprobed, now);
        let (condition, _) = findings.condition("exchanged", 1).unwrap();
        assert_eq!(condition.status, ConditionStatus::True);
        assert!(
            condition.message.contains("1 tools composed")
                && condition.message.contains("not probed without a caller"),
            "{}",
            condition.message
        );
    }
}
