//! The caller checked against the project it names. The crd source reads bindings with the
//! sidecar's own credential, so without this any process on the socket could name any project
//! and receive its composition. With `sar`, every request is served only when the project's
//! control plane, asked with the caller's own token, says the caller may list
//! CapabilityBindings there (a SelfSubjectAccessReview). Answers are cached per (project, token
//! digest) for the TTL (a minute by default), bounded; a request after it asks again, so a
//! revoked caller's live session ends; a plane that cannot be asked refuses (503), never
//! admits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use capstan_core::control_plane::ControlPlane;
use tracing::warn;

use crate::caller::identity::{Identity, refusal};
use crate::observe::metrics::Metrics;

/// How long an answer is reused by default (`CAPSTAN_CALLER_CHECK_TTL_SECONDS`). 60 s: the
/// window the platform already accepts for a revoked authorization, and what keeps a busy
/// assistant from asking at every request. Live sessions are re-checked after it too.
pub const CALLER_CHECK_TTL: Duration = Duration::from_secs(60);

/// Answers kept at most (one per project and token).
pub const CALLER_CHECK_CAPACITY: usize = 4096;

/// How the caller is checked against the project.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CallerCheckMode {
    /// Ask the project's control plane with the caller's token (SelfSubjectAccessReview:
    /// list CapabilityBindings); a token is required. The default with the crd source.
    Sar,
    /// Trust the socket: whoever can connect may name any project. The default with the
    /// fixture and http sources (local use).
    None,
}

/// Why a caller was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token to ask with.
    NoToken {
        /// The project named.
        project: String,
    },
    /// The project's plane says no.
    NotAllowed {
        /// The project named.
        project: String,
    },
    /// The plane could not be asked.
    Unavailable {
        /// The project named.
        project: String,
        /// Why.
        message: String,
    },
}

impl Refusal {
    /// Whether the refusal is the plane's answer about the caller (no token, not allowed) —
    /// not a failure to ask: a live session of a denied caller ends.
    pub fn is_denial(&self) -> bool {
        matches!(self, Self::NoToken { .. } | Self::NotAllowed { .. })
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Self::NoToken { project } => refusal(
                StatusCode::UNAUTHORIZED,
                "forbidden",
                &format!(
                    "project {project}: a bearer token is required (Authorization: Bearer …); \
                     the sidecar asks the project whether its holder may act there"
                ),
            ),
            Self::NotAllowed { project } => refusal(
                StatusCode::FORBIDDEN,
                "forbidden",
                &format!(
                    "project {project}: the project's control plane says this caller may not \
                     list CapabilityBindings there, so it may not use the project's assistant \
                     tools; ask the project's owner for access"
                ),
            ),
            Self::Unavailable { project, message } => refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "upstream_unavailable",
                &format!(
                    "project {project}: the project's control plane could not be asked whether \
                     this caller may act there ({message}); nothing was served, retry later"
                ),
            ),
        }
    }
}

struct Answer {
    at: Instant,
    allowed: bool,
}

/// The caller check with its cache.
pub struct CallerCheck {
    plane: ControlPlane,
    metrics: Metrics,
    ttl: Duration,
    capacity: usize,
    answers: Mutex<HashMap<[u8; 32], Answer>>,
}

impl CallerCheck {
    /// A check asking each project's plane (`plane`), reusing an answer for `ttl`, counting
    /// outcomes in `metrics`.
    pub fn new(plane: ControlPlane, metrics: Metrics, ttl: Duration) -> Self {
        Self {
            plane,
            metrics,
            ttl,
            capacity: CALLER_CHECK_CAPACITY,
            answers: Mutex::new(HashMap::new()),
        }
    }

    /// How often the callers of open streams are checked again (`tasks/reaper.rs`): every half of
    /// the time an answer is reused, so a denial reaches a stream at most half a TTL after its
    /// cached admission expires; at least a second apart.
    pub fn revalidation_period(&self) -> Duration {
        (self.ttl / 2).max(Duration::from_secs(1))
    }

