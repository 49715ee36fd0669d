//! `echo-upstream`'s app: the smallest MCP server the sidecar can sit in front of — one tool,
//! `echo`, that returns its argument — on rmcp's Streamable HTTP server with the demo provider's
//! transport settings and nothing else (no recording, no faults).

use std::borrow::Cow;

use axum::Router;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

/// The `echo` tool's argument.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Text {
    /// What to send back.
    text: String,
}

/// The echo server of one session.
#[derive(Clone)]
struct Echo {
    tool_router: ToolRouter<Self>,
    only_2026_07_28: bool,
}

#[tool_router]
impl Echo {
    #[tool(description = "Return the text it is given.")]
    fn echo(&self, Parameters(Text { text }): Parameters<Text>) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        if self.only_2026_07_28 {
            Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
        } else {
            Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }
}

/// The echo server's routes; with `only_2026_07_28` it speaks only that revision (no
/// `initialize`, no sessions); with `json` it keeps no sessions either and answers every POST
/// with `application/json` rather than an SSE stream (rmcp answers JSON only without
/// sessions): the upstream of the benchmarks' like-for-like rows, where a client calling it
/// directly parses the same response mode as through the sidecar (`docs/benchmarks.md`).
pub fn app(only_2026_07_28: bool, json: bool) -> Router {
    let mcp: StreamableHttpService<Echo, LocalSessionManager> = StreamableHttpService::new(
        move || {
            Ok(Echo {
                tool_router: Echo::tool_router(),
                only_2026_07_28,
            })
        },
        Default::default(),
        StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_legacy_session_mode(!json)
            .with_json_response(json),
    );
    Router::new().nest_service("/mcp", mcp)
}
