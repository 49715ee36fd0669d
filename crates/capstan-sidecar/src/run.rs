//! The sidecar's wiring: settings → document reader, guards, composer, sessions → the socket,
//! served until SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::HeaderName;
use capstan_compose::{
    CachedSource, Composer, CrdSource, FixtureSource, HttpSource, Limits, ProjectDocuments,
    SetupError, SourceError, Uncached,
};
use capstan_process::{AdminError, LoggingError, Readiness, Shutdown, init_logging, serve_admin};
use prometheus_client::registry::Registry;
use thiserror::Error;
use tracing::{info, warn};

use crate::compose::ProjectComposer;
use crate::config::{Config, SourceKind};
use crate::metering::Meter;
use crate::metrics::Metrics;
use crate::server::router;
use crate::sessions::Sessions;
use crate::socket::{self, SocketError};
use crate::task::TaskContext;

/// Why the sidecar could not start or stopped with an error. Each names the setting to fix.
#[derive(Debug, Error)]
pub enum RunError {
    /// The log settings.
    #[error(transparent)]
    Logging(#[from] LoggingError),
    /// A setting a source needs is missing or wrong.
    #[error("{0}")]
    Settings(String),
    /// The provider API URL cannot be used.
    #[error("CAPABILITY_PROVIDER_URL: {0}")]
    Provider(#[source] SourceError),
    /// The kubeconfig of the crd source.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file, or `(inferred)`.
        path: String,
        /// What failed.
        message: String,
    },
    /// The composer's settings.
    #[error(transparent)]
    Composer(#[from] SetupError),
    /// The project header is not a header name.
    #[error("CAPSTAN_PROJECT_HEADER {0:?} is not a header name")]
    ProjectHeader(String),
    /// The metering sink cannot be opened.
    #[error("metering sink {sink}: {source}")]
    Meter {
        /// The sink.
        sink: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The socket.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The admin (metrics) server.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// Serving the socket failed.
    #[error("serving the socket: {0}")]
    Serve(#[source] std::io::Error),
}

impl Config {
    /// Parses the command line and environment, then runs the sidecar.
    pub async fn parse_and_run() -> Result<(), RunError> {
        run(<Self as clap::Parser>::parse()).await
    }
}

/// Runs the sidecar until SIGTERM or Ctrl-C.
pub async fn run(config: Config) -> Result<(), RunError> {
    let Config {
        socket,
        source,
        docs_fixture,
        provider_url,
        provider_max_bytes,
        crd_url_template,
        kubeconfig,
        crd_cache_ttl_seconds,
        crd_cache_capacity,
        mcp_endpoint_hosts,
        fetch_hosts,
        connect_timeout_seconds,
        call_timeout_seconds,
        fetch_timeout_seconds,
        knowledge_source_cap,
        knowledge_total_cap,
        skill_cap,
        session_idle_seconds,
        max_sessions,
        project_header,
        metrics_address,
        metering_sink,
        log,
        log_format,
    } = config;
    init_logging(&log, log_format)?;
    capstan_compose::install_crypto_provider();

    let documents: Arc<dyn ProjectDocuments> = match source {
        SourceKind::Fixture => {
            let path = docs_fixture.ok_or_else(|| {
                RunError::Settings(
                    "CAPABILITY_SOURCE=fixture needs CAPABILITY_DOCS_FIXTURE (--docs-fixture)"
                        .into(),
                )
            })?;
            if !path.is_file() {
                return Err(RunError::Settings(format!(
                    "fixture {} is not a readable file",
                    path.display()
                )));
            }
            Arc::new(Uncached::new(Arc::new(FixtureSource::new(path))))
        }
        SourceKind::Http => {
            let url = provider_url.ok_or_else(|| {
                RunError::Settings(
                    "CAPABILITY_SOURCE=http needs CAPABILITY_PROVIDER_URL (--provider-url)".into(),
                )
            })?;
            let source = HttpSource::new(&url, provider_max_bytes).map_err(RunError::Provider)?;
            Arc::new(Uncached::new(Arc::new(source)))
        }
        SourceKind::Crd => {
            let config = kube_config(kubeconfig).await?;
            Arc::new(CachedSource::new(
                Arc::new(CrdSource::new(config, crd_url_template)),
                Duration::from_secs(crd_cache_ttl_seconds),
                crd_cache_capacity,
            ))
        }
    };
    let limits = Limits {
        connect_timeout: Duration::from_secs(connect_timeout_seconds),
        call_timeout: Duration::from_secs(call_timeout_seconds),
        knowledge_timeout: Duration::from_secs(fetch_timeout_seconds),
        knowledge_source_cap,
        knowledge_total_cap,
        skill_timeout: Duration::from_secs(fetch_timeout_seconds),
        skill_cap,
    };
    let composer = Composer::from_allow_lists(&mcp_endpoint_hosts, &fetch_hosts, limits)?;
    if composer.dials_nothing() {
        warn!("CAPABILITY_MCP_ENDPOINT_HOSTS is empty: no MCP endpoint will be dialed");
    }
    let project_header = HeaderName::try_from(project_header.as_str())
        .map_err(|_| RunError::ProjectHeader(project_header.clone()))?;

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let meter = Meter::open(&metering_sink).map_err(|source| RunError::Meter {
        sink: metering_sink.clone(),
        source,
    })?;
    let composer = Arc::new(ProjectComposer::new(
        documents,
        composer,
        TaskContext {
            metrics,
            meter: Arc::new(meter),
            clock: Instant::now(),
        },
    ));
    let sessions = Arc::new(Sessions::new(project_header, max_sessions));

    let listener = socket::bind(&socket).await?;
    info!(socket = %socket.display(), url = capstan_api::wire::MCP_URL, "serving");
    let shutdown = Shutdown::on_signal();
    let admin = match metrics_address {
        Some(address) => {
            let server =
                serve_admin(address, registry, Readiness::ready(), shutdown.clone()).await?;
            info!(%address, "serving /metrics, /healthz and /readyz");
            Some(tokio::spawn(server))
        }
        None => None,
    };
    let app = router(
        composer,
        sessions,
        Duration::from_secs(session_idle_seconds),
    );
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.requested())
        .await;
    let _ = std::fs::remove_file(&socket);
    if let Some(admin) = admin
        && let Ok(Err(error)) = admin.await
    {
        warn!(%error, "admin server");
    }
    served.map_err(RunError::Serve)
}

/// The crd source's credential: the given kubeconfig, or the in-cluster service account.
async fn kube_config(kubeconfig: Option<PathBuf>) -> Result<kube::Config, RunError> {
    match kubeconfig {
        Some(path) => {
            let error = |message: String| RunError::Kubeconfig {
                path: path.display().to_string(),
                message,
            };
            let kubeconfig =
                kube::config::Kubeconfig::read_from(&path).map_err(|e| error(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| error(e.to_string()))
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| RunError::Kubeconfig {
                path: "(none given, none inferred)".into(),
                message: e.to_string(),
            }),
    }
}
