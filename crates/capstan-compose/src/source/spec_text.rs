//! One CapabilityBinding or RouteQualifier as the crd sources read it (`source/crd_watch.rs`,
//! `source/crd_list.rs`): the metadata and the spec as the JSON text the apiserver sent. The spec
//! is parsed once, by `capstan_api::parse` (`source/objects.rs` `documents_of`), never into a
//! `Value` tree first; the watch also drops managed fields before it stores an object.

use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::value::RawValue;

/// One object as the crd sources read it: metadata and the spec as JSON text.
#[derive(Deserialize)]
pub struct SpecText<K> {
    pub(crate) metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<Box<RawValue>>,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K> SpecText<K> {
    /// The spec as the apiserver sent it (`null` when the object has none).
    pub(crate) fn spec(&self) -> &RawValue {
        self.spec.as_deref().unwrap_or(RawValue::NULL)
    }
}

// Hand-written: a derive would demand `K: Clone`, and `K` is only a marker here.
impl<K> Clone for SpecText<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            spec: self.spec.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for SpecText<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpecText")
            .field("name", &self.metadata.name)
            .finish_non_exhaustive()
    }
}

capstan_api::resource_projection!(SpecText);
