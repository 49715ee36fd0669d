//! capstan-controller: reconciles CapabilityBindings and RouteQualifiers and reports what it
//! found in their status conditions, through a bounded, coalescing status queue drained by one
//! writer.

pub mod cached;
pub mod leader;
pub mod metrics;
pub mod reconcile;
pub mod server;
pub mod status;
pub mod status_queue;
pub mod writer;
