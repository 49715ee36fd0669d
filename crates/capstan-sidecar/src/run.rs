//! The sidecar's wiring: settings → document reader, guards, composer, sessions → the socket,
//! served until SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::HeaderName;
use capstan_compose::{
    CachedSource, Composer, CrdSource, FixtureSource, HttpSource, Limits, ProjectDocuments,
    SetupError, SourceError, Uncached, WatchCounts, WatchedCluster,
};
use capstan_core::control_plane::ControlPlane;
use capstan_platform::{ChangePath, KeyError, LedgerError, PlanKeys, PlanLedger};
use capstan_process::{
    AdminError, Readiness, Shutdown, TelemetryError, init_telemetry, serve_admin,
};
use prometheus_client::registry::Registry;
use thiserror::Error;
use tracing::{info, warn};

mod settings;

use self::settings::Settings;
use crate::admission::{Admission, Caps};
use crate::caller_check::{CallerCheck, CallerCheckMode};
use crate::config::{BaseToolsMode, Config, SourceKind};
use crate::decisions::{DEFAULT_CAPACITY as DECISION_LOG_CAPACITY, DecisionLog};
use crate::feeds::ProjectFeeds;
use crate::metering::Meter;
use crate::metrics::{Metrics, WatchMetrics};
use crate::project_composer::{BaseToolsSetup, ProjectComposer};
use crate::reaper::revalidate_streams;
use crate::request_states::RequestStates;
use crate::server::router;
use crate::socket::{self, SocketError};
use crate::task::TaskContext;
use crate::tasks::{Lifetimes, TaskStarter, Tasks};

/// Why the sidecar could not start or stopped with an error. Each names the setting to fix.
#[derive(Debug, Error)]
pub enum RunError {
    /// The log or trace settings.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
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
    // Before any TLS client is built, the trace exporter's first.
    capstan_core::install_crypto_provider();
    // Held to the end: dropping it exports the spans still buffered.
    let _telemetry = init_telemetry(&config.log, config.log_format, "capstan-sidecar")?;
    let config = Settings::from(config);
    let plane = control_plane(&config).await?;
    let (documents, watched) = document_reader(&config, plane.as_ref())?;
    let composer = composer(&config)?;
    let project_header = HeaderName::try_from(config.project_header.as_str())
        .map_err(|_| RunError::ProjectHeader(config.project_header.clone()))?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = readiness(&mut registry, watched);
    let meter = Meter::open(&config.metering_sink).map_err(|source| RunError::Meter {
        sink: config.metering_sink.clone(),
        source,
    })?;
    let context = TaskContext {
        metrics: metrics.clone(),
        meter: Arc::new(meter),
        clock: Instant::now(),
        decisions: Arc::new(DecisionLog::new(DECISION_LOG_CAPACITY)),
        states: Arc::new(RequestStates::new()),
    };
    let composer = with_base_tools(
        ProjectComposer::new(documents, composer, context),
        &config,
        plane.as_ref(),
    )?;
    let check = caller_check(&config, plane.as_ref(), &metrics)?;
    let tasks = Arc::new(Tasks::new(
        Admission::with(project_header, caps(&config), check.clone(), Some(metrics)),
        Lifetimes {
            session_idle: Duration::from_secs(config.session_idle_seconds),
            sessionless: Duration::from_secs(config.sessionless_ttl_seconds),
        },
    ));
    let served = Served {
        composer: Arc::new(composer),
        tasks,
        check,
        registry,
        readiness,
    };
    served.serve(&config).await
}

/// The projects' control planes: required by the crd source, otherwise known when a
/// kubeconfig is given or the sidecar runs in a pod.
async fn control_plane(config: &Settings) -> Result<Option<ControlPlane>, RunError> {
    let kube = match (config.source, &config.kubeconfig) {
        (SourceKind::Crd, kubeconfig) => Some(kube_config(kubeconfig.clone()).await?),
        (_, Some(path)) => Some(kube_config(Some(path.clone())).await?),
        (_, None) if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            Some(kube_config(None).await?)
        }
        (_, None) => None,
    };
    Ok(kube.map(|kube| ControlPlane::new(kube, config.crd_url_template.clone())))
}

/// The watched crd source's counts and first sync, when it is the source.
type Watched = (Arc<WatchCounts>, tokio::sync::watch::Receiver<bool>);

