//! Watch caches keep projections of objects — the metadata and what the reader needs, slimmer
//! than the object (the controller's `cached.rs`, the sidecar's crd source
//! `capstan-compose/src/source/crd_watch.rs`). A projection must be a `kube::Resource` of its
//! kind to be watched; this macro says so once.

/// Implements `kube::Resource` for a projection `$projection<K>` of kind `K` that keeps its
/// metadata in a field named `metadata`: kind, group, version, plural and scope are `K`'s.
#[macro_export]
macro_rules! resource_projection {
    ($projection:ident) => {
        impl<K: ::kube::Resource<DynamicType = ()>> ::kube::Resource for $projection<K> {
            type DynamicType = ();
            type Scope = K::Scope;

            fn kind(dt: &()) -> ::std::borrow::Cow<'_, str> {
                K::kind(dt)
            }

            fn group(dt: &()) -> ::std::borrow::Cow<'_, str> {
                K::group(dt)
            }

            fn version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                K::version(dt)
            }

            fn plural(dt: &()) -> ::std::borrow::Cow<'_, str> {
                K::plural(dt)
            }

            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
