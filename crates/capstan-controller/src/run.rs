//! The controller's wiring: settings → client, the admin server, leadership, the Composed
//! probe, the status queue, then the caches, reconcilers and the queue's writer — run until
//! SIGTERM, then handed over.

use std::hash::{BuildHasher as _, Hasher as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_compose::composer::Composer;
use capstan_compose::composer::SetupError;
use capstan_compose::limits::Limits;
use capstan_core::control_plane::ControlPlane;
use capstan_process::{
    AdminError, Readiness, Shutdown, TelemetryError, init_telemetry, serve_admin,
};
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller, watcher};
use kube::{Client, Config as KubeConfig};
use prometheus_client::registry::Registry;
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::cached::CachedBinding;
use crate::config::{Config, ProbeConfig};
use crate::due::Due;
use crate::leader::{Leadership, LeaseSettings, LeaseSettingsError};
use crate::metrics::Metrics;
use crate::probe::{ProbeSettings, Prober};
use crate::qualifiers::run_qualifiers;
use crate::reconcile::{
    Context, DirectWriter, StatusPath, binding_error_policy, reconcile_binding,
};
use crate::status::{DesiredStatus, ObjectKey};
use crate::status_queue::{Released, StatusReceiver, status_queue};
use crate::triggers::{
    ProbedNames, all_on_leadership, probed_bindings, resync_walk, spawn_marker, split_released,
};
use crate::writer::StatusWriter;

mod caches;

use self::caches::{Ready, spawn_readiness, watch_bindings, watch_qualifiers};

/// Why the controller could not start or stopped with an error.
#[derive(Debug, Error)]
pub enum RunError {
    /// The log or trace settings.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    /// The kubeconfig could not be read or built into a client.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file, or `(inferred)`.
        path: String,
        /// What failed.
        message: String,
    },
    /// The admin server.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// The probe's composer settings.
    #[error(transparent)]
    Composer(#[from] SetupError),
    /// The lease settings.
    #[error(transparent)]
    Lease(#[from] LeaseSettingsError),
}

impl Config {
    /// Parses the command line and environment, then runs the controller.
    pub async fn parse_and_run() -> Result<(), RunError> {
        run(<Self as clap::Parser>::parse()).await
    }
}

/// Runs the controller until SIGTERM or Ctrl-C, then releases its lease.
pub async fn run(config: Config) -> Result<(), RunError> {
    run_on(config, StatusPath::Queue).await
}

/// [`run`], with every status written by `writer` as it is computed instead of queued and
/// written on transitions: the controller benchmark's naive baseline ([`DirectWriter`]).
pub async fn run_with_direct_writer(
    config: Config,
    writer: Arc<dyn DirectWriter>,
) -> Result<(), RunError> {
    run_on(config, StatusPath::Direct(writer)).await
}

/// The controller, its statuses going down `path`.
async fn run_on(config: Config, path: StatusPath) -> Result<(), RunError> {
    let Config {
        kubeconfig,
        listen_address,
        status_queue_capacity,
        status_writes_in_flight,
        reconcile_concurrency,
        resync_seconds,
        lease_name,
        lease_namespace,
        lease_duration_seconds,
        lease_grace_seconds,
        identity,
        probe: probe_config,
        log,
        log_format,
    } = config;
    let lease = LeaseSettings {
        name: lease_name,
        namespace: lease_namespace,
        identity: identity.unwrap_or_else(default_identity),
        duration_seconds: lease_duration_seconds,
        grace_seconds: lease_grace_seconds,
    };
    lease.check()?;
    // Before any TLS client is built: the probe's and the trace exporter's.
    capstan_core::install_crypto_provider();
    // Held to the end: dropping it exports the spans still buffered.
    let _telemetry = init_telemetry(&log, log_format, "capstan-controller", || false)?;

    let kube = kube_config(kubeconfig).await?;
    let client = Client::try_from(kube.clone()).map_err(|e| RunError::Kubeconfig {
        path: "(the client)".into(),
        message: format!("building the client: {e}"),
    })?;
    let shutdown = Shutdown::on_signal();
    let admin = AdminServer::start(listen_address, shutdown.clone()).await?;
    // Turned true once both caches have synced: readiness, the qualifier loop and the
    // election wait for it.
    let (synced_tx, synced) = watch::channel(false);
    let leadership = start_leader_election(client.clone(), lease, synced);
    let (probe, probed) = composed_probe(probe_config, &kube, &admin.metrics)?.unzip();
    let (queue, worker, released) = status_queue(status_queue_capacity);
    let ctx = Arc::new(Context {
        client,
        queue,
        metrics: admin.metrics.clone(),
        path,
        resync: Duration::from_secs(resync_seconds),
        probe,
        leader: leadership.leader(),
        term: leadership.term(),
    });

    let settings = ControllerSettings {
        reconcile_concurrency,
        status_writes_in_flight,
    };
    let ready = Ready {
        readiness: admin.readiness.clone(),
        synced: synced_tx,
    };
    run_controllers(ctx, settings, worker, released, probed, ready, shutdown).await;
    // The loops have stopped: release the lease so a standby takes over at once instead of
    // after the lease has gone unrenewed for its duration.
    leadership.stop().await;
    admin.stopped().await
}

/// The admin server (metrics, liveness, readiness) on its own task, and what it reports.
struct AdminServer {
    task: JoinHandle<Result<(), AdminError>>,
    metrics: Metrics,
    readiness: Readiness,
}

impl AdminServer {
    /// Registers the controller's metrics and serves them, liveness and readiness on `address`
    /// until `shutdown`; fails when `address` cannot be bound.
    async fn start(address: SocketAddr, shutdown: Shutdown) -> Result<Self, AdminError> {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let readiness = Readiness::new();
        let task = tokio::spawn(serve_admin(address, registry, readiness.clone(), shutdown).await?);
        Ok(Self {
            task,
            metrics,
            readiness,
        })
    }

    /// Waits for the server to stop: its error, if it failed. A task that panicked is only
    /// logged, since the controller's own work has finished by then.
    async fn stopped(self) -> Result<(), RunError> {
        match self.task.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(error.into()),
            Err(error) => {
                warn!(%error, "admin server task");
                Ok(())
            }
        }
    }
}

