//! W3C trace context across MCP hops (docs/observability.md): read from what a caller sent —
//! the `traceparent` / `tracestate` HTTP headers, or the same keys in a request's
//! `params._meta` (MCP reserves them there) — and written on every request Capstan sends a
//! provider, in both places, from the span the request is sent in, so the provider's own spans
//! join the caller's trace.
//!
//! With no trace exporter installed (`capstan-process` telemetry.rs) every span's context is
//! empty: nothing is read into a span and nothing is written, and a caller's `_meta` passes
//! through as it came.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The `_meta` keys and HTTP headers that carry trace context.
pub const TRACE_CONTEXT_KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// The trace context of the span a request is sent in, as its carriers' entries; empty when
/// nothing is traced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outgoing(HashMap<String, String>);

impl Outgoing {
    /// The current span's context (the span the request is sent in).
    pub fn current() -> Self {
        let context = tracing::Span::current().context();
        if !context.span().span_context().is_valid() {
            return Self::default();
        }
        let mut carrier = Self::default();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        carrier
    }

    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entries, header name and value.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Writes the context into a request's `params._meta` (made when missing), over whatever
    /// trace context the caller's `_meta` carried: the provider's parent is Capstan's span.
    pub fn stamp_meta(&self, params: &mut Value) {
        if self.is_empty() {
            return;
        }
        if let Some(meta) = meta_mut(params) {
            for key in TRACE_CONTEXT_KEYS {
                meta.remove(key);
            }
            for (key, value) in self.entries() {
                meta.insert(key.to_owned(), Value::String(value.to_owned()));
            }
        }
    }
}

/// A request's `params._meta`, made when missing; `None` when `params` or its `_meta` is not
/// an object.
pub(crate) fn meta_mut(params: &mut Value) -> Option<&mut Map<String, Value>> {
    params
        .as_object_mut()?
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

impl Injector for Outgoing {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

/// The trace context a caller sent in its HTTP headers.
pub fn from_headers(headers: &http::HeaderMap) -> Context {
    TraceContextPropagator::new().extract(&Headers(headers))
}

/// The trace context a caller sent in a request's `params._meta` (`meta`).
pub fn from_meta(meta: Option<&Map<String, Value>>) -> Context {
    match meta {
        Some(meta) => TraceContextPropagator::new().extract(&Meta(meta)),
        None => Context::new(),
    }
}

/// Whether `context` names a remote span to continue.
pub fn is_remote_parent(context: &Context) -> bool {
    context.span().span_context().is_valid()
}

/// A session id as spans carry it: the first 16 hex digits of its SHA-256. The id itself lets
/// whoever holds it (with the caller's token) act in the session, so it is not exported.
pub fn hashed_session_id(id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct Meta<'a>(&'a Map<String, Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_in_meta_should_be_read_as_the_remote_parent() {
        let meta = json!({"traceparent": PARENT});
        let context = from_meta(meta.as_object());
        assert!(is_remote_parent(&context));
        assert_eq!(
            context.span().span_context().trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
    }

    #[test]
    fn a_malformed_traceparent_should_be_no_parent() {
        for bad in [
            "00-zz-00f067aa0ba902b7-01",
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            let meta = json!({"traceparent": bad});
            assert!(!is_remote_parent(&from_meta(meta.as_object())), "{bad:?}");
        }
        assert!(!is_remote_parent(&from_meta(None)));
    }

    #[test]
    fn a_header_traceparent_should_be_read() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            PARENT.parse().unwrap_or_else(|_| unreachable!()),
        );
        assert!(is_remote_parent(&from_headers(&headers)));
    }

    #[test]
    fn stamping_should_replace_the_callers_trace_context_and_keep_the_rest() {
        let mut outgoing = Outgoing::default();
        outgoing.set("traceparent", "00-ours".into());
        let mut params =
            json!({"_meta": {"traceparent": PARENT, "tracestate": "a=b", "progressToken": 7}});
        outgoing.stamp_meta(&mut params);
        assert_eq!(
            params,
            json!({"_meta": {"traceparent": "00-ours", "progressToken": 7}})
        );
        let mut bare = json!({"name": "t"});
        outgoing.stamp_meta(&mut bare);
        assert_eq!(bare["_meta"]["traceparent"], "00-ours");
    }

    #[test]
    fn nothing_traced_should_leave_the_callers_meta_alone() {
        let outgoing = Outgoing::current();
        assert!(outgoing.is_empty());
        let mut params = json!({"_meta": {"traceparent": PARENT}});
        outgoing.stamp_meta(&mut params);
        assert_eq!(params["_meta"]["traceparent"], PARENT);
    }

    #[test]
    fn a_hashed_session_id_should_not_contain_the_id() {
        let hashed = hashed_session_id("9f1c2e");
        assert_eq!(hashed.len(), 16);
        assert!(!hashed.contains("9f1c2e"));
        assert_eq!(hashed, hashed_session_id("9f1c2e"));
    }
}
