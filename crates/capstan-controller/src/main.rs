//! `capstan-controller`: validates CapabilityBindings and RouteQualifiers and reports through
//! their `Accepted` conditions. Two replicas run; the one holding the Lease writes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use capstan_controller::cached::{CachedBinding, CachedQualifier};
use capstan_controller::leader::{Leadership, LeaseSettings};
use capstan_controller::metrics::Metrics;
use capstan_controller::reconcile::{
    Context, WriteMode, binding_error_policy, reconcile_binding, reconcile_qualifiers,
};
use capstan_controller::status_queue::status_queue;
use capstan_controller::writer::{FIELD_MANAGER, StatusWriter};
use futures::{FutureExt, StreamExt};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, Config as KubeConfig, Resource};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{error, info, warn};

/// Log output formats.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    /// One JSON object per line (for log pipelines).
    Json,
    /// Human-readable lines.
    Text,
}

/// Capstan's controller. Every flag can also be set from the environment variable shown.
#[derive(Debug, clap::Parser)]
#[command(name = "capstan-controller", version, about)]
struct Config {
    /// Kubeconfig file; without one, the in-cluster service account (or the default
    /// kubeconfig) is used.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,

    /// Address serving /metrics, /healthz and /readyz.
    #[arg(long, env = "CAPSTAN_LISTEN_ADDRESS", default_value = "0.0.0.0:8080")]
    listen_address: SocketAddr,

    /// Objects that may wait for a status write at once. Size it above the number of objects
    /// so a full resync never drops; a dropped update is recovered by the next resync.
    #[arg(long, env = "CAPSTAN_STATUS_QUEUE_CAPACITY", default_value_t = 16_384)]
    status_queue_capacity: usize,

    /// Seconds between full reconciles of every object (plus up to 10% jitter): the backstop
    /// for anything dropped or missed.
    #[arg(long, env = "CAPSTAN_RESYNC_SECONDS", default_value_t = 300)]
    resync_seconds: u64,

    /// How statuses are written: `transitions` (queued, only on change) or
    /// `every-reconcile` (the naive baseline, for benchmarks).
    #[arg(
        long,
        env = "CAPSTAN_WRITE_MODE",
        value_enum,
        default_value = "transitions"
    )]
    write_mode: WriteMode,

    /// Name of the coordination.k8s.io Lease used for leader election.
    #[arg(long, env = "CAPSTAN_LEASE_NAME", default_value = "capstan-controller")]
    lease_name: String,

    /// Namespace of the Lease (usually the controller's own).
    #[arg(
        long,
        env = "CAPSTAN_LEASE_NAMESPACE",
        default_value = "capstan-system"
    )]
    lease_namespace: String,

    /// Seconds a lease stays valid after its last renewal; a standby takes over this long
    /// after the leader stops renewing.
    #[arg(long, env = "CAPSTAN_LEASE_DURATION_SECONDS", default_value_t = 15)]
    lease_duration_seconds: u64,

    /// Seconds before expiry at which the leader renews.
    #[arg(long, env = "CAPSTAN_LEASE_GRACE_SECONDS", default_value_t = 5)]
    lease_grace_seconds: u64,

    /// This replica's identity in the Lease; defaults to the pod name (POD_NAME) or the host
    /// name, with the process id.
    #[arg(long, env = "CAPSTAN_IDENTITY")]
    identity: Option<String>,

    /// Log filter, e.g. `info` or `capstan_controller=debug,kube=info`.
    #[arg(long, env = "CAPSTAN_LOG", default_value = "info")]
    log: String,

    /// Log format.
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
        kubeconfig,
        listen_address,
        status_queue_capacity,
        resync_seconds,
        write_mode,
        lease_name,
        lease_namespace,
        lease_duration_seconds,
        lease_grace_seconds,
        identity,
        log,
        log_format,
    } = config;
    init_logging(&log, log_format)?;

    let client = client(kubeconfig).await?;
    let identity = identity.unwrap_or_else(default_identity);
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let shutdown = {
        let mut rx = shutdown_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
        .shared()
    };
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutting down");
        let _ = shutdown_tx.send(true);
    });

    let server = tokio::spawn(capstan_controller::server::serve(
        listen_address,
        registry,
        ready.clone(),
        shutdown.clone(),
    ));

    // Leader election: only the holder writes; the standby keeps its caches warm.
    let leadership = Leadership::start(
        client.clone(),
        LeaseSettings {
            name: lease_name.clone(),
            namespace: lease_namespace.clone(),
            identity: identity.clone(),
            duration_seconds: lease_duration_seconds,
            grace_seconds: lease_grace_seconds,
            field_manager: format!("{FIELD_MANAGER}-lease"),
        },
    )
    .await?;
    let leader = leadership.leader();
    info!(%identity, lease = %format!("{lease_namespace}/{lease_name}"), "leader election started");

    let (queue, queue_rx) = status_queue(status_queue_capacity);
    let ctx = Arc::new(Context {
        client: client.clone(),
        queue,
        metrics: metrics.clone(),
        mode: write_mode,
        resync: Duration::from_secs(resync_seconds),
        leader: leader.clone(),
    });

    // Reads come from watch caches; `any_semantic` lets (re-)lists be served from the
    // apiserver's watch cache instead of a quorum read of etcd.
    let watch_config = watcher::Config::default().any_semantic();

    // Each cache reports its first full sync (InitDone) on a watch channel: a store's own
    // readiness future wakes only its latest waiter, and the Controller already waits on it.
    let bindings_api: Api<CachedBinding> = Api::all(client.clone());
    let binding_writer = reflector::store::Writer::default();
    let binding_store: Store<CachedBinding> = binding_writer.as_reader();
    let (bindings_synced_tx, bindings_synced) = watch::channel(false);
    let binding_events = reflector::reflector(
        binding_writer,
        watcher(bindings_api, watch_config.clone()).modify(trim_for_cache),
    )
    .default_backoff()
    .inspect(move |event| {
        if matches!(event, Ok(watcher::Event::InitDone)) {
            let _ = bindings_synced_tx.send(true);
        }
    })
    .applied_objects();
    let controller = Controller::for_stream_with(binding_events, binding_store.clone(), ())
        .reconcile_all_on(became_leader(leader.clone()))
        .graceful_shutdown_on(shutdown.clone());

    let qualifier_writer = reflector::store::Writer::default();
    let qualifier_store: Store<CachedQualifier> = qualifier_writer.as_reader();
    let qualifiers_api: Api<CachedQualifier> = Api::all(client.clone());
    let (qualifiers_synced_tx, qualifiers_synced) = watch::channel(false);
    let qualifier_events = reflector::reflector(
        qualifier_writer,
        watcher(qualifiers_api, watch_config).modify(trim_for_cache),
    )
    .default_backoff()
    .inspect(move |event| {
        if matches!(event, Ok(watcher::Event::InitDone)) {
            let _ = qualifiers_synced_tx.send(true);
        }
    });

    let writer = StatusWriter::new(
        client.clone(),
        binding_store.clone(),
        qualifier_store.clone(),
        leader.clone(),
        metrics.clone(),
    );
    let worker = tokio::spawn(writer.run(queue_rx));

    let (synced_tx, synced) = watch::channel(false);
    {
        let ready = ready.clone();
        let (mut bindings, mut qualifiers) = (bindings_synced, qualifiers_synced);
        tokio::spawn(async move {
            if bindings.wait_for(|s| *s).await.is_ok() && qualifiers.wait_for(|s| *s).await.is_ok()
            {
                ready.store(true, Ordering::Release);
                let _ = synced_tx.send(true);
                info!("caches synced; ready");
            }
        });
    }
    let leadership_log = tokio::spawn(log_leadership(leader.clone(), metrics.clone()));

    let qualifier_loop = tokio::spawn(run_qualifiers(
        qualifier_events,
        qualifier_store,
        synced,
        ctx.clone(),
        leader.clone(),
        shutdown.clone(),
    ));

    controller
        .run(reconcile_binding, binding_error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(%error, "binding controller");
            }
        })
        .await;

    // Graceful shutdown: stop the loops, then release the lease so the standby takes over
    // at once instead of after the lease expires.
    qualifier_loop.abort();
    worker.abort();
    leadership_log.abort();
    let _ = tokio::join!(qualifier_loop, worker, leadership_log);
    leadership.stop().await;
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => error!(%error, "metrics server"),
        Err(error) => error!(%error, "metrics server task"),
    }
    Ok(())
}

