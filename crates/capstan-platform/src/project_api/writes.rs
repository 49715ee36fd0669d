//! The writes of the change path, each as the caller and as [`FIELD_MANAGER`]: server-side
//! apply and create (dry run or not), and the deletes and replaces with preconditions that undo
//! a plan's writes.

use kube::api::{
    DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions, ValidationDirective,
};
use serde_json::Value;

use super::{ApiFailure, FIELD_MANAGER, Kind, ProjectApi, name_and_namespace, object_value};

impl ProjectApi {
    /// Server-side apply of `manifest` as [`FIELD_MANAGER`], strict about unknown fields;
    /// `dry_run` keeps nothing. Returns the object as the apiserver has (or would have) it.
    ///
    /// Never forced: a field another manager owns with another value is a conflict (409), so
    /// nobody's field is taken over. A `metadata.resourceVersion` in `manifest` is a
    /// precondition: the apiserver refuses (409) when the object has moved on.
    pub async fn apply(
        &self,
        kind: &Kind,
        manifest: &Value,
        dry_run: bool,
    ) -> Result<Value, ApiFailure> {
        let (name, namespace) = name_and_namespace(manifest);
        let api = self.api(kind, namespace);
        let mut params = PatchParams::apply(FIELD_MANAGER);
        params.field_validation = Some(ValidationDirective::Strict);
        params.dry_run = dry_run;
        let object = self
            .bounded(
                || format!("applying {} {name}", kind.resource.kind),
                api.patch(name, &params, &Patch::Apply(manifest)),
            )
            .await?;
        object_value(object, &kind.resource)
    }

    /// Creates `manifest` as [`FIELD_MANAGER`], strict about unknown fields: the object must
    /// not exist (409 otherwise), which server-side apply cannot ask for. `dry_run` keeps
    /// nothing.
    pub async fn create(
        &self,
        kind: &Kind,
        manifest: &Value,
        dry_run: bool,
    ) -> Result<Value, ApiFailure> {
        let (name, namespace) = name_and_namespace(manifest);
        let api = self.api(kind, namespace);
        // kube's PostParams carries no field validation: the request is built here.
        let mut url = format!(
            "{}?fieldManager={FIELD_MANAGER}&fieldValidation=Strict",
            api.resource_url()
        );
        if dry_run {
            url.push_str("&dryRun=All");
        }
        let body = serde_json::to_vec(manifest).map_err(|e| ApiFailure::Malformed {
            message: e.to_string(),
        })?;
        let request = http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .map_err(|e| ApiFailure::unavailable(e.to_string()))?;
        let object: DynamicObject = self
            .bounded(
                || format!("creating {} {name}", kind.resource.kind),
                self.client.request(request),
            )
            .await?;
        object_value(object, &kind.resource)
    }

    /// Deletes `name` only if it is still the object with `uid` at `resource_version`: what a
    /// plan created, unchanged since (undoing a create). 409 when it has changed.
    pub async fn delete_exactly(
        &self,
        kind: &Kind,
        name: &str,
        namespace: Option<&str>,
        uid: &str,
        resource_version: &str,
    ) -> Result<(), ApiFailure> {
        let api = self.api(kind, namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: Some(resource_version.to_owned()),
            }),
            ..DeleteParams::default()
        };
        self.bounded(
            || format!("deleting {} {name}", kind.resource.kind),
            api.delete(name, &params),
        )
        .await
        .map(drop)
    }

    /// Puts `object` back whole (its content and field managers as they were read), only if
    /// the object is still at `resource_version`: undoing an update. 409 when it has changed.
    pub async fn restore(
        &self,
        kind: &Kind,
        object: &Value,
        resource_version: &str,
    ) -> Result<Value, ApiFailure> {
        let mut object = object.clone();
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("resourceVersion".into(), Value::from(resource_version));
        }
        let (name, namespace) = name_and_namespace(&object);
        let name = name.to_owned();
        let api = self.api(kind, namespace);
        let dynamic: DynamicObject =
            serde_json::from_value(object.clone()).map_err(|e| ApiFailure::Malformed {
                message: e.to_string(),
            })?;
        let restored = self
            .bounded(
                || format!("restoring {} {name}", kind.resource.kind),
                api.replace(&name, &PostParams::default(), &dynamic),
            )
            .await?;
        object_value(restored, &kind.resource)
    }
}
