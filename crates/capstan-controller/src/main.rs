//! `capstan-controller`: validates CapabilityBindings and RouteQualifiers and reports through
//! their conditions; two replicas run and the one holding the Lease writes. The wiring lives
//! in the library (`capstan_controller::run`).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    capstan_controller::Config::parse_and_run().await?;
    Ok(())
}
