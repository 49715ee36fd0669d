//! The change path: `resources_validate` (judge, keep nothing), `resources_plan` (validate,
//! order, diff, sign for this caller) and `resources_apply` (re-derive the token from what it
//! is handed, check every precondition, apply in plan order, undo on a refusal). Only apply
//! writes, only what a plan token covers (`plan_token.rs`), only once (`plan_ledger.rs`), and
//! never over another field manager (docs/base-tools.md, "The change path").

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::failures::read_failure;
use crate::manifest::{Identity, diff, editable, plan_order};
use crate::plan_ledger::{NotRecorded, PlanLedger};
use crate::plan_token::{Caller, PlanKeys, PlanPayload, Refused, ledger_digest};
use crate::project_api::{ApiFailure, Cause, DEFAULT_NAMESPACE, Kind, ProjectApi};
use capstan_compose::{ErrorKind, ToolError};

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

/// A manifest ready to judge: its kind as the project serves it and its canonical form
/// (editable, with the namespace filled in for a namespaced kind).
struct Prepared {
    kind: Kind,
    canonical: Value,
    identity: Identity,
}

/// What the plane said of one prepared manifest.
struct Judged {
    prepared: Prepared,
    existing: Option<Value>,
    verdict: Result<Value, ApiFailure>,
}

fn item_error(index: usize, field: &str, message: impl Into<String>) -> Value {
    let path = if field.is_empty() {
        format!("manifests[{index}]")
    } else {
        format!("manifests[{index}].{field}")
    };
    json!({"field": path, "message": message.into()})
}

/// What apply found of one object before writing: the manifest to write and the object as it
/// is now (`None`: it must not exist, so it is created).
struct Step {
    prepared: Prepared,
    before: Option<Value>,
}

/// A write apply made, remembered so it can be undone.
enum Written {
    /// An object created: deleted again if it is still exactly this one.
    Created {
        uid: String,
        resource_version: String,
    },
    /// An object updated: put back as it was if nobody changed it since.
    Updated { resource_version: String },
    /// Applied without a change (the same resource version): nothing to undo.
    Unchanged,
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

    /// The write a step makes: a create when the object does not exist (refused if it exists
    /// by then), else a server-side apply on the resource version it has (refused if it has
    /// moved on); never forced over another field manager.
    async fn write(api: &ProjectApi, step: &Step, dry_run: bool) -> Result<Value, ApiFailure> {
        let kind = &step.prepared.kind;
        match step.before.as_ref().and_then(resource_version) {
            None => api.create(kind, &step.prepared.canonical, dry_run).await,
            Some(version) => {
                let mut manifest = step.prepared.canonical.clone();
                if let Some(metadata) = manifest.get_mut("metadata").and_then(Value::as_object_mut)
                {
                    metadata.insert("resourceVersion".into(), json!(version));
                }
                api.apply(kind, &manifest, dry_run).await
            }
        }
    }

