//! The controller's settings: one clap struct, every flag with an environment variable, every
//! tunable default a named constant with the reason for its value.

use std::net::SocketAddr;
use std::path::PathBuf;

use capstan_process::LogFormat;

/// Objects that may wait for a status write at once. 16,384: above the 5,000 bindings the
/// benchmark runs, so a full resync of a large cluster never drops.
pub const DEFAULT_STATUS_QUEUE_CAPACITY: usize = 16_384;

/// Default of `--status-writes-in-flight`: where the apiserver's own status-patch rate levels
/// off (32 in flight patch within 10% of the rate of 128), while leaving room for everyone
/// else's requests.
pub const DEFAULT_STATUS_WRITES_IN_FLIGHT: usize = 32;

/// Default of `--reconcile-concurrency`. A reconcile is CPU work (validation) and a hand-off to
/// the status queue, so more than a few per core buys no speed, and each one waiting to run
/// is a spawned task: unbounded, the initial sync of 50,000 bindings holds 160 MB of them.
pub const DEFAULT_RECONCILE_CONCURRENCY: u16 = 16;

/// Seconds between full reconciles. 300 s: the backstop for anything missed costs one pass
/// over the cache every five minutes, and writes nothing when nothing changed.
pub const DEFAULT_RESYNC_SECONDS: u64 = 300;

/// Seconds a lease stays valid after a renewal. 15 s: client-go's leader-election default; a
/// killed leader is replaced within it and two retry periods, a gracefully stopped one at once.
pub const DEFAULT_LEASE_DURATION_SECONDS: u64 = 15;

/// Seconds between a leader that cannot renew stopping its writes and a standby taking over.
/// 5 s: client-go's margin (its renew deadline is 10 s of 15), room for a slow write to finish
/// and for clocks that do not run at quite the same rate.
pub const DEFAULT_LEASE_GRACE_SECONDS: u64 = 5;

/// Capstan's controller. Every flag can also be set from the environment variable shown.
#[derive(Debug, clap::Parser)]
#[command(name = "capstan-controller", version, about)]
pub struct Config {
    /// Kubeconfig file; without one, the in-cluster service account (or the default
    /// kubeconfig) is used.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Address serving /metrics, /healthz and /readyz.
    #[arg(long, env = "CAPSTAN_LISTEN_ADDRESS", default_value = "0.0.0.0:8080")]
    pub listen_address: SocketAddr,

    /// Objects that may wait for a status write at once. An update that finds the queue full is
    /// dropped, its object's name kept, and the object reconciled again when the queue is half
    /// empty; sized above the number of objects, a full resync never drops.
    #[arg(long, env = "CAPSTAN_STATUS_QUEUE_CAPACITY", default_value_t = DEFAULT_STATUS_QUEUE_CAPACITY, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub status_queue_capacity: usize,

    /// Status writes the controller keeps in flight at once (never two for one object).
    #[arg(long, env = "CAPSTAN_STATUS_WRITES_IN_FLIGHT", default_value_t = DEFAULT_STATUS_WRITES_IN_FLIGHT)]
    pub status_writes_in_flight: usize,

    /// Reconciles running at once; objects waiting for one are kept as names in the
    /// scheduler.
    #[arg(long, env = "CAPSTAN_RECONCILE_CONCURRENCY", default_value_t = DEFAULT_RECONCILE_CONCURRENCY, value_parser = clap::value_parser!(u16).range(1..))]
    pub reconcile_concurrency: u16,

    /// Seconds between full reconciles of every object, spread evenly over them: the backstop
    /// for anything missed.
    #[arg(long, env = "CAPSTAN_RESYNC_SECONDS", default_value_t = DEFAULT_RESYNC_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub resync_seconds: u64,

    /// Name of the coordination.k8s.io Lease used for leader election.
    #[arg(long, env = "CAPSTAN_LEASE_NAME", default_value = "capstan-controller")]
    pub lease_name: String,

