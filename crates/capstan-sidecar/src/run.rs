//! The sidecar's wiring: settings → document reader, guards, composer, sessions → the socket,
//! served until SIGTERM.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::HeaderName;
use capstan_api::CallLimits;
use capstan_compose::composer::Composer;
use capstan_compose::composer::SetupError;
use capstan_compose::limits::Limits;
use capstan_compose::source::SourceError;
use capstan_core::control_plane::ControlPlane;
use capstan_platform::{KeyError, LedgerError};
use capstan_process::{
    AdminError, Readiness, Shutdown, TelemetryError, init_telemetry, serve_admin,
};
use capstan_upstream::trace_context::unsampled;
use prometheus_client::registry::Registry;
use thiserror::Error;
use tracing::{info, warn};

mod base_tools;
mod credentials;
mod documents;
pub mod socket;

use self::base_tools::with_base_tools;
use self::credentials::with_credentials;
use self::documents::{Watched, document_settings};
use self::socket::SocketError;
use crate::caller::admission::{Admission, Caps};
use crate::caller::authorization::{ToolAuthorizationMode, ToolAuthorizer};
use crate::caller::check::{CallerCheck, CallerCheckMode};
use crate::caller::names::CallerNames;
use crate::composition::composer::ProjectComposer;
use crate::composition::feeds::ProjectFeeds;
use crate::config::{
    CallLimitSettings, CallerCheckSettings, Config, DEFAULT_GAP_SINK, ObservabilitySettings,
    ServeSettings, SessionSettings, SourceKind, ToolSearchSettings, UpstreamSettings,
};
use crate::edge::router;
use crate::limits::caller_rate::CallerRate;
use crate::limits::{CallGates, PlatformLimits};
use crate::observe::audit::{Audit, AuditNames};
use crate::observe::metering::Meter;
use crate::observe::metrics::{Metrics, WatchMetrics};
use crate::observe::request_span::RequestTracing;
use crate::routing::decisions::{DEFAULT_CAPACITY as DECISION_LOG_CAPACITY, DecisionLog};
use crate::task::gaps::{GapPolicy, GapReports};
use crate::task::request_states::RequestStates;
use crate::task::{TaskContext, ToolSearch};
use crate::tasks::reaper::revalidate_streams;
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
    /// The capability-gap sink cannot be opened.
    #[error("CAPSTAN_GAP_SINK {sink}: {source}")]
    Gaps {
        /// The sink.
        sink: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The metering sink cannot be opened.
    #[error("metering sink {sink}: {source}")]
    Meter {
        /// The sink.
        sink: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The audit sink cannot be opened (CAPSTAN_AUDIT_SINK).
    #[error("audit sink {sink}: {source}")]
    Audit {
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
        let mut builder = match config.serving.worker_threads {
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

/// Runs the sidecar until SIGTERM or Ctrl-C: each start-up step built from its group of
/// settings.
pub async fn run(config: Config) -> Result<(), RunError> {
    let Config {
        serving,
        documents,
        caller_check: caller_check_settings,
        base_tools,
        upstream,
        sessions,
        call_limits,
        tool_search,
        credentials,
        token_exchange,
        observability:
            ObservabilitySettings {
                metrics_address,
                metering_sink,
                audit_sink,
                audit_names,
                log,
                log_format,
            },
    } = config;
    // Before any TLS client is built, the trace exporter's first.
    capstan_core::install_crypto_provider();
    // Held to the end: dropping it exports the spans still buffered.
    let telemetry = init_telemetry(&log, log_format, "capstan-sidecar", unsampled)?;
    let documents = document_settings(documents).await?;
    let composer = composer(upstream)?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = readiness(&mut registry, documents.watched);
    let (meter, audit) = sinks(&metering_sink, &audit_sink, audit_names)?;
    let (search, gaps) = tool_search_settings(tool_search)?;
    let Callers {
        check,
        authorizer,
        project_header,
    } = callers(
        caller_check_settings,
        documents.source,
        documents.plane.as_ref(),
        &metrics,
    )?;
    let context = TaskContext {
        metrics: metrics.clone(),
        meter: Arc::new(meter),
        clock: Instant::now(),
        decisions: Arc::new(DecisionLog::new(DECISION_LOG_CAPACITY)),
        states: Arc::new(RequestStates::new()),
        authorizer,
        limits: Arc::new(CallGates::new(platform_limits(call_limits))),
        audit: Arc::new(audit),
        names: Arc::new(CallerNames::new(documents.plane.clone())),
        search,
        gaps: Arc::new(gaps),
    };
    let composer = with_base_tools(
        ProjectComposer::new(documents.reader, composer, context),
        base_tools,
        documents.plane.as_ref(),
    )?;
    let composer = with_credentials(
        composer,
        credentials,
        token_exchange,
        documents.plane.as_ref(),
    )?;
    let tasks = Arc::new(tasks(sessions, project_header, check.clone(), &metrics));
    let built = Built {
        composer: Arc::new(composer),
        tasks,
        check,
        registry,
        readiness,
        refresh: documents.refresh,
        metrics_address,
        tracing: RequestTracing::new(telemetry.head_sampler()),
    };
    built.serve(serving).await
}

/// When `find_tools` is offered, and where capability-gap reports go, from their settings.
fn tool_search_settings(
    settings: ToolSearchSettings,
) -> Result<(ToolSearch, GapReports), RunError> {
    let ToolSearchSettings {
        tool_search_min_tools,
        tool_search_threshold,
        tool_search_calls_per_minute,
        gap_sink,
        gap_window_seconds,
        gap_reports_per_hour,
    } = settings;
    let search = ToolSearch {
        min_tools: tool_search_min_tools,
        threshold: tool_search_threshold,
        rate: CallerRate::per_minute(tool_search_calls_per_minute).map(Arc::new),
    };
    let policy = GapPolicy {
        window: Duration::from_secs(gap_window_seconds),
        per_caller_per_hour: gap_reports_per_hour,
    };
    let gaps = match GapReports::open(&gap_sink, policy) {
        Ok(gaps) => gaps,
        // The default file's volume is the chart's; a sidecar run without it reports nothing.
        Err(error) if gap_sink == DEFAULT_GAP_SINK => {
            warn!(sink = %gap_sink, %error, "capability-gap reports are off: the default sink cannot be opened");
            GapReports::open("off", policy).map_err(|source| RunError::Gaps {
                sink: gap_sink.clone(),
                source,
            })?
        }
        Err(source) => {
            return Err(RunError::Gaps {
                sink: gap_sink,
                source,
            });
        }
    };
    Ok((search, gaps))
}

/// The metering and audit sinks, opened.
fn sinks(
    metering_sink: &str,
    audit_sink: &str,
    audit_names: AuditNames,
) -> Result<(Meter, Audit), RunError> {
    let meter = Meter::open(metering_sink).map_err(|source| RunError::Meter {
        sink: metering_sink.to_owned(),
        source,
    })?;
    let audit = Audit::open(audit_sink, audit_names).map_err(|source| RunError::Audit {
        sink: audit_sink.to_owned(),
        source,
    })?;
    Ok((meter, audit))
}

/// The platform's defaults and ceilings of every server's call limits.
fn platform_limits(settings: CallLimitSettings) -> PlatformLimits {
    let CallLimitSettings {
        default_calls_per_minute_per_caller,
        default_concurrent_calls_per_caller,
        default_calls_per_minute,
        max_calls_per_minute_per_caller,
        max_concurrent_calls_per_caller,
        max_calls_per_minute,
    } = settings;
    PlatformLimits {
        defaults: CallLimits {
            calls_per_minute_per_caller: default_calls_per_minute_per_caller,
            concurrent_calls_per_caller: default_concurrent_calls_per_caller,
            calls_per_minute: default_calls_per_minute,
        },
        ceilings: CallLimits {
            calls_per_minute_per_caller: max_calls_per_minute_per_caller,
            concurrent_calls_per_caller: max_concurrent_calls_per_caller,
            calls_per_minute: max_calls_per_minute,
        },
    }
}

/// The composer of the allow-list and limit settings.
fn composer(settings: UpstreamSettings) -> Result<Composer, RunError> {
    let UpstreamSettings {
        mcp_endpoint_hosts,
        fetch_hosts,
        call_timeout_seconds,
        question_timeout_seconds,
        timeouts,
        knowledge_source_cap,
        knowledge_total_cap,
        skill_cap,
    } = settings;
    let limits = timeouts.applied_to(Limits {
        call_timeout: Duration::from_secs(call_timeout_seconds),
        question_timeout: Duration::from_secs(question_timeout_seconds),
        knowledge_source_cap,
        knowledge_total_cap,
        skill_cap,
        ..Limits::default()
    });
    let composer = Composer::from_allow_lists(&mcp_endpoint_hosts, &fetch_hosts, limits)?;
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

/// How callers are told apart and checked: the header naming their project, the caller check,
/// and what decides each caller's tools.
struct Callers {
    check: Option<Arc<CallerCheck>>,
    authorizer: Option<Arc<ToolAuthorizer>>,
    project_header: HeaderName,
}

/// The caller check `CAPSTAN_CALLER_CHECK` asks for (`sar` by default with the crd source,
/// `none` otherwise; `sar` needs a control plane to ask), the tool authorization
/// `CAPSTAN_TOOL_AUTHORIZATION` asks for (`rbac` needs `sar`: its questions are asked with the
/// caller's token, with the same TTL), and the header that names the caller's project.
fn callers(
    settings: CallerCheckSettings,
    source: SourceKind,
    plane: Option<&ControlPlane>,
    metrics: &Metrics,
) -> Result<Callers, RunError> {
    let CallerCheckSettings {
        caller_check,
        caller_check_ttl_seconds,
        project_header,
        tool_authorization,
    } = settings;
    let project_header = HeaderName::try_from(project_header.as_str())
        .map_err(|_| RunError::ProjectHeader(project_header.clone()))?;
    let mode = caller_check.unwrap_or(if source == SourceKind::Crd {
        CallerCheckMode::Sar
    } else {
        CallerCheckMode::None
    });
    let check = match (mode, plane) {
        (CallerCheckMode::None, _) => {
            info!(
                "callers are not checked against the project they name \
                 (CAPSTAN_CALLER_CHECK=none): whoever reaches the socket may name any project"
            );
            None
        }
        (CallerCheckMode::Sar, None) => {
            return Err(RunError::Settings(
                "CAPSTAN_CALLER_CHECK=sar needs a control plane to ask: give KUBECONFIG, run \
                 in a pod, or use the crd source"
                    .into(),
            ));
        }
        (CallerCheckMode::Sar, Some(plane)) => Some(Arc::new(CallerCheck::new(
            plane.clone(),
            metrics.clone(),
            Duration::from_secs(caller_check_ttl_seconds),
        ))),
    };
    let authorizer = match (tool_authorization, &check, plane) {
        (ToolAuthorizationMode::Off, _, _) => None,
        (ToolAuthorizationMode::Rbac, Some(_), Some(plane)) => {
            info!(
                "tools, prompts and resources are decided per caller by the project's RBAC \
                 (CAPSTAN_TOOL_AUTHORIZATION=rbac)"
            );
            Some(Arc::new(ToolAuthorizer::new(
                plane.clone(),
                metrics.clone(),
                Duration::from_secs(caller_check_ttl_seconds),
            )))
        }
        (ToolAuthorizationMode::Rbac, _, _) => {
            return Err(RunError::Settings(
                "CAPSTAN_TOOL_AUTHORIZATION=rbac needs CAPSTAN_CALLER_CHECK=sar: each caller's \
                 tools are asked of the project's control plane with the caller's own token"
                    .into(),
            ));
        }
    };
    Ok(Callers {
        check,
        authorizer,
        project_header,
    })
}

/// The task registry of the session settings: admission under the `CAPSTAN_MAX_*` caps, and
/// the lifetimes of sessions and tasks without one.
fn tasks(
    settings: SessionSettings,
    project_header: HeaderName,
    check: Option<Arc<CallerCheck>>,
    metrics: &Metrics,
) -> Tasks {
    let SessionSettings {
        session_idle_seconds,
        sessionless_ttl_seconds,
        max_sessions,
        max_sessions_per_caller,
        max_sessions_per_project,
        max_streams_per_task,
    } = settings;
    let caps = Caps {
        total: max_sessions,
        per_caller: max_sessions_per_caller,
        per_project: max_sessions_per_project,
        streams_per_task: max_streams_per_task,
    };
    Tasks::new(
        Admission::with(project_header, caps, check, Some(metrics.clone())),
        Lifetimes {
            session_idle: Duration::from_secs(session_idle_seconds),
            sessionless: Duration::from_secs(sessionless_ttl_seconds),
        },
    )
}

/// What the socket serves, built: the composer, the task registry, the caller check and
/// the admin server's registry and readiness.
struct Built {
    composer: Arc<ProjectComposer>,
    tasks: Arc<Tasks>,
    check: Option<Arc<CallerCheck>>,
    registry: Registry,
    readiness: Readiness,
    /// How often live sessions re-read their documents (`CAPSTAN_REFRESH_SECONDS`).
    refresh: Option<Duration>,
    metrics_address: Option<std::net::SocketAddr>,
    /// How requests are traced (the head sampler, when spans are exported).
    tracing: RequestTracing,
}

impl Built {
    /// Serves the socket (and the admin server, if asked) until SIGTERM. On SIGTERM: no new
    /// connection is accepted, in-flight requests get the grace period, then every task's
    /// upstream sessions are ended (providers see the session close) and the sidecar exits,
    /// whatever is still open (a client's stream, a call that hangs).
    async fn serve(self, settings: ServeSettings) -> Result<(), RunError> {
        let Self {
            composer,
            tasks,
            check,
            registry,
            readiness,
            refresh,
            metrics_address,
            tracing,
        } = self;
        let ServeSettings {
            socket: socket_path,
            // Read before the runtime existed (`Config::parse_and_run`).
            worker_threads: _,
            shutdown_grace_seconds,
        } = settings;
        let listener = socket::bind(&socket_path).await?;
        info!(socket = %socket_path.display(), url = capstan_api::wire::MCP_URL, "serving");
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
            refresh,
            composer.context().metrics.clone(),
        );
        let starter = TaskStarter::new(composer.clone(), feeds);
        if let Some(check) = check {
            tokio::spawn(revalidate_streams(check, tasks.clone()));
        }
        // Its routes are made into services once here, and each connection gets a clone of
        // the `Arc` that holds them: served as a `Router`, axum would make them again for each
        // connection (~5 KiB for each connection held open).
        let app = router(composer, starter, tasks.clone(), tracing).with_state(());
        let grace = Duration::from_secs(shutdown_grace_seconds);
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
        let _ = std::fs::remove_file(&socket_path);
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
