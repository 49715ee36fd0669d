//! `capstan-sidecar`: serves a project's composed tool set to the assistant beside it, over a
//! Unix socket (MCP Streamable HTTP at `http://localhost/mcp`). Every flag can also be set
//! from the environment variable shown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::http::HeaderName;
use capstan_compose::source::DEFAULT_PROVIDER_MAX_BODY;
use capstan_compose::{
    CachedSource, Composer, CrdSource, EndpointGuard, Fetcher, FixtureSource, HttpSource, Limits,
};
use capstan_sidecar::identity::{DEFAULT_MAX_SESSIONS, Sessions};
use capstan_sidecar::metering::Meter;
use capstan_sidecar::metrics::Metrics;
use capstan_sidecar::sidecar::{Documents, Sidecar};
use capstan_sidecar::{server, socket};
use prometheus_client::registry::Registry;
use tracing::{info, warn};

/// Where capability documents come from.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum SourceKind {
    /// A local JSON or YAML file (CAPABILITY_DOCS_FIXTURE).
    Fixture,
    /// The capability-provider API (CAPABILITY_PROVIDER_URL).
    Http,
    /// CapabilityBindings on the project's control plane, cached per project.
    Crd,
}

/// Log output formats.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

/// Capstan's composer sidecar.
#[derive(Debug, clap::Parser)]
#[command(name = "capstan-sidecar", version, about)]
struct Config {
    /// The Unix socket to serve on (mode 0660; a stale socket is replaced).
    #[arg(
        long,
        env = "CAPSTAN_SOCKET",
        default_value = "/var/run/capstan/composer.sock"
    )]
    socket: PathBuf,

    /// Where capability documents come from.
    #[arg(long, env = "CAPABILITY_SOURCE", value_enum)]
    source: SourceKind,

    /// The fixture file (source `fixture`).
    #[arg(long, env = "CAPABILITY_DOCS_FIXTURE")]
    docs_fixture: Option<PathBuf>,

    /// The capability-provider API base URL (source `http`).
    #[arg(long, env = "CAPABILITY_PROVIDER_URL")]
    provider_url: Option<String>,

    /// Largest capability-provider API answer read, in bytes (source `http`); a longer one
    /// reads as no capabilities, logged with its size.
    #[arg(long, env = "CAPABILITY_PROVIDER_MAX_BYTES", default_value_t = DEFAULT_PROVIDER_MAX_BODY)]
    provider_max_bytes: usize,

    /// The project's control-plane URL, with `{project}` (source `crd`); without one, the
    /// cluster of the sidecar's own credential.
    #[arg(long, env = "CAPABILITY_CRD_URL_TEMPLATE")]
    crd_url_template: Option<String>,

    /// Kubeconfig for the crd source; without one, the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,

    /// Seconds a project's bindings are cached (source `crd`).
    #[arg(long, env = "CAPABILITY_CRD_CACHE_TTL_SECONDS", default_value_t = 60)]
    crd_cache_ttl_seconds: u64,

    /// Projects cached at most (source `crd`).
    #[arg(long, env = "CAPABILITY_CRD_CACHE_CAPACITY", default_value_t = 64)]
    crd_cache_capacity: usize,

    /// Hosts MCP endpoints may name: `host`, `*.suffix`, IPs, each with an optional `:port`,
    /// comma-separated. Empty admits none.
    #[arg(long, env = "CAPABILITY_MCP_ENDPOINT_HOSTS", default_value = "")]
    mcp_endpoint_hosts: String,

    /// Hosts knowledge sources and skill bodies may be fetched from (same form).
    #[arg(long, env = "CAPABILITY_FETCH_HOSTS", default_value = "")]
    fetch_hosts: String,

    /// Seconds to connect, initialize and list one MCP upstream.
    #[arg(long, env = "CAPSTAN_CONNECT_TIMEOUT_SECONDS", default_value_t = 5)]
    connect_timeout_seconds: u64,

    /// Seconds one forwarded tool call may take.
    #[arg(long, env = "CAPSTAN_CALL_TIMEOUT_SECONDS", default_value_t = 30)]
    call_timeout_seconds: u64,

    /// Seconds to fetch one knowledge source or skill body.
    #[arg(long, env = "CAPSTAN_FETCH_TIMEOUT_SECONDS", default_value_t = 5)]
    fetch_timeout_seconds: u64,

    /// Bytes kept of one knowledge source.
    #[arg(long, env = "CAPSTAN_KNOWLEDGE_SOURCE_CAP", default_value_t = 256 * 1024)]
    knowledge_source_cap: usize,

    /// Bytes of knowledge in the instructions altogether.
    #[arg(long, env = "CAPSTAN_KNOWLEDGE_TOTAL_CAP", default_value_t = 1024 * 1024)]
    knowledge_total_cap: usize,

    /// Bytes kept of one skill body.
    #[arg(long, env = "CAPSTAN_SKILL_CAP", default_value_t = 64 * 1024)]
    skill_cap: usize,

    /// Seconds without a request after which a session ends and its upstreams close.
    #[arg(long, env = "CAPSTAN_SESSION_IDLE_SECONDS", default_value_t = 600)]
    session_idle_seconds: u64,

    /// Sessions open at most; an `initialize` beyond it is answered 503 with Retry-After.
    #[arg(long, env = "CAPSTAN_MAX_SESSIONS", default_value_t = DEFAULT_MAX_SESSIONS)]
    max_sessions: usize,

    /// The request header naming the caller's project.
    #[arg(
        long,
        env = "CAPSTAN_PROJECT_HEADER",
        default_value = "X-Capstan-Project"
    )]
    project_header: String,

    /// Serve /metrics on this TCP address (off unless set).
    #[arg(long, env = "CAPSTAN_METRICS_ADDRESS")]
    metrics_address: Option<SocketAddr>,

    /// Where tool-invocation events go: `stdout`, `stderr`, `off`, or a file (appended).
    #[arg(long, env = "CAPSTAN_METERING_SINK", default_value = "stdout")]
    metering_sink: String,

    /// Log filter, e.g. `info` or `capstan_sidecar=debug`.
    #[arg(long, env = "CAPSTAN_LOG", default_value = "info")]
    log: String,

    /// Log format (logs go to stderr).
    #[arg(long, env = "CAPSTAN_LOG_FORMAT", value_enum, default_value = "json")]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = <Config as clap::Parser>::parse();
    run(config).await
}

