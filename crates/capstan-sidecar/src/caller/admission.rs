//! Admission: who may open what. The header that names a request's project, the caller check (is
//! the caller admitted by the project it names), and how many places the sidecar gives out, and to
//! whom. A session, a task without a session, and every open stream (a session's GET stream, a
//! 2026-07-28 `subscriptions/listen`) each take a place for as long as they live. Places are capped
//! three ways at once — for the whole sidecar, per caller (the bearer token), and per project — so
//! neither one token nor one project can take every place and lock the others out; and each task
//! holds at most a few streams.
//!
//! A refusal names the cap that was reached and the setting that sets it: 503 for the
//! sidecar's cap, 429 for a caller's, a project's or a task's, each with `Retry-After`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::caller::check::CallerCheck;
use crate::caller::identity::{Identity, refusal};
use crate::observe::metrics::Metrics;

/// Places at most, for the whole sidecar. 1,024: one assistant runs a handful of tasks at a
/// time; the sidecar benchmark measured ~230 KiB per session with three upstreams and ~95 KiB
/// per open stream, so the cap bounds the sidecar near a quarter of a GiB.
pub const DEFAULT_MAX_PLACES: usize = 1024;

/// Places one caller (one bearer token) may hold at most: a quarter of the sidecar's, so a
/// token naming project after project cannot fill the sidecar.
pub const DEFAULT_MAX_PLACES_PER_CALLER: usize = 256;

/// Places one project's callers may hold together at most: half of the sidecar's.
pub const DEFAULT_MAX_PLACES_PER_PROJECT: usize = 512;

/// Streams one task may hold open at once. 4: a client needs one (the GET stream, or one
/// listen); a reconnect may overlap the stream it replaces.
pub const DEFAULT_MAX_STREAMS_PER_TASK: usize = 4;

/// What a client refused for a full cap should wait before trying again: sessions end on
/// DELETE or idle, streams when their clients leave, so under churn a place frees within
/// seconds.
pub const RETRY_AFTER_SECONDS: u64 = 5;

/// The caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// For the whole sidecar (`CAPSTAN_MAX_SESSIONS`).
    pub total: usize,
    /// Per caller (`CAPSTAN_MAX_SESSIONS_PER_CALLER`).
    pub per_caller: usize,
    /// Per project (`CAPSTAN_MAX_SESSIONS_PER_PROJECT`).
    pub per_project: usize,
    /// Streams per task (`CAPSTAN_MAX_STREAMS_PER_TASK`).
    pub streams_per_task: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            total: DEFAULT_MAX_PLACES,
            per_caller: DEFAULT_MAX_PLACES_PER_CALLER,
            per_project: DEFAULT_MAX_PLACES_PER_PROJECT,
            streams_per_task: DEFAULT_MAX_STREAMS_PER_TASK,
        }
    }
}

/// Which cap refused a place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Full {
    /// The sidecar's.
    Total {
        /// The cap.
        max: usize,
    },
    /// The caller's.
    Caller {
        /// The cap.
        max: usize,
    },
    /// The project's.
    Project {
        /// The project.
        project: String,
        /// The cap.
        max: usize,
    },
    /// The task's streams.
    Streams {
        /// The cap.
        max: usize,
    },
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Total { max } => write!(
                f,
                "{max} sessions, tasks and streams are open, the most this sidecar serves \
                 (CAPSTAN_MAX_SESSIONS); end one (DELETE, or close a stream) or retry later"
            ),
            Self::Caller { max } => write!(
                f,
                "this caller (bearer token) holds {max} sessions, tasks and streams, the most \
                 one caller may (CAPSTAN_MAX_SESSIONS_PER_CALLER); end one or retry later"
            ),
            Self::Project { project, max } => write!(
                f,
                "project {project} holds {max} sessions, tasks and streams, the most one \
                 project may (CAPSTAN_MAX_SESSIONS_PER_PROJECT); end one or retry later"
            ),
            Self::Streams { max } => write!(
                f,
                "this task has {max} streams open, the most one task may \
                 (CAPSTAN_MAX_STREAMS_PER_TASK); close one before opening another"
            ),
        }
    }
}

impl Full {
    /// The cap as a metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Total { .. } => "total",
            Self::Caller { .. } => "caller",
            Self::Project { .. } => "project",
            Self::Streams { .. } => "task_streams",
        }
    }
}

