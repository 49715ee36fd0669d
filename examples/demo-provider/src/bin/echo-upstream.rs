//! `echo-upstream`: the smallest MCP server the sidecar can sit in front of — one tool, `echo`,
//! that returns its argument — on rmcp's Streamable HTTP server with the demo provider's
//! transport settings and nothing else (no recording, no faults). The benchmarks' minimal
//! upstream (`docs/benchmarks.md`): a heavier provider would hide the sidecar's own cost.

use std::borrow::Cow;
use std::net::SocketAddr;

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

/// The echo server's settings.
#[derive(Debug, clap::Parser)]
#[command(name = "echo-upstream", version, about)]
struct Config {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,

    /// Speak only the 2026-07-28 revision (no `initialize`, no sessions): a server of the
    /// newest revision alone, for the composer's tests.
    #[arg(long)]
    only_2026_07_28: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Text {
    /// What to send back.
    text: String,
}

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = <Config as clap::Parser>::parse();
    let only_2026_07_28 = config.only_2026_07_28;
    let mcp: StreamableHttpService<Echo, LocalSessionManager> = StreamableHttpService::new(
        move || {
            Ok(Echo {
                tool_router: Echo::tool_router(),
                only_2026_07_28,
            })
        },
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let app = Router::new().nest_service("/mcp", mcp);
    capstan_demo_provider::serve("echo-upstream", config.listen, app).await
}
