//! Graceful shutdown: one signal (SIGTERM or Ctrl-C) seen by every part of the process.

use tokio::sync::watch;
use tracing::{info, warn};

/// Resolves for every clone once the process is asked to stop.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// A shutdown requested by SIGTERM or Ctrl-C (the listener runs on the current Tokio
    /// runtime).
    pub fn on_signal() -> Self {
        let (trigger, shutdown) = Self::manual();
        tokio::spawn(async move {
            wait_for_signal().await;
            info!("shutting down");
            trigger();
        });
        shutdown
    }

    /// A shutdown requested by calling the returned function (tests, embedding).
    pub fn manual() -> (impl FnOnce() + Send + 'static, Self) {
        let (tx, rx) = watch::channel(false);
        (
            move || {
                let _ = tx.send(true);
            },
            Self(rx),
        )
    }

    /// Waits until shutdown is requested.
    pub async fn requested(mut self) {
        // A dropped trigger without a request never resolves: nobody can ask any more.
        if self.0.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Whether shutdown has been requested.
    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }
}

async fn wait_for_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_should_see_a_requested_shutdown() {
        let (trigger, shutdown) = Shutdown::manual();
        let other = shutdown.clone();
        assert!(!shutdown.is_requested());
        trigger();
        other.requested().await;
        assert!(shutdown.is_requested());
        shutdown.requested().await;
    }
}
