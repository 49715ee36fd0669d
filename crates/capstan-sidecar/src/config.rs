//! The sidecar's settings: one clap struct of groups, one group per start-up step, every flag
//! with an environment variable, every default a named constant shared with the code that uses it.

use std::net::SocketAddr;
use std::path::PathBuf;

use capstan_api::wire::{DEFAULT_SOCKET, PROJECT_HEADER};
use capstan_process::LogFormat;

use crate::caller::authorization::ToolAuthorizationMode;
use crate::caller::check::CallerCheckMode;
use crate::observe::audit::AuditNames;

/// Where capability documents come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceKind {
    /// A local JSON or YAML file (CAPABILITY_DOCS_FIXTURE).
    Fixture,
    /// The capability-provider API (CAPABILITY_PROVIDER_URL).
    Http,
    /// CapabilityBindings on the project's control plane, cached per project.
    Crd,
}

/// Which base platform tools are composed for a caller with a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BaseToolsMode {
    /// The read tools, and the change path (validate, plan, apply).
    Auto,
    /// The read tools only: nothing the assistant does can change the project.
    ReadOnly,
    /// None.
    Off,
}

/// Capstan's composer sidecar: serves a project's composed tool set to the assistant beside it,
/// over a Unix socket (MCP Streamable HTTP at `http://localhost/mcp`). Every flag can also be
/// set from the environment variable shown.
//
// The flags come in groups, one for each start-up step (`run.rs`). Each step takes its group
// by value and destructures it field by field, so a flag that no step reads does not build:
// the binding is unused, and warnings are denied. (Not a doc comment: clap would print it.)
#[derive(Debug, clap::Parser)]
#[command(name = "capstan-sidecar", version, about)]
pub struct Config {
    /// Where and how the sidecar serves: its socket, threads and shutdown.
    #[command(flatten, next_help_heading = "Serving")]
    pub serving: ServeSettings,
    /// Where capability documents come from, and how often live sessions re-read them.
    #[command(flatten, next_help_heading = "Capability documents")]
    pub documents: DocumentSettings,
    /// How a caller is checked against the project it names.
    #[command(flatten, next_help_heading = "Callers")]
    pub caller_check: CallerCheckSettings,
    /// The base platform tools and the change path's plan tokens.
    #[command(flatten, next_help_heading = "Base platform tools")]
    pub base_tools: BaseToolSettings,
    /// What the composer may dial and fetch, and its limits.
    #[command(flatten, next_help_heading = "Providers")]
    pub upstream: UpstreamSettings,
    /// How long sessions and tasks live, and how many may be open.
    #[command(flatten, next_help_heading = "Sessions and limits")]
    pub sessions: SessionSettings,
    /// How many calls each provider's MCP server takes: the platform's defaults and ceilings.
    #[command(flatten, next_help_heading = "Call limits")]
    pub call_limits: CallLimitSettings,
    /// When callers may search the tools (`find_tools`).
    #[command(flatten, next_help_heading = "Tool search")]
    pub tool_search: ToolSearchSettings,
    /// Who the sidecar is to providers: where Secrets are read, its workload identity.
    #[command(flatten, next_help_heading = "Upstream credentials")]
    pub credentials: capstan_compose::credentials::settings::CredentialSettings,
    /// Where a caller's token may be exchanged.
    #[command(flatten, next_help_heading = "Upstream credentials")]
    pub token_exchange: TokenExchangeSettings,
    /// Logs, metrics and the metering sink.
    #[command(flatten, next_help_heading = "Observability")]
    pub observability: ObservabilitySettings,
}

/// Where and how the sidecar serves: its socket, threads and shutdown.
#[derive(Debug, clap::Args)]
pub struct ServeSettings {
    /// The Unix socket to serve on (mode 0660; a stale socket is replaced).
    #[arg(long, env = "CAPSTAN_SOCKET", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,

    /// Threads that run the sidecar's work: 1 (the default) runs everything on one thread, with
    /// no hand-offs between threads; 0 one per CPU the process may use; more only for a sidecar
    /// given more than one CPU that serves more calls than one core carries (docs/performance.md
    /// "One thread by default").
    #[arg(long, env = "CAPSTAN_WORKER_THREADS", default_value_t = DEFAULT_WORKER_THREADS)]
    pub worker_threads: usize,