async fn run(config: Config) -> anyhow::Result<()> {
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

    let documents = match source {
        SourceKind::Fixture => {
            let path = docs_fixture.context(
                "CAPABILITY_SOURCE=fixture needs CAPABILITY_DOCS_FIXTURE (--docs-fixture)",
            )?;
            anyhow::ensure!(
                path.is_file(),
                "fixture {} is not a readable file",
                path.display()
            );
            Documents::Direct(Arc::new(FixtureSource::new(path)))
        }
        SourceKind::Http => {
            let url = provider_url
                .context("CAPABILITY_SOURCE=http needs CAPABILITY_PROVIDER_URL (--provider-url)")?;
            Documents::Direct(Arc::new(HttpSource::new(&url, provider_max_bytes)?))
        }
        SourceKind::Crd => {
            let config = match kubeconfig {
                Some(path) => {
                    let kubeconfig = kube::config::Kubeconfig::read_from(&path)
                        .with_context(|| format!("kubeconfig {}", path.display()))?;
                    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                        .await
                        .with_context(|| format!("kubeconfig {}", path.display()))?
                }
                None => kube::Config::infer()
                    .await
                    .context("no kubeconfig given and none could be inferred")?,
            };
            Documents::Cached(CachedSource::new(
                Arc::new(CrdSource::new(config, crd_url_template)),
                Duration::from_secs(crd_cache_ttl_seconds),
                crd_cache_capacity,
            ))
        }
    };
    let mcp_guard =
        EndpointGuard::from_list(&mcp_endpoint_hosts).context("CAPABILITY_MCP_ENDPOINT_HOSTS")?;
    let fetch_guard = EndpointGuard::from_list(&fetch_hosts).context("CAPABILITY_FETCH_HOSTS")?;
    if mcp_guard.patterns().next().is_none() {
        warn!("CAPABILITY_MCP_ENDPOINT_HOSTS is empty: no MCP endpoint will be dialed");
    }
    let limits = Limits {
        connect_timeout: Duration::from_secs(connect_timeout_seconds),
        call_timeout: Duration::from_secs(call_timeout_seconds),
        knowledge_timeout: Duration::from_secs(fetch_timeout_seconds),
        knowledge_source_cap,
        knowledge_total_cap,
        skill_timeout: Duration::from_secs(fetch_timeout_seconds),
        skill_cap,
    };
    let composer = Composer::new(mcp_guard, Fetcher::new(fetch_guard)?, limits)?;
    let project_header = HeaderName::try_from(project_header.as_str())
        .with_context(|| format!("project header {project_header:?}"))?;

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let sidecar = Arc::new(Sidecar {
        documents,
        composer,
        sessions: Arc::new(Sessions::new(project_header, max_sessions)),
        metrics,
        meter: Meter::open(&metering_sink)
            .with_context(|| format!("metering sink {metering_sink}"))?,
        clock: std::time::Instant::now(),
    });

    let listener = socket::bind(&socket).await?;
    info!(socket = %socket.display(), url = "http://localhost/mcp", "serving");
    let shutdown = async {
        wait_for_signal().await;
        info!("shutting down");
    };
    if let Some(address) = metrics_address {
        let registry = Arc::new(registry);
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let registry = registry.clone();
                async move {
                    let mut text = String::new();
                    match prometheus_client::encoding::text::encode(&mut text, &registry) {
                        Ok(()) => (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        )
                            .into_response(),
                        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                    }
                }
            }),
        );
        let metrics_listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("metrics address {address}"))?;
        info!(%address, "serving /metrics");
        tokio::spawn(async move {
            if let Err(error) = axum::serve(metrics_listener, app).await {
                warn!(%error, "metrics server");
            }
        });
    }
    let app = server::router(sidecar, Duration::from_secs(session_idle_seconds));
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    let _ = std::fs::remove_file(&socket);
    served.context("serving the socket")?;
    Ok(())
}

use axum::response::IntoResponse as _;

async fn wait_for_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("log filter {filter:?}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    Ok(())
}
