//! Logs and traces: the process's `tracing` subscriber. Log lines go to stderr as before
//! (`logging.rs`); spans are also exported over OTLP/HTTP when the standard OpenTelemetry
//! variables ask for it — `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) names a
//! collector — with `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and
//! `OTEL_TRACES_SAMPLER_ARG` read by the OpenTelemetry SDK itself. Without an endpoint nothing
//! is exported and no exporter exists.
//!
//! Only spans are exported, never events: what a span carries is what the code put in its
//! fields on purpose (docs/observability.md lists them), so a log line's text — which may
//! quote a provider's error, and a provider may quote the arguments — never leaves the
//! process as a span event.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use thiserror::Error;
use tracing::Metadata;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{FilterFn, LevelFilter, ParseError};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::logging::{LogFormat, log_layer};

/// The variables that turn exporting on: an endpoint for traces, or for every signal.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The span targets exported: Capstan's own crates, and the HTTP requests kube makes for them
/// (a base tool's reads of the project, a status write), which kube opens at debug level.
fn exported(metadata: &Metadata<'_>) -> bool {
    metadata.is_span()
        && (metadata.target().starts_with("capstan")
            || metadata.target().starts_with("kube_client"))
}

/// The subscriber could not be installed.
#[derive(Debug, Error)]
pub enum TelemetryError {
    /// The log filter could not be read.
    #[error("log filter {filter:?}: {source}")]
    Filter {
        /// The filter as given.
        filter: String,
        /// Why it was refused.
        #[source]
        source: ParseError,
    },
    /// The trace settings in the environment cannot be served.
    #[error("{0}")]
    Traces(String),
}

/// What the process keeps of its telemetry: the trace exporter, if one runs. Dropping it
/// exports what is still buffered (bounded by the exporter's timeout).
#[must_use = "dropping it at once ends exporting"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are being exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("capstan: the last spans could not be exported: {error}");
        }
    }
}

/// Installs the process's subscriber: log lines filtered by `filter` (e.g. `info` or
/// `capstan_controller=debug,kube=info`) in `format` to stderr (stdout may carry metering),
/// and — when the environment names an OTLP endpoint — Capstan's spans exported as
/// `service` (unless `OTEL_SERVICE_NAME` names it). The process's TLS crypto provider must be
/// installed first: the exporter's HTTP client is built here.
pub fn init_telemetry(
    filter: &str,
    format: LogFormat,
    service: &'static str,
) -> Result<Telemetry, TelemetryError> {
    let logs = log_layer(filter, format).map_err(|source| TelemetryError::Filter {
        filter: filter.to_owned(),
        source,
    })?;
    let provider = trace_provider(service)?;
    // No location, thread, target or level attributes, no busy/idle timing, and no OpenTelemetry
    // context activated on each enter (a span's parent is read from `tracing`'s own tree, and
    // `trace_context.rs` reads a span's context directly): each costs on every poll of an
    // instrumented future, and with activation alone sampling 1 % costs most of what sampling
    // 100 % does.
    let traces = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("capstan"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            // Capstan's spans are at debug level: nothing below it needs to reach this layer.
            .with_filter(FilterFn::new(exported).with_max_level_hint(LevelFilter::DEBUG))
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .init();
    Ok(Telemetry { provider })
}

/// The tracer provider the environment asks for, if any.
fn trace_provider(service: &'static str) -> Result<Option<SdkTracerProvider>, TelemetryError> {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.trim() == "none");
    if disabled || !ENDPOINT_VARIABLES.iter().any(|name| set(name)) {
        return Ok(None);
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Ok(protocol) = std::env::var(name)
            && protocol.trim() != "http/protobuf"
        {
            return Err(TelemetryError::Traces(format!(
                "{name}={protocol}: Capstan exports OTLP over HTTP only (http/protobuf); unset it \
                 or set http/protobuf, and point the endpoint at the collector's OTLP/HTTP port \
                 (4318 by default)"
            )));
        }
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| TelemetryError::Traces(format!("the OTLP trace exporter: {e}")))?;
    let mut resource = Resource::builder();
    if !set("OTEL_SERVICE_NAME") && !resource_names_service() {
        resource = resource.with_service_name(service);
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}

/// Whether `OTEL_RESOURCE_ATTRIBUTES` names the service (it then wins over the default name).
fn resource_names_service() -> bool {
    std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|attributes| {
        attributes
            .split(',')
            .any(|pair| pair.trim_start().starts_with("service.name="))
    })
}