    /// Seconds in-flight requests may run after SIGTERM (no new connection is accepted
    /// meanwhile); then every session's upstream sessions are closed and the sidecar exits.
    /// Keep it below the pod's terminationGracePeriodSeconds (30 by default).
    #[arg(long, env = "CAPSTAN_SHUTDOWN_GRACE_SECONDS", default_value_t = DEFAULT_SHUTDOWN_GRACE_SECONDS)]
    pub shutdown_grace_seconds: u64,
}

/// Where capability documents come from, and how often live sessions re-read them.
#[derive(Debug, clap::Args)]
pub struct DocumentSettings {
    /// Where capability documents come from.
    #[arg(long, env = "CAPABILITY_SOURCE", value_enum)]
    pub source: SourceKind,

    /// The fixture file (source `fixture`).
    #[arg(long, env = "CAPABILITY_DOCS_FIXTURE")]
    pub docs_fixture: Option<PathBuf>,

    /// The capability-provider API base URL (source `http`).
    #[arg(long, env = "CAPABILITY_PROVIDER_URL")]
    pub provider_url: Option<String>,

    /// Largest capability-provider API answer read, in bytes (source `http`); a longer one
    /// reads as no capabilities, logged with its size.
    #[arg(long, env = "CAPABILITY_PROVIDER_MAX_BYTES", default_value_t = capstan_compose::source::DEFAULT_PROVIDER_MAX_BODY)]
    pub provider_max_bytes: usize,

    /// The project's control-plane URL, with `{project}` (source `crd`); without one, the
    /// cluster of the sidecar's own credential.
    #[arg(long, env = "CAPABILITY_CRD_URL_TEMPLATE")]
    pub crd_url_template: Option<String>,

    /// Kubeconfig naming the project's control plane (its URL and CA; its credential is the
    /// crd source's). Without one: the in-cluster service account, when running in a pod.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Seconds a project's bindings are cached (source `crd` with a URL template; without one
    /// they are watched).
    #[arg(long, env = "CAPABILITY_CRD_CACHE_TTL_SECONDS", default_value_t = capstan_compose::source::DEFAULT_TTL.as_secs())]
    pub crd_cache_ttl_seconds: u64,

    /// Projects cached at most (source `crd` with a URL template).
    #[arg(long, env = "CAPABILITY_CRD_CACHE_CAPACITY", default_value_t = capstan_compose::source::DEFAULT_CAPACITY)]
    pub crd_cache_capacity: usize,

    /// Seconds between re-reads of the documents of projects with live sessions, for sources
    /// that do not report changes (fixture, http, crd with a URL template): a binding added,
    /// changed or removed reaches live sessions within this time, as
    /// `notifications/tools/list_changed`. 0: never (sessions keep what they composed). The crd
    /// source without a URL template is watched and reports changes as they happen.
    #[arg(long, env = "CAPSTAN_REFRESH_SECONDS", default_value_t = DEFAULT_REFRESH_SECONDS)]
    pub refresh_seconds: u64,
}

/// How a caller is checked against the project it names.
#[derive(Debug, clap::Args)]
pub struct CallerCheckSettings {
    /// How the caller is checked against the project it names: `sar` asks the project's
    /// control plane, with the caller's token, whether the caller may list
    /// CapabilityBindings there (a token is then required); `none` trusts whoever can reach
    /// the socket. Default: `sar` with the crd source, `none` with fixture and http.
    #[arg(long, env = "CAPSTAN_CALLER_CHECK", value_enum)]
    pub caller_check: Option<CallerCheckMode>,

    /// Seconds an answer of the caller check is reused (`sar`). A request after it, in a live
    /// session too, asks the project's plane again, so a revoked caller is refused — and its
    /// open session ended — within this time.
    #[arg(long, env = "CAPSTAN_CALLER_CHECK_TTL_SECONDS", default_value_t = crate::caller::check::CALLER_CHECK_TTL.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub caller_check_ttl_seconds: u64,

    /// The request header naming the caller's project.
    #[arg(long, env = "CAPSTAN_PROJECT_HEADER", default_value = PROJECT_HEADER)]
    pub project_header: String,

