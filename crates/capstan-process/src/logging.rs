//! Logs: structured `tracing` events to stderr, one JSON object per line (fields at the top
//! level, the same shape for every binary) or human-readable text.

use thiserror::Error;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, event fields at the top level (for log pipelines).
    Json,
    /// Human-readable lines.
    Text,
}

/// The log filter could not be read.
#[derive(Debug, Error)]
#[error("log filter {filter:?}: {source}")]
pub struct LoggingError {
    /// The filter as given.
    pub filter: String,
    /// Why it was refused.
    #[source]
    pub source: tracing_subscriber::filter::ParseError,
}

/// Installs the process's log subscriber: `filter` (e.g. `info` or
/// `capstan_controller=debug,kube=info`) in `format`, to stderr (stdout may carry metering).
pub fn init_logging(filter: &str, format: LogFormat) -> Result<(), LoggingError> {
    let parsed = tracing_subscriber::EnvFilter::try_new(filter).map_err(|source| LoggingError {
        filter: filter.to_owned(),
        source,
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(parsed)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
    Ok(())
}
