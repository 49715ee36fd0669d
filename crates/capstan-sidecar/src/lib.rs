//! capstan-sidecar: serves a project's composed tool set to the assistant beside it over a
//! Unix socket (MCP Streamable HTTP), one session per task, with identity checked on every
//! request.
//!
//! How a request flows through the modules: `docs/architecture.md#capstan-sidecar`.

mod admission;
mod caller_check;
mod config;
mod decisions;
mod edge;
mod feeds;
#[doc(hidden)]
pub mod fuzzing;
mod identity;
mod message;
mod metering;
mod metrics;
mod project_composer;
mod reaper;
mod refresh;
mod request_span;
mod request_states;
mod route_decision;
mod run;
mod socket;
mod task;
mod tasks;

pub use admission::{
    DEFAULT_MAX_PLACES, DEFAULT_MAX_PLACES_PER_CALLER, DEFAULT_MAX_PLACES_PER_PROJECT,
    DEFAULT_MAX_STREAMS_PER_TASK,
};
pub use caller_check::{CALLER_CHECK_TTL, CallerCheckMode};
pub use capstan_core::tool_error::{ErrorKind, ToolError};
pub use config::{
    BaseToolSettings, BaseToolsMode, CallerCheckSettings, Config, DEFAULT_SESSION_IDLE_SECONDS,
    DocumentSettings, ObservabilitySettings, ServeSettings, SessionSettings, SourceKind,
    UpstreamSettings,
};
pub use run::{RunError, run};
pub use socket::SOCKET_MODE;
