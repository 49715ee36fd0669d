//! `demo-provider`: the StreamCo provider of the examples, as a real MCP server (Streamable
//! HTTP, rmcp) that also serves its knowledge (`/llms-full.txt`) and a runbook
//! (`/runbooks/lag.md`).
//!
//! Faults for tests, set with `--fault` (repeatable), `DEMO_PROVIDER_FAULTS` (comma-separated)
//! or at run time with `PUT /debug/faults` (a JSON array):
//! `hang` (MCP requests never answer), `hang-calls` (`tools/call` requests never answer),
//! `http-500`, `malformed` (MCP answers are not JSON-RPC),
//! `drop-tool:<name>` (left out of `tools/list`), `describe:<name>=<text>` (the tool listed
//! with that description: a changed definition), `oversized-knowledge` (1 MiB of knowledge),
//! `slow-calls:<ms>` (`tools/call` answered after that long), `slow-drip` (MCP answers sent one
//! byte every 200 ms), `drip-calls:<ms>` (`tools/call` answers sent one byte every `<ms>`),
//! `list-changed` (sessions opened while it is set advertise
//! `tools.listChanged`; `POST /debug/list-changed` sends them `notifications/tools/list_changed`),
//! `runbook:<text>` (the runbook served as that text: a changed skill body),
//! `runbook-per-request` (another runbook on every request, ending `Served as response <n>.`),
//! `runbook-unavailable` (the runbook answers 503), `oversized-runbook` (1 MiB of runbook),
//! `slow-runbook` (the runbook sent one byte every 200 ms).
//! `drop-tool` and `describe` apply to every session at once, open ones included: after a list
//! change, `tools/list` on the same session shows the new list, as a server must.
//! Every request's method, path and headers are recorded, and for MCP POSTs the JSON-RPC
//! method and the tool a `tools/call` names; `GET /debug/requests` returns them.

use std::net::SocketAddr;

/// The demo provider's settings.
#[derive(Debug, clap::Parser)]
#[command(name = "demo-provider", version, about)]
struct Config {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, env = "DEMO_PROVIDER_LISTEN", default_value = "127.0.0.1:7810")]
    listen: SocketAddr,

    /// Faults to start with (see the module documentation).
    #[arg(long = "fault", env = "DEMO_PROVIDER_FAULTS", value_delimiter = ',')]
    faults: Vec<String>,

    /// Host names MCP requests may carry besides localhost, 127.0.0.1 and ::1 (the MCP
    /// server's DNS-rebinding check), e.g. the name a sidecar dials it by.
    #[arg(
        long = "allowed-host",
        env = "DEMO_PROVIDER_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Config {
        listen,
        faults,
        allowed_hosts,
    } = <Config as clap::Parser>::parse();
    let app = capstan_demo_provider::server::app(faults, allowed_hosts);
    capstan_demo_provider::serve("demo-provider", listen, app).await
}