    /// Whether each caller's tools, prompts and resources are decided by the project's RBAC:
    /// `off` gives every admitted caller everything the project composes; `rbac` gives each
    /// caller what it may `use` (`tools`, `prompts`, `capabilitybindings` in
    /// capabilities.assistant.miloapis.com), asked with the caller's own token and cached for
    /// the caller check's TTL; needs the caller check `sar` (docs/authorization.md). Default
    /// `off`, so an upgrade loses no caller its tools.
    #[arg(long, env = "CAPSTAN_TOOL_AUTHORIZATION", value_enum, default_value_t)]
    pub tool_authorization: ToolAuthorizationMode,
}

/// The base platform tools and the change path's plan tokens.
#[derive(Debug, clap::Args)]
pub struct BaseToolSettings {
    /// Which base platform tools a caller with a token gets: `auto` (read tools and the change
    /// path), `read-only`, or `off`. They are composed only when a control plane is known
    /// (the crd source, a kubeconfig, or in-cluster).
    #[arg(long, env = "CAPSTAN_BASE_TOOLS", value_enum, default_value = "auto")]
    pub base_tools: BaseToolsMode,

    /// The key that signs plan tokens (at least 32 bytes, e.g. `openssl rand -base64 32`,
    /// from a Secret). Without it or a key file, a key is drawn per process: tokens then die
    /// with the process and are not accepted by another replica.
    #[arg(long, env = "PLAN_TOKEN_KEY", hide_env_values = true)]
    pub plan_token_key: Option<String>,

    /// A key-set file for rotation, `{"keys": [{"id": "…", "secret": "…"}, …]}`, newest
    /// first: the first signs, every one verifies.
    #[arg(long, env = "PLAN_TOKEN_KEYS_FILE")]
    pub plan_token_keys_file: Option<PathBuf>,

    /// A file that keeps the ledger of applied plan tokens (its id and every token applied,
    /// until each expires), so a sidecar restarted with the same key and file still applies the
    /// plans made before — each once. Put it on a volume of the sidecar's own that outlives the
    /// container (an emptyDir); without it the ledger lives in memory and a restart refuses
    /// every earlier plan.
    #[arg(long, env = "CAPSTAN_PLAN_LEDGER")]
    pub plan_ledger: Option<PathBuf>,

    /// Seconds a plan token stays valid.
    #[arg(long, env = "CAPSTAN_PLAN_TOKEN_TTL_SECONDS", default_value_t = capstan_platform::DEFAULT_PLAN_TTL.as_secs())]
    pub plan_token_ttl_seconds: u64,
}

/// What the composer may dial and fetch, and its limits.
#[derive(Debug, clap::Args)]
pub struct UpstreamSettings {
    /// Hosts MCP endpoints may name: `host`, `*.suffix`, IPs (each with an optional `:port`)
    /// and CIDRs, comma-separated. Empty admits none.
    #[arg(long, env = "CAPABILITY_MCP_ENDPOINT_HOSTS", default_value = "")]
    pub mcp_endpoint_hosts: String,

    /// Hosts knowledge sources and skill bodies may be fetched from (same form).
    #[arg(long, env = "CAPABILITY_FETCH_HOSTS", default_value = "")]
    pub fetch_hosts: String,

    /// Seconds one forwarded tool call may take, not counting the time its provider's
    /// questions wait for the caller's answers.
    #[arg(long, env = "CAPSTAN_CALL_TIMEOUT_SECONDS", default_value_t = capstan_compose::limits::DEFAULT_CALL_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub call_timeout_seconds: u64,

    /// Seconds a provider's question (elicitation, sampling, roots) asked during a call waits
    /// for the caller's answer; unanswered by then, the call is cancelled at the provider and
    /// fails as `unanswered`. The caller's client ends the wait sooner by cancelling the call.
    #[arg(long, env = "CAPSTAN_QUESTION_TIMEOUT_SECONDS", default_value_t = capstan_compose::limits::DEFAULT_QUESTION_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub question_timeout_seconds: u64,

    /// The upstream timeouts the controller's Composed probe shares.
    #[command(flatten)]
    pub timeouts: capstan_compose::limits::UpstreamTimeouts,

    /// Bytes kept of one knowledge source.
    #[arg(long, env = "CAPSTAN_KNOWLEDGE_SOURCE_CAP", default_value_t = capstan_compose::limits::DEFAULT_KNOWLEDGE_SOURCE_CAP)]
    pub knowledge_source_cap: usize,

