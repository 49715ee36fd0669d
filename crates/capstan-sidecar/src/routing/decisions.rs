//! Routing decisions kept for reading back: a bounded ring per project, newest first, served
//! at `GET /v1/route-decisions?capability=&limit=` to callers of the same project
//! (docs/routing.md). Each project has its own ring, so no project's calls push another's
//! records out; a call's `intent` is kept as a keyed digest only.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use capstan_route::{Decision, Exclusion, RouteReason};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

/// Decisions kept per project by default: about a minute of a busy assistant's routed calls.
pub const DEFAULT_CAPACITY: usize = 1024;

/// Projects whose decisions are kept at most. When a new project would pass it, the project
/// whose newest record is oldest is forgotten whole: memory stays bounded (4,096 × 1,024
/// records at most, ~1 KiB each) and no busy project loses records to another's calls.
pub const MAX_PROJECTS: usize = 4096;

/// The chosen provider.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Selected {
    /// Its binding.
    pub binding: String,
    /// Its MCP server.
    pub server: String,
    /// The namespaced tool called.
    pub tool: String,
    /// Its service, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

/// One routed call, as recorded.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    /// When (RFC 3339).
    pub time: String,
    /// The caller's project.
    pub project: String,
    /// The capability called.
    pub capability: String,
    /// The provider chosen, if any.
    pub selected: Option<Selected>,
    /// How it was chosen (absent when nothing was eligible or the route was refused).
    pub route_reason: Option<RouteReason>,
    /// How many candidates were ranked.
    pub eligible: usize,
    /// Every candidate left out, with its reason.
    pub exclusions: Vec<Exclusion>,
    /// The qualifiers that applied, in name order.
    pub qualifiers: Vec<String>,
    /// The selection algorithm.
    pub algorithm: &'static str,
    /// The call's `intent` keyed with a per-process secret (HMAC-SHA256, first 16 hex digits):
    /// calls with the same intent correlate; a guessed intent cannot be confirmed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent_digest: Option<String>,
    /// Why the route was refused before selection (contradicting qualifiers, a call that
    /// widens them, qualifiers that could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Whose call it was (the digest of project and token), never shown: with per-tool
    /// authorization a caller reads back only its own calls' decisions
    /// (docs/authorization.md).
    #[serde(skip)]
    pub caller: Option<[u8; 32]>,
}

impl DecisionRecord {
    /// The record, as made for the call of `caller` (its identity's fingerprint).
    pub fn by(mut self, caller: [u8; 32]) -> Self {
        self.caller = Some(caller);
        self
    }

    /// The record of `decision` for `project`.
    pub fn of(project: &str, decision: &Decision, intent_digest: Option<String>) -> Self {
        Self {
            time: now(),
            project: project.to_owned(),
            capability: decision.capability.clone(),
            selected: decision.selected().map(|c| Selected {
                binding: c.binding.clone(),
                server: c.server.clone(),
                tool: c.tool.clone(),
                service: c.service.clone(),
            }),
            route_reason: decision.route_reason,
            eligible: decision.eligible(),
            exclusions: decision.exclusions.clone(),
            qualifiers: decision.qualifiers.clone(),
            algorithm: decision.algorithm,
            intent_digest,
            refused: None,
            caller: None,
        }
    }

