//! Who is calling, and what they may open: the caller's identity read from a request's headers
//! (`identity.rs`), the caller checked against the project it names (`check.rs`), what of a
//! composition the caller may use (`authorization.rs`), who the caller is by name
//! (`names.rs`, for the audit trail), and the places the sidecar gives out and to whom
//! (`admission.rs`). Nothing here knows a session's content: these are the
//! questions the edge asks before anything is served.

pub mod admission;
pub mod authorization;
pub mod check;
pub mod identity;
pub mod names;
