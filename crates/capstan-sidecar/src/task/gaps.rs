//! Capability-gap reports (docs/tool-search.md "Capability-gap reports"): one JSON line per
//! report, to a sink beside metering with the same rules (`off`, `stdout`, `stderr`, or a file,
//! appended). A report is deduplicated per project and need within a window, and each caller
//! may file only so many an hour: a model in a loop cannot flood a provider's team.

use std::collections::HashMap;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::limits::caller_rate::CallerRate;
use crate::observe::metering::rfc3339;
use crate::observe::sink::LineSink;

/// One report, for one provider's team.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GapReport<'a> {
    /// When it was filed (RFC 3339).
    #[serde(serialize_with = "rfc3339")]
    pub time: Timestamp,
    /// The project whose assistant found no tool.
    pub project: &'a str,
    /// Where the provider's reports land (the binding's `reportingProject`).
    pub reporting_project: &'a str,
    /// The provider service (the binding's `serviceName`).
    pub service: &'a str,
    /// The binding that names the reporting project.
    pub binding: &'a str,
    /// What the person needed, as the assistant said it.
    pub need: &'a str,
    /// The services the assistant considered, as it named them.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub considered: &'a [String],
    /// The search it ran, if it said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<&'a str>,
}

/// How reports are kept in check.
#[derive(Clone, Copy, Debug)]
pub struct GapPolicy {
    /// A second report of one need in one project within this time is not written again.
    pub window: Duration,
    /// Reports one caller may file in an hour; 0: no limit.
    pub per_caller_per_hour: u32,
}

/// What became of a report.
#[derive(Debug, PartialEq, Eq)]
pub enum Filed {
    /// Written.
    Written,
    /// The same need of the same project was reported within the window: not written again.
    Duplicate,
    /// The caller filed its hour's reports already.
    OverRate,
}

/// Needs the window table keeps before forgetting the expired ones.
const SWEEP_AT: usize = 4096;

/// Where reports go, and what was reported lately.
pub struct GapReports {
    sink: LineSink,
    policy: GapPolicy,
    /// (project, need digest) → when its window ends.
    reported: Mutex<HashMap<[u8; 32], Instant>>,
    /// Each caller's reports an hour; `None`: no limit.
    rate: Option<CallerRate>,
}

impl GapReports {
    /// Reports to `sink` (`off`, `stdout`, `stderr` or a file) under `policy`.
    pub fn open(sink: &str, policy: GapPolicy) -> io::Result<Self> {
        Ok(Self {
            sink: LineSink::open(sink, "capability-gap report")?,
            policy,
            reported: Mutex::default(),
            rate: CallerRate::per_hour(policy.per_caller_per_hour),
        })
    }

    /// Whether reports go anywhere (the tool is offered only then).
    pub fn is_on(&self) -> bool {
        self.sink.is_on()
    }

    /// Files `reports` (one need, one per provider team) for `caller`: counted once against
    /// the caller's rate, written unless the need was reported in the window.
    pub fn file(&self, caller: [u8; 32], reports: &[GapReport<'_>]) -> Filed {
        let Some(first) = reports.first() else {
            return Filed::Duplicate;
        };
        let now = Instant::now();
        let key = need_key(first.project, first.need);
        {
            let Ok(mut reported) = self.reported.lock() else {
                return Filed::OverRate;
            };
            if reported.len() >= SWEEP_AT {
                reported.retain(|_, until| *until > now);
            }
            if reported.get(&key).is_some_and(|&until| until > now) {
                return Filed::Duplicate;
            }
            if self
                .rate
                .as_ref()
                .is_some_and(|rate| rate.check(&caller).is_err())
            {
                return Filed::OverRate;
            }
            reported.insert(key, now + self.policy.window);
        }
        for report in reports {
            self.sink.write(report);
        }
        Filed::Written
    }
}

/// The key of a need in a project: its words, lower-cased, whitespace collapsed — one need
/// said twice with other spacing or case is one report.
fn need_key(project: &str, need: &str) -> [u8; 32] {
    let words: Vec<String> = need.split_whitespace().map(str::to_lowercase).collect();
    let mut digest = Sha256::new();
    digest.update(project.as_bytes());
    digest.update([0]);
    digest.update(words.join(" ").as_bytes());
    digest.finalize().into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn report<'a>(need: &'a str) -> GapReport<'a> {
        GapReport {
            time: Timestamp::now(),
            project: "demo",
            reporting_project: "streamco-platform",
            service: "streaming.streamco.example",
            binding: "streamco",
            need,
            considered: &[],
            search: None,
        }
    }

    fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_need_should_be_written_once_per_window_and_a_caller_held_to_its_rate() {
        let path = std::env::temp_dir().join(format!("capstan-gaps-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let policy = GapPolicy {
            window: Duration::from_secs(60),
            per_caller_per_hour: 2,
        };
        let gaps = GapReports::open(path.to_str().unwrap(), policy).unwrap();
        let (alice, bob) = ([1; 32], [2; 32]);
        assert_eq!(
            gaps.file(alice, &[report("Refund a charge")]),
            Filed::Written
        );
        // The same need, said otherwise, by anyone: not written again, and not counted.
        assert_eq!(
            gaps.file(bob, &[report("refund  a CHARGE")]),
            Filed::Duplicate
        );
        assert_eq!(gaps.file(alice, &[report("Book a flight")]), Filed::Written);
        // Alice's hour is spent; Bob's is not.
        assert_eq!(
            gaps.file(alice, &[report("Text a number")]),
            Filed::OverRate
        );
        assert_eq!(gaps.file(bob, &[report("Text a number")]), Filed::Written);
        let written = lines(&path);
        let needs: Vec<&str> = written
            .iter()
            .map(|l| l["need"].as_str().unwrap())
            .collect();
        assert_eq!(needs, ["Refund a charge", "Book a flight", "Text a number"]);
        assert_eq!(written[0]["reportingProject"], "streamco-platform");
        assert!(written[0]["time"].as_str().unwrap().ends_with('Z'));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_need_should_be_reported_again_after_its_window() {
        let policy = GapPolicy {
            window: Duration::ZERO,
            per_caller_per_hour: 10,
        };
        let gaps = GapReports::open("off", policy).unwrap();
        assert_eq!(
            gaps.file([1; 32], &[report("Refund a charge")]),
            Filed::Written
        );
        assert_eq!(
            gaps.file([1; 32], &[report("Refund a charge")]),
            Filed::Written
        );
    }
}