    /// Bytes of knowledge in the instructions altogether.
    #[arg(long, env = "CAPSTAN_KNOWLEDGE_TOTAL_CAP", default_value_t = capstan_compose::limits::DEFAULT_KNOWLEDGE_TOTAL_CAP)]
    pub knowledge_total_cap: usize,

    /// Bytes kept of one skill body.
    #[arg(long, env = "CAPSTAN_SKILL_CAP", default_value_t = capstan_compose::limits::DEFAULT_SKILL_CAP)]
    pub skill_cap: usize,
}

/// How long sessions and tasks live, and how many may be open.
#[derive(Debug, clap::Args)]
pub struct SessionSettings {
    /// Seconds without a request after which a session ends and its upstreams close.
    #[arg(long, env = "CAPSTAN_SESSION_IDLE_SECONDS", default_value_t = DEFAULT_SESSION_IDLE_SECONDS)]
    pub session_idle_seconds: u64,

    /// Seconds a task without a session (a 2026-07-28 caller, keyed by project and token)
    /// lives without a request; with a `subscriptions/listen` stream open it lives up to
    /// `--session-idle-seconds` without one, as a session does. The next request after it
    /// composes a new task (new upstream sessions).
    #[arg(long, env = "CAPSTAN_SESSIONLESS_TTL_SECONDS", default_value_t = crate::tasks::DEFAULT_SESSIONLESS_TTL.as_secs())]
    pub sessionless_ttl_seconds: u64,

    /// Places open at most: every session, task without a session (2026-07-28) and open
    /// stream (a session's GET stream, a `subscriptions/listen`) takes one. Beyond it a new one
    /// is answered 503 with Retry-After.
    #[arg(long, env = "CAPSTAN_MAX_SESSIONS", default_value_t = crate::caller::admission::DEFAULT_MAX_PLACES)]
    pub max_sessions: usize,

    /// Places one caller (one bearer token, whatever projects it names) may hold at once;
    /// beyond it, 429 with Retry-After.
    #[arg(long, env = "CAPSTAN_MAX_SESSIONS_PER_CALLER", default_value_t = crate::caller::admission::DEFAULT_MAX_PLACES_PER_CALLER)]
    pub max_sessions_per_caller: usize,

    /// Places one project's callers may hold together at once; beyond it, 429 with
    /// Retry-After.
    #[arg(long, env = "CAPSTAN_MAX_SESSIONS_PER_PROJECT", default_value_t = crate::caller::admission::DEFAULT_MAX_PLACES_PER_PROJECT)]
    pub max_sessions_per_project: usize,

    /// Streams one session or task may hold open at once; beyond it, 429.
    #[arg(long, env = "CAPSTAN_MAX_STREAMS_PER_TASK", default_value_t = crate::caller::admission::DEFAULT_MAX_STREAMS_PER_TASK)]
    pub max_streams_per_task: usize,
}

/// When callers may search the tools (docs/tool-search.md).
#[derive(Debug, clap::Args)]
pub struct ToolSearchSettings {
    /// `find_tools` is offered to a caller who may call at least this many tools (0: to every
    /// caller). The platform's choice, not a project's: below it a list is short enough to read
    /// whole, and the search tool would be one more to choose among.
    #[arg(long, env = "CAPSTAN_TOOL_SEARCH_MIN_TOOLS", default_value_t = crate::task::DEFAULT_MIN_TOOLS)]
    pub tool_search_min_tools: usize,

    /// Above this many tools a caller may call, `tools/list` shows only the built-in tools, the
    /// `cap.*` tools and `find_tools`, and the instructions say how to search; any tool the
    /// caller may call stays callable by its name (0: always list every tool). The default
    /// keeps a list under about 10,000 tokens (docs/tool-search.md "Progressive disclosure").
    #[arg(long, env = "CAPSTAN_TOOL_SEARCH_THRESHOLD", default_value_t = crate::task::DEFAULT_THRESHOLD)]
    pub tool_search_threshold: usize,

    /// Searches (`find_tools`) one caller may run in a minute; beyond it, `rate_limited` with
    /// the time to wait (0: no limit).
    #[arg(long, env = "CAPSTAN_TOOL_SEARCH_CALLS_PER_MINUTE", default_value_t = crate::task::DEFAULT_CALLS_PER_MINUTE)]
    pub tool_search_calls_per_minute: u32,

