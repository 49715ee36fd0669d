//! Logs: structured `tracing` events to stderr, one JSON object per line (fields at the top
//! level, the same shape for every binary) or human-readable text. The layer is installed
//! with the trace exporter, if any (`telemetry.rs`).

use tracing_subscriber::filter::ParseError;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, event fields at the top level (for log pipelines).
    Json,
    /// Human-readable lines.
    Text,
}

/// The log lines' layer: `filter` (e.g. `info` or `capstan_controller=debug,kube=info`) in
/// `format`, to stderr (stdout may carry metering). The filter is the layer's own, so it
/// decides what is logged, not which spans are exported.
pub(crate) fn log_layer(
    filter: &str,
    format: LogFormat,
) -> Result<Box<dyn Layer<Registry> + Send + Sync>, ParseError> {
    let filter = EnvFilter::try_new(filter)?;
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    Ok(match format {
        LogFormat::Json => layer.json().flatten_event(true).with_filter(filter).boxed(),
        LogFormat::Text => layer.with_filter(filter).boxed(),
    })
}