    /// The canonical form of manifest `index`, or the errors that keep it from being judged
    /// (each with its field path).
    async fn prepare(
        api: &ProjectApi,
        index: usize,
        manifest: &Value,
    ) -> Result<Prepared, Vec<Value>> {
        let field = |name: &str| manifest.pointer(name).and_then(Value::as_str);
        let mut errors = Vec::new();
        if !manifest.is_object() {
            return Err(vec![item_error(
                index,
                "",
                "must be an object (a manifest)",
            )]);
        }
        let api_version = field("/apiVersion").filter(|v| !v.is_empty());
        let kind = field("/kind").filter(|v| !v.is_empty());
        let name = field("/metadata/name").filter(|v| !v.is_empty());
        if api_version.is_none() {
            errors.push(item_error(
                index,
                "apiVersion",
                "required (e.g. v1 or apps/v1)",
            ));
        }
        if kind.is_none() {
            errors.push(item_error(index, "kind", "required"));
        }
        if name.is_none() {
            errors.push(item_error(
                index,
                "metadata.name",
                "required (generateName is not supported: a plan names what it changes)",
            ));
        }
        let (Some(api_version), Some(kind), Some(_)) = (api_version, kind, name) else {
            return Err(errors);
        };
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let found = api.kind(group, version, kind).await.map_err(|failure| {
            let message = match failure {
                ApiFailure::NotServed { .. } => format!(
                    "project {} does not serve {kind} ({api_version})",
                    api.project()
                ),
                other => format!("could not look up {kind}: {other}"),
            };
            vec![item_error(index, "kind", message)]
        })?;
        let mut canonical = editable(manifest);
        if found.namespaced {
            if field("/metadata/namespace").is_none_or(str::is_empty)
                && let Some(metadata) = canonical.get_mut("metadata").and_then(Value::as_object_mut)
            {
                metadata.insert("namespace".into(), json!(DEFAULT_NAMESPACE));
            }
        } else if field("/metadata/namespace").is_some_and(|n| !n.is_empty()) {
            return Err(vec![item_error(
                index,
                "metadata.namespace",
                format!("{kind} is cluster-scoped: remove the namespace"),
            )]);
        }
        let identity = Identity::of(&canonical);
        Ok(Prepared {
            kind: found,
            canonical,
            identity,
        })
    }

    /// Prepares every manifest; the errors of those that cannot be judged, by index.
    async fn prepare_all(
        api: &ProjectApi,
        manifests: &[Value],
    ) -> Result<Vec<Result<Prepared, Vec<Value>>>, ToolError> {
        if manifests.is_empty() || manifests.len() > MAX_MANIFESTS {
            return Err(ToolError::new(
                ErrorKind::InvalidInput,
                format!(
                    "manifests: between 1 and {MAX_MANIFESTS} manifests per call ({} given)",
                    manifests.len()
                ),
            )
            .at("manifests"));
        }
        let mut prepared = Vec::with_capacity(manifests.len());
        for (index, manifest) in manifests.iter().enumerate() {
            prepared.push(Self::prepare(api, index, manifest).await);
        }
        // Two manifests for one object cannot both be applied.
        let identities: Vec<Option<Identity>> = prepared
            .iter()
            .map(|p| p.as_ref().ok().map(|p| p.identity.clone()))
            .collect();
        for (index, item) in prepared.iter_mut().enumerate() {
            if let (Ok(_), Some(identity)) = (&item, &identities[index])
                && let Some(first) = identities[..index]
                    .iter()
                    .position(|other| other.as_ref() == Some(identity))
            {
                *item = Err(vec![item_error(
                    index,
                    "metadata.name",
                    format!("{identity} is also manifests[{first}]: one manifest per object"),
                )]);
            }
        }
        Ok(prepared)
    }

    /// Reads each object and dry-runs each manifest. Failures that keep the plane from
    /// judging at all (unavailable, timed out) end the call; the rest are verdicts.
    async fn judge(api: &ProjectApi, prepared: Prepared) -> Result<Judged, ToolError> {
        let namespace = prepared
            .canonical
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        let existing = match api
            .get(&prepared.kind, &prepared.identity.name, namespace)
            .await
        {
            Ok(existing) => existing,
            Err(failure @ (ApiFailure::Forbidden { .. } | ApiFailure::Invalid { .. })) => {
                return Ok(Judged {
                    prepared,
                    existing: None,
                    verdict: Err(failure),
                });
            }
            Err(failure) => {
                return Err(read_failure(
                    failure,
                    &format!("read {}", prepared.identity),
                    api.project(),
                ));
            }
        };
        // Server-side apply as a dry run (never forced), for a create too: it names the field
        // of a type error, which a create's decoding error does not. Apply then creates with
        // a create, whose dry run it repeats with the preconditions.
        let verdict = match api.apply(&prepared.kind, &prepared.canonical, true).await {
            Ok(object) => Ok(object),
            Err(
                failure @ (ApiFailure::Forbidden { .. }
                | ApiFailure::Invalid { .. }
                | ApiFailure::Conflict { .. }
                | ApiFailure::NotFound { .. }),
            ) => Err(failure),
            Err(failure) => {
                return Err(read_failure(
                    failure,
                    &format!("dry-run {}", prepared.identity),
                    api.project(),
                ));
            }
        };
        Ok(Judged {
            prepared,
            existing,
            verdict,
        })
    }

