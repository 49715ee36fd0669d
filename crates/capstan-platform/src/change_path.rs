//! The change path: `resources_validate` (judge, keep nothing), `resources_plan` (validate,
//! order, diff, sign for this caller) and `resources_apply` (re-derive the token from what it
//! is handed, check every precondition, apply in plan order, undo on a refusal). Only apply
//! writes, only what a plan token covers (`plan_token.rs`), only once (`plan_ledger.rs`), and
//! never over another field manager (docs/base-tools.md, "The change path").
//!
//! The entry points live here; their parts in `change_path/`: `prepare.rs` (reading the
//! manifests), `judge.rs` and `report.rs` (the dry run and what it says of each manifest),
//! `apply.rs` and `step.rs` (apply's steps and writes), `undo.rs` (stopping at a refusal).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::failures::read_failure;
use crate::manifest::plan_order;
use crate::plan_ledger::{NotRecorded, PlanLedger};
use crate::plan_token::{Caller, PlanKeys, PlanPayload, Refused, Verified, ledger_digest};
use crate::project_api::{ApiFailure, ProjectApi};
use capstan_core::tool_error::{ErrorKind, ToolError};

mod apply;
#[cfg(test)]
mod fixtures;
mod judge;
mod prepare;
mod report;
mod step;
mod undo;

use apply::stale;
use report::{Report, refuse_unless_accepted, reports};

/// Most manifests in one batch: enough for an application's objects, few enough that one
/// plan stays something a person reads.
pub const MAX_MANIFESTS: usize = 50;

/// The clock plan expiries are measured with (tests inject one).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The change path of a sidecar: its plan-token keys, its ledger of applied tokens, how long a
/// plan lives, and the clock.
#[derive(Clone)]
pub struct ChangePath {
    keys: Arc<PlanKeys>,
    ledger: Arc<PlanLedger>,
    ttl: Duration,
    clock: Clock,
}

impl std::fmt::Debug for ChangePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangePath")
            .field("key", &self.keys.signing_id())
            .field("ledger", &self.ledger.id())
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// An error of manifest `index` at `field` (the manifest itself when `field` is empty).
fn item_error(index: usize, field: &str, message: impl Into<String>) -> Value {
    let path = if field.is_empty() {
        format!("manifests[{index}]")
    } else {
        format!("manifests[{index}].{field}")
    };
    json!({"field": path, "message": message.into()})
}

