//! `tcp-hop`: one extra network hop and nothing else — every accepted connection is joined to a
//! new connection to `--to`, and bytes are copied both ways unread. The sidecar benchmark calls
//! the minimal upstream through it to show what a hop alone costs on the machine
//! (`docs/benchmarks.md`): the floor under any proxy's latency, the sidecar's included.

use std::net::SocketAddr;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};

/// The hop's settings.
#[derive(Debug, clap::Parser)]
#[command(name = "tcp-hop", version, about)]
struct Config {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where every connection goes.
    #[arg(long)]
    to: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = <Config as clap::Parser>::parse();
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    println!("tcp-hop: listening on http://{}", listener.local_addr()?);
    loop {
        let (mut inbound, _) = listener.accept().await?;
        let to = config.to;
        tokio::spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(to).await else {
                return;
            };
            // As the servers on both ends do: no Nagle delay on small writes.
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}
