//! One session's client of its project's control plane, acting as the caller (its token, no other
//! identity; capstan-core's `control_plane.rs` builds it): kinds by discovery (cached for the
//! session), lists, gets, creates, server-side apply (dry run or not; never forcing over another
//! field manager), deletes and replaces with preconditions (undoing a plan's writes), who the
//! caller is (a SelfSubjectReview), and the published OpenAPI v3 schemas. Failures are told apart
//! the way the tools must report them (`ApiFailure`).
//!
//! Reads, discovery and schemas live here; the writes in `writes.rs`, the failure classes in
//! `api_failure.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::discovery::Scope;
use serde_json::Value;

use crate::plan_token::Caller;
use capstan_core::control_plane::ControlPlane;

mod api_failure;
mod writes;

pub use api_failure::{ApiFailure, Cause};

/// The field manager of every write the change path makes.
pub const FIELD_MANAGER: &str = "capstan";

/// The namespace a namespaced object lives in when none is named.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Most objects one list returns; a longer list says it was cut.
pub const LIST_LIMIT: u32 = 500;

/// How long one request to the project's plane may take. 30 s: an apiserver answers in
/// milliseconds; a write still unanswered by then has an unknown outcome.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A kind as the project serves it.
#[derive(Clone, Debug)]
pub struct Kind {
    /// Its resource (plural, group, version, kind).
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// A session's client of its project's control plane, acting as the caller.
pub struct ProjectApi {
    client: kube::Client,
    project: String,
    plane: String,
    caller: tokio::sync::OnceCell<Caller>,
    timeout: Duration,
    kinds: Mutex<HashMap<(String, String, String), Kind>>,
    openapi: tokio::sync::Mutex<Option<Arc<Value>>>,
}

impl std::fmt::Debug for ProjectApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectApi")
            .field("project", &self.project)
            .finish_non_exhaustive()
    }
}

fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

impl ProjectApi {
    /// A client of `project`'s plane, as `plane` places it, acting as the holder of `token`
    /// (its token and nothing of the sidecar's identity).
    pub fn for_caller(
        plane: &ControlPlane,
        project: &str,
        token: &str,
    ) -> Result<Self, ApiFailure> {
        let config = plane
            .caller_config(project, token)
            .map_err(|e| ApiFailure::unavailable(e.to_string()))?;
        let url = config.cluster_url.to_string();
        let client = kube::Client::try_from(config)
            .map_err(|e| ApiFailure::unavailable(format!("building the client: {e}")))?;
        Ok(Self::new(client, project, &url))
    }

    /// A client of `project`'s plane at `plane` (its URL) over `client` (which carries the
    /// caller's token).
    pub fn new(client: kube::Client, project: &str, plane: &str) -> Self {
        Self {
            client,
            project: project.to_owned(),
            plane: plane.to_owned(),
            caller: tokio::sync::OnceCell::new(),
            timeout: DEFAULT_REQUEST_TIMEOUT,
            kinds: Mutex::new(HashMap::new()),
            openapi: tokio::sync::Mutex::new(None),
        }
    }

    /// The project this client acts in.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The URL of the project's control plane.
    pub fn plane(&self) -> &str {
        &self.plane
    }

    /// Who the caller is, as the project's plane authenticates the token: asked once per
    /// client (a SelfSubjectReview, which any authenticated caller may make), then kept — a
    /// token names one user for its whole life. An answer without a user name is refused.
    pub async fn caller(&self) -> Result<Caller, ApiFailure> {
        self.caller
            .get_or_try_init(|| async {
                let asked = self_subject(self.client.clone());
                match tokio::time::timeout(self.timeout, asked).await {
                    Ok(answer) => answer,
                    Err(_) => Err(ApiFailure::TimedOut {
                        message: format!(
                            "asking who the caller is (SelfSubjectReview) got no answer within \
                             {}s",
                            self.timeout.as_secs()
                        ),
                    }),
                }
            })
            .await
            .cloned()
    }

