//! capstan-sidecar: serves a project's composed tool set to the assistant beside it over a
//! Unix socket (MCP Streamable HTTP), one session per task, with identity checked on every
//! request.
//!
//! How a request flows through the modules: `docs/architecture.md#capstan-sidecar`.

// The layers, lowest first: each uses only the layers listed before it (scripts/check-layout).

/// The JSON-RPC message of a POST, parsed once.
mod message;

/// Metrics, request spans, metering.
mod observe;

/// Who is calling, and what they may open.
mod caller;

/// Routed (`cap.*`) calls.
mod routing;

/// Limits on calls to providers' servers: per caller, concurrent, in total.
mod limits;

/// One task: what it serves and how it answers.
mod task;

/// A task's composition, and how it follows its documents.
mod composition;

/// The registry of live tasks.
mod tasks;

/// The one way in: every request on the socket.
mod edge;

/// The settings, and the start-up that wires the layers together.
mod config;
mod run;

/// The fuzz targets' entry points.
#[doc(hidden)]
pub mod fuzzing;

pub use caller::admission::{
    DEFAULT_MAX_PLACES, DEFAULT_MAX_PLACES_PER_CALLER, DEFAULT_MAX_PLACES_PER_PROJECT,
    DEFAULT_MAX_STREAMS_PER_TASK,
};
pub use caller::check::{CALLER_CHECK_TTL, CallerCheckMode};
pub use capstan_core::tool_error::{ErrorKind, ToolError};
pub use config::{
    BaseToolSettings, BaseToolsMode, CallerCheckSettings, Config, DEFAULT_SESSION_IDLE_SECONDS,
    DocumentSettings, ObservabilitySettings, ServeSettings, SessionSettings, SourceKind,
    UpstreamSettings,
};
pub use run::socket::SOCKET_MODE;
pub use run::{RunError, run};