impl IntoResponse for Full {
    fn into_response(self) -> Response {
        let status = match self {
            Self::Total { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::TOO_MANY_REQUESTS,
        };
        let mut response = refusal(status, "unavailable", &self.to_string());
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        response
    }
}

#[derive(Default)]
struct Counts {
    total: usize,
    callers: HashMap<[u8; 32], usize>,
    projects: HashMap<String, usize>,
}

/// Who may open what: the project header, the caller check, and the places given out, by
/// caller and project.
pub struct Admission {
    project_header: HeaderName,
    caller_check: Option<Arc<CallerCheck>>,
    caps: Caps,
    counts: Mutex<Counts>,
    metrics: Option<Metrics>,
}

/// One place, held by a session's or sessionless task, or by an open stream; given back on
/// drop.
pub struct Place {
    admission: Arc<Admission>,
    caller: [u8; 32],
    project: String,
}

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Place")
            .field("project", &self.project)
            .finish_non_exhaustive()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = match self.admission.counts.lock() {
            Ok(counts) => counts,
            // Only whole counts are written under the lock.
            Err(poisoned) => poisoned.into_inner(),
        };
        counts.total = counts.total.saturating_sub(1);
        if let Some(metrics) = &self.admission.metrics {
            metrics.places_held.dec();
        }
        if let Some(held) = counts.callers.get_mut(&self.caller) {
            *held -= 1;
            if *held == 0 {
                counts.callers.remove(&self.caller);
            }
        }
        if let Some(held) = counts.projects.get_mut(&self.project) {
            *held -= 1;
            if *held == 0 {
                counts.projects.remove(&self.project);
            }
        }
    }
}

impl Admission {
    /// Admission of requests naming their project in `project_header`, under `caps`, without
    /// a caller check.
    pub fn new(project_header: HeaderName, caps: Caps) -> Arc<Self> {
        Self::with(project_header, caps, None, None)
    }

