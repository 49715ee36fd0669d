//! Routed (`cap.*`) calls: deciding which provider serves one (`decide.rs`), and the decisions
//! kept for reading back (`decisions.rs`). Selection itself is `capstan_route`'s; this is the
//! sidecar's side of it.

pub mod decide;
pub mod decisions;
