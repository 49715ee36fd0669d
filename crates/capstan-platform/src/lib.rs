//! capstan-platform: the tools that belong to no provider — they read (and, through the change
//! path, change) the caller's own project as the caller — and what they rest on: the project's
//! control-plane client, manifests and their differences, Milo's kinds, OpenAPI schemas, plan
//! tokens and the ledger of applied plans, and the access review the sidecar's caller check
//! asks. The composer knows none of it; the sidecar adds the tools to a task.
//!
//! How the modules depend on each other: `docs/architecture.md#capstan-platform`.

mod access_review;
mod base_tools;
mod change_path;
mod failures;
mod manifest;
mod milo;
mod openapi;
mod plan_ledger;
mod plan_token;
mod project_api;

pub use access_review::{AccessReviewer, may_list_bindings, who_is};
pub use base_tools::{
    BaseTools, LOCATIONS_LIST, QUOTA_GET, RESOURCES_APPLY, RESOURCES_GET, RESOURCES_LIST,
    RESOURCES_PLAN, RESOURCES_VALIDATE, SCHEMA_GET,
};
pub use change_path::{ChangePath, Clock, MAX_MANIFESTS};
pub use plan_ledger::{LEDGER_CAPACITY, LedgerError, NotRecorded, PlanLedger};
pub use plan_token::{
    Caller, DEFAULT_PLAN_TTL, KeyError, MIN_KEY_BYTES, PlanKeys, PlanPayload,
    Refused as PlanRefused, Verified, ledger_digest,
};
pub use project_api::{
    ApiFailure, Cause, DEFAULT_NAMESPACE, DEFAULT_REQUEST_TIMEOUT, FIELD_MANAGER, Kind, LIST_LIMIT,
    ProjectApi,
};
