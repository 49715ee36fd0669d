//! Routed capabilities (`cap.*`): how RouteQualifiers merge, which of them take effect, and —
//! as routing lands — candidate selection and scoring. Pure functions: no I/O, no clock.
//!
//! The controller uses [`qualifier::verdicts`] to write each RouteQualifier's `Accepted`
//! condition; the sidecar uses [`qualifier::merge_for`] to constrain a capability call by the
//! same rules, so a qualifier the controller marks conflicting is exactly one the sidecar
//! refuses to route under.

pub mod qualifier;

pub use qualifier::{
    Conflict, ConflictKind, MAX_QUALIFIERS, MergedRoute, Qualifier, Scope, Verdict, merge_for,
    verdicts,
};