    /// Where capability-gap reports go (`report_capability_gap`, offered when a binding names a
    /// `reportingProject`): one JSON line each — `off`, `stdout`, `stderr`, or a file
    /// (appended), as the metering sink. The default file is in the sidecar's state volume;
    /// where it cannot be opened, reports are off (logged). Another setting that cannot be
    /// opened stops the sidecar.
    #[arg(long, env = "CAPSTAN_GAP_SINK", default_value = DEFAULT_GAP_SINK)]
    pub gap_sink: String,

    /// Seconds within which one need of one project is reported once, whoever reports it.
    #[arg(long, env = "CAPSTAN_GAP_WINDOW_SECONDS", default_value_t = 86_400)]
    pub gap_window_seconds: u64,

    /// Capability-gap reports one caller may file in an hour; beyond it, `rate_limited`.
    #[arg(long, env = "CAPSTAN_GAP_REPORTS_PER_HOUR", default_value_t = 10)]
    pub gap_reports_per_hour: u32,
}

/// Where capability-gap reports go unless set: the sidecar's state volume (the chart mounts
/// one at /var/lib/capstan).
pub const DEFAULT_GAP_SINK: &str = "/var/lib/capstan/capability-gaps.jsonl";

/// Where the sidecar may exchange a caller's token (`auth.tokenExchange`,
/// docs/upstream-auth.md).
#[derive(Debug, clap::Args)]
pub struct TokenExchangeSettings {
    /// Hosts a binding's `auth.tokenExchange.tokenEndpoint` may name (the form of the endpoint
    /// allow-lists; each address a name resolves to is checked as for MCP endpoints). The
    /// caller's token is sent there. Empty admits none.
    #[arg(long, env = "CAPSTAN_TOKEN_ENDPOINT_HOSTS", default_value = "")]
    pub token_endpoint_hosts: String,
}

/// How many calls each provider's MCP server takes from this sidecar (docs/limits.md): a
/// binding declares `limits` per server; these fill what it omits and cap what it sets. Each
/// is unset by default (no limit), so an upgrade refuses no call it served before.
#[derive(Debug, clap::Args)]
pub struct CallLimitSettings {
    /// Calls one caller may make to a server in a minute, where its binding declares none.
    #[arg(long, env = "CAPSTAN_DEFAULT_CALLS_PER_MINUTE_PER_CALLER", value_parser = per_minute())]
    pub default_calls_per_minute_per_caller: Option<u32>,

    /// Calls one caller may have running on a server at once, where its binding declares none.
    #[arg(long, env = "CAPSTAN_DEFAULT_CONCURRENT_CALLS_PER_CALLER", value_parser = concurrent())]
    pub default_concurrent_calls_per_caller: Option<u32>,

    /// Calls every caller together may make to a server in a minute, where its binding
    /// declares none.
    #[arg(long, env = "CAPSTAN_DEFAULT_CALLS_PER_MINUTE", value_parser = per_minute())]
    pub default_calls_per_minute: Option<u32>,

    /// The most calls a minute per caller any server gets: a binding declaring more is held
    /// to this (and the sidecar logs it at composition).
    #[arg(long, env = "CAPSTAN_MAX_CALLS_PER_MINUTE_PER_CALLER", value_parser = per_minute())]
    pub max_calls_per_minute_per_caller: Option<u32>,

    /// The most concurrent calls per caller any server gets.
    #[arg(long, env = "CAPSTAN_MAX_CONCURRENT_CALLS_PER_CALLER", value_parser = concurrent())]
    pub max_concurrent_calls_per_caller: Option<u32>,

    /// The most calls a minute from every caller together any server gets.
    #[arg(long, env = "CAPSTAN_MAX_CALLS_PER_MINUTE", value_parser = per_minute())]
    pub max_calls_per_minute: Option<u32>,
}

/// A per-minute limit: the range a binding may declare (capstan-api `binding.rs`).
fn per_minute() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(capstan_api::binding::MAX_CALLS_PER_MINUTE))
}

/// A concurrency limit: the range a binding may declare.
fn concurrent() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(capstan_api::binding::MAX_CONCURRENT_CALLS))
}

/// Logs, metrics and the metering sink.
#[derive(Debug, clap::Args)]
pub struct ObservabilitySettings {
    /// Serve /metrics, /healthz and /readyz on this TCP address (off unless set).
    #[arg(long, env = "CAPSTAN_METRICS_ADDRESS")]
    pub metrics_address: Option<SocketAddr>,

