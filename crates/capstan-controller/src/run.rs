//! The controller's wiring: settings → client, leadership, caches, reconcilers, the status
//! queue and its writer, the admin server — run until SIGTERM, then handed over.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_compose::{Composer, Limits, SetupError};
use capstan_process::{AdminError, LoggingError, Readiness, Shutdown, init_logging, serve_admin};
use futures::{FutureExt, StreamExt};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use kube::{Client, Config as KubeConfig, Resource, ResourceExt};
use prometheus_client::registry::Registry;
use thiserror::Error;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::cached::{CachedBinding, CachedQualifier};
use crate::config::Config;
use crate::leader::{Leadership, LeaseSettings, became_leader};
use crate::metrics::Metrics;
use crate::probe::{ProbeSettings, Prober};
use crate::qualifiers::run_qualifiers;
use crate::reconcile::{Context, binding_error_policy, reconcile_binding};
use crate::status_queue::status_queue;
use crate::writer::{FIELD_MANAGER, StatusWriter};

/// Why the controller could not start or stopped with an error.
#[derive(Debug, Error)]
pub enum RunError {
    /// The log settings.
    #[error(transparent)]
    Logging(#[from] LoggingError),
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
}

impl Config {
    /// Parses the command line and environment, then runs the controller.
    pub async fn parse_and_run() -> Result<(), RunError> {
        run(<Self as clap::Parser>::parse()).await
    }
}

/// Runs the controller until SIGTERM or Ctrl-C, then releases its lease.
pub async fn run(config: Config) -> Result<(), RunError> {
    let Config {
        kubeconfig,
        listen_address,
        status_queue_capacity,
        status_writes_in_flight,
        reconcile_concurrency,
        resync_seconds,
        write_mode,
        lease_name,
        lease_namespace,
        lease_duration_seconds,
        lease_grace_seconds,
        identity,
        probe_interval_seconds,
        probe_concurrency,
        probe_deadline_seconds,
        mcp_endpoint_hosts,
        fetch_hosts,
        log,
        log_format,
    } = config;
    init_logging(&log, log_format)?;

    let client = client(kubeconfig).await?;
    let identity = identity.unwrap_or_else(default_identity);
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = Readiness::new();
    let shutdown = Shutdown::on_signal();
    let stop = shutdown.clone().requested().boxed().shared();
    let admin = tokio::spawn(
        serve_admin(
            listen_address,
            registry,
            readiness.clone(),
            shutdown.clone(),
        )
        .await?,
    );

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
    );
    let leader = leadership.leader();
    info!(%identity, lease = %format!("{lease_namespace}/{lease_name}"), "leader election started");

    // The Composed probe: the sidecar's composer, guards and flag names.
    let (probe, probed) = if probe_interval_seconds == 0 {
        info!("Composed probes are off (--probe-interval-seconds 0)");
        (None, None)
    } else {
        capstan_compose::install_crypto_provider();
        let composer =
            Composer::from_allow_lists(&mcp_endpoint_hosts, &fetch_hosts, Limits::default())?;
        let (prober, probed) = Prober::new(
            composer,
            ProbeSettings {
                interval: Duration::from_secs(probe_interval_seconds),
                concurrency: probe_concurrency,
                deadline: Duration::from_secs(probe_deadline_seconds),
            },
            metrics.clone(),
        );
        (Some(prober), Some(probed))
    };

    let (queue, queue_rx) = status_queue(status_queue_capacity);
    let ctx = Arc::new(Context {
        client: client.clone(),
        queue,
        metrics: metrics.clone(),
        mode: write_mode,
        resync: Duration::from_secs(resync_seconds),
        probe: probe.clone(),
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
    let forget_deleted = probe.clone();
    let binding_events = reflector::reflector(
        binding_writer,
        watcher(bindings_api, watch_config.clone()).modify(trim_for_cache),
    )
    .default_backoff()
    .inspect(move |event| match event {
        Ok(watcher::Event::InitDone) => {
            let _ = bindings_synced_tx.send(true);
        }
        // A deleted binding frees the names it held at once (no reconcile follows a delete).
        Ok(watcher::Event::Delete(binding)) => {
            if let Some(prober) = &forget_deleted {
                prober.forget(&binding.name_any());
            }
        }
        _ => {}
    })
    .applied_objects();
    // A probe's finding reconciles the bindings whose status it may change.
    let probed = match probed {
        Some(rx) => futures::stream::unfold(rx, |mut rx| async move {
            let name = rx.recv().await?;
            Some((ObjectRef::<CachedBinding>::new(&name), rx))
        })
        .boxed(),
        None => futures::stream::pending().boxed(),
    };
    let controller = Controller::for_stream_with(binding_events, binding_store.clone(), ())
        .with_config(controller::Config::default().concurrency(reconcile_concurrency))
        .reconcile_all_on(became_leader(leader.clone()))
        .reconcile_on(probed)
        .graceful_shutdown_on(stop.clone());
    // A backstop for deletions a re-list hid from the watch: findings of bindings that are
    // gone free their names.
    let forgetter = probe.map(|prober| {
        let store = binding_store.clone();
        let every = Duration::from_secs(resync_seconds.max(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                prober.forget_missing(|name| {
                    store.get(&ObjectRef::<CachedBinding>::new(name)).is_some()
                });
            }
        })
    });

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
        status_writes_in_flight,
    );
    let worker = tokio::spawn(writer.run(queue_rx));

    let (synced_tx, synced) = watch::channel(false);
    {
        let readiness = readiness.clone();
        let (mut bindings, mut qualifiers) = (bindings_synced, qualifiers_synced);
        tokio::spawn(async move {
            if bindings.wait_for(|s| *s).await.is_ok() && qualifiers.wait_for(|s| *s).await.is_ok()
            {
                readiness.set_ready();
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
        leader,
        stop,
    ));

    controller
        .run(reconcile_binding, binding_error_policy, ctx)
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
    if let Some(forgetter) = forgetter {
        forgetter.abort();
    }
    let _ = tokio::join!(qualifier_loop, worker, leadership_log);
    leadership.stop().await;
    match admin.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(error.into()),
        Err(error) => {
            warn!(%error, "admin server task");
            Ok(())
        }
    }
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

/// Logs leadership changes and keeps the `leader` gauge current.
async fn log_leadership(mut leader: watch::Receiver<bool>, metrics: Metrics) {
    while leader.changed().await.is_ok() {
        let is_leader = *leader.borrow_and_update();
        metrics.leader.set(i64::from(is_leader));
        info!(is_leader, "leadership changed");
    }
}

async fn client(kubeconfig: Option<PathBuf>) -> Result<Client, RunError> {
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
    Client::try_from(config).map_err(|e| error(format!("building the client: {e}")))
}

/// The pod name (POD_NAME) or host name, with the process id: unique per replica.
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
