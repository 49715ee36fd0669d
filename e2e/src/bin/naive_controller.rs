//! `capstan-naive-controller`: the controller benchmark's baseline. The same controller as
//! `capstan-controller` (same flags, watches, validation and leadership), except that every
//! reconcile writes its status at once with server-side apply, as a naive controller would,
//! instead of queueing it and writing only transitions. Only `e2e/benches/controller.rs` and
//! `e2e/benches/soak_controller.rs` run it.

use std::sync::Arc;

use capstan_controller::status::{DesiredStatus, ObjectKey, ObservedStatus};
use capstan_controller::{Config, DirectWriter, write_status};
use futures::FutureExt as _;
use futures::future::BoxFuture;

/// Writes each status as it comes.
struct EveryReconcile;

impl DirectWriter for EveryReconcile {
    fn write<'a>(
        &'a self,
        client: &'a kube::Client,
        key: &'a ObjectKey,
        observed: &'a ObservedStatus,
        desired: &'a DesiredStatus,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        write_status(client, key, observed, desired)
            .map(|written| written.map(|_| ()))
            .boxed()
    }
}

#[tokio::main]
async fn main() -> Result<(), capstan_controller::RunError> {
    let config = <Config as clap::Parser>::parse();
    capstan_controller::run_with_direct_writer(config, Arc::new(EveryReconcile)).await
}