/// An object's `metadata.resourceVersion`.
fn resource_version(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// `time` as the tools write it (RFC 3339).
fn timestamp(time: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(time)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

impl ChangePath {
    /// A change path signing with `keys`, recording applied tokens in `ledger`, plans living
    /// `ttl`, measured with `clock`.
    pub fn new(keys: Arc<PlanKeys>, ledger: Arc<PlanLedger>, ttl: Duration, clock: Clock) -> Self {
        Self {
            keys,
            ledger,
            ttl,
            clock,
        }
    }

    /// A change path on the system clock.
    pub fn with_system_clock(keys: Arc<PlanKeys>, ledger: Arc<PlanLedger>, ttl: Duration) -> Self {
        Self::new(keys, ledger, ttl, Arc::new(SystemTime::now))
    }

    /// When a plan made now expires.
    fn expires(&self) -> SystemTime {
        (self.clock)() + self.ttl
    }

    fn now_seconds(&self) -> u64 {
        (self.clock)()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    /// Who the caller is, for binding a plan to them.
    async fn caller(api: &ProjectApi) -> Result<Caller, ToolError> {
        api.caller().await.map_err(|failure| match failure {
            ApiFailure::Forbidden { message } => ToolError::new(
                ErrorKind::Forbidden,
                format!(
                    "project {}'s control plane does not accept your token ({message}); \
                     nothing was planned or changed",
                    api.project()
                ),
            ),
            // A plane that does not serve SelfSubjectReview cannot say who the caller is, and a
            // plan is bound to its caller: refused, naming what is missing.
            ApiFailure::NotFound { .. } | ApiFailure::NotServed { .. } => ToolError::new(
                ErrorKind::UpstreamUnavailable,
                format!(
                    "project {}'s control plane does not answer SelfSubjectReview \
                     (authentication.k8s.io/v1), so it cannot say who you are and no plan can \
                     be bound to you; nothing was planned or changed",
                    api.project()
                ),
            )
            .with_code("kind_not_served"),
            other => read_failure(other, "tell who you are", api.project()),
        })
    }

    /// `resources_validate`.
    pub async fn validate(
        &self,
        api: &ProjectApi,
        manifests: &[Value],
    ) -> Result<CallToolResult, ToolError> {
        let reports = reports(api, manifests).await?;
        let all = reports.iter().all(|r| r.errors.is_empty());
        Ok(CallToolResult::structured(json!({
            "project": api.project(),
            "accepted": all,
            "manifests": reports.iter().map(Report::to_json).collect::<Vec<_>>(),
        })))
    }

    /// `resources_plan`.
    pub async fn plan(
        &self,
        api: &ProjectApi,
        manifests: &[Value],
    ) -> Result<CallToolResult, ToolError> {
        let reports = reports(api, manifests).await?;
        refuse_unless_accepted(&reports, "planned")?;
        let canonical: Vec<Value> = reports.iter().map(|r| r.manifest.clone()).collect();
        let order = plan_order(&canonical).map_err(|cycle| {
            ToolError::new(ErrorKind::Rejected, cycle.to_string())
                .at("manifests")
                .with_code("cycle")
        })?;
        let ordered: Vec<&Report> = order.iter().map(|&i| &reports[i]).collect();
        let payload = PlanPayload {
            project: api.project().to_owned(),
            plane: api.plane().to_owned(),
            caller: Self::caller(api).await?,
            manifests: ordered.iter().map(|r| r.manifest.clone()).collect(),
            resource_versions: ordered.iter().map(|r| r.resource_version()).collect(),
        };
        let expires = self.expires();
        let token = self.keys.sign(&payload, self.ledger.id(), expires);
        let steps: Vec<Value> = ordered
            .iter()
            .enumerate()
            .map(|(step, report)| {
                let mut entry = report.to_json();
                entry["step"] = json!(step + 1);
                entry
            })
            .collect();
        Ok(CallToolResult::structured(json!({
            "project": api.project(),
            "planToken": token,
            "expiresAt": timestamp(expires),
            "steps": steps,
            "manifests": payload.manifests,
            "next": "Show the person these steps. Only after they agree, call resources_apply with exactly these manifests, in this order, and this planToken.",
        })))
    }

    /// `resources_apply`.
    pub async fn apply(
        &self,
        api: &ProjectApi,
        manifests: &[Value],
        token: &str,
    ) -> Result<CallToolResult, ToolError> {
        let prepared = apply::prepared_as_handed(api, manifests).await?;
        // Applied before: said first, whatever else has moved since (what it created exists
        // now, so the objects no longer match either).
        if ledger_digest(token).is_some_and(|digest| self.ledger.was_applied(&digest)) {
            return Err(stale(&Refused::AlreadyApplied.to_string()));
        }
        let caller = Self::caller(api).await?;
        // Re-derive: the manifests as handed, in the order handed, this project and plane,
        // this caller, and each object as it is now.
        let steps = apply::read_steps(api, prepared).await?;
        let payload = apply::payload(api, caller, &steps);
        let verified = self
            .keys
            .verify(token, &payload, self.ledger.id(), (self.clock)())
            .map_err(|refused| stale(&refused.to_string()))?;
        apply::dry_run_all(api, &steps).await?;
        self.record(verified).await?;
        let applied = apply::write_all(api, &steps).await?;
        Ok(CallToolResult::structured(json!({
            "project": api.project(),
            "complete": true,
            "applied": applied,
        })))
    }

    /// Records `verified` in the ledger before the first write: a second apply of this token,
    /// concurrent or later, is refused. The ledger syncs its line to disk; that runs on the
    /// blocking pool, so a slow disk holds this apply and not the thread every session of the
    /// sidecar runs on (docs/architecture.md).
    async fn record(&self, verified: Verified) -> Result<(), ToolError> {
        let ledger = self.ledger.clone();
        let now = self.now_seconds();
        tokio::task::spawn_blocking(move || ledger.record(&verified, now))
            .await
            .map_err(|error| {
                ToolError::new(
                    ErrorKind::UpstreamUnavailable,
                    format!(
                        "recording the plan was cut short ({error}). Nothing was changed; apply \
                         again in a moment."
                    ),
                )
            })?
            .map_err(|error| match error {
                NotRecorded::AlreadyApplied => stale(&Refused::AlreadyApplied.to_string()),
                other => ToolError::new(
                    ErrorKind::UpstreamUnavailable,
                    format!("{other}. Nothing was changed; apply again in a moment."),
                ),
            })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::plan_token::DEFAULT_PLAN_TTL;

    /// The ledger entry a plan's apply makes before its first write: made once, and a second
    /// apply of the same token — concurrent or later — is refused as a stale plan that was
    /// applied already, before anything is written.
    #[tokio::test]
    async fn a_token_should_be_recorded_once_and_refused_the_second_time() {
        let ledger = Arc::new(PlanLedger::in_memory().unwrap());
        let path = ChangePath::with_system_clock(
            Arc::new(PlanKeys::generate().unwrap()),
            ledger.clone(),
            DEFAULT_PLAN_TTL,
        );
        let verified = Verified {
            digest: [7; 32],
            expires: u64::MAX,
        };
        assert!(!ledger.was_applied(&verified.digest));
        path.record(verified.clone()).await.unwrap();
        assert!(ledger.was_applied(&verified.digest));
        let again = path.record(verified).await.unwrap_err();
        assert_eq!(again.kind, ErrorKind::StalePlan);
        assert!(
            again.message.contains("applied already"),
            "{}",
            again.message
        );
    }

    /// What a log line shows of the change path: which key signs, which ledger, how long a
    /// plan lives — and never the key's secret.
    #[test]
    fn the_change_path_should_debug_print_its_key_id_and_never_its_secret() {
        let secret = crate::plan_token::UNLOGGABLE_SECRET;
        let keys = crate::plan_token::keys_with_unloggable_secret();
        let ledger = Arc::new(PlanLedger::in_memory().unwrap());
        let path =
            ChangePath::with_system_clock(Arc::new(keys), ledger.clone(), Duration::from_secs(90));
        let printed = format!("{path:?}");
        assert!(printed.contains("visible-id"), "{printed}");
        assert!(printed.contains(ledger.id()), "{printed}");
        assert!(printed.contains("90s"), "{printed}");
        assert!(!printed.contains(secret), "{printed}");
    }

    /// A plane that cannot be reached (nothing listens at its address) is no verdict on the
    /// manifests: validate, plan and apply each fail saying the plane could not be asked —
    /// not that the manifests are invalid, nor that the plan is stale — and apply records
    /// nothing.
    #[tokio::test]
    async fn a_plane_that_cannot_be_reached_should_fail_every_step_saying_so() {
        let api = fixtures::unreachable();
        let manifests = [json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "a"},
            "data": {"a": "1"},
        })];
        let ledger = Arc::new(PlanLedger::in_memory().unwrap());
        let path = ChangePath::with_system_clock(
            Arc::new(PlanKeys::generate().unwrap()),
            ledger.clone(),
            DEFAULT_PLAN_TTL,
        );
        let token = "capstan-plan.v1.k.1.aaaa.bbbb";
        let failed = [
            ("validate", path.validate(&api, &manifests).await),
            ("plan", path.plan(&api, &manifests).await),
            ("apply", path.apply(&api, &manifests, token).await),
        ];
        for (step, outcome) in failed {
            let error = outcome.unwrap_err();
            assert_eq!(
                error.kind,
                ErrorKind::UpstreamUnavailable,
                "{step}: {error:?}"
            );
            assert!(
                error
                    .message
                    .starts_with("project acme's control plane could not look up ConfigMap (v1): "),
                "{step}: {}",
                error.message
            );
        }
        if let Some(digest) = ledger_digest(token) {
            assert!(!ledger.was_applied(&digest), "apply recorded its token");
        }
    }

    /// The clock a plan's life is measured with: a plan made at T lives until T + the TTL,
    /// said in RFC 3339 (`expiresAt`); the ledger forgets applied tokens by the same clock's
    /// seconds.
    #[test]
    fn a_plan_should_expire_one_ttl_after_it_is_made_by_the_injected_clock() {
        let made = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let path = ChangePath::new(
            Arc::new(PlanKeys::generate().unwrap()),
            Arc::new(PlanLedger::in_memory().unwrap()),
            Duration::from_secs(900),
            Arc::new(move || made),
        );
        assert_eq!(path.now_seconds(), 1_700_000_000);
        assert_eq!(
            path.expires(),
            UNIX_EPOCH + Duration::from_secs(1_700_000_900)
        );
        assert_eq!(timestamp(path.expires()), "2023-11-14T22:28:20Z");
    }
}