/// Starts leader election in the background: only the holder writes; the standby keeps its
/// caches warm.
fn start_leader_election(
    client: Client,
    settings: LeaseSettings,
    synced: watch::Receiver<bool>,
) -> Leadership {
    let identity = settings.identity.clone();
    let lease = format!("{}/{}", settings.namespace, settings.name);
    let leadership = Leadership::start(client, settings, synced);
    info!(%identity, %lease, "leader election started");
    leadership
}

/// The Composed probe, with the sidecar's composer, guards, timeouts and flag names, and the
/// names its findings concern; `None` when probing is off (interval 0).
fn composed_probe(
    config: ProbeConfig,
    kube: &KubeConfig,
    metrics: &Metrics,
) -> Result<Option<(Arc<Prober>, ProbedNames)>, SetupError> {
    if config.interval_seconds == 0 {
        info!("Composed probes are off (--probe-interval-seconds 0)");
        return Ok(None);
    }
    let limits = config.timeouts.applied_to(Limits::default());
    let plane = ControlPlane::new(kube.clone(), None);
    let credentials = config
        .credentials
        .probe_sources(&plane)
        .map_err(SetupError::Credentials)?;
    let composer =
        Composer::from_allow_lists(&config.mcp_endpoint_hosts, &config.fetch_hosts, limits)?
            .with_credentials(Arc::new(credentials).for_probe(PROBED_PROJECT));
    let settings = ProbeSettings {
        interval: Duration::from_secs(config.interval_seconds),
        concurrency: config.concurrency,
        deadline: Duration::from_secs(config.deadline_seconds),
    };
    Ok(Some(Prober::new(composer, settings, metrics.clone())))
}

/// How the controllers run, from the command line.
struct ControllerSettings {
    /// Bindings reconciled at once.
    reconcile_concurrency: u16,
    /// Status writes the writer keeps in flight.
    status_writes_in_flight: usize,
}

