//! A capability document as composition reads it (the binding's name and its validated spec),
//! and what a source holds for a project: its documents and its route qualifiers.

use capstan_api::{CapabilityBindingSpec, RouteQualifierSpec};

/// One capability document as composition reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The binding (document) name, used in provenance and outcomes.
    pub binding: String,
    /// The validated spec.
    pub spec: CapabilityBindingSpec,
}

/// A valid RouteQualifier: its name (the merge order key) and its spec.
pub type NamedQualifier = (String, RouteQualifierSpec);

/// What a source holds for one project, read together so routing and composition see the same
/// moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// The capability documents, in first-wins order.
    pub documents: Vec<Document>,
    /// The valid route qualifiers (the merge orders them by name).
    pub qualifiers: Vec<NamedQualifier>,
    /// Why the qualifiers could not be read, when they could not: routed calls are then
    /// refused, never routed as if no qualifier existed.
    pub qualifiers_error: Option<String>,
}

impl Snapshot {
    /// A snapshot of documents alone.
    pub fn of(documents: Vec<Document>) -> Self {
        Self {
            documents,
            ..Self::default()
        }
    }

    /// Whether the project has no capability documents (qualifiers alone route nothing).
    pub fn is_empty(&self) -> bool {
        self.documents.is_empty()
    }
}
