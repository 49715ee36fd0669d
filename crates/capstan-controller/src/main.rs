//! `capstan-controller`: validates CapabilityBindings and RouteQualifiers and reports through
//! their conditions; two replicas run and the one holding the Lease writes. The wiring lives
//! in the library (`capstan_controller::run`).

/// mimalloc rather than glibc's malloc: glibc's per-thread arenas kept ~50 MB more resident
/// than the live heap at 50,000 bindings (docs/performance.md "The controller").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    capstan_controller::Config::parse_and_run().await?;
    Ok(())
}
