//! What the sidecar tells its operator: the Prometheus metrics (`metrics.rs`), the span of
//! each request on the socket (`request_span.rs`), the metering line of each provider call
//! (`metering.rs`) and the audit line of each tool call (`audit.rs`), both written to a line
//! sink (`sink.rs`). The layers above report here; nothing here calls back up.

pub mod audit;
pub mod metering;
pub mod metrics;
pub mod request_span;
pub mod sink;
