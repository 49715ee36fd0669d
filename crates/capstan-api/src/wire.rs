//! Names on the wire between an assistant, `capstanctl` and the sidecar, and between the
//! composer and MCP servers: one home, so the sidecar, the CLI and the composer cannot drift.

/// Where the sidecar serves by default, and where `capstanctl` looks.
pub const DEFAULT_SOCKET: &str = "/var/run/capstan/composer.sock";

/// The request header naming the caller's project (configurable on both sides; this is the
/// default).
pub const PROJECT_HEADER: &str = "X-Capstan-Project";

/// The Host every request over the socket carries: clients use `http://localhost/...`.
pub const SOCKET_HOST: &str = "localhost";

/// The MCP endpoint on the socket, as clients write it.
pub const MCP_URL: &str = "http://localhost/mcp";

/// The MCP session header (Streamable HTTP).
pub const MCP_SESSION_ID: &str = "mcp-session-id";

/// The header carrying the negotiated MCP protocol revision.
pub const MCP_PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// The header repeating a request's JSON-RPC method (2026-07-28 revision).
pub const MCP_METHOD: &str = "mcp-method";
