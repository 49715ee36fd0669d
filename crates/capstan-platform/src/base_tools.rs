//! The base platform tools: tools that belong to no provider and read (or, through the change
//! path, change) the caller's own project as the caller. Un-namespaced (`resources_list`, never
//! `<server>__…`), so no provider can shadow them; no input schema has a project field — the
//! project is the session's. None of them is metered: no provider did the work.
//!
//! The read tools live here; validate, plan and apply in `change_path.rs`.

use std::sync::Arc;

use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::change_path::ChangePath;
use crate::failures::read_failure;
use crate::manifest::{conditions, editable};
use crate::milo::{
    ALLOWANCE_BUCKET, LOCATION, MiloKind, PROJECT_BUCKETS, QUOTA_NAMESPACE, RESOURCE_REGISTRATION,
    SERVICE_AVAILABILITY, join_locations, quota_rows,
};
use crate::openapi::{expand, narrow};
use crate::project_api::{ApiFailure, DEFAULT_NAMESPACE, Kind, ProjectApi};
use capstan_core::tool_error::{ErrorKind, ToolError};

/// `resources_list`.
pub const RESOURCES_LIST: &str = "resources_list";
/// `resources_get`.
pub const RESOURCES_GET: &str = "resources_get";
/// `schema_get`.
pub const SCHEMA_GET: &str = "schema_get";
/// `locations_list`.
pub const LOCATIONS_LIST: &str = "locations_list";
/// `quota_get`.
pub const QUOTA_GET: &str = "quota_get";
/// `resources_validate`.
pub const RESOURCES_VALIDATE: &str = "resources_validate";
/// `resources_plan`.
pub const RESOURCES_PLAN: &str = "resources_plan";
/// `resources_apply`.
pub const RESOURCES_APPLY: &str = "resources_apply";

/// The base tools of one session: its project API client (the caller's token, the project's
/// plane) and, when a plan-token key is available, the change path. A clone shares the client
/// (its discovery cache and who the caller is).
#[derive(Clone, Debug)]
pub struct BaseTools {
    api: Arc<ProjectApi>,
    change_path: Option<ChangePath>,
    tools: Vec<Tool>,
}

fn gvk_properties() -> serde_json::Map<String, Value> {
    let mut properties = serde_json::Map::new();
    properties.insert(
        "group".into(),
        json!({"type": "string", "description": "The API group; empty for the core group (ConfigMap, Secret)."}),
    );
    properties.insert(
        "version".into(),
        json!({"type": "string", "minLength": 1, "description": "The API version, e.g. v1 or v1alpha1."}),
    );
    properties.insert(
        "kind".into(),
        json!({"type": "string", "minLength": 1, "description": "The kind, e.g. ConfigMap."}),
    );
    properties
}

fn schema(
    mut properties: serde_json::Map<String, Value>,
    extra: &[(&str, Value)],
    required: &[&str],
) -> Value {
    for (name, property) in extra {
        properties.insert((*name).to_owned(), property.clone());
    }
    json!({"type": "object", "properties": properties, "required": required,
           "additionalProperties": false})
}

fn manifests_property() -> Value {
    json!({"type": "array", "minItems": 1, "maxItems": crate::change_path::MAX_MANIFESTS,
           "items": {"type": "object"},
           "description": "Kubernetes manifests (apiVersion, kind, metadata.name, and the fields to set). Namespaced kinds default to the namespace `default`."})
}

fn tool(name: &str, description: &str, input: Value, read_only: bool) -> Tool {
    let mut tool = Tool::new(
        name.to_owned(),
        description.to_owned(),
        Arc::new(input.as_object().cloned().unwrap_or_default()),
    );
    let mut annotations = ToolAnnotations::new().read_only(read_only);
    if !read_only {
        annotations = annotations.destructive(name == RESOURCES_APPLY);
    }
    tool.annotations = Some(annotations);
    tool
}

impl BaseTools {
    /// The base tools over `api`, with the change path when `change_path` is given.
    pub fn new(api: ProjectApi, change_path: Option<ChangePath>) -> Self {
        let tools = definitions(change_path.is_some());
        Self {
            api: Arc::new(api),
            change_path,
            tools,
        }
    }

    /// The names that can change something: `resources_plan` (it alone authorizes a write)
    /// and `resources_apply`, when the change path is composed.
    pub fn mutating(&self) -> Vec<String> {
        if self.change_path.is_some() {
            vec![RESOURCES_PLAN.to_owned(), RESOURCES_APPLY.to_owned()]
        } else {
            Vec::new()
        }
    }