    /// The answer for `key` still live at `now`: an answer lives strictly less than the TTL.
    fn cached(&self, key: &[u8; 32], now: Instant) -> Option<bool> {
        let answers = self.answers.lock().ok()?;
        answers
            .get(key)
            .filter(|answer| self.live(answer, now))
            .map(|answer| answer.allowed)
    }

    fn live(&self, answer: &Answer, now: Instant) -> bool {
        now.saturating_duration_since(answer.at) < self.ttl
    }

    /// Keeps the answer for `key` given at `now`, within the capacity.
    fn remember(&self, key: [u8; 32], allowed: bool, now: Instant) {
        let Ok(mut answers) = self.answers.lock() else {
            return;
        };
        if answers.len() >= self.capacity && !answers.contains_key(&key) {
            // Expired answers first; then the oldest live one.
            answers.retain(|_, answer| self.live(answer, now));
            if answers.len() >= self.capacity
                && let Some(oldest) = answers
                    .iter()
                    .min_by_key(|(_, answer)| answer.at)
                    .map(|(key, _)| *key)
            {
                answers.remove(&oldest);
            }
        }
        answers.insert(key, Answer { at: now, allowed });
    }

    /// Admits `identity` or says why not.
    pub async fn check(&self, identity: &Identity) -> Result<(), Refusal> {
        let project = identity.project.clone();
        let Some(token) = identity.token() else {
            self.metrics.caller_check("no_token");
            return Err(Refusal::NoToken { project });
        };
        let key = identity.fingerprint();
        if let Some(allowed) = self.cached(&key, Instant::now()) {
            self.metrics.caller_check(if allowed {
                "cached_allowed"
            } else {
                "cached_denied"
            });
            return if allowed {
                Ok(())
            } else {
                Err(Refusal::NotAllowed { project })
            };
        }
        match capstan_platform::may_list_bindings(&self.plane, &project, token).await {
            Ok(allowed) => {
                self.remember(key, allowed, Instant::now());
                self.metrics
                    .caller_check(if allowed { "allowed" } else { "denied" });
                if allowed {
                    Ok(())
                } else {
                    Err(Refusal::NotAllowed { project })
                }
            }
            // An invalid or expired token is an answer too: the plane does not know the
            // caller.
            Err(capstan_platform::ApiFailure::Forbidden { .. }) => {
                self.remember(key, false, Instant::now());
                self.metrics.caller_check("denied");
                Err(Refusal::NotAllowed { project })
            }
            Err(failure) => {
                self.metrics.caller_check("error");
                warn!(%project, error = %failure, "caller check: the project's control plane could not be asked");
                Err(Refusal::Unavailable {
                    project,
                    message: failure.to_string(),
                })
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn check(capacity: usize) -> CallerCheck {
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let mut registry = prometheus_client::registry::Registry::default();
        let mut check = CallerCheck::new(
            ControlPlane::new(config, None),
            Metrics::register(&mut registry),
            CALLER_CHECK_TTL,
        );
        check.capacity = capacity;
        check
    }

    #[tokio::test]
    async fn a_caller_without_a_token_should_be_refused_without_asking() {
        let check = check(4);
        let refused = check
            .check(&Identity::new("acme".into(), None))
            .await
            .unwrap_err();
        assert_eq!(
            refused,
            Refusal::NoToken {
                project: "acme".into()
            }
        );
    }

    #[tokio::test]
    async fn an_unreachable_plane_should_refuse_not_admit() {
        let check = check(4);
        let refused = check
            .check(&Identity::new("acme".into(), Some("t")))
            .await
            .unwrap_err();
        assert!(
            matches!(refused, Refusal::Unavailable { .. }),
            "{refused:?}"
        );
        assert_eq!(
            check.answers.lock().unwrap().len(),
            0,
            "a failure is not an answer"
        );
    }

    #[test]
    fn the_cache_should_hold_answers_for_the_ttl_and_stay_bounded() {
        let check = check(2);
        let now = Instant::now();
        let a = Identity::new("a".into(), Some("t")).fingerprint();
        let b = Identity::new("b".into(), Some("t")).fingerprint();
        let c = Identity::new("c".into(), Some("t")).fingerprint();
        check.remember(a, true, now);
        check.remember(b, false, now + Duration::from_secs(1));
        assert_eq!(check.cached(&a, now), Some(true));
        assert_eq!(check.cached(&b, now), Some(false));
        check.remember(c, true, now + Duration::from_secs(2));
        assert_eq!(check.answers.lock().unwrap().len(), 2);
        assert_eq!(check.cached(&a, now), None, "the oldest went");
        assert_eq!(check.cached(&b, now), Some(false), "a younger one stayed");
        assert_eq!(check.cached(&c, now), Some(true));
        // A new answer for a key it holds replaces it in place: nothing else goes.
        check.remember(c, false, now + Duration::from_secs(3));
        assert_eq!(check.cached(&b, now), Some(false));
        assert_eq!(check.cached(&c, now), Some(false));
    }

    /// Streams are checked again every half TTL, never more often than every second.
    #[test]
    fn streams_should_be_checked_again_every_half_ttl() {
        let mut check = check(4);
        assert_eq!(check.revalidation_period(), Duration::from_secs(30));
        check.ttl = Duration::from_secs(3);
        assert_eq!(check.revalidation_period(), Duration::from_millis(1500));
        for ttl in [Duration::from_secs(1), Duration::ZERO] {
            check.ttl = ttl;
            assert_eq!(
                check.revalidation_period(),
                Duration::from_secs(1),
                "{ttl:?}"
            );
        }
    }

    /// An answer is reused for strictly less than the TTL (60 s): at 60 s the plane is asked
    /// again.
    #[test]
    fn an_answer_should_live_until_exactly_the_ttl() {
        let check = check(4);
        let given = Instant::now();
        let key = Identity::new("a".into(), Some("t")).fingerprint();
        check.remember(key, true, given);
        let just_before = given + CALLER_CHECK_TTL - Duration::from_millis(1);
        assert_eq!(check.cached(&key, just_before), Some(true));
        assert_eq!(check.cached(&key, given + CALLER_CHECK_TTL), None);
    }

    /// At capacity, expired answers go before any live one: a full cache of stale answers
    /// keeps the live one, and the newcomer gets in.
    #[test]
    fn a_full_cache_should_shed_expired_answers_before_the_oldest_live_one() {
        let check = check(3);
        let start = Instant::now();
        let key = |project: &str| Identity::new(project.into(), Some("t")).fingerprint();
        check.remember(key("stale-1"), true, start);
        check.remember(key("stale-2"), true, start + Duration::from_secs(1));
        let later = start + CALLER_CHECK_TTL + Duration::from_secs(1);
        check.remember(key("live"), false, later);
        check.remember(key("new"), true, later + Duration::from_secs(1));
        assert_eq!(
            check.answers.lock().unwrap().len(),
            2,
            "both stale ones went"
        );
        assert_eq!(check.cached(&key("live"), later), Some(false));
        assert_eq!(check.cached(&key("new"), later), Some(true));
    }

    /// A remembered answer is the answer: a denial refuses and an admission admits without
    /// asking the plane (which here cannot be reached, so asking would refuse as unavailable).
    #[tokio::test]
    async fn a_cached_answer_should_be_given_without_asking_the_plane() {
        let check = check(4);
        let denied = Identity::new("acme".into(), Some("denied"));
        let allowed = Identity::new("acme".into(), Some("allowed"));
        check.remember(denied.fingerprint(), false, Instant::now());
        check.remember(allowed.fingerprint(), true, Instant::now());
        let refused = check.check(&denied).await.unwrap_err();
        assert_eq!(
            refused,
            Refusal::NotAllowed {
                project: "acme".into()
            }
        );
        assert!(refused.is_denial(), "a denial ends a live session");
        assert_eq!(check.check(&allowed).await, Ok(()));
        // The same token in another project is another question.
        let elsewhere = check
            .check(&Identity::new("other".into(), Some("allowed")))
            .await
            .unwrap_err();
        assert!(
            matches!(elsewhere, Refusal::Unavailable { .. }) && !elsewhere.is_denial(),
            "{elsewhere:?}"
        );
    }
}
