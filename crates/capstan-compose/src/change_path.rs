//! The change path: `resources_validate` (judge, keep nothing), `resources_plan` (validate,
//! order, diff, sign) and `resources_apply` (re-derive the token from what it is handed,
//! dry-run again, apply in plan order). Only apply writes, and only what a plan token covers
//! (`plan_token.rs`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::failures::read_failure;
use crate::manifest::{Identity, diff, editable, plan_order};
use crate::plan_token::{PlanKeys, PlanPayload};
use crate::project_api::{ApiFailure, Cause, DEFAULT_NAMESPACE, Kind, ProjectApi};
use crate::tool_error::{ErrorKind, ToolError};

/// Most manifests in one batch: enough for an application's objects, few enough that one
/// plan stays something a person reads.
pub const MAX_MANIFESTS: usize = 50;

/// The clock plan expiries are measured with (tests inject one).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The change path of a sidecar: its plan-token keys, how long a plan lives, and the clock.
#[derive(Clone)]
pub struct ChangePath {
    keys: Arc<PlanKeys>,
    ttl: Duration,
    clock: Clock,
}

impl std::fmt::Debug for ChangePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangePath")
            .field("key", &self.keys.signing_id())
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

impl ChangePath {
    /// A change path signing with `keys`, plans living `ttl`, measured with `clock`.
    pub fn new(keys: Arc<PlanKeys>, ttl: Duration, clock: Clock) -> Self {
        Self { keys, ttl, clock }
    }

    /// A change path on the system clock.
    pub fn with_system_clock(keys: Arc<PlanKeys>, ttl: Duration) -> Self {
        Self::new(keys, ttl, Arc::new(SystemTime::now))
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
            manifests: ordered.iter().map(|r| r.manifest.clone()).collect(),
            resource_versions: ordered.iter().map(|r| r.resource_version()).collect(),
        };
        let expires = (self.clock)() + self.ttl;
        let token = self.keys.sign(&payload, expires);
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
        let stale = |what: String| {
            ToolError::new(
                ErrorKind::StalePlan,
                format!(
                    "{what}. Nothing was changed. Plan again: call resources_plan with the \
                     manifests, show the person the new plan, and apply with its token."
                ),
            )
        };
        let mut prepared = Vec::with_capacity(manifests.len());
        for item in Self::prepare_all(api, manifests).await? {
            match item {
                Ok(item) => prepared.push(item),
                Err(_) => {
                    return Err(stale(
                        "these manifests are not ones a plan was issued for (one cannot even \
                         be read as a manifest of this project)"
                            .into(),
                    ));
                }
            }
        }
        // Re-derive: the manifests as handed, in the order handed, this project, and each
        // object's resource version as it is now.
        let mut current = Vec::with_capacity(prepared.len());
        for item in &prepared {
            let namespace = item
                .canonical
                .pointer("/metadata/namespace")
                .and_then(Value::as_str);
            let existing = api
                .get(&item.kind, &item.identity.name, namespace)
                .await
                .map_err(|f| read_failure(f, &format!("read {}", item.identity), api.project()))?;
            current.push(existing.as_ref().and_then(resource_version));
        }
        let payload = PlanPayload {
            project: api.project().to_owned(),
            manifests: prepared.iter().map(|p| p.canonical.clone()).collect(),
            resource_versions: current.clone(),
        };
        self.keys
            .verify(token, &payload, (self.clock)())
            .map_err(|refused| stale(refused.to_string()))?;
        // Once more as a dry run: the plane may have changed its mind (a policy, a quota).
        let mut reports = Vec::with_capacity(prepared.len());
        for (index, item) in prepared.into_iter().enumerate() {
            reports.push(Report::judged(index, Self::judge(api, item).await?));
        }
        refuse_unless_accepted(&reports, "applied")?;
        let mut applied: Vec<Value> = Vec::new();
        for (step, report) in reports.iter().enumerate() {
            let Some(judged) = &report.judged else {
                continue;
            };
            let mut manifest = report.manifest.clone();
            // An update only lands on the version the plan saw (the apiserver refuses it
            // otherwise): nobody's change in between is overwritten.
            if let (Some(version), Some(metadata)) = (
                &current[step],
                manifest.get_mut("metadata").and_then(Value::as_object_mut),
            ) {
                metadata.insert("resourceVersion".into(), json!(version));
            }
            match api.apply(&judged.prepared.kind, &manifest, false).await {
                Ok(object) => applied.push(json!({
                    "step": step + 1,
                    "object": report.identity.to_string(),
                    "action": if current[step].is_some() { "updated" } else { "created" },
                    "resourceVersion": resource_version(&object),
                })),
                Err(failure) => {
                    return Err(partial_failure(&reports, step, &applied, failure));
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

/// Apply stopped at `step`: what was applied, what was not, and why.
fn partial_failure(
    reports: &[Report],
    step: usize,
    applied: &[Value],
    failure: ApiFailure,
) -> ToolError {
    let done: Vec<String> = reports[..step]
        .iter()
        .map(|r| r.identity.to_string())
        .collect();
    let not_done: Vec<String> = reports[step + 1..]
        .iter()
        .map(|r| r.identity.to_string())
        .collect();
    let object = &reports[step].identity;
    let so_far = if applied.is_empty() {
        "nothing was applied before it".to_owned()
    } else {
        format!("applied before it: {}", done.join(", "))
    };
    debug_assert_eq!(done.len(), applied.len());
    let rest = if not_done.is_empty() {
        String::new()
    } else {
        format!("; not applied: {}", not_done.join(", "))
    };
    match failure {
        ApiFailure::TimedOut { message } => ToolError::new(
            ErrorKind::OutcomeUnknown,
            format!(
                "step {} ({object}) got no answer, so whether it was applied is unknown \
                 ({message}); {so_far}{rest}. Read it with resources_get before planning again.",
                step + 1
            ),
        ),
        ApiFailure::Conflict { message } => ToolError::new(
            ErrorKind::StalePlan,
            format!(
                "step {} ({object}) was changed by someone else after the plan was checked \
                 ({message}); it was not applied; {so_far}{rest}. Plan again.",
                step + 1
            ),
        ),
        ApiFailure::Forbidden { message } => ToolError::new(
            ErrorKind::Forbidden,
            format!(
                "step {} ({object}) was refused: {message}; {so_far}{rest}.",
                step + 1
            ),
        ),
        ApiFailure::Unavailable { message } => ToolError::new(
            ErrorKind::UpstreamUnavailable,
            format!(
                "step {} ({object}) failed: the control plane is unavailable ({message}); it was \
                 not applied; {so_far}{rest}.",
                step + 1
            ),
        ),
        other => ToolError::new(
            ErrorKind::Rejected,
            format!(
                "step {} ({object}) was refused: {other}; {so_far}{rest}.",
                step + 1
            ),
        ),
    }
}
