//! capstan-process: what Capstan's two binaries share as processes — one log format and the
//! trace exporter, signals and graceful shutdown, the admin HTTP server (`/metrics`,
//! `/healthz`, `/readyz`), and the configuration reference rendered from their flags.
//!
//! A crate of its own rather than a module of `capstan-api` or `capstan-compose`: both
//! binaries need it, and neither library should carry an HTTP server, a log subscriber and
//! signal handling into the programs that only validate or compose (`capstanctl`, a catalog
//! controller using `capstan-api`).

mod admin;
mod logging;
mod reference;
mod sampling;
mod shutdown;
mod telemetry;

pub use admin::{AdminError, Readiness, serve_admin};
pub use logging::LogFormat;
pub use reference::{StaleReference, check_reference, reference_table, replace_section};
pub use sampling::{Head, HeadSampler};
pub use shutdown::Shutdown;
pub use telemetry::{Telemetry, TelemetryError, init_telemetry};