/// Watches bindings and qualifiers and runs their reconcilers, the status writer and the
/// leadership log until `shutdown`; returns once they have all stopped. A binding is
/// reconciled when it changes, when the resync walk comes by, when a probe's finding concerns
/// it, when the status queue hands it back after a drop, and on gaining leadership.
async fn run_controllers(
    ctx: Arc<Context>,
    settings: ControllerSettings,
    queue: StatusReceiver<ObjectKey, DesiredStatus>,
    released: Released<ObjectKey>,
    probed: Option<ProbedNames>,
    readiness: Ready,
    shutdown: Shutdown,
) {
    let stop = shutdown.requested().boxed().shared();
    // Reads come from watch caches; `any_semantic` lets (re-)lists be served from the
    // apiserver's watch cache instead of a quorum read of etcd.
    let watch_config = watcher::Config::default().any_semantic();
    let bindings = watch_bindings(&ctx, watch_config.clone());
    let (released_bindings, released_qualifiers) = split_released(released);
    // Every trigger marks a name due; the Controller is handed a few at a time (`due.rs`).
    let due = Due::new(2 * usize::from(settings.reconcile_concurrency));
    let (events, store) = (bindings.events, &bindings.store);
    let marker = spawn_triggers(&ctx, events, store, probed, released_bindings, due.clone());
    let forgetter = ctx
        .probe
        .clone()
        .map(|prober| spawn_forgetter(prober, bindings.store.clone(), ctx.resync));

    let qualifiers = watch_qualifiers(&ctx.client, watch_config, ctx.queue.clone());
    let writer = StatusWriter::new(
        ctx.client.clone(),
        bindings.store.clone(),
        qualifiers.store.clone(),
        ctx.term.clone(),
        ctx.metrics.clone(),
        settings.status_writes_in_flight,
    );
    let writer = tokio::spawn(writer.run(queue));
    let (bindings_synced, qualifiers_synced) = (bindings.synced, qualifiers.synced);
    let synced = spawn_readiness(
        readiness,
        bindings_synced,
        qualifiers_synced,
        ctx.metrics.clone(),
    );
    let leadership = tokio::spawn(log_leadership(ctx.leader.clone(), ctx.metrics.clone()));
    let qualifier_loop = tokio::spawn(run_qualifiers(
        qualifiers.events,
        qualifiers.store,
        synced,
        released_qualifiers,
        ctx.clone(),
        ctx.leader.clone(),
        stop.clone(),
    ));
    run_binding_controller(
        ctx,
        bindings.store,
        due,
        settings.reconcile_concurrency,
        stop,
    )
    .await;
    Beside {
        marker,
        qualifier_loop,
        writer,
        leadership,
        forgetter,
    }
    .stop()
    .await;
}

/// Starts what marks bindings due (`triggers.rs`): their own changes, a probe's findings, the
/// bindings the status queue hands back after a drop, the resync walk, gaining leadership.
fn spawn_triggers(
    ctx: &Context,
    changes: impl Stream<Item = Result<ObjectRef<CachedBinding>, watcher::Error>> + Send + 'static,
    store: &Store<CachedBinding>,
    probed: Option<ProbedNames>,
    released: BoxStream<'static, ObjectRef<CachedBinding>>,
    due: Arc<Due>,
) -> JoinHandle<()> {
    let triggers = vec![
        probed_bindings(probed),
        released,
        resync_walk(store.clone(), ctx.revisit()),
        all_on_leadership(store.clone(), ctx.leader.clone()),
    ];
    spawn_marker(changes, triggers, due)
}

/// The loops that run beside the binding controller.
struct Beside {
    /// Marks bindings due (`triggers.rs`).
    marker: JoinHandle<()>,
    qualifier_loop: JoinHandle<()>,
    /// The status queue's writer.
    writer: JoinHandle<()>,
    leadership: JoinHandle<()>,
    /// Frees the probe's names of bindings that are gone.
    forgetter: Option<JoinHandle<()>>,
}