    /// Whether `name` is one of these tools.
    pub fn has(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// The tool definitions, in the order `tools/list` shows them.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }
}

/// The definitions of the base tools (the change path's only with a plan-token key).
fn definitions(change_path: bool) -> Vec<Tool> {
    let mut tools = read_tools();
    if change_path {
        tools.extend(change_path_tools());
    }
    tools
}

/// The tools that only read the project: every session has them.
fn read_tools() -> Vec<Tool> {
    vec![
        tool(
            RESOURCES_LIST,
            "List every resource of one kind in this project, with the conditions the platform reports about each. Namespaced kinds default to the namespace `default`.",
            schema(
                gvk_properties(),
                &[(
                    "namespace",
                    json!({"type": "string", "description": "The namespace (namespaced kinds only)."}),
                )],
                &["group", "version", "kind"],
            ),
            true,
        ),
        tool(
            RESOURCES_GET,
            "Read one resource of this project as an editable manifest (the platform's bookkeeping and status removed), with its conditions alongside.",
            schema(
                gvk_properties(),
                &[
                    ("name", json!({"type": "string", "minLength": 1})),
                    (
                        "namespace",
                        json!({"type": "string", "description": "The namespace (namespaced kinds only); default `default`."}),
                    ),
                ],
                &["group", "version", "kind", "name"],
            ),
            true,
        ),
        tool(
            SCHEMA_GET,
            "Describe a kind's fields and which are required, from this project's own published OpenAPI schema. `path` (dotted, e.g. spec.template) narrows a large kind to one part.",
            schema(
                gvk_properties(),
                &[(
                    "path",
                    json!({"type": "string", "description": "A dotted field path inside the kind, e.g. spec or spec.ports."}),
                )],
                &["group", "version", "kind"],
            ),
            true,
        ),
        tool(
            LOCATIONS_LIST,
            "Where a service is offered to this project: its ServiceAvailabilities joined to the Locations they name, with topology and readiness.",
            schema(
                serde_json::Map::new(),
                &[(
                    "service",
                    json!({"type": "string", "minLength": 1, "description": "The service's name, as ServiceAvailability's spec.serviceRef.name holds it."}),
                )],
                &["service"],
            ),
            true,
        ),
        tool(
            QUOTA_GET,
            "This project's quota per resource type: limit, used and available, in the unit each resource type publishes. `service` narrows to the resource types that service owns.",
            schema(
                serde_json::Map::new(),
                &[(
                    "service",
                    json!({"type": "string", "minLength": 1, "description": "A service's canonical name, e.g. compute.datumapis.com."}),
                )],
                &[],
            ),
            true,
        ),
    ]
}

/// The change path's tools, in the order a person uses them: validate, plan, apply.
fn change_path_tools() -> [Tool; 3] {
    [
        tool(
            RESOURCES_VALIDATE,
            "Ask the platform to judge manifests and keep nothing: for each, whether it is accepted (with the field path of every rejection), whether the resource exists, and what applying would change. Writes nothing.",
            schema(
                serde_json::Map::new(),
                &[("manifests", manifests_property())],
                &["manifests"],
            ),
            true,
        ),
        tool(
            RESOURCES_PLAN,
            "Plan a change: validate every manifest, decide create or update, order them so a manifest referring to another comes after it, report the differences, and return the canonical manifests with a plan token. Writes nothing. Show the plan to the person and apply only after they agree.",
            schema(
                serde_json::Map::new(),
                &[("manifests", manifests_property())],
                &["manifests"],
            ),
            false,
        ),
        tool(
            RESOURCES_APPLY,
            "Apply a plan the person agreed to: pass exactly the manifests resources_plan returned, in its order, with its planToken. Anything changed since the plan is refused and nothing is written. The only tool here that writes.",
            schema(
                serde_json::Map::new(),
                &[
                    ("manifests", manifests_property()),
                    (
                        "planToken",
                        json!({"type": "string", "minLength": 1, "description": "The planToken resources_plan returned."}),
                    ),
                ],
                &["manifests", "planToken"],
            ),
            false,
        ),
    ]
}

impl BaseTools {
    /// Serves one call of a base tool; errors come back as tool errors a consumer can act on.
    pub async fn call(&self, name: &str, arguments: &Value) -> Result<CallToolResult, ToolError> {
        let text = |field: &str| arguments.get(field).and_then(Value::as_str);
        match name {
            RESOURCES_LIST | RESOURCES_GET | SCHEMA_GET => {
                let (group, version, kind) = (
                    text("group").unwrap_or_default(),
                    text("version").unwrap_or_default(),
                    text("kind").unwrap_or_default(),
                );
                match name {
                    RESOURCES_LIST => self.list(group, version, kind, text("namespace")).await,
                    RESOURCES_GET => {
                        self.get(
                            group,
                            version,
                            kind,
                            text("name").unwrap_or_default(),
                            text("namespace"),
                        )
                        .await
                    }
                    _ => self.schema(group, version, kind, text("path")).await,
                }
            }
            LOCATIONS_LIST => self.locations(text("service").unwrap_or_default()).await,
            QUOTA_GET => self.quota(text("service")).await,
            RESOURCES_VALIDATE | RESOURCES_PLAN | RESOURCES_APPLY => {
                let Some(change_path) = &self.change_path else {
                    return Err(ToolError::new(
                        ErrorKind::Forbidden,
                        format!("{name} is not available: this sidecar has no plan-token key"),
                    ));
                };
                let manifests = arguments
                    .get("manifests")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                match name {
                    RESOURCES_VALIDATE => change_path.validate(&self.api, manifests).await,
                    RESOURCES_PLAN => change_path.plan(&self.api, manifests).await,
                    _ => {
                        change_path
                            .apply(&self.api, manifests, text("planToken").unwrap_or_default())
                            .await
                    }
                }
            }
            other => Err(ToolError::new(
                ErrorKind::InvalidInput,
                format!("no base tool named {other:?}"),
            )),
        }
    }

