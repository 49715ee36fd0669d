//! Capstan's API: the CapabilityBinding and RouteQualifier custom resources, the capability
//! document whose `spec` is the CapabilityBinding's spec, and their validation.
//!
//! Validation runs twice with one vocabulary: the CRDs' OpenAPI schemas and CEL rules at
//! admission, and [`validate()`] at runtime, which returns every error, each path-qualified
//! (`spec.skills[0].source: required`). A newer Capstan may refuse what an older CRD admitted,
//! so the runtime check always runs.

pub mod binding;
pub mod conditions;
pub mod crd;
pub mod document;
pub mod parse;
pub mod patterns;
pub mod project;
mod projection;
pub mod qualifier;
pub mod validate;
pub mod wire;

pub use binding::{
    AuthKind, Authority, CallLimits, CallerAuthorization, CapabilityBinding, CapabilityBindingSpec,
    CapabilityBindingStatus, CapabilityMapping, CapabilityStatus, Concept, CostHint, EndpointAuth,
    ExchangeClient, GroupKind, Knowledge, KnowledgeSource, KnowledgeSourceType, McpServer, Naming,
    ObjectRef, PromptSelector, ProviderProjectArgument, ReadGrant, ResourceSelector, ResourceUris,
    SecretCredential, SecretKeyRef, Skill, SubjectTokenType, TokenExchange, ToolSelector, Tools,
    WorkloadIdentity,
};
pub use document::{CapabilityDocument, DocumentMeta};
pub use parse::{API_VERSION, InvalidObject, Object, ParseError, Parsed, ParsedObject, parse};
pub use project::{ProjectNameError, check_project_name};
pub use qualifier::{RouteConstraint, RouteQualifier, RouteQualifierSpec, RouteQualifierStatus};
pub use validate::{FieldError, SchemaDefect, TypeSchema, validate, validate_qualifier};

/// The kube and k8s-openapi versions Capstan's types are built against.
pub use {k8s_openapi, kube};