impl Beside {
    /// Stops them all and waits for them: a graceful shutdown stops the loops before the
    /// lease is released.
    async fn stop(self) {
        let Self {
            marker,
            qualifier_loop,
            writer,
            leadership,
            forgetter,
        } = self;
        marker.abort();
        qualifier_loop.abort();
        writer.abort();
        leadership.abort();
        if let Some(forgetter) = forgetter {
            forgetter.abort();
        }
        let _ = tokio::join!(marker, qualifier_loop, writer, leadership);
    }
}

/// kube-runtime's Controller for bindings, handed names by `due` and running at most
/// `concurrency` reconciles at once, until `stop`.
async fn run_binding_controller(
    ctx: Arc<Context>,
    store: Store<CachedBinding>,
    due: Arc<Due>,
    concurrency: u16,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let metrics = ctx.metrics.clone();
    Controller::for_stream_with(
        futures::stream::pending::<Result<CachedBinding, watcher::Error>>(),
        store,
        (),
    )
    .with_config(controller::Config::default().concurrency(concurrency))
    .reconcile_on(due.clone().stream())
    .graceful_shutdown_on(stop)
    .run(reconcile_binding, binding_error_policy, ctx)
    .for_each(|result| {
        finished(result, &due);
        metrics
            .reconciles_due
            .set(i64::try_from(due.waiting()).unwrap_or(i64::MAX));
        futures::future::ready(())
    })
    .await;
}

/// What the Controller reported for one reconcile: its name's place is free in `due`; a
/// failure is logged.
fn finished<E: std::fmt::Display, Q: std::fmt::Display>(
    result: Result<(ObjectRef<CachedBinding>, controller::Action), controller::Error<E, Q>>,
    due: &Due,
) {
    match result {
        Ok((object, _)) => due.done(&object.name),
        // A binding deleted after a trigger named it: nothing to do.
        Err(controller::Error::ObjectNotFound(object)) => {
            debug!(%object, "binding gone before its reconcile");
            due.done(&object.name);
        }
        Err(controller::Error::ReconcilerFailed(error, object)) => {
            warn!(%error, %object, "binding reconcile failed");
            due.done(&object.name);
        }
        Err(error) => warn!(%error, "binding controller"),
    }
}

/// A backstop for deletions a re-list hid from the watch: every resync (at least every
/// second), findings of bindings that are gone free their names.
fn spawn_forgetter(
    prober: Arc<Prober>,
    store: Store<CachedBinding>,
    resync: Duration,
) -> JoinHandle<()> {
    let every = resync.max(Duration::from_secs(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            prober
                .forget_missing(|name| store.get(&ObjectRef::<CachedBinding>::new(name)).is_some());
        }
    })
}

/// Logs leadership changes and keeps the `leader` gauge current.
async fn log_leadership(mut leader: watch::Receiver<bool>, metrics: Metrics) {
    while leader.changed().await.is_ok() {
        let is_leader = *leader.borrow_and_update();
        metrics.leader.set(i64::from(is_leader));
        info!(is_leader, "leadership changed");
    }
}

/// The project a probe's Secrets are read from: the controller's one plane (no URL template,
/// so every name reads the same cluster).
const PROBED_PROJECT: &str = "probed";

async fn kube_config(kubeconfig: Option<PathBuf>) -> Result<KubeConfig, RunError> {
    let shown = kubeconfig
        .as_ref()
        .map_or_else(|| "(inferred)".to_owned(), |p| p.display().to_string());
    let error = |message: String| RunError::Kubeconfig {
        path: shown.clone(),
        message,
    };
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(&path).map_err(|e| error(e.to_string()))?;
            KubeConfig::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| error(e.to_string()))?
        }
        None => KubeConfig::infer()
            .await
            .map_err(|e| error(e.to_string()))?,
    };
    Ok(config)
}

/// The pod name (POD_NAME) or host name, with the process id and a random suffix: unique per
/// process, as client-go's. Without the suffix a restarted container (process id 1 again) took
/// the identity of the leader that had just died and renewed its lease at once.
fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "capstan-controller".to_owned());
    // RandomState's keys are drawn from the operating system: a random number without a
    // dependency for it.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("{host}-{}-{:08x}", std::process::id(), random & 0xffff_ffff)
}
