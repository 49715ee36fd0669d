//! Routed capabilities (`cap.*`), pure functions: no I/O, no clock (docs/routing.md).
//!
//! - `spec.rs`: capability specs and the catalog of packs in `config/capabilities/`.
//! - `qualifier_merge.rs`: how RouteQualifiers merge and which take effect. The controller
//!   uses [`qualifier_merge::verdicts`] to write each qualifier's `Accepted`; the sidecar
//!   merges with [`qualifier_merge::merge_for`], so a qualifier the controller marks
//!   conflicting is exactly one the sidecar refuses to route under.
//! - `request.rs`: the per-call `route`, `requirements` and `intent`, taken out of a call.
//! - `select.rs`: the merged route narrowed by a call, exclusions, scoring, the decision.
//! - `mapping.rs`: warnings for bindings that map onto unknown capabilities or features.

pub mod mapping;
pub mod qualifier_merge;
pub mod request;
pub mod select;
pub mod spec;

pub use mapping::mapping_warnings;
pub use qualifier_merge::{
    Conflict, ConflictKind, MAX_QUALIFIERS, MergedRoute, Qualifier, Scope, Verdict, merge_for,
    verdicts,
};
pub use request::{Level, Requirements, RouteRequest, Taken, take_from};
pub use select::{
    ALGORITHM, CANDIDATE_CAP, Candidate, Decision, Exclusion, PinnedBy, Ranked, Reason, Refusal,
    Route, RouteReason, narrow, route_for, select,
};
pub use spec::{
    CapabilitySpec, Catalog, Effect, EffectKind, PackError, RESERVED_ARGUMENTS, SpecStatus,
    load_pack, tool_name,
};
