//! The capability document: the envelope the fixture and HTTP sources carry around a
//! [`CapabilityBindingSpec`].

use serde::{Deserialize, Serialize};

use crate::binding::CapabilityBindingSpec;

/// A capability document as producers publish it. The KRM-style envelope only carries
/// provenance; the `spec` is the same type a CapabilityBinding has. Unknown fields are ignored,
/// so producers may add fields without breaking older readers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityDocument {
    /// Provenance only, e.g. `services.miloapis.com/v1alpha1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Provenance only, e.g. `AgentBinding`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The document's name and the consumer project it was entitled to.
    #[serde(default)]
    pub metadata: DocumentMeta,
    /// What the provider contributes.
    pub spec: CapabilityBindingSpec,
}

/// A capability document's metadata.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct DocumentMeta {
    /// The document's name, used in provenance headers and error messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The consumer project the document was entitled to. The fixture and HTTP sources drop
    /// documents naming another project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}