    async fn bounded<T>(
        &self,
        what: impl FnOnce() -> String,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ApiFailure> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result.map_err(ApiFailure::from_kube),
            Err(_) => Err(ApiFailure::TimedOut {
                message: format!(
                    "{} got no answer within {}s",
                    what(),
                    self.timeout.as_secs()
                ),
            }),
        }
    }

    /// The kind `group/version/kind` as this project serves it (discovery, cached for the
    /// session).
    pub async fn kind(&self, group: &str, version: &str, kind: &str) -> Result<Kind, ApiFailure> {
        let key = (group.to_owned(), version.to_owned(), kind.to_owned());
        if let Some(found) = self.kinds.lock().ok().and_then(|k| k.get(&key).cloned()) {
            return Ok(found);
        }
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let not_served = || ApiFailure::NotServed {
            api_version: api_version(group, version),
            kind: kind.to_owned(),
        };
        let discovered = tokio::time::timeout(
            self.timeout,
            kube::discovery::pinned_kind(&self.client, &gvk),
        )
        .await;
        let (resource, capabilities) = match discovered {
            Err(_) => {
                return Err(ApiFailure::TimedOut {
                    message: format!("discovering {kind} ({})", api_version(group, version)),
                });
            }
            Ok(Ok(found)) => found,
            Ok(Err(kube::Error::Discovery(_))) => return Err(not_served()),
            Ok(Err(error)) => match ApiFailure::from_kube(error) {
                ApiFailure::NotFound { .. } => return Err(not_served()),
                other => return Err(other),
            },
        };
        let found = Kind {
            resource,
            namespaced: capabilities.scope == Scope::Namespaced,
        };
        if let Ok(mut kinds) = self.kinds.lock() {
            kinds.insert(key, found.clone());
        }
        Ok(found)
    }

    fn api(&self, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        match (kind.namespaced, namespace) {
            (true, Some(namespace)) => {
                Api::namespaced_with(self.client.clone(), namespace, &kind.resource)
            }
            _ => Api::all_with(self.client.clone(), &kind.resource),
        }
    }

    /// Objects of `kind` (in `namespace` for a namespaced kind; every namespace the caller may
    /// read when `None`), at most [`LIST_LIMIT`]; the flag says whether there were more.
    pub async fn list(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<(Vec<Value>, bool), ApiFailure> {
        let mut params = ListParams::default().limit(LIST_LIMIT);
        if let Some(selector) = label_selector {
            params = params.labels(selector);
        }
        let api = self.api(kind, namespace);
        let list = self
            .bounded(
                || format!("listing {}", kind.resource.plural),
                api.list(&params),
            )
            .await?;
        let more = list
            .metadata
            .continue_
            .as_ref()
            .is_some_and(|c| !c.is_empty());
        let items = list
            .items
            .into_iter()
            .map(|object| object_value(object, &kind.resource))
            .collect::<Result<_, _>>()?;
        Ok((items, more))
    }

    /// The object `name` of `kind`, if it exists.
    pub async fn get(
        &self,
        kind: &Kind,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<Option<Value>, ApiFailure> {
        let api = self.api(kind, namespace);
        let object = self
            .bounded(
                || format!("reading {} {name}", kind.resource.kind),
                api.get_opt(name),
            )
            .await?;
        object
            .map(|object| object_value(object, &kind.resource))
            .transpose()
    }

    /// The OpenAPI v3 schema of `group/version/kind`, with the document it came from (for its
    /// `$ref`s).
    pub async fn schema(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Result<(Value, Arc<Value>), ApiFailure> {
        let index = self.openapi_index().await?;
        let path = if group.is_empty() {
            format!("api/{version}")
        } else {
            format!("apis/{group}/{version}")
        };
        let not_served = || ApiFailure::NotServed {
            api_version: api_version(group, version),
            kind: kind.to_owned(),
        };
        let Some(url) = index
            .pointer(&format!(
                "/paths/{}/serverRelativeURL",
                path.replace('/', "~1")
            ))
            .and_then(Value::as_str)
        else {
            return Err(not_served());
        };
        let document = Arc::new(self.get_json(url).await?);
        let schemas = document
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .ok_or_else(|| ApiFailure::Malformed {
                message: format!("{url} has no components.schemas"),
            })?;
        let schema = schemas
            .values()
            .find(|schema| {
                schema
                    .get("x-kubernetes-group-version-kind")
                    .and_then(Value::as_array)
                    .is_some_and(|gvks| {
                        gvks.iter().any(|gvk| {
                            gvk["group"] == group
                                && gvk["version"] == version
                                && gvk["kind"] == kind
                        })
                    })
            })
            .cloned()
            .ok_or_else(not_served)?;
        Ok((schema, document))
    }

    async fn openapi_index(&self) -> Result<Arc<Value>, ApiFailure> {
        let mut cached = self.openapi.lock().await;
        if let Some(index) = cached.as_ref() {
            return Ok(index.clone());
        }
        let index = Arc::new(self.get_json("/openapi/v3").await?);
        *cached = Some(index.clone());
        Ok(index)
    }

    async fn get_json(&self, url: &str) -> Result<Value, ApiFailure> {
        let request = http::Request::get(url)
            .body(Vec::new())
            .map_err(|e| ApiFailure::unavailable(format!("{url}: {e}")))?;
        let text = self
            .bounded(
                || format!("reading {url}"),
                self.client.request_text(request),
            )
            .await?;
        serde_json::from_str(&text).map_err(|e| ApiFailure::Malformed {
            message: format!("{url}: {e}"),
        })
    }
}

/// The `metadata.name` and `metadata.namespace` of a manifest (empty and none when missing).
fn name_and_namespace(manifest: &Value) -> (&str, Option<&str>) {
    let name = manifest
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let namespace = manifest
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    (name, namespace)
}

/// An object as JSON, with its apiVersion and kind (list items may come without them).
fn object_value(object: DynamicObject, resource: &ApiResource) -> Result<Value, ApiFailure> {
    let mut value = serde_json::to_value(object).map_err(|e| ApiFailure::Malformed {
        message: e.to_string(),
    })?;
    if let Some(map) = value.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(resource.api_version.clone()));
        map.entry("kind")
            .or_insert_with(|| Value::String(resource.kind.clone()));
    }
    Ok(value)
}

/// Who `client`'s credential is (a SelfSubjectReview, which any authenticated caller may
/// make). An answer without a user name is refused: it names nobody.
pub(crate) async fn self_subject(client: kube::Client) -> Result<Caller, ApiFailure> {
    let api: Api<SelfSubjectReview> = Api::all(client);
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(ApiFailure::from_kube)?;
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    match user.username {
        Some(username) if !username.is_empty() => Ok(Caller {
            username,
            uid: user.uid.unwrap_or_default(),
        }),
        _ => Err(ApiFailure::Malformed {
            message: "the control plane's SelfSubjectReview named no user".into(),
        }),
    }
}
