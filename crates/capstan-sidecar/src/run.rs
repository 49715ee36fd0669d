//! The sidecar's wiring: settings → document reader, guards, composer, sessions → the socket,
//! served until SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::HeaderName;
use capstan_compose::{
    CachedSource, Composer, ControlPlane, CrdSource, FixtureSource, HttpSource, Limits,
    ProjectDocuments, SetupError, SourceError, Uncached, WatchedCluster,
};
use capstan_platform::{ChangePath, KeyError, LedgerError, PlanKeys, PlanLedger};
use capstan_process::{AdminError, LoggingError, Readiness, Shutdown, init_logging, serve_admin};
use prometheus_client::registry::Registry;
use thiserror::Error;
use tracing::{info, warn};

use crate::admission::{Admission, Caps};
use crate::caller_check::{CallerCheck, CallerCheckMode};
use crate::compose::{BaseToolsSetup, ProjectComposer};
use crate::config::{BaseToolsMode, Config, SourceKind};
use crate::decisions::{DEFAULT_CAPACITY as DECISION_LOG_CAPACITY, DecisionLog};
use crate::feeds::ProjectFeeds;
use crate::metering::Meter;
use crate::metrics::{Metrics, WatchMetrics};
use crate::reaper::revalidate_streams;
use crate::server::router;
use crate::socket::{self, SocketError};
use crate::task::TaskContext;
use crate::tasks::{Lifetimes, TaskStarter, Tasks};

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
    /// The plan-token keys.
    #[error(transparent)]
    PlanKeys(#[from] KeyError),
    /// The ledger of applied plan tokens.
    #[error(transparent)]
    PlanLedger(#[from] LedgerError),
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
    /// The async runtime could not be built.
    #[error("starting the runtime (CAPSTAN_WORKER_THREADS): {0}")]
    Runtime(#[source] std::io::Error),
}

impl Config {
    /// Parses the command line and environment, builds the runtime `--worker-threads` asks
    /// for, and runs the sidecar on it.
    pub fn parse_and_run() -> Result<(), RunError> {
        let config = <Self as clap::Parser>::parse();
        let mut builder = match config.worker_threads {
            1 => tokio::runtime::Builder::new_current_thread(),
            threads => {
                let mut builder = tokio::runtime::Builder::new_multi_thread();
                if threads > 1 {
                    builder.worker_threads(threads);
                }
                builder
            }
        };
        let runtime = builder.enable_all().build().map_err(RunError::Runtime)?;
        runtime.block_on(run(config))
    }
}

/// How long the sidecar waits, at shutdown, for its upstream clients to send their session
/// closes.
const UPSTREAM_CLOSE_WAIT: Duration = Duration::from_millis(500);

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
        caller_check,
        caller_check_ttl_seconds,
        base_tools,
        plan_token_key,
        plan_token_keys_file,
        plan_ledger,
        plan_token_ttl_seconds,
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
        refresh_seconds,
        sessionless_ttl_seconds,
        shutdown_grace_seconds,
        // Read by `parse_and_run`, which built the runtime this runs on.
        worker_threads: _,
        max_sessions,
        max_sessions_per_caller,
        max_sessions_per_project,
        max_streams_per_task,
        project_header,
        metrics_address,
        metering_sink,
        log,
        log_format,
    } = config;
    init_logging(&log, log_format)?;
    capstan_compose::install_crypto_provider();

    // The projects' control planes: required by the crd source, otherwise known when a
    // kubeconfig is given or the sidecar runs in a pod.
    let plane = match (source, kubeconfig) {
        (SourceKind::Crd, kubeconfig) => Some(kube_config(kubeconfig).await?),
        (_, Some(path)) => Some(kube_config(Some(path)).await?),
        (_, None) if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            Some(kube_config(None).await?)
        }
        (_, None) => None,
    }
    .map(|config| ControlPlane::new(config, crd_url_template.clone()));

    // The watched crd source's counts and first sync, when it is the source.
    let mut watched_source = None;
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
            let plane = plane.clone().ok_or_else(|| {
                RunError::Settings("CAPABILITY_SOURCE=crd needs a control plane".into())
            })?;
            match plane.cluster_config() {
                // One cluster for every project: one watch serves them all
                // (capstan-compose crd_watch.rs); ready once it has listed.
                Some(config) => {
                    let watched = WatchedCluster::connect(config).map_err(|e| {
                        RunError::Settings(format!("the crd source's cluster: {e}"))
                    })?;
                    watched_source = Some((watched.counts(), watched.first_sync()));
                    Arc::new(watched)
                }
                None => Arc::new(CachedSource::new(
                    Arc::new(CrdSource::from_plane(plane).with_capacity(crd_cache_capacity)),
                    Duration::from_secs(crd_cache_ttl_seconds),
                    crd_cache_capacity,
                )),
            }
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
    // Ready at once, except with a watched crd source: once it has listed.
    let readiness = Readiness::new();
    match watched_source {
        None => readiness.set_ready(),
        Some((counts, mut synced)) => {
            registry.register_collector(Box::new(WatchMetrics(counts)));
            let ready = readiness.clone();
            tokio::spawn(async move {
                if synced.wait_for(|synced| *synced).await.is_ok() {
                    ready.set_ready();
                }
            });
        }
    }
    let meter = Meter::open(&metering_sink).map_err(|source| RunError::Meter {
        sink: metering_sink.clone(),
        source,
    })?;
    let mut project_composer = ProjectComposer::new(
        documents,
        composer,
        TaskContext {
            metrics: metrics.clone(),
            meter: Arc::new(meter),
            clock: Instant::now(),
            decisions: Arc::new(DecisionLog::new(DECISION_LOG_CAPACITY)),
        },
    );
    match (&plane, base_tools) {
        (_, BaseToolsMode::Off) => info!("base platform tools are off (CAPSTAN_BASE_TOOLS=off)"),
        (None, _) => info!(
            "base platform tools are not composed: no control plane is known (no kubeconfig, \
             not in a pod)"
        ),
        (Some(plane), mode) => {
            let change_path = if mode == BaseToolsMode::Auto {
                let keys = plan_keys(plan_token_key, plan_token_keys_file)?;
                let ledger = match &plan_ledger {
                    Some(path) => {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map(|d| d.as_secs())
                            .unwrap_or(0);
                        PlanLedger::open(path, now)?
                    }
                    None => PlanLedger::in_memory()?,
                };
                info!(
                    ledger = ledger.id(),
                    file = plan_ledger.as_ref().map(|p| p.display().to_string()),
                    "plan tokens are applied once, by the caller who planned, through this ledger"
                );
                Some(ChangePath::with_system_clock(
                    Arc::new(keys),
                    Arc::new(ledger),
                    Duration::from_secs(plan_token_ttl_seconds),
                ))
            } else {
                None
            };
            info!(
                url_template = plane.url_template().unwrap_or("(the kubeconfig's cluster)"),
                change_path = change_path.is_some(),
                "base platform tools are composed for callers with a token, acting as the caller"
            );
            project_composer = project_composer.with_base_tools(BaseToolsSetup {
                plane: plane.clone(),
                change_path,
            });
        }
    }
    let composer = Arc::new(project_composer);
    let caller_check = caller_check.unwrap_or(if source == SourceKind::Crd {
        CallerCheckMode::Sar
    } else {
        CallerCheckMode::None
    });
    let mut check = None;
    match (caller_check, &plane) {
        (CallerCheckMode::None, _) => info!(
            "callers are not checked against the project they name \
             (CAPSTAN_CALLER_CHECK=none): whoever reaches the socket may name any project"
        ),
        (CallerCheckMode::Sar, None) => {
            return Err(RunError::Settings(
                "CAPSTAN_CALLER_CHECK=sar needs a control plane to ask: give KUBECONFIG, run \
                 in a pod, or use the crd source"
                    .into(),
            ));
        }
        (CallerCheckMode::Sar, Some(plane)) => {
            check = Some(Arc::new(CallerCheck::new(
                plane.clone(),
                metrics.clone(),
                Duration::from_secs(caller_check_ttl_seconds),
            )));
        }
    }
    let admission = Admission::with(
        project_header,
        Caps {
            total: max_sessions,
            per_caller: max_sessions_per_caller,
            per_project: max_sessions_per_project,
            streams_per_task: max_streams_per_task,
        },
        check.clone(),
        Some(metrics),
    );
    let tasks = Arc::new(Tasks::new(
        admission,
        Lifetimes {
            session_idle: Duration::from_secs(session_idle_seconds),
            sessionless: Duration::from_secs(sessionless_ttl_seconds),
        },
    ));

    let listener = socket::bind(&socket).await?;
    info!(socket = %socket.display(), url = capstan_api::wire::MCP_URL, "serving");
    let shutdown = Shutdown::on_signal();
    let admin = match metrics_address {
        Some(address) => {
            let server = serve_admin(address, registry, readiness, shutdown.clone()).await?;
            info!(%address, "serving /metrics, /healthz and /readyz");
            Some(tokio::spawn(server))
        }
        None => None,
    };
    let feeds = ProjectFeeds::new(
        composer.documents().clone(),
        (refresh_seconds > 0).then(|| Duration::from_secs(refresh_seconds)),
        composer.context().metrics.clone(),
    );
    let starter = TaskStarter::new(composer.clone(), feeds);
    if let Some(check) = check {
        tokio::spawn(revalidate_streams(check, tasks.clone()));
    }
    let app = router(composer, starter, tasks.clone());
    // On SIGTERM: no new connection is accepted, in-flight requests get the grace period,
    // then every session's upstream sessions are ended (providers see the session close) and
    // the sidecar exits, whatever is still open (a client's stream, a call that hangs).
    let grace = Duration::from_secs(shutdown_grace_seconds);
    let serve = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.clone().requested())
        .into_future();
    let served = tokio::select! {
        served = serve => served,
        () = async {
            shutdown.clone().requested().await;
            tokio::time::sleep(grace).await;
        } => {
            warn!(?grace, "the shutdown grace period is over; requests still running are cut");
            Ok(())
        }
    };
    let _ = std::fs::remove_file(&socket);
    let closed = tasks.close_all();
    if closed > 0 {
        info!(sessions = closed, "upstream sessions closed");
        // The session closes go out from the upstream clients' own tasks: a moment for them.
        tokio::time::sleep(UPSTREAM_CLOSE_WAIT.min(grace)).await;
    }
    if let Some(admin) = admin
        && let Ok(Err(error)) = admin.await
    {
        warn!(%error, "admin server");
    }
    served.map_err(RunError::Serve)
}

/// The plan-token keys: `PLAN_TOKEN_KEY`, a key file, or one drawn for this process.
fn plan_keys(key: Option<String>, file: Option<PathBuf>) -> Result<PlanKeys, RunError> {
    match (key, file) {
        (Some(_), Some(_)) => Err(RunError::Settings(
            "PLAN_TOKEN_KEY and PLAN_TOKEN_KEYS_FILE are both set: use one (the file for \
             rotation)"
                .into(),
        )),
        (Some(key), None) => Ok(PlanKeys::from_secret(&key)?),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                RunError::Settings(format!("PLAN_TOKEN_KEYS_FILE {}: {e}", path.display()))
            })?;
            Ok(PlanKeys::from_key_file(&text)?)
        }
        (None, None) => {
            let keys = PlanKeys::generate()?;
            warn!(
                key = keys.signing_id(),
                "no PLAN_TOKEN_KEY or PLAN_TOKEN_KEYS_FILE: plan tokens are signed with a key \
                 drawn for this process; they die with it"
            );
            Ok(keys)
        }
    }
}

/// The control plane's configuration: the given kubeconfig, or the inferred one (in a pod,
/// the service account).
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