    /// The record of a call to `capability` whose route was refused.
    pub fn refused(
        project: &str,
        capability: &str,
        why: String,
        intent_digest: Option<String>,
    ) -> Self {
        Self {
            time: now(),
            project: project.to_owned(),
            capability: capability.to_owned(),
            selected: None,
            route_reason: None,
            eligible: 0,
            exclusions: Vec::new(),
            qualifiers: Vec::new(),
            algorithm: capstan_route::ALGORITHM,
            intent_digest,
            refused: Some(why),
            caller: None,
        }
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// One project's ring and when it last recorded (a sequence number).
struct Ring {
    entries: VecDeque<Arc<DecisionRecord>>,
    last: u64,
}

/// The last decisions of every project, bounded per project.
pub struct DecisionLog {
    rings: Mutex<(HashMap<String, Ring>, u64)>,
    capacity: usize,
    max_projects: usize,
    /// The per-process secret intent digests are keyed with.
    intent_key: [u8; 32],
}

impl DecisionLog {
    /// A log keeping the last `capacity` decisions (at least one) of each project, for at most
    /// [`MAX_PROJECTS`] projects.
    pub fn new(capacity: usize) -> Self {
        let mut intent_key = [0u8; 32];
        // Without randomness the key stays zero: digests are then plain HMACs of a known key,
        // no worse than the unkeyed digest, and the log says so.
        if let Err(error) = getrandom::fill(&mut intent_key) {
            tracing::warn!(%error, "no randomness for the intent-digest key");
        }
        Self {
            rings: Mutex::new((HashMap::new(), 0)),
            capacity: capacity.max(1),
            max_projects: MAX_PROJECTS,
            intent_key,
        }
    }

    /// The digest a call's `intent` is kept as: HMAC-SHA256 with a secret drawn per process,
    /// the first 16 hex digits. Enough to tell whether two calls of one sidecar had the same
    /// intent; a guessed intent cannot be confirmed against it by anyone without the key.
    pub fn intent_digest(&self, intent: &str) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.intent_key) else {
            // HMAC takes keys of any length.
            return String::new();
        };
        mac.update(intent.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Keeps `record` in its project's ring, dropping that project's oldest beyond the
    /// capacity.
    pub fn record(&self, record: DecisionRecord) {
        // A poisoned log loses records, never a call.
        let Ok(mut guard) = self.rings.lock() else {
            return;
        };
        let (rings, clock) = &mut *guard;
        *clock += 1;
        let now = *clock;
        if !rings.contains_key(&record.project)
            && rings.len() >= self.max_projects
            && let Some(quietest) = rings
                .iter()
                .min_by_key(|(_, ring)| ring.last)
                .map(|(project, _)| project.clone())
        {
            rings.remove(&quietest);
        }
        let ring = rings.entry(record.project.clone()).or_insert_with(|| Ring {
            entries: VecDeque::new(),
            last: now,
        });
        if ring.entries.len() == self.capacity {
            ring.entries.pop_front();
        }
        ring.entries.push_back(Arc::new(record));
        ring.last = now;
    }

    /// At most `limit` decisions of `project`, newest first, of `capability` when given.
    pub fn recent(
        &self,
        project: &str,
        capability: Option<&str>,
        caller: Option<&[u8; 32]>,
        limit: usize,
    ) -> Vec<Arc<DecisionRecord>> {
        let Ok(guard) = self.rings.lock() else {
            return Vec::new();
        };
        let Some(ring) = guard.0.get(project) else {
            return Vec::new();
        };
        ring.entries
            .iter()
            .rev()
            .filter(|r| capability.is_none_or(|c| r.capability == c))
            .filter(|r| caller.is_none_or(|caller| r.caller.as_ref() == Some(caller)))
            .take(limit)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use sha2::Digest as _;

    use super::*;

    fn refused(project: &str, capability: &str) -> DecisionRecord {
        DecisionRecord::refused(project, capability, "x".into(), None)
    }

    #[test]
    fn the_log_should_keep_the_newest_per_project_and_capability() {
        let log = DecisionLog::new(2);
        for (project, capability) in [
            ("a", "cap.web.search"),
            ("b", "cap.web.search"),
            ("a", "cap.web.scrape"),
            ("a", "cap.web.search"),
        ] {
            log.record(refused(project, capability));
        }
        // a's first record fell out (2 per project); b's are never shown to a.
        let a = log.recent("a", None, None, 10);
        let shown: Vec<&str> = a.iter().map(|r| r.capability.as_str()).collect();
        assert_eq!(shown, ["cap.web.search", "cap.web.scrape"]);
        assert_eq!(log.recent("a", Some("cap.web.search"), None, 10).len(), 1);
        assert_eq!(log.recent("a", None, None, 1).len(), 1);
        assert_eq!(log.recent("b", None, None, 10).len(), 1);
    }

    #[test]
    fn a_flood_from_one_project_should_never_push_out_anothers_records() {
        let log = DecisionLog::new(DEFAULT_CAPACITY);
        log.record(refused("demo-project", "cap.web.search"));
        for _ in 0..(DEFAULT_CAPACITY + 100) {
            log.record(refused("other-project", "cap.web.search"));
        }
        assert_eq!(log.recent("demo-project", None, None, 10).len(), 1);
        assert_eq!(
            log.recent("other-project", None, None, usize::MAX).len(),
            DEFAULT_CAPACITY
        );
    }

    #[test]
    fn past_the_project_bound_the_quietest_project_should_go_first() {
        let mut log = DecisionLog::new(4);
        log.max_projects = 2;
        log.record(refused("quiet", "cap.web.search"));
        log.record(refused("busy", "cap.web.search"));
        log.record(refused("busy", "cap.web.search"));
        log.record(refused("new", "cap.web.search"));
        assert!(log.recent("quiet", None, None, 10).is_empty());
        assert_eq!(log.recent("busy", None, None, 10).len(), 2);
        assert_eq!(log.recent("new", None, None, 10).len(), 1);
    }

    #[test]
    fn an_intent_digest_should_not_be_the_plain_hash_of_the_intent() {
        let log = DecisionLog::new(4);
        let intent = "find the pricing page";
        let digest = log.intent_digest(intent);
        assert_eq!(digest.len(), 16);
        assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(digest, log.intent_digest(intent), "stable within a process");
        assert_ne!(digest, log.intent_digest("find the pricing page."));
        // The oracle: what a co-worker could compute from a guess.
        let guessed: String = sha2::Sha256::digest(intent.as_bytes())
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_ne!(digest, guessed, "a guess must not confirm against the log");
        assert_ne!(
            digest,
            DecisionLog::new(4).intent_digest(intent),
            "another process draws another key"
        );
    }
}
