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
use tracing::subscriber::Interest;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{LevelFilter, ParseError};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::logging::{LogFormat, log_layer};
use crate::sampling::{HeadFirst, HeadSampler};

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

/// What reaches the exporter's layer: the spans [`exported`] names, unless the code creating
/// them serves an unsampled request (`0` says whether it does). Asked for every such span (the
/// answer depends on the request), which costs a call of `0`; a callsite never exported is
/// never asked again. A per-layer filter: the log lines still see what their own filter lets
/// through.
struct ExportFilter(fn() -> bool);

impl<S> tracing_subscriber::layer::Filter<S> for ExportFilter {
    fn enabled(
        &self,
        metadata: &Metadata<'_>,
        _: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        exported(metadata) && !(self.0)()
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if exported(metadata) {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // Capstan's spans are at debug level: nothing below it needs to reach this layer.
        Some(LevelFilter::DEBUG)
    }
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
    heads: Option<HeadSampler>,
}

impl Telemetry {
    /// Whether spans are being exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// The sampler a request is decided by when it arrives (`sampling.rs`), when spans are
    /// exported.
    pub fn head_sampler(&self) -> Option<HeadSampler> {
        self.heads.clone()
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
/// `service` (unless `OTEL_SERVICE_NAME` names it). `unsampled` says whether the code running
/// now serves a request its head sampler left out (`sampling.rs`): no span of it reaches the
/// exporter. The process's TLS crypto provider must be installed first: the exporter's HTTP
/// client is built here.
pub fn init_telemetry(
    filter: &str,
    format: LogFormat,
    service: &'static str,
    unsampled: fn() -> bool,
) -> Result<Telemetry, TelemetryError> {
    let logs = log_layer(filter, format).map_err(|source| TelemetryError::Filter {
        filter: filter.to_owned(),
        source,
    })?;
    let heads = HeadSampler::from_env();
    let provider = trace_provider(service, &heads)?;
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
            .with_filter(ExportFilter(unsampled))
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .init();
    let heads = provider.is_some().then_some(heads);
    Ok(Telemetry { provider, heads })
}

/// The tracer provider the environment asks for, if any, sampling what `heads` sampled at a
/// request's head and the rest as `heads` would.
fn trace_provider(
    service: &'static str,
    heads: &HeadSampler,
) -> Result<Option<SdkTracerProvider>, TelemetryError> {
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
            .with_sampler(HeadFirst(heads.clone().into_inner()))
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::cell::Cell;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tracing::span;
    use tracing_subscriber::layer::Context;

    use super::*;

    thread_local! {
        static LEFT_OUT: Cell<bool> = const { Cell::new(false) };
    }

    fn left_out() -> bool {
        LEFT_OUT.with(Cell::get)
    }

    /// Counts the spans it is shown: the exporter's layer in their place.
    struct Built(Arc<AtomicUsize>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Built {
        fn on_new_span(&self, _: &span::Attributes<'_>, _: &span::Id, _: Context<'_, S>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Spans made as a sampled request, an unsampled one, then a sampled one again would make
    /// them, under the log filter `logs` and the layers `init_telemetry` stacks: how many the
    /// exporter's layer saw after each.
    fn seen(logs: &str) -> [usize; 3] {
        let built = Arc::new(AtomicUsize::new(0));
        let subscriber = tracing_subscriber::registry()
            .with(log_layer(logs, LogFormat::Text).unwrap())
            .with(Built(built.clone()).with_filter(ExportFilter(left_out)));
        let mut counts = [0; 3];
        tracing::subscriber::with_default(subscriber, || {
            let sampled = tracing::debug_span!("mcp.server");
            let _child = tracing::debug_span!(parent: &sampled, "mcp.client");
            counts[0] = built.load(Ordering::Relaxed);
            LEFT_OUT.with(|l| l.set(true));
            let _unsampled = tracing::debug_span!("mcp.server");
            let _child = tracing::debug_span!("mcp.client");
            counts[1] = built.load(Ordering::Relaxed);
            // The same callsites are asked again once the request is over.
            LEFT_OUT.with(|l| l.set(false));
            let _after = tracing::debug_span!("mcp.server");
            counts[2] = built.load(Ordering::Relaxed);
        });
        counts
    }

    #[test]
    fn no_span_of_an_unsampled_request_should_reach_the_exporters_layer() {
        // Whether log lines carry Capstan's debug spans or not.
        assert_eq!(seen("info"), [2, 2, 3]);
        assert_eq!(seen("debug"), [2, 2, 3]);
    }
}
