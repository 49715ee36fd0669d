//! Capstan's objects on the test plane as a client sees them: apply and delete by kind and
//! name, a condition as a reader reads it, and waits for one.

use std::time::Duration;

use capstan_api::API_VERSION;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::FIELD_MANAGER;
use crate::suite::eventually;

/// The resource of `kind` (`CapabilityBinding` or `RouteQualifier`).
pub fn resource(kind: &str) -> ApiResource {
    if kind == "RouteQualifier" {
        ApiResource::erase::<capstan_api::RouteQualifier>(&())
    } else {
        ApiResource::erase::<capstan_api::CapabilityBinding>(&())
    }
}

/// Creates or replaces an object (server-side apply as the test's own field manager).
pub async fn apply(client: &Client, kind: &str, name: &str, spec: Value) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
    let object = json!({ "apiVersion": API_VERSION, "kind": kind, "metadata": { "name": name }, "spec": spec });
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .map(drop)
    .map_err(|e| format!("apply {kind}/{name}: {e}"))
}

/// Creates or replaces many objects of `kind`, each `(name, spec)`, with `in_flight` requests
/// at once (server-side apply as the test's own field manager); the first failure ends it.
pub async fn apply_many(
    client: &Client,
    kind: &str,
    objects: impl Iterator<Item = (String, Value)>,
    in_flight: usize,
) -> Result<(), String> {
    use futures::{StreamExt, TryStreamExt};

    futures::stream::iter(objects)
        .map(|(name, spec)| async move { apply(client, kind, &name, spec).await })
        .buffer_unordered(in_flight.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await
}

/// The CapabilityBinding spec the benchmarks fill the plane with: binding `index` of a
/// provider at `configuration_version`; without `serviceName` (invalid) unless `valid`.
pub fn sample_binding_spec(index: usize, configuration_version: &str, valid: bool) -> Value {
    let mut spec = json!({
        "serviceRef": { "name": format!("service-{index}") },
        "serviceName": format!("service-{index}.example"),
        "serviceAgentRef": { "name": format!("agent-{index}") },
        "configurationVersion": configuration_version,
        "tools": { "mcpServers": [{
            "name": "streamco",
            "endpoint": "http://127.0.0.1:7810/mcp",
            "toolSelector": { "include": ["streams_list", "streams_get", "pipeline_diagnose"] }
        }]},
        "skills": [{ "name": "lag-triage", "description": "Triage lag", "source": "http://127.0.0.1:7810/runbooks/lag.md" }]
    });
    if !valid {
        spec.as_object_mut().map(|s| s.remove("serviceName"));
    }
    spec
}

/// Deletes an object if it exists.
pub async fn delete(client: &Client, kind: &str, name: &str) {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
    let _ = api.delete(name, &DeleteParams::default()).await;
}

/// An object's status as the apiserver holds it.
pub async fn status(client: &Client, kind: &str, name: &str) -> Option<Value> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
    api.get(name).await.ok()?.data.get("status").cloned()
}

/// One condition of an object as a reader sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ConditionView {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The reason.
    pub reason: String,
    /// The message.
    pub message: String,
    /// The generation the condition describes.
    pub observed_generation: Option<i64>,
    /// The object's generation now.
    pub generation: Option<i64>,
}

/// The condition `type_` of an object, if it has one.
pub async fn condition(
    client: &Client,
    kind: &str,
    name: &str,
    type_: &str,
) -> Option<ConditionView> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
    let object = api.get(name).await.ok()?;
    let conditions = object
        .data
        .get("status")?
        .get("conditions")?
        .as_array()?
        .clone();
    let condition = conditions.iter().find(|c| c["type"] == type_)?;
    let text = |key: &str| condition[key].as_str().unwrap_or_default().to_owned();
    Some(ConditionView {
        status: text("status"),
        reason: text("reason"),
        message: text("message"),
        observed_generation: condition["observedGeneration"].as_i64(),
        generation: object.metadata.generation,
    })
}

/// Waits until the object's condition `type_` has `status` and `reason` for its current
/// generation, and returns it.
pub async fn wait_condition(
    client: &Client,
    kind: &str,
    name: &str,
    type_: &str,
    (status, reason): (&str, &str),
    patience: Duration,
) -> Result<ConditionView, libtest_mimic::Failed> {
    let last = std::sync::Mutex::new(None);
    eventually(
        patience,
        || async {
            let found = condition(client, kind, name, type_).await;
            *last.lock().unwrap_or_else(|e| e.into_inner()) = found.clone();
            found.filter(|c| {
                c.status == status && c.reason == reason && c.observed_generation == c.generation
            })
        },
        || {
            format!(
                "{kind}/{name} {type_}={status}/{reason}; last seen {:?}",
                last.lock().map(|l| l.clone())
            )
        },
    )
    .await
}
