//! A capability document as composition reads it: the binding's name and its validated spec.

use capstan_api::CapabilityBindingSpec;

/// One capability document as composition reads it.
#[derive(Clone, Debug)]
pub struct Document {
    /// The binding (document) name, used in provenance and outcomes.
    pub binding: String,
    /// The validated spec.
    pub spec: CapabilityBindingSpec,
}
