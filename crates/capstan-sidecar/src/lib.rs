//! capstan-sidecar: serves a project's composed tool set to the assistant beside it over a
//! Unix socket (MCP Streamable HTTP), one session per task, with identity checked on every
//! request.

pub mod direct;
pub mod handler;
pub mod identity;
pub mod metering;
pub mod metrics;
pub mod server;
pub mod sidecar;
pub mod socket;
pub mod tool_error;
