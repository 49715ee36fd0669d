//! What the controller keeps of each object in its watch caches.
//!
//! A `DynamicObject` holds its spec as a `serde_json::Value` tree: for a typical binding that is
//! several kilobytes of map nodes, and with 5,000 bindings the cache dominated the controller's
//! memory. The controller reads a spec only when it reconciles the object, so the cache keeps
//! the spec as the compact JSON text the apiserver sent and parses it on demand. The status is
//! kept already read, as [`ObservedStatus`] (a few short strings), because the status worker
//! compares against it on every write decision.
//!
//! The spec stays untyped: a spec this version cannot decode must reach validation and be
//! reported, never stall the watch.

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::status::ObservedStatus;

/// A cached CapabilityBinding.
pub type CachedBinding = Cached<capstan_api::CapabilityBinding>;
/// A cached RouteQualifier.
pub type CachedQualifier = Cached<capstan_api::RouteQualifier>;

/// One object of kind `K` as the controller caches it.
#[derive(Deserialize)]
pub struct Cached<K> {
    /// The object's metadata (managed fields are dropped before caching).
    pub metadata: ObjectMeta,
    /// The spec as the apiserver sent it.
    #[serde(default)]
    spec: Option<Box<RawValue>>,
    /// The status, read leniently: a malformed status reads as empty and the next write
    /// replaces it.
    #[serde(default, deserialize_with = "lenient_status")]
    pub status: ObservedStatus,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K> Cached<K> {
    /// The spec as a JSON value (`null` when the object has none).
    pub fn spec(&self) -> Value {
        self.spec
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or(Value::Null)
    }

    /// The resource version as an etcd revision, which orders versions of one object.
    pub fn resource_version(&self) -> Option<u64> {
        self.metadata.resource_version.as_deref()?.parse().ok()
    }
}

fn lenient_status<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObservedStatus, D::Error> {
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

// Hand-written rather than derived: a derive would demand `K: Clone + Debug`, and `K` is only a
// marker here.
impl<K> Clone for Cached<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            spec: self.spec.clone(),
            status: self.status.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Cached<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cached")
            .field("name", &self.metadata.name)
            .field("generation", &self.metadata.generation)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

capstan_api::resource_projection!(Cached);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_spec_text_and_reads_the_status() {
        let object: CachedBinding = serde_json::from_str(
            r#"{"apiVersion":"v","kind":"CapabilityBinding","metadata":{"name":"a","generation":3,"resourceVersion":"42"},
                "spec":{"serviceName":"x","tools":{"mcpServers":[]}},
                "status":{"observedGeneration":3,"conditions":[{"type":"Accepted","status":"True","reason":"Validated","message":"m","observedGeneration":3,"lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            object.spec(),
            serde_json::json!({"serviceName":"x","tools":{"mcpServers":[]}})
        );
        assert_eq!(object.status.observed_generation, Some(3));
        assert_eq!(object.status.conditions.len(), 1);
        assert_eq!(object.resource_version(), Some(42));
    }

    #[test]
    fn a_malformed_status_or_missing_spec_never_fails_the_object() {
        let object: CachedBinding =
            serde_json::from_str(r#"{"metadata":{"name":"a"},"status":{"conditions":"oops"}}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(object.spec(), Value::Null);
        assert_eq!(object.status, ObservedStatus::default());
    }
}
