//! The valid objects of what a source read: every source's text goes through
//! `capstan_api::parse`, invalid objects are logged and skipped, the valid ones kept in
//! first-wins order.

use capstan_api::{CapabilityDocument, Object, Parsed, RouteQualifier};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde_json::value::RawValue;
use tracing::warn;

use super::snapshot::{Document, NamedQualifier, Snapshot};

/// The valid objects of `parsed` (invalid ones logged and skipped): documents named by
/// `metadata.name` or their position, and qualifiers with the namespace they name, if any.
pub(super) struct Found {
    documents: Vec<(CapabilityDocument, String)>,
    qualifiers: Vec<(RouteQualifier, String)>,
}

pub(super) fn found_in(parsed: Parsed, origin: &str) -> Found {
    for invalid in &parsed.invalid {
        for line in invalid.lines() {
            warn!(origin, error = %line, "invalid capability document or qualifier skipped");
        }
    }
    let mut found = Found {
        documents: Vec::new(),
        qualifiers: Vec::new(),
    };
    for p in parsed.objects {
        let index = p.index;
        let name = p.object.name().map(str::to_owned);
        match p.object {
            Object::Qualifier(qualifier) => {
                // A qualifier's name is its merge order key: validation requires one.
                let name = name.unwrap_or_else(|| format!("qualifier-{index}"));
                found.qualifiers.push((qualifier, name));
            }
            other => {
                if let Some(document) = other.into_document() {
                    let name = name.unwrap_or_else(|| format!("document-{index}"));
                    found.documents.push((document, name));
                }
            }
        }
    }
    found
}

/// Fixture and HTTP objects name their consumer project in `metadata.namespace`; one naming
/// another project is dropped (an object without one applies to every project).
pub(super) fn scoped(found: Found, project: &str, origin: &str) -> Snapshot {
    let mine = |namespace: Option<&str>, name: &str, what: &str| match namespace {
        Some(namespace) if namespace != project => {
            warn!(
                origin,
                name, namespace, project, "{what} for another project dropped"
            );
            false
        }
        _ => true,
    };
    Snapshot {
        qualifiers_error: None,
        documents: found
            .documents
            .into_iter()
            .filter(|(document, binding)| {
                mine(document.metadata.namespace.as_deref(), binding, "document")
            })
            .map(|(document, binding)| Document {
                binding,
                spec: document.spec,
            })
            .collect(),
        qualifiers: found
            .qualifiers
            .into_iter()
            .filter(|(qualifier, name)| {
                mine(qualifier.metadata.namespace.as_deref(), name, "qualifier")
            })
            .map(|(qualifier, name)| (name, qualifier.spec))
            .collect(),
    }
}

/// One object as `capstan_api::parse` reads it from a list: its name and its spec, the spec
/// text passed through as it is (the watching source keeps specs as text).
#[derive(Serialize)]
struct Item<'a> {
    #[serde(rename = "apiVersion", skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    metadata: ItemName<'a>,
    spec: &'a RawValue,
}

#[derive(Serialize)]
struct ItemName<'a> {
    name: Option<&'a str>,
}

/// Why a list of watched or listed objects could not be read as one list.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListError {
    /// The objects could not be written back out as one list (a spec that is not JSON text).
    #[error(transparent)]
    Encode(serde_json::Error),
    /// The list did not parse as Capstan objects.
    #[error(transparent)]
    Parse(capstan_api::ParseError),
}

/// `items` as one list through `capstan_api::parse`: the valid objects (`found_in`).
fn found_in_items(items: &[Item<'_>]) -> Result<Found, ListError> {
    #[derive(Serialize)]
    struct List<'a, 'b> {
        items: &'a [Item<'b>],
    }
    let text = serde_json::to_string(&List { items }).map_err(ListError::Encode)?;
    let parsed = capstan_api::parse(&text).map_err(ListError::Parse)?;
    Ok(found_in(parsed, "crd"))
}

/// CapabilityBindings (metadata and spec text) as documents in first-wins order — creation
/// order, then name, the order the controller's probe uses for collisions —, each spec through
/// the same parse and validation as every source. Shared by the listing and the watching crd
/// source (`source/crd_watch.rs`).
pub(crate) fn documents_of<'a>(
    objects: impl Iterator<Item = (&'a ObjectMeta, &'a RawValue)>,
) -> Result<Vec<Document>, ListError> {
    let mut objects: Vec<(&ObjectMeta, &RawValue)> = objects.collect();
    objects.sort_by(|a, b| capstan_api::binding::first_wins_order(a.0, b.0));
    let items: Vec<Item<'_>> = objects
        .into_iter()
        .map(|(metadata, spec)| Item {
            api_version: None,
            kind: None,
            metadata: ItemName {
                name: metadata.name.as_deref(),
            },
            spec,
        })
        .collect();
    Ok(found_in_items(&items)?
        .documents
        .into_iter()
        .map(|(document, binding)| Document {
            binding,
            spec: document.spec,
        })
        .collect())
}

/// RouteQualifiers (metadata and spec text), the valid ones, through the same parse and
/// validation as every source.
pub(crate) fn qualifiers_of<'a>(
    objects: impl Iterator<Item = (&'a ObjectMeta, &'a RawValue)>,
) -> Result<Vec<NamedQualifier>, ListError> {
    let items: Vec<Item<'_>> = objects
        .map(|(metadata, spec)| Item {
            api_version: Some(capstan_api::API_VERSION),
            kind: Some("RouteQualifier"),
            metadata: ItemName {
                name: metadata.name.as_deref(),
            },
            spec,
        })
        .collect();
    Ok(found_in_items(&items)?
        .qualifiers
        .into_iter()
        .map(|(qualifier, name)| (name, qualifier.spec))
        .collect())
}
