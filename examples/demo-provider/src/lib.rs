//! The demo provider's servers, so that its binaries only parse flags and call in: the
//! StreamCo MCP server with its knowledge, runbook, request record and fault switches
//! ([`server`]), the benchmarks' minimal upstream ([`echo_upstream`]), and [`serve`], which runs
//! either on a listener. (Tests drive the binaries through the `capstan-testkit` crate.)

mod debug;
pub mod echo_upstream;
mod faults;
mod knowledge;
mod recording;
pub mod server;
mod streamco;

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::Router;
use axum::serve::ListenerExt;

/// Serves `app` on `listen` until Ctrl-C, first printing `<name>: listening on http://<address>`
/// (the line the tests read the chosen port from).
pub async fn serve(name: &str, listen: SocketAddr, app: Router) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    println!("{name}: listening on http://{}", listener.local_addr()?);
    // Nagle's algorithm off, as mainstream servers do (Go, Node, Python's asyncio): an SSE
    // response is written in pieces, and with Nagle on a kept-alive client connection waits
    // for the client's delayed ACK (~40 ms) between them.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