    /// Namespace of the Lease (usually the controller's own).
    #[arg(
        long,
        env = "CAPSTAN_LEASE_NAMESPACE",
        default_value = "capstan-system"
    )]
    pub lease_namespace: String,

    /// Seconds a lease stays valid after its last renewal: a standby takes over once it has
    /// seen the Lease unchanged this long, on its own clock.
    #[arg(long, env = "CAPSTAN_LEASE_DURATION_SECONDS", default_value_t = DEFAULT_LEASE_DURATION_SECONDS)]
    pub lease_duration_seconds: u64,

    /// Seconds of margin: a leader that has not renewed for the duration less this stops
    /// writing, this long before a standby may take over. At least 1, and less than the
    /// duration.
    #[arg(long, env = "CAPSTAN_LEASE_GRACE_SECONDS", default_value_t = DEFAULT_LEASE_GRACE_SECONDS)]
    pub lease_grace_seconds: u64,

    /// This replica's identity in the Lease, at most 103 characters of printable ASCII (its
    /// field manager's name is built from it); defaults to the pod name (POD_NAME) or the host name,
    /// with the process id and a random suffix (a restarted container is a new candidate).
    #[arg(long, env = "CAPSTAN_IDENTITY")]
    pub identity: Option<String>,

    /// The Composed probe's flags.
    #[command(flatten)]
    pub probe: ProbeConfig,

    /// Log filter, e.g. `info` or `capstan_controller=debug,kube=info`.
    #[arg(long, env = "CAPSTAN_LOG", default_value = "info")]
    pub log: String,

    /// Log format.
    #[arg(long, env = "CAPSTAN_LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
}

/// The Composed probe's flags: how often and how many, and the composer's allow-lists and
/// timeouts as the sidecar has them.
#[derive(Debug, clap::Args)]
pub struct ProbeConfig {
    /// Seconds between Composed probes of one binding (plus up to 10% jitter); 0 turns probing
    /// off (`Composed=Unknown`, NotProbed). A spec change is probed at once.
    #[arg(long = "probe-interval-seconds", env = "CAPSTAN_PROBE_INTERVAL_SECONDS", default_value_t = crate::probe::DEFAULT_PROBE_INTERVAL_SECONDS)]
    pub interval_seconds: u64,

    /// Probes running at once.
    #[arg(long = "probe-concurrency", env = "CAPSTAN_PROBE_CONCURRENCY", default_value_t = crate::probe::DEFAULT_PROBE_CONCURRENCY)]
    pub concurrency: usize,

    /// Seconds one probe may take before it is cut (and reads as degraded).
    #[arg(long = "probe-deadline-seconds", env = "CAPSTAN_PROBE_DEADLINE_SECONDS", default_value_t = crate::probe::DEFAULT_PROBE_DEADLINE_SECONDS)]
    pub deadline_seconds: u64,

    /// Hosts MCP endpoints may name, as the sidecar's setting of the same name: `host`,
    /// `*.suffix`, IPs (each with an optional `:port`) and CIDRs, comma-separated.
    #[arg(long, env = "CAPABILITY_MCP_ENDPOINT_HOSTS", default_value = "")]
    pub mcp_endpoint_hosts: String,

    /// Hosts knowledge sources may be fetched from, as the sidecar's setting of the same name.
    #[arg(long, env = "CAPABILITY_FETCH_HOSTS", default_value = "")]
    pub fetch_hosts: String,

    /// The upstream timeouts, the sidecar's flags of the same names.
    #[command(flatten)]
    pub timeouts: capstan_compose::limits::UpstreamTimeouts,

    /// How the probe authenticates to endpoints with an `auth` block, the sidecar's flags of
    /// the same names: with the controller's own workload identity and the Secrets it may
    /// read; a token exchange is never made (there is no caller), and the condition says so.
    #[command(flatten)]
    pub credentials: capstan_compose::credentials::settings::CredentialSettings,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    /// `docs/configuration.md` shows these flags as they are; `make generate` (which sets
    /// `CAPSTAN_UPDATE_DOCS`) rewrites the section.
    #[test]
    fn the_configuration_reference_should_match_the_flags() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
        if let Err(stale) =
            capstan_process::check_reference(&path, "capstan-controller", &Config::command())
        {
            panic!("{stale}");
        }
    }

    /// A grace the lease cannot renew with stops the controller before it reads its kubeconfig
    /// or serves anything, naming both flags.
    #[tokio::test]
    async fn a_lease_grace_not_below_its_duration_should_stop_the_controller_at_start() {
        use clap::Parser as _;
        let config = Config::try_parse_from([
            "capstan-controller",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--lease-duration-seconds",
            "15",
            "--lease-grace-seconds",
            "15",
        ]);
        let Ok(config) = config else {
            panic!("{config:?}");
        };
        let Err(refused) = crate::run(config).await else {
            panic!("the controller ran");
        };
        let message = refused.to_string();
        assert!(
            message.contains("--lease-grace-seconds (15) must be at least 1 and less than")
                && message.contains("--lease-duration-seconds (15)"),
            "{message}"
        );
    }
}
