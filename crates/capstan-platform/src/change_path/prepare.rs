//! Reading a batch of manifests as the project serves their kinds: each in its canonical form,
//! or the errors (with field paths) that keep it from being judged.

use serde_json::{Value, json};

use super::{MAX_MANIFESTS, item_error};
use crate::failures::read_failure;
use crate::manifest::{Identity, editable, group_version};
use crate::project_api::{ApiFailure, DEFAULT_NAMESPACE, Kind, ProjectApi};
use capstan_core::tool_error::{ErrorKind, ToolError};

/// A manifest ready to judge: its kind as the project serves it and its canonical form
/// (editable, with the namespace filled in for a namespaced kind).
pub(super) struct Prepared {
    pub(super) kind: Kind,
    pub(super) canonical: Value,
    pub(super) identity: Identity,
}

impl Prepared {
    /// The namespace the object lives in (`None` for a cluster-scoped kind).
    pub(super) fn namespace(&self) -> Option<&str> {
        self.canonical
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }
}

/// Prepares every manifest; the errors of those that cannot be judged, by index.
pub(super) async fn prepare_all(
    api: &ProjectApi,
    manifests: &[Value],
) -> Result<Vec<Result<Prepared, Vec<Value>>>, ToolError> {
    check_count(manifests.len())?;
    let mut prepared = Vec::with_capacity(manifests.len());
    for (index, manifest) in manifests.iter().enumerate() {
        prepared.push(prepare(api, index, manifest).await?);
    }
    refuse_duplicates(&mut prepared);
    Ok(prepared)
}

/// A batch holds between 1 and [`MAX_MANIFESTS`] manifests.
fn check_count(count: usize) -> Result<(), ToolError> {
    if count == 0 || count > MAX_MANIFESTS {
        return Err(ToolError::new(
            ErrorKind::InvalidInput,
            format!("manifests: between 1 and {MAX_MANIFESTS} manifests per call ({count} given)"),
        )
        .at("manifests"));
    }
    Ok(())
}

/// Two manifests for one object cannot both be applied: every one after the first is refused,
/// naming the first.
fn refuse_duplicates(prepared: &mut [Result<Prepared, Vec<Value>>]) {
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
}

/// The canonical form of manifest `index`, or the errors that keep it from being judged
/// (each with its field path). A plane that cannot be asked what the kind is (unavailable,
/// timed out, an unreadable answer) ends the call, as it does when judging (`judge.rs`): that
/// is no verdict on the manifest.
async fn prepare(
    api: &ProjectApi,
    index: usize,
    manifest: &Value,
) -> Result<Result<Prepared, Vec<Value>>, ToolError> {
    let named = match named(index, manifest) {
        Ok(named) => named,
        Err(errors) => return Ok(Err(errors)),
    };
    let (group, version) = group_version(named.api_version);
    let found = match api.kind(group, version, named.kind).await {
        Ok(found) => found,
        Err(
            failure @ (ApiFailure::Unavailable { .. }
            | ApiFailure::TimedOut { .. }
            | ApiFailure::Malformed { .. }),
        ) => {
            return Err(read_failure(
                failure,
                &format!("look up {} ({})", named.kind, named.api_version),
                api.project(),
            ));
        }
        Err(ApiFailure::NotServed { .. }) => {
            let message = format!(
                "project {} does not serve {} ({})",
                api.project(),
                named.kind,
                named.api_version
            );
            return Ok(Err(vec![item_error(index, "kind", message)]));
        }
        Err(other) => {
            let message = format!("could not look up {}: {other}", named.kind);
            return Ok(Err(vec![item_error(index, "kind", message)]));
        }
    };
    Ok(canonical(index, manifest, found))
}

/// What a manifest must name before its kind can be looked up.
#[derive(Debug, PartialEq, Eq)]
struct Named<'a> {
    api_version: &'a str,
    kind: &'a str,
}

/// The apiVersion and kind of manifest `index`, or every required field it lacks (a name too:
/// a plan names what it changes).
fn named(index: usize, manifest: &Value) -> Result<Named<'_>, Vec<Value>> {
    let field = |name: &str| {
        manifest
            .pointer(name)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    if !manifest.is_object() {
        return Err(vec![item_error(
            index,
            "",
            "must be an object (a manifest)",
        )]);
    }
    let api_version = field("/apiVersion");
    let kind = field("/kind");
    let name = field("/metadata/name");
    let mut errors = Vec::new();
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
    match (api_version, kind, name) {
        (Some(api_version), Some(kind), Some(_)) => Ok(Named { api_version, kind }),
        _ => Err(errors),
    }
}

/// Manifest `index` as it is judged, for its kind `found`: editable, with the default
/// namespace filled in for a namespaced kind; a namespace on a cluster-scoped kind is refused
/// (an empty one dropped).
fn canonical(index: usize, manifest: &Value, found: Kind) -> Result<Prepared, Vec<Value>> {
    let namespace = manifest
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    let mut canonical = editable(manifest);
    if found.namespaced {
        if namespace.is_none()
            && let Some(metadata) = canonical.get_mut("metadata").and_then(Value::as_object_mut)
        {
            metadata.insert("namespace".into(), json!(DEFAULT_NAMESPACE));
        }
    } else if namespace.is_some() {
        return Err(vec![item_error(
            index,
            "metadata.namespace",
            format!(
                "{} is cluster-scoped: remove the namespace",
                found.resource.kind
            ),
        )]);
    } else if let Some(metadata) = canonical.get_mut("metadata").and_then(Value::as_object_mut) {
        // An empty namespace on a cluster-scoped kind is no namespace: left in, the object would
        // be read at a namespaced path and named apart from the same object without it.
        metadata.remove("namespace");
    }
    let identity = Identity::of(&canonical);
    Ok(Prepared {
        kind: found,
        canonical,
        identity,
    })
}

#[cfg(test)]
#[path = "prepare/tests.rs"]
mod tests;