/// Where projects' documents are read: the source `CAPABILITY_SOURCE` names, the crd source
/// cached per project with a URL template or watched once without one.
fn document_reader(
    config: &Settings,
    plane: Option<&ControlPlane>,
) -> Result<(Arc<dyn ProjectDocuments>, Option<Watched>), RunError> {
    let reader: Arc<dyn ProjectDocuments> = match config.source {
        SourceKind::Fixture => {
            let path = config.docs_fixture.clone().ok_or_else(|| {
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
            let url = config.provider_url.as_deref().ok_or_else(|| {
                RunError::Settings(
                    "CAPABILITY_SOURCE=http needs CAPABILITY_PROVIDER_URL (--provider-url)".into(),
                )
            })?;
            let source =
                HttpSource::new(url, config.provider_max_bytes).map_err(RunError::Provider)?;
            Arc::new(Uncached::new(Arc::new(source)))
        }
        SourceKind::Crd => return crd_reader(config, plane),
    };
    Ok((reader, None))
}

/// The crd source: with a URL template each project's plane listed behind a cache; without
/// one, one watch serves every project (capstan-compose `source/crd_watch.rs`), ready once it
/// has listed.
fn crd_reader(
    config: &Settings,
    plane: Option<&ControlPlane>,
) -> Result<(Arc<dyn ProjectDocuments>, Option<Watched>), RunError> {
    let plane = plane
        .cloned()
        .ok_or_else(|| RunError::Settings("CAPABILITY_SOURCE=crd needs a control plane".into()))?;
    let Some(cluster) = plane.cluster_config() else {
        let capacity = config.crd_cache_capacity;
        let cached = CachedSource::new(
            Arc::new(CrdSource::from_plane(plane).with_capacity(capacity)),
            Duration::from_secs(config.crd_cache_ttl_seconds),
            capacity,
        );
        return Ok((Arc::new(cached), None));
    };
    let watched = WatchedCluster::connect(cluster)
        .map_err(|e| RunError::Settings(format!("the crd source's cluster: {e}")))?;
    let sync = (watched.counts(), watched.first_sync());
    Ok((Arc::new(watched), Some(sync)))
}

/// The composer of the allow-list and limit settings.
fn composer(config: &Settings) -> Result<Composer, RunError> {
    let limits = config.timeouts.applied_to(Limits {
        call_timeout: Duration::from_secs(config.call_timeout_seconds),
        question_timeout: Duration::from_secs(config.question_timeout_seconds),
        knowledge_source_cap: config.knowledge_source_cap,
        knowledge_total_cap: config.knowledge_total_cap,
        skill_cap: config.skill_cap,
        ..Limits::default()
    });
    let composer =
        Composer::from_allow_lists(&config.mcp_endpoint_hosts, &config.fetch_hosts, limits)?;
    if composer.dials_nothing() {
        warn!("CAPABILITY_MCP_ENDPOINT_HOSTS is empty: no MCP endpoint will be dialed");
    }
    Ok(composer)
}

/// Ready at once, except with a watched crd source: once it has listed (its counts then go
/// into `registry`).
fn readiness(registry: &mut Registry, watched: Option<Watched>) -> Readiness {
    let readiness = Readiness::new();
    match watched {
        None => readiness.set_ready(),
        Some((counts, mut synced)) => {
            registry.register_collector(Box::new(WatchMetrics {
                counts,
                synced: synced.clone(),
            }));
            let ready = readiness.clone();
            tokio::spawn(async move {
                if synced.wait_for(|synced| *synced).await.is_ok() {
                    ready.set_ready();
                }
            });
        }
    }
    readiness
}

/// `composer` with the base platform tools, when they are on and a control plane is known;
/// the change path with them in `auto` mode.
fn with_base_tools(
    composer: ProjectComposer,
    config: &Settings,
    plane: Option<&ControlPlane>,
) -> Result<ProjectComposer, RunError> {
    let plane = match (plane, config.base_tools) {
        (_, BaseToolsMode::Off) => {
            info!("base platform tools are off (CAPSTAN_BASE_TOOLS=off)");
            return Ok(composer);
        }
        (None, _) => {
            info!(
                "base platform tools are not composed: no control plane is known (no \
                 kubeconfig, not in a pod)"
            );
            return Ok(composer);
        }
        (Some(plane), _) => plane,
    };
    let change_path = if config.base_tools == BaseToolsMode::Auto {
        Some(change_path(config)?)
    } else {
        None
    };
    info!(
        url_template = plane.url_template().unwrap_or("(the kubeconfig's cluster)"),
        change_path = change_path.is_some(),
        "base platform tools are composed for callers with a token, acting as the caller"
    );
    Ok(composer.with_base_tools(BaseToolsSetup {
        plane: plane.clone(),
        change_path,
    }))
}

/// The change path: plan-token keys and the ledger of applied tokens (a file with
/// `CAPSTAN_PLAN_LEDGER`, else in memory).
fn change_path(config: &Settings) -> Result<ChangePath, RunError> {
    let keys = plan_keys(
        config.plan_token_key.clone(),
        config.plan_token_keys_file.clone(),
    )?;
    let ledger = match &config.plan_ledger {
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
        file = config.plan_ledger.as_ref().map(|p| p.display().to_string()),
        "plan tokens are applied once, by the caller who planned, through this ledger"
    );
    Ok(ChangePath::with_system_clock(
        Arc::new(keys),
        Arc::new(ledger),
        Duration::from_secs(config.plan_token_ttl_seconds),
    ))
}

/// The caller check `CAPSTAN_CALLER_CHECK` asks for (`sar` by default with the crd source,
/// `none` otherwise); `sar` needs a control plane to ask.
fn caller_check(
    config: &Settings,
    plane: Option<&ControlPlane>,
    metrics: &Metrics,
) -> Result<Option<Arc<CallerCheck>>, RunError> {
    let mode = config
        .caller_check
        .unwrap_or(if config.source == SourceKind::Crd {
            CallerCheckMode::Sar
        } else {
            CallerCheckMode::None
        });
    match (mode, plane) {
        (CallerCheckMode::None, _) => {
            info!(
                "callers are not checked against the project they name \
                 (CAPSTAN_CALLER_CHECK=none): whoever reaches the socket may name any project"
            );
            Ok(None)
        }
        (CallerCheckMode::Sar, None) => Err(RunError::Settings(
            "CAPSTAN_CALLER_CHECK=sar needs a control plane to ask: give KUBECONFIG, run \
             in a pod, or use the crd source"
                .into(),
        )),
        (CallerCheckMode::Sar, Some(plane)) => Ok(Some(Arc::new(CallerCheck::new(
            plane.clone(),
            metrics.clone(),
            Duration::from_secs(config.caller_check_ttl_seconds),
        )))),
    }
}

/// The admission caps of the `CAPSTAN_MAX_*` settings.
fn caps(config: &Settings) -> Caps {
    Caps {
        total: config.max_sessions,
        per_caller: config.max_sessions_per_caller,
        per_project: config.max_sessions_per_project,
        streams_per_task: config.max_streams_per_task,
    }
}

/// What the socket serves, built: the composer, the task registry, the caller check and
/// the admin server's registry and readiness.
struct Served {
    composer: Arc<ProjectComposer>,
    tasks: Arc<Tasks>,
    check: Option<Arc<CallerCheck>>,
    registry: Registry,
    readiness: Readiness,
}

impl Served {
    /// Serves the socket (and the admin server, if asked) until SIGTERM. On SIGTERM: no new
    /// connection is accepted, in-flight requests get the grace period, then every task's
    /// upstream sessions are ended (providers see the session close) and the sidecar exits,
    /// whatever is still open (a client's stream, a call that hangs).
    async fn serve(self, config: &Settings) -> Result<(), RunError> {
        let Self {
            composer,
            tasks,
            check,
            registry,
            readiness,
        } = self;
        let listener = socket::bind(&config.socket).await?;
        info!(socket = %config.socket.display(), url = capstan_api::wire::MCP_URL, "serving");
        let shutdown = Shutdown::on_signal();
        let admin = match config.metrics_address {
            Some(address) => {
                let server = serve_admin(address, registry, readiness, shutdown.clone()).await?;
                info!(%address, "serving /metrics, /healthz and /readyz");
                Some(tokio::spawn(server))
            }
            None => None,
        };
        let feeds = ProjectFeeds::new(
            composer.documents().clone(),
            (config.refresh_seconds > 0).then(|| Duration::from_secs(config.refresh_seconds)),
            composer.context().metrics.clone(),
        );
        let starter = TaskStarter::new(composer.clone(), feeds);
        if let Some(check) = check {
            tokio::spawn(revalidate_streams(check, tasks.clone()));
        }
        // Its routes are made into services once here, and each connection gets a clone of
        // the `Arc` that holds them: served as a `Router`, axum would make them again for each
        // connection (~5 KiB a connection held open, docs/performance.md).
        let app = router(composer, starter, tasks.clone()).with_state(());
        let grace = Duration::from_secs(config.shutdown_grace_seconds);
        let serve = axum::serve(listener, app.into_make_service())
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
        let _ = std::fs::remove_file(&config.socket);
        close_upstreams(&tasks, grace).await;
        if let Some(admin) = admin
            && let Ok(Err(error)) = admin.await
        {
            warn!(%error, "admin server");
        }
        served.map_err(RunError::Serve)
    }
}

/// Ends every task's upstream sessions and gives their clients a moment to send the closes.
async fn close_upstreams(tasks: &Tasks, grace: Duration) {
    let closed = tasks.close_all();
    if closed > 0 {
        info!(sessions = closed, "upstream sessions closed");
        // The session closes go out from the upstream clients' own tasks: a moment for them.
        tokio::time::sleep(UPSTREAM_CLOSE_WAIT.min(grace)).await;
    }
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
