//! Test support around the demo provider, shared by the integration tests and benchmarks of
//! the composer and the sidecar: building workspace binaries in the caller's profile, running
//! the demo provider on a free loopback port, and finding the Python `mcp` SDK.
//!
//! Everything in `harness` panics with a message on failure: it only ever runs inside tests.
//! `serve` is what the demo provider's binaries share.

pub mod harness;

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::Router;
use axum::serve::ListenerExt;

/// Serves `app` on `listen` until Ctrl-C, first printing `<name>: listening on http://<address>`
/// (the line the harness reads the chosen port from).
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