    async fn kind(&self, group: &str, version: &str, kind: &str) -> Result<Kind, ToolError> {
        self.api
            .kind(group, version, kind)
            .await
            .map_err(|failure| read_failure(failure, &format!("find {kind}"), self.api.project()))
    }

    async fn list(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<CallToolResult, ToolError> {
        let found = self.kind(group, version, kind).await?;
        let namespace = found
            .namespaced
            .then(|| namespace.unwrap_or(DEFAULT_NAMESPACE));
        let (objects, truncated) =
            self.api
                .list(&found, namespace, None)
                .await
                .map_err(|failure| {
                    read_failure(
                        failure,
                        &format!("list {kind}{}", in_namespace(namespace)),
                        self.api.project(),
                    )
                })?;
        let items: Vec<Value> = objects
            .iter()
            .map(|object| {
                let mut item = json!({
                    "name": object.pointer("/metadata/name"),
                    "conditions": conditions(object),
                });
                if let Some(namespace) = object.pointer("/metadata/namespace") {
                    item["namespace"] = namespace.clone();
                }
                if let Some(phase) = object.pointer("/status/phase") {
                    item["phase"] = phase.clone();
                }
                if let Some(created) = object.pointer("/metadata/creationTimestamp") {
                    item["created"] = created.clone();
                }
                item
            })
            .collect();
        let mut answer = json!({
            "apiVersion": found.resource.api_version,
            "kind": kind,
            "count": items.len(),
            "items": items,
        });
        if let Some(namespace) = namespace {
            answer["namespace"] = json!(namespace);
        }
        if truncated {
            answer["truncated"] = json!(format!(
                "only the first {} are shown; there are more",
                crate::project_api::LIST_LIMIT
            ));
        }
        Ok(CallToolResult::structured(answer))
    }

    async fn get(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<CallToolResult, ToolError> {
        let found = self.kind(group, version, kind).await?;
        let namespace = found
            .namespaced
            .then(|| namespace.unwrap_or(DEFAULT_NAMESPACE));
        let object = self
            .api
            .get(&found, name, namespace)
            .await
            .map_err(|failure| {
                read_failure(
                    failure,
                    &format!("read {kind} {name}{}", in_namespace(namespace)),
                    self.api.project(),
                )
            })?;
        let Some(object) = object else {
            return Err(ToolError::new(
                ErrorKind::InvalidInput,
                format!(
                    "there is no {kind} {name}{} in project {}; resources_list shows the ones there are",
                    in_namespace(namespace),
                    self.api.project()
                ),
            )
            .at("name")
            .with_code("not_found"));
        };
        Ok(CallToolResult::structured(json!({
            "manifest": editable(&object),
            "conditions": conditions(&object),
        })))
    }

    async fn schema(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        path: Option<&str>,
    ) -> Result<CallToolResult, ToolError> {
        let (schema, document) =
            self.api
                .schema(group, version, kind)
                .await
                .map_err(|failure| {
                    read_failure(
                        failure,
                        &format!("read the schema of {kind}"),
                        self.api.project(),
                    )
                })?;
        let part = match path.filter(|p| !p.is_empty()) {
            Some(path) => narrow(&schema, &document, path).map_err(|wrong| {
                ToolError::new(ErrorKind::InvalidInput, wrong.to_string()).at("path")
            })?,
            None => schema,
        };
        let (expanded, depth) = expand(&part, &document);
        let mut answer = json!({
            "apiVersion": if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") },
            "kind": kind,
            "required": expanded.get("required").cloned().unwrap_or(json!([])),
            "schema": expanded,
        });
        if let Some(path) = path.filter(|p| !p.is_empty()) {
            answer["path"] = json!(path);
        }
        if depth < 8 {
            answer["note"] = json!(format!(
                "references are expanded {depth} levels deep to keep this readable; pass a path to see a deeper part"
            ));
        }
        Ok(CallToolResult::structured(answer))
    }

    /// The kind `milo` as this project serves it, or the loud refusal: the answer is unknown,
    /// not empty, and the person did nothing wrong.
    async fn milo_kind(&self, milo: MiloKind, unknown: &str) -> Result<Kind, ToolError> {
        let (group, version, kind) = milo;
        match self.api.kind(group, version, kind).await {
            Ok(found) => Ok(found),
            Err(ApiFailure::NotServed { api_version, kind }) => Err(ToolError::new(
                ErrorKind::UpstreamUnavailable,
                format!(
                    "project {} does not serve {kind} ({api_version}), so {unknown} cannot be \
                     known. This is not an empty answer, and nothing you did caused it: the \
                     platform has not installed {kind} for this project.",
                    self.api.project()
                ),
            )
            .with_code("kind_not_served")
            .retryable(false)),
            Err(failure) => Err(read_failure(
                failure,
                &format!("find {kind}"),
                self.api.project(),
            )),
        }
    }

    async fn locations(&self, service: &str) -> Result<CallToolResult, ToolError> {
        let unknown = format!("where {service} is offered");
        let availability = self.milo_kind(SERVICE_AVAILABILITY, &unknown).await?;
        let location = self.milo_kind(LOCATION, &unknown).await?;
        let project = self.api.project();
        let (availabilities, _) = self
            .api
            .list(&availability, None, None)
            .await
            .map_err(|f| read_failure(f, "list ServiceAvailabilities", project))?;
        let (locations, _) = self
            .api
            .list(&location, None, None)
            .await
            .map_err(|f| read_failure(f, "list Locations", project))?;
        let rows = join_locations(service, &availabilities, &locations);
        Ok(CallToolResult::structured(json!({
            "service": service,
            "count": rows.len(),
            "locations": rows,
        })))
    }

    async fn quota(&self, service: Option<&str>) -> Result<CallToolResult, ToolError> {
        let unknown = "this project's quota (which is not the same as no limit)";
        let bucket = self.milo_kind(ALLOWANCE_BUCKET, unknown).await?;
        let registration = self.milo_kind(RESOURCE_REGISTRATION, unknown).await?;
        let project = self.api.project();
        let (buckets, _) = self
            .api
            .list(&bucket, Some(QUOTA_NAMESPACE), Some(PROJECT_BUCKETS))
            .await
            .map_err(|f| read_failure(f, "list AllowanceBuckets in milo-system", project))?;
        let (registrations, _) = self
            .api
            .list(&registration, None, None)
            .await
            .map_err(|f| read_failure(f, "list ResourceRegistrations", project))?;
        let rows = quota_rows(service, &buckets, &registrations);
        let mut answer = json!({"count": rows.len(), "quotas": rows});
        if let Some(service) = service {
            answer["service"] = json!(service);
        }
        Ok(CallToolResult::structured(answer))
    }
}

fn in_namespace(namespace: Option<&str>) -> String {
    namespace
        .map(|n| format!(" in namespace {n}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider tool exposed without its prefix may never take a base tool's name: the
    /// binding rules refuse the names in `capstan_api::patterns::BUILT_IN_TOOLS`.
    #[test]
    fn every_base_tool_should_be_a_reserved_name() {
        for tool in definitions(true) {
            assert!(
                capstan_api::patterns::BUILT_IN_TOOLS.contains(&tool.name.as_ref()),
                "{} is not in BUILT_IN_TOOLS",
                tool.name
            );
        }
    }
}