    /// Where tool-invocation events go: `stdout`, `stderr`, `off`, or a file (appended).
    #[arg(long, env = "CAPSTAN_METERING_SINK", default_value = "stdout")]
    pub metering_sink: String,

    /// Where the audit trail goes — one JSON line per `tools/call`, refused or served, naming
    /// the caller, the tool, an argument digest and the decisions (docs/audit.md): `off`,
    /// `stdout`, `stderr`, or a file (appended). Off by default: on, each task asks its
    /// project's plane once who its caller is.
    #[arg(long, env = "CAPSTAN_AUDIT_SINK", default_value = "off")]
    pub audit_sink: String,

    /// How audit lines name the caller: `names` (user name and uid), `digest` (a keyed
    /// digest of them, linking one person's calls without naming them), or `off`.
    #[arg(long, env = "CAPSTAN_AUDIT_NAMES", value_enum, default_value_t)]
    pub audit_names: AuditNames,

    /// Log filter, e.g. `info` or `capstan_sidecar=debug`.
    #[arg(long, env = "CAPSTAN_LOG", default_value = "info")]
    pub log: String,

    /// Log format (logs go to stderr).
    #[arg(long, env = "CAPSTAN_LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
}

/// Default of `--worker-threads`: one thread. A sidecar serves one assistant; one core
/// carries ~16,000 forwarded calls a second (61 µs of CPU each), and a second worker costs
/// every call two wake-ups of the other thread. One per CPU would also mean one per node CPU
/// in a pod without a CPU limit.
pub const DEFAULT_WORKER_THREADS: usize = 1;

/// Seconds a session may go without a request ([`crate::tasks::DEFAULT_SESSION_IDLE`]).
pub const DEFAULT_SESSION_IDLE_SECONDS: u64 = crate::tasks::DEFAULT_SESSION_IDLE.as_secs();

/// Default of `--refresh-seconds`. 30 s: half the crd cache's TTL, so a cached project is
/// mostly read from the cache, and a change made by hand shows within half a minute.
pub const DEFAULT_REFRESH_SECONDS: u64 = 30;

/// Default of `--shutdown-grace-seconds`: room for a slow tool call, well inside Kubernetes'
/// default 30 s termination grace period.
pub const DEFAULT_SHUTDOWN_GRACE_SECONDS: u64 = 10;

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
            capstan_process::check_reference(&path, "capstan-sidecar", &Config::command())
        {
            panic!("{stale}");
        }
    }

    /// A call limit of 0 would refuse every call, and one above a binding's own range means
    /// nothing: both refused when the process starts, naming the flag.
    #[test]
    fn a_call_limit_outside_its_range_should_be_refused_at_start() {
        use clap::Parser as _;
        for (flag, value) in [
            ("--default-calls-per-minute-per-caller", "0"),
            ("--max-calls-per-minute", "60001"),
            ("--max-concurrent-calls-per-caller", "10001"),
        ] {
            let Err(refused) =
                Config::try_parse_from(["capstan-sidecar", "--source", "fixture", flag, value])
            else {
                panic!("{flag} {value} was taken");
            };
            assert_eq!(refused.kind(), clap::error::ErrorKind::ValueValidation);
            assert!(refused.to_string().contains(flag), "{refused}");
        }
        let taken = Config::try_parse_from([
            "capstan-sidecar",
            "--source",
            "fixture",
            "--max-calls-per-minute-per-caller",
            "60000",
        ]);
        assert!(taken.is_ok(), "{taken:?}");
    }

    /// A call timeout of 0 s would fail every call at once: refused when the process starts,
    /// naming the flag (the timeouts it shares with the controller: capstan-compose's limits).
    #[test]
    fn a_zero_call_timeout_should_be_refused_at_start() {
        use clap::Parser as _;
        let flag = "--call-timeout-seconds";
        let Err(refused) =
            Config::try_parse_from(["capstan-sidecar", "--source", "fixture", flag, "0"])
        else {
            panic!("{flag} 0 was taken");
        };
        assert_eq!(refused.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(refused.to_string().contains(flag), "{refused}");
        let taken = Config::try_parse_from(["capstan-sidecar", "--source", "fixture", flag, "1"]);
        assert!(taken.is_ok(), "{flag} 1: {taken:?}");
    }
}
