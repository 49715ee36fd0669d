//! `echo-upstream`: the smallest MCP server the sidecar can sit in front of — one tool, `echo`,
//! that returns its argument — on rmcp's Streamable HTTP server with the demo provider's
//! transport settings and nothing else (no recording, no faults). The benchmarks' minimal
//! upstream (`docs/benchmarks.md`): a heavier provider would hide the sidecar's own cost.

use std::net::SocketAddr;

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

    /// Keep no sessions and answer every POST with `application/json`, not an SSE stream.
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Config {
        listen,
        only_2026_07_28,
        json,
    } = <Config as clap::Parser>::parse();
    let app = capstan_demo_provider::echo_upstream::app(only_2026_07_28, json);
    capstan_demo_provider::serve("echo-upstream", listen, app).await
}