/// Re-evaluates every qualifier on any change to the set (deletions included), on each resync
/// tick, and when this replica becomes leader.
async fn run_qualifiers(
    events: impl futures::Stream<Item = Result<watcher::Event<CachedQualifier>, watcher::Error>>
    + Send
    + 'static,
    store: Store<CachedQualifier>,
    mut synced: watch::Receiver<bool>,
    ctx: Arc<Context>,
    leader: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()> + Send,
) {
    // The watch stream feeds the cache on its own task; a burst of events (the initial list,
    // a bulk apply) leaves one pending notification, so it is evaluated once.
    let changed = Arc::new(tokio::sync::Notify::new());
    let feeder = {
        let changed = changed.clone();
        tokio::spawn(events.for_each(move |event| {
            if let Err(error) = event {
                warn!(%error, "route qualifier watch");
            } else {
                changed.notify_one();
            }
            futures::future::ready(())
        }))
    };
    let changes = futures::stream::unfold(changed, |changed| async move {
        changed.notified().await;
        Some(((), changed))
    });
    let ticks = futures::stream::unfold(
        tokio::time::interval(ctx.resync),
        |mut interval| async move {
            interval.tick().await;
            Some(((), interval))
        },
    );
    let triggers = futures::stream::select(
        futures::stream::select(changes, ticks),
        became_leader(leader),
    );
    let mut triggers = std::pin::pin!(triggers.take_until(shutdown));
    while triggers.next().await.is_some() {
        if synced.wait_for(|synced| *synced).await.is_err() {
            break;
        }
        if let Err(error) = reconcile_qualifiers(&store.state(), &ctx).await {
            warn!(%error, "qualifier reconcile");
        }
    }
    feeder.abort();
}

/// Drops what the controller never reads before an object enters the cache: managed fields
/// and the last-applied annotation are often larger than the spec itself.
fn trim_for_cache<K: Resource>(object: &mut K) {
    let metadata = object.meta_mut();
    metadata.managed_fields = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Yields once each time this replica becomes leader, so every object is evaluated by the
/// new writer.
fn became_leader(leader: watch::Receiver<bool>) -> impl futures::Stream<Item = ()> + Send {
    futures::stream::unfold(leader, |mut leader| async move {
        loop {
            leader.changed().await.ok()?;
            if *leader.borrow_and_update() {
                return Some(((), leader));
            }
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

async fn client(kubeconfig: Option<PathBuf>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(&path)
                .with_context(|| format!("kubeconfig {}", path.display()))?;
            KubeConfig::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?
        }
        None => KubeConfig::infer()
            .await
            .context("no kubeconfig given and none could be inferred")?,
    };
    Client::try_from(config).context("building the Kubernetes client")
}

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
    format!("{host}-{}", std::process::id())
}

fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("log filter {filter:?}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
    Ok(())
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
