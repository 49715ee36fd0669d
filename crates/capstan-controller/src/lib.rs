//! capstan-controller: reconciles CapabilityBindings and RouteQualifiers and reports what it
//! found in their status conditions, through a bounded, coalescing status queue drained by one
//! writer.
//!
//! How an object flows through the modules: `docs/architecture.md#capstan-controller`.

mod cached;
mod composed_condition;
mod config;
mod due;
mod leader;
mod metrics;
mod probe;
mod qualifiers;
mod reconcile;
mod run;
pub mod status;
pub mod status_queue;
mod summary;
mod triggers;
mod writer;

pub use config::{
    Config, DEFAULT_LEASE_DURATION_SECONDS, DEFAULT_LEASE_GRACE_SECONDS, DEFAULT_RESYNC_SECONDS,
    DEFAULT_STATUS_QUEUE_CAPACITY,
};
pub use leader::{Leadership, LeaseSettings, LeaseSettingsError, MAX_IDENTITY_LEN, Term};
pub use probe::{
    DEFAULT_PROBE_CONCURRENCY, DEFAULT_PROBE_DEADLINE_SECONDS, DEFAULT_PROBE_INTERVAL_SECONDS,
};
pub use qualifiers::accepted_conditions;
pub use reconcile::DirectWriter;
pub use run::{RunError, run, run_with_direct_writer};
pub use writer::{FIELD_MANAGER, write_status};
