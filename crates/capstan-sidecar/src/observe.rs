//! What the sidecar tells its operator: the Prometheus metrics (`metrics.rs`), the span of
//! each request on the socket (`request_span.rs`), and the metering line of each provider
//! call (`metering.rs`). The layers above report here; nothing here calls back up.

pub mod metering;
pub mod metrics;
pub mod request_span;