    /// Admission of requests naming their project in `project_header`, under `caps`, callers
    /// checked by `caller_check` when given, places counted in `metrics`.
    pub fn with(
        project_header: HeaderName,
        caps: Caps,
        caller_check: Option<Arc<CallerCheck>>,
        metrics: Option<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Self {
            project_header,
            caller_check,
            caps,
            counts: Mutex::default(),
            metrics,
        })
    }

    /// The header carrying the project.
    pub fn project_header(&self) -> &HeaderName {
        &self.project_header
    }

    /// The caller check, when one is configured (`CAPSTAN_CALLER_CHECK=sar`).
    pub fn caller_check(&self) -> Option<&CallerCheck> {
        self.caller_check.as_deref()
    }

    /// Where the sidecar's counts go, if anywhere (not in unit tests).
    pub fn metrics(&self) -> Option<&Metrics> {
        self.metrics.as_ref()
    }

    /// The caps.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Places held now, in all.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.counts.lock().map(|c| c.total).unwrap_or(0)
    }

    /// A place for `identity`, or the cap that is full (counted).
    pub fn admit(self: &Arc<Self>, identity: &Identity) -> Result<Place, Full> {
        let admitted = self.take(identity);
        if let Some(metrics) = &self.metrics {
            match &admitted {
                Ok(_) => {
                    metrics.places_held.inc();
                }
                Err(full) => metrics.admission_refused(full.label()),
            }
        }
        admitted
    }

    /// Counts a refusal that was not `admit`'s (a task's streams).
    pub fn refused(&self, full: &Full) {
        if let Some(metrics) = &self.metrics {
            metrics.admission_refused(full.label());
        }
    }

    fn take(self: &Arc<Self>, identity: &Identity) -> Result<Place, Full> {
        let mut counts = match self.counts.lock() {
            Ok(counts) => counts,
            Err(poisoned) => poisoned.into_inner(),
        };
        let caller = identity.caller();
        if counts.total >= self.caps.total {
            return Err(Full::Total {
                max: self.caps.total,
            });
        }
        if counts.callers.get(&caller).copied().unwrap_or(0) >= self.caps.per_caller {
            return Err(Full::Caller {
                max: self.caps.per_caller,
            });
        }
        if counts.projects.get(&identity.project).copied().unwrap_or(0) >= self.caps.per_project {
            return Err(Full::Project {
                project: identity.project.clone(),
                max: self.caps.per_project,
            });
        }
        counts.total += 1;
        *counts.callers.entry(caller).or_insert(0) += 1;
        *counts.projects.entry(identity.project.clone()).or_insert(0) += 1;
        Ok(Place {
            admission: self.clone(),
            caller,
            project: identity.project.clone(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn caps() -> Caps {
        Caps {
            total: 5,
            per_caller: 3,
            per_project: 4,
            streams_per_task: 2,
        }
    }

    fn admission() -> Arc<Admission> {
        let admission = Admission::new(HeaderName::from_static("x-capstan-project"), caps());
        // The caps it enforces are the ones it reports (the stream cap is read through
        // `caps()`; through the gate in `tests/test_tenancy.rs`).
        assert_eq!(admission.caps(), caps());
        admission
    }

    #[test]
    fn one_caller_should_never_take_more_than_its_cap_whatever_projects_it_names() {
        let admission = admission();
        let held: Vec<Place> = ["a", "b", "c"]
            .iter()
            .map(|p| {
                admission
                    .admit(&Identity::new((*p).into(), Some("t")))
                    .unwrap()
            })
            .collect();
        assert_eq!(
            admission
                .admit(&Identity::new("d".into(), Some("t")))
                .unwrap_err(),
            Full::Caller { max: 3 }
        );
        // Another caller still gets in.
        let other = admission
            .admit(&Identity::new("d".into(), Some("u")))
            .unwrap();
        drop(held);
        assert_eq!(admission.held(), 1);
        drop(other);
        assert_eq!(admission.held(), 0);
        assert!(
            admission
                .admit(&Identity::new("d".into(), Some("t")))
                .is_ok()
        );
    }

    #[test]
    fn one_project_should_never_take_more_than_its_cap_and_the_total_should_hold() {
        let admission = admission();
        let tokens = ["t1", "t2", "t3", "t4"];
        let held: Vec<Place> = tokens
            .iter()
            .map(|t| {
                admission
                    .admit(&Identity::new("p".into(), Some(t)))
                    .unwrap()
            })
            .collect();
        assert_eq!(
            admission
                .admit(&Identity::new("p".into(), Some("t5")))
                .unwrap_err(),
            Full::Project {
                project: "p".into(),
                max: 4
            }
        );
        let fifth = admission
            .admit(&Identity::new("q".into(), Some("t5")))
            .unwrap();
        assert_eq!(
            admission
                .admit(&Identity::new("r".into(), Some("t6")))
                .unwrap_err(),
            Full::Total { max: 5 }
        );
        drop((held, fifth));
        assert_eq!(admission.held(), 0);
    }

    #[test]
    fn a_refusal_should_name_its_setting_and_say_when_to_retry() {
        for (full, status, setting) in [
            (Full::Total { max: 1 }, 503, "CAPSTAN_MAX_SESSIONS"),
            (
                Full::Caller { max: 1 },
                429,
                "CAPSTAN_MAX_SESSIONS_PER_CALLER",
            ),
            (
                Full::Project {
                    project: "p".into(),
                    max: 1,
                },
                429,
                "CAPSTAN_MAX_SESSIONS_PER_PROJECT",
            ),
            (
                Full::Streams { max: 1 },
                429,
                "CAPSTAN_MAX_STREAMS_PER_TASK",
            ),
        ] {
            assert!(full.to_string().contains(setting), "{full}");
            let response = full.into_response();
            assert_eq!(response.status().as_u16(), status);
            assert_eq!(response.headers()[header::RETRY_AFTER], "5");
        }
    }

    /// A place given back frees exactly one place of its caller and one of its project: the
    /// caller (or project) gets exactly one more, not none and not a fresh allowance.
    #[test]
    fn a_place_given_back_should_free_exactly_one_of_its_caller_and_project() {
        let admission = admission();
        let caller = |project: &str| Identity::new(project.into(), Some("t"));
        let mut held: Vec<Place> = ["a", "a", "b"]
            .iter()
            .map(|p| admission.admit(&caller(p)).unwrap())
            .collect();
        held.remove(0);
        held.push(admission.admit(&caller("c")).unwrap());
        assert_eq!(
            admission.admit(&caller("c")).unwrap_err(),
            Full::Caller { max: 3 }
        );
        drop(held);

        let in_p = |token: &str| Identity::new("p".into(), Some(token));
        let mut held: Vec<Place> = ["t1", "t2", "t3", "t4"]
            .iter()
            .map(|t| admission.admit(&in_p(t)).unwrap())
            .collect();
        held.remove(0);
        held.push(admission.admit(&in_p("t5")).unwrap());
        assert_eq!(
            admission.admit(&in_p("t6")).unwrap_err(),
            Full::Project {
                project: "p".into(),
                max: 4
            }
        );
        drop(held);
        assert_eq!(admission.held(), 0);
    }

    /// What `/metrics` shows of admission: places held now, and refusals by the cap that was
    /// full, under the label the dashboards read (`outcome`).
    #[test]
    fn admission_should_be_counted_under_the_caps_label() {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut registry);
        let admission = Admission::with(
            HeaderName::from_static("x-capstan-project"),
            caps(),
            None,
            Some(metrics),
        );
        let text = |registry: &prometheus_client::registry::Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text
        };
        let caller = Identity::new("a".into(), Some("t"));
        let held: Vec<Place> = (0..3).map(|_| admission.admit(&caller).unwrap()).collect();
        assert!(admission.admit(&caller).is_err());
        admission.refused(&Full::Streams { max: 2 });
        let shown = text(&registry);
        for line in [
            "places_held 3",
            "admission_refusals_total{outcome=\"caller\"} 1",
            "admission_refusals_total{outcome=\"task_streams\"} 1",
            "admission_refusals_total{outcome=\"total\"} 0",
            "admission_refusals_total{outcome=\"project\"} 0",
        ] {
            assert!(shown.lines().any(|l| l.ends_with(line)), "{line}:\n{shown}");
        }
        assert_eq!(
            format!("{:?}", held[0]),
            r#"Place { project: "a", .. }"#,
            "a place names its project and nothing of its caller"
        );
        drop(held);
        assert!(
            text(&registry)
                .lines()
                .any(|l| l.ends_with("places_held 0")),
            "the places went back"
        );
        for (full, label) in [
            (Full::Total { max: 1 }, "total"),
            (Full::Caller { max: 1 }, "caller"),
            (
                Full::Project {
                    project: "p".into(),
                    max: 1,
                },
                "project",
            ),
            (Full::Streams { max: 1 }, "task_streams"),
        ] {
            assert_eq!(full.label(), label, "{full}");
        }
    }
}