    /// Validates a batch: one report per manifest, in the given order.
    async fn reports(api: &ProjectApi, manifests: &[Value]) -> Result<Vec<Report>, ToolError> {
        let mut reports = Vec::with_capacity(manifests.len());
        for (index, item) in Self::prepare_all(api, manifests)
            .await?
            .into_iter()
            .enumerate()
        {
            let report = match item {
                Err(errors) => Report {
                    index,
                    manifest: manifests[index].clone(),
                    identity: Identity::of(&manifests[index]),
                    judged: None,
                    errors,
                    forbidden: false,
                },
                Ok(prepared) => Report::judged(index, Self::judge(api, prepared).await?),
            };
            reports.push(report);
        }
        Ok(reports)
    }

    /// `resources_validate`.
    pub async fn validate(
        &self,
        api: &ProjectApi,
        manifests: &[Value],
    ) -> Result<CallToolResult, ToolError> {
        let reports = Self::reports(api, manifests).await?;
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
        let reports = Self::reports(api, manifests).await?;
        refuse_unless_accepted(&reports, "planned")?;
        let canonical: Vec<Value> = reports.iter().map(|r| r.manifest.clone()).collect();
        let order = plan_order(&canonical).map_err(|message| {
            ToolError::new(ErrorKind::Rejected, message)
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
        let expires = (self.clock)() + self.ttl;
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
        let mut prepared = Vec::with_capacity(manifests.len());
        for item in Self::prepare_all(api, manifests).await? {
            match item {
                Ok(item) => prepared.push(item),
                Err(_) => {
                    return Err(stale(
                        "these manifests are not ones a plan was issued for (one cannot even \
                         be read as a manifest of this project)",
                    ));
                }
            }
        }
        // Applied before: said first, whatever else has moved since (what it created exists
        // now, so the objects no longer match either).
        if ledger_digest(token).is_some_and(|digest| self.ledger.was_applied(&digest)) {
            return Err(stale(&Refused::AlreadyApplied.to_string()));
        }
        let caller = Self::caller(api).await?;
        // Re-derive: the manifests as handed, in the order handed, this project and plane,
        // this caller, and each object as it is now.
        let mut steps = Vec::with_capacity(prepared.len());
        for item in prepared {
            let namespace = item
                .canonical
                .pointer("/metadata/namespace")
                .and_then(Value::as_str);
            let before = api
                .get(&item.kind, &item.identity.name, namespace)
                .await
                .map_err(|f| read_failure(f, &format!("read {}", item.identity), api.project()))?;
            steps.push(Step {
                prepared: item,
                before,
            });
        }
        let payload = PlanPayload {
            project: api.project().to_owned(),
            plane: api.plane().to_owned(),
            caller,
            manifests: steps.iter().map(|s| s.prepared.canonical.clone()).collect(),
            resource_versions: steps
                .iter()
                .map(|s| s.before.as_ref().and_then(resource_version))
                .collect(),
        };
        let verified = self
            .keys
            .verify(token, &payload, self.ledger.id(), (self.clock)())
            .map_err(|refused| stale(&refused.to_string()))?;
        // Every write as a dry run first, each with its precondition: what was true when the
        // token was checked is still true, the plane still accepts each object (a policy or a
        // quota may have changed), and no field of another manager is in the way.
        let mut reports = Vec::with_capacity(steps.len());
        for (index, step) in steps.iter().enumerate() {
            let verdict = match Self::write(api, step, true).await {
                Ok(object) => Ok(object),
                Err(ApiFailure::Conflict { message }) => {
                    return Err(stale(&moved_since(step, &message)));
                }
                Err(
                    failure @ (ApiFailure::Forbidden { .. }
                    | ApiFailure::Invalid { .. }
                    | ApiFailure::NotFound { .. }),
                ) => Err(failure),
                Err(failure) => {
                    return Err(read_failure(
                        failure,
                        &format!("dry-run {}", step.prepared.identity),
                        api.project(),
                    ));
                }
            };
            let (errors, forbidden) = match &verdict {
                Ok(_) => (Vec::new(), false),
                Err(failure) => failure_errors(index, failure),
            };
            reports.push(Report {
                index,
                manifest: step.prepared.canonical.clone(),
                identity: step.prepared.identity.clone(),
                judged: None,
                errors,
                forbidden,
            });
        }
        refuse_unless_accepted(&reports, "applied")?;
        // Recorded before the first write: a second apply of this token, concurrent or later,
        // is refused.
        self.ledger
            .record(&verified, self.now_seconds())
            .map_err(|error| match error {
                NotRecorded::AlreadyApplied => stale(&Refused::AlreadyApplied.to_string()),
                other => ToolError::new(
                    ErrorKind::UpstreamUnavailable,
                    format!("{other}. Nothing was changed; apply again in a moment."),
                ),
            })?;
        let mut written: Vec<Written> = Vec::with_capacity(steps.len());
        let mut applied: Vec<Value> = Vec::with_capacity(steps.len());
        for (index, step) in steps.iter().enumerate() {
            match Self::write(api, step, false).await {
                Ok(object) => {
                    let version = resource_version(&object).unwrap_or_default();
                    let before = step.before.as_ref().and_then(resource_version);
                    written.push(match before {
                        None => Written::Created {
                            uid: object
                                .pointer("/metadata/uid")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            resource_version: version.clone(),
                        },
                        Some(before) if before == version => Written::Unchanged,
                        Some(_) => Written::Updated {
                            resource_version: version.clone(),
                        },
                    });
                    applied.push(json!({
                        "step": index + 1,
                        "object": step.prepared.identity.to_string(),
                        "action": if step.before.is_some() { "updated" } else { "created" },
                        "resourceVersion": version,
                    }));
                }
                Err(failure) => {
                    return Err(failed_at(api, &steps, index, &written, failure).await);
                }
            }
        }
        Ok(CallToolResult::structured(json!({
            "project": api.project(),
            "complete": true,
            "applied": applied,
        })))
    }
}

/// A refusal of the token or the plan: nothing was changed.
fn stale(what: &str) -> ToolError {
    ToolError::new(
        ErrorKind::StalePlan,
        format!(
            "{what}. Nothing was changed. Plan again: call resources_plan with the manifests, \
             show the person the new plan, and apply with its token."
        ),
    )
}

/// What a refused precondition says of `step`'s object.
fn moved_since(step: &Step, message: &str) -> String {
    let object = &step.prepared.identity;
    match step.before {
        None => format!(
            "{object} was created by someone else after the plan was checked, so creating it \
             would overwrite theirs ({message})"
        ),
        Some(_) => format!(
            "{object} was changed by someone else after the plan was checked, or another \
             field manager owns a field the plan sets ({message})"
        ),
    }
}

/// Undoes `written` (the writes of `steps` before the one that failed), newest first: a
/// created object is deleted if it is still exactly the one created, an updated one is put
/// back as apply read it if nobody changed it since. Returns the objects undone and those
/// left as written (with why).
async fn undo(api: &ProjectApi, steps: &[Step], written: &[Written]) -> (Vec<String>, Vec<String>) {
    let mut undone = Vec::new();
    let mut left = Vec::new();
    for (step, write) in steps.iter().zip(written).rev() {
        let object = &step.prepared.identity;
        let namespace = step
            .prepared
            .canonical
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        let outcome = match (write, &step.before) {
            (Written::Unchanged, _) => continue,
            (
                Written::Created {
                    uid,
                    resource_version,
                },
                _,
            ) => {
                api.delete_exactly(
                    &step.prepared.kind,
                    &object.name,
                    namespace,
                    uid,
                    resource_version,
                )
                .await
            }
            (Written::Updated { resource_version }, Some(before)) => api
                .restore(&step.prepared.kind, before, resource_version)
                .await
                .map(drop),
            (Written::Updated { .. }, None) => continue,
        };
        match outcome {
            Ok(()) => undone.push(object.to_string()),
            Err(failure) => left.push(format!("{object} ({failure})")),
        }
    }
    undone.reverse();
    left.reverse();
    (undone, left)
}

/// Apply stopped at step `index`: the writes before it are undone when the plane refused the
/// step outright (a conflict, a rejection, a refusal), so nothing of the plan is left
/// written; when the step's outcome is unknown (no answer) or the plane failed, they are
/// named instead, for the person to read before planning again.
async fn failed_at(
    api: &ProjectApi,
    steps: &[Step],
    index: usize,
    written: &[Written],
    failure: ApiFailure,
) -> ToolError {
    let object = &steps[index].prepared.identity;
    let step = index + 1;
    let names = |range: &[Step]| -> Vec<String> {
        range
            .iter()
            .map(|s| s.prepared.identity.to_string())
            .collect()
    };
    let not_done = names(&steps[index + 1..]);
    let rest = if not_done.is_empty() {
        String::new()
    } else {
        format!("; not applied: {}", not_done.join(", "))
    };
    let done = names(&steps[..index]);
    let so_far = if done.is_empty() {
        "nothing was applied before it".to_owned()
    } else {
        format!("applied before it: {}", done.join(", "))
    };
    let (kind, what) = match failure {
        ApiFailure::TimedOut { message } => {
            return ToolError::new(
                ErrorKind::OutcomeUnknown,
                format!(
                    "step {step} ({object}) got no answer, so whether it was applied is \
                     unknown ({message}); {so_far}{rest}. Read it with resources_get before \
                     planning again."
                ),
            );
        }
        ApiFailure::Unavailable { message } => {
            return ToolError::new(
                ErrorKind::UpstreamUnavailable,
                format!(
                    "step {step} ({object}) failed: the control plane is unavailable \
                     ({message}); whether it was applied is unknown; {so_far}{rest}. Read \
                     them with resources_get before planning again."
                ),
            );
        }
        ApiFailure::Conflict { message } => {
            (ErrorKind::StalePlan, moved_since(&steps[index], &message))
        }
        ApiFailure::Forbidden { message } => (
            ErrorKind::Forbidden,
            format!("{object} was refused: {message}"),
        ),
        other => (
            ErrorKind::Rejected,
            format!("{object} was refused: {other}"),
        ),
    };
    let (undone, left) = undo(api, steps, &written[..index.min(written.len())]).await;
    let undone_text = if undone.is_empty() {
        String::new()
    } else {
        format!(" (undone: {})", undone.join(", "))
    };
    if left.is_empty() {
        let before = if written
            .iter()
            .take(index)
            .all(|w| matches!(w, Written::Unchanged))
        {
            "no write before it changed anything"
        } else {
            "every write before it was undone"
        };
        return ToolError::new(
            kind,
            format!(
                "step {step}: {what}. Nothing was changed: {before}{undone_text}{rest}. Plan again."
            ),
        );
    }
    ToolError::new(
        ErrorKind::Rejected,
        format!(
            "step {step}: {what}. Some of the plan is left written, because undoing it was \
             refused (someone changed the object since, or you may not delete or update it): \
             {}{undone_text}{rest}. Read them with resources_get before planning again.",
            left.join(", ")
        ),
    )
    .with_code("partially_applied")
}

/// One manifest's judgement.
struct Report {
    index: usize,
    manifest: Value,
    identity: Identity,
    judged: Option<Judged>,
    errors: Vec<Value>,
    forbidden: bool,
}

impl Report {
    /// The report of a manifest the apiserver judged (dry run), accepted or not.
    fn judged(index: usize, judged: Judged) -> Self {
        let (errors, forbidden) = match &judged.verdict {
            Ok(_) => (Vec::new(), false),
            Err(failure) => failure_errors(index, failure),
        };
        Self {
            index,
            manifest: judged.prepared.canonical.clone(),
            identity: judged.prepared.identity.clone(),
            judged: Some(judged),
            errors,
            forbidden,
        }
    }

    fn resource_version(&self) -> Option<String> {
        self.judged
            .as_ref()
            .and_then(|j| j.existing.as_ref())
            .and_then(resource_version)
    }

    fn to_json(&self) -> Value {
        let mut report = json!({
            "index": self.index,
            "apiVersion": self.manifest.get("apiVersion"),
            "kind": self.identity.kind,
            "name": self.identity.name,
            "accepted": self.errors.is_empty(),
        });
        if let Some(namespace) = &self.identity.namespace {
            report["namespace"] = json!(namespace);
        }
        if let Some(judged) = &self.judged {
            report["exists"] = json!(judged.existing.is_some());
            if let Ok(after) = &judged.verdict {
                let before = judged.existing.as_ref().map(editable);
                let (changes, omitted) = diff(before.as_ref(), &editable(after));
                report["action"] = json!(match (&judged.existing, changes.is_empty()) {
                    (None, _) => "create",
                    (Some(_), true) => "unchanged",
                    (Some(_), false) => "update",
                });
                report["changes"] = json!(changes);
                if omitted > 0 {
                    report["changesOmitted"] = json!(omitted);
                }
            }
        }
        if !self.errors.is_empty() {
            report["errors"] = json!(self.errors);
        }
        report
    }
}

fn resource_version(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn timestamp(time: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(time)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The errors a refused manifest reports, each with its field path, and whether the refusal
/// was one of authorization.
fn failure_errors(index: usize, failure: &ApiFailure) -> (Vec<Value>, bool) {
    match failure {
        ApiFailure::Invalid { message, causes } if !causes.is_empty() => (
            causes
                .iter()
                .map(
                    |Cause {
                         field,
                         message: what,
                     }| {
                        item_error(index, field, if what.is_empty() { message } else { what })
                    },
                )
                .collect(),
            false,
        ),
        ApiFailure::Invalid { message, .. } => {
            (vec![item_error(index, "", message.clone())], false)
        }
        ApiFailure::Forbidden { message } => (vec![item_error(index, "", message.clone())], true),
        ApiFailure::Conflict { message } => (
            vec![item_error(
                index,
                "",
                format!(
                    "{message}; Capstan never takes a field from another field manager: leave \
                     those fields out of the manifest, or have their manager change them"
                ),
            )],
            false,
        ),
        other => (vec![item_error(index, "", other.to_string())], false),
    }
}

/// Refuses unless every report was accepted: authorization first (nothing the caller may not
/// do is planned), then the rejections with every field path.
fn refuse_unless_accepted(reports: &[Report], what: &str) -> Result<(), ToolError> {
    let refused: Vec<&Report> = reports.iter().filter(|r| !r.errors.is_empty()).collect();
    if refused.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = refused
        .iter()
        .flat_map(|r| {
            r.errors.iter().map(move |e| {
                format!(
                    "{} ({}): {}",
                    e["field"].as_str().unwrap_or_default(),
                    r.identity,
                    e["message"].as_str().unwrap_or_default()
                )
            })
        })
        .collect();
    let kind = if refused.iter().any(|r| r.forbidden) {
        ErrorKind::Forbidden
    } else {
        ErrorKind::Rejected
    };
    let first = refused[0].errors[0]["field"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Err(ToolError::new(
        kind,
        format!(
            "nothing was {what}: the platform refused {} of {} manifests — {}. Fix them \
             (resources_validate shows each) and plan again.",
            refused.len(),
            reports.len(),
            lines.join("; ")
        ),
    )
    .at(first))
}
