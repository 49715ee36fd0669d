//! The admin HTTP server: `/metrics` (Prometheus text), `/healthz` (the process answers) and
//! `/readyz` (ready to do its work), on a TCP address, stopped by the process's shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use thiserror::Error;

use crate::shutdown::Shutdown;

/// Whether the process is ready; `/readyz` answers 503 until it is set.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Not ready yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ready from the start (a process with nothing to wait for).
    pub fn ready() -> Self {
        let readiness = Self::new();
        readiness.set_ready();
        readiness
    }

    /// Marks the process ready.
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether the process is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The admin server could not run.
#[derive(Debug, Error)]
pub enum AdminError {
    /// The address could not be bound.
    #[error("admin address {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("admin server: {0}")]
    Serve(#[source] std::io::Error),
}

struct Shared {
    registry: Registry,
    readiness: Readiness,
}

/// Binds `address` and returns the server, which runs until `shutdown` is requested. Binding
/// first lets a caller report a taken address before anything else starts.
pub async fn serve_admin(
    address: SocketAddr,
    registry: Registry,
    readiness: Readiness,
    shutdown: Shutdown,
) -> Result<impl Future<Output = Result<(), AdminError>> + Send + 'static, AdminError> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| AdminError::Bind { address, source })?;
    let shared = Arc::new(Shared {
        registry,
        readiness,
    });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(shared);
    Ok(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.requested())
            .await
            .map_err(AdminError::Serve)
    })
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &shared.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding metrics: {error}"),
        ),
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    if shared.readiness.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready yet")
    }
}
