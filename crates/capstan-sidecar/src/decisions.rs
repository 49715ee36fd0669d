//! Routing decisions kept for reading back: a bounded ring buffer, newest first, served at
//! `GET /v1/route-decisions?capability=&limit=` to callers of the same project (docs/routing.md).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use capstan_route::{Decision, Exclusion, RouteReason};
use serde::Serialize;

/// Decisions kept by default: about a minute of a busy assistant's routed calls.
pub const DEFAULT_CAPACITY: usize = 1024;

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
    /// SHA-256 of the call's `intent` (first 16 hex digits), for correlation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent_digest: Option<String>,
    /// Why the route was refused before selection (contradicting qualifiers, a call that
    /// widens them, qualifiers that could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl DecisionRecord {
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
        }
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// The last decisions of every project, bounded.
pub struct DecisionLog {
    entries: Mutex<VecDeque<Arc<DecisionRecord>>>,
    capacity: usize,
}

impl DecisionLog {
    /// A log keeping the last `capacity` decisions (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
        }
    }

    /// Keeps `record`, dropping the oldest beyond the capacity.
    pub fn record(&self, record: DecisionRecord) {
        // A poisoned log loses records, never a call.
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() == self.capacity {
                entries.pop_front();
            }
            entries.push_back(Arc::new(record));
        }
    }

    /// At most `limit` decisions of `project`, newest first, of `capability` when given.
    pub fn recent(
        &self,
        project: &str,
        capability: Option<&str>,
        limit: usize,
    ) -> Vec<Arc<DecisionRecord>> {
        let Ok(entries) = self.entries.lock() else {
            return Vec::new();
        };
        entries
            .iter()
            .rev()
            .filter(|r| r.project == project && capability.is_none_or(|c| r.capability == c))
            .take(limit)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_log_should_keep_the_newest_per_project_and_capability() {
        let log = DecisionLog::new(3);
        for (project, capability) in [
            ("a", "cap.web.search"),
            ("b", "cap.web.search"),
            ("a", "cap.web.scrape"),
            ("a", "cap.web.search"),
        ] {
            log.record(DecisionRecord::refused(
                project,
                capability,
                "x".into(),
                None,
            ));
        }
        // The first record fell out (capacity 3); b's are never shown to a.
        let a = log.recent("a", None, 10);
        let shown: Vec<&str> = a.iter().map(|r| r.capability.as_str()).collect();
        assert_eq!(shown, ["cap.web.search", "cap.web.scrape"]);
        assert_eq!(log.recent("a", Some("cap.web.search"), 10).len(), 1);
        assert_eq!(log.recent("a", None, 1).len(), 1);
        assert_eq!(log.recent("b", None, 10).len(), 1);
    }
}
