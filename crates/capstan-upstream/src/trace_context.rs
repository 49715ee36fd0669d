//! W3C trace context across MCP hops (docs/observability.md): read from what a caller sent —
//! the `traceparent` / `tracestate` HTTP headers, or the same keys in a request's
//! `params._meta` (MCP reserves them there) — and written on every request Capstan sends a
//! provider, in both places, from the span the request is sent in, so the provider's own spans
//! join the caller's trace.
//!
//! With no trace exporter installed (`capstan-process` telemetry.rs) every span's context is
//! empty: nothing is read into a span and nothing is written, and a caller's `_meta` passes
//! through as it came.
//!
//! A request its head sampler left out (`capstan-process` sampling.rs) has no span at all: its
//! code runs [`in_unsampled`], and what it sends a provider carries the unsampled context the
//! decision named, so the provider knows the trace is not sampled.

use std::collections::HashMap;

use futures::future::Either;
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The `_meta` keys and HTTP headers that carry trace context.
pub const TRACE_CONTEXT_KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// The trace context of the span a request is sent in, as its carriers' entries; empty when
/// nothing is traced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outgoing(Vec<(String, String)>);

impl Outgoing {
    /// The current span's context (the span the request is sent in), or in an unsampled
    /// request the context its decision passes on.
    pub fn current() -> Self {
        if let Ok(passed) = UNSAMPLED.try_with(Clone::clone) {
            return passed;
        }
        Self::of(&tracing::Span::current().context())
    }

    /// The entries that carry `context`; none when it names no span.
    fn of(context: &Context) -> Self {
        if !context.span().span_context().is_valid() {
            return Self::default();
        }
        let mut carrier = Self::default();
        TraceContextPropagator::new().inject_context(context, &mut carrier);
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

tokio::task_local! {
    /// What an unsampled request passes on, while its code runs: written once per request.
    static UNSAMPLED: Outgoing;
}

/// Whether the code running now serves a request its head sampler left out: the exporter's
/// filter (`capstan-process` telemetry.rs) then lets none of its spans be built.
pub fn unsampled() -> bool {
    UNSAMPLED.try_with(|_| ()).is_ok()
}

/// The span `make` builds, or none in a request its head sampler left out: every span site of
/// a request makes its span through this, so an unsampled request builds none (the exporter's
/// filter in `capstan-process` refuses them too, but tracing's per-layer filters cannot stop a
/// span from being made when the answer depends on the request).
pub fn span_unless_unsampled(make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if unsampled() {
        tracing::Span::none()
    } else {
        make()
    }
}

/// Runs `future` as a request its head sampler left out, passing `passed` on to providers.
///
/// A plain function returning the scope rather than an `async fn`: an `async fn` keeps its
/// future argument and the future it awaits side by side, twice the size, and a request's
/// future is kilobytes copied on every move (docs/performance.md "A request's future, once").
pub fn in_unsampled<F: Future>(passed: SpanContext, future: F) -> impl Future<Output = F::Output> {
    let passed = Outgoing::of(&Context::new().with_remote_span_context(passed));
    UNSAMPLED.scope(passed, future)
}

/// `future` in the current request's trace wherever it is polled (a task of its own, or after
/// the request's handler returned): in the current span, and unsampled if the request is.
///
/// Either of two futures, not an `async` block awaiting one: the block would hold `future` and
/// the scope made of it side by side (see [`in_unsampled`]).
pub fn in_this_request<F: Future>(future: F) -> impl Future<Output = F::Output> {
    let unsampled = UNSAMPLED.try_with(Clone::clone).ok();
    let future = future.instrument(tracing::Span::current());
    match unsampled {
        Some(passed) => Either::Left(UNSAMPLED.scope(passed, future)),
        None => Either::Right(future),
    }
}

/// The `_meta` key carrying W3C baggage (as the `baggage` header would).
pub const BAGGAGE_KEY: &str = "baggage";

/// The longest `traceparent` read: version 00 is 55 characters; a later version may append
/// fields, which a reader ignores. Anything longer is no trace context.
const MAX_TRACEPARENT_LEN: usize = 512;

/// The longest `tracestate` passed on: the W3C recommends propagating at least 512 characters
/// and lets a carrier drop whole members past its limit.
const MAX_TRACESTATE_LEN: usize = 512;

/// The longest `baggage` read (the W3C Baggage limit, which the propagator enforces too).
const MAX_BAGGAGE_LEN: usize = 8192;

/// Makes the trace context in a caller's `_meta` (`meta`) what a provider may be handed,
/// whether anything is traced or not: `traceparent` and `tracestate` only as a valid W3C trace
/// context re-written in canonical form (`tracestate` within its limits, whole members kept);
/// `baggage` only as valid W3C baggage, re-encoded, within its limits. Whatever is not valid —
/// too long, a newline, a malformed id, a key of the wrong shape — is dropped, not repaired
/// into something the caller did not send.
pub fn sanitize_meta(meta: &mut Map<String, Value>) {
    if TRACE_CONTEXT_KEYS
        .iter()
        .chain(&[BAGGAGE_KEY])
        .all(|key| !meta.contains_key(*key))
    {
        return;
    }
    // Printable ASCII only, as each header's grammar allows: a control character (a line
    // break that would split a header) makes the whole entry invalid.
    let text = |meta: &Map<String, Value>, key: &str, limit: usize| {
        meta.get(key)
            .and_then(Value::as_str)
            .filter(|v| v.len() <= limit && v.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .map(str::to_owned)
    };
    let mut given = HashMap::new();
    if let Some(parent) = text(meta, "traceparent", MAX_TRACEPARENT_LEN) {
        given.insert("traceparent".to_owned(), parent);
        // A tracestate without a valid traceparent means nothing.
        if let Some(state) = meta
            .get("tracestate")
            .and_then(Value::as_str)
            .filter(|v| v.bytes().all(|b| (0x20..0x7f).contains(&b)))
        {
            given.insert("tracestate".to_owned(), bounded_tracestate(state));
        }
    }
    if let Some(baggage) = text(meta, BAGGAGE_KEY, MAX_BAGGAGE_LEN) {
        given.insert(
            BAGGAGE_KEY.to_owned(),
            without_escapes_outside_values(&baggage),
        );
    }
    for key in TRACE_CONTEXT_KEYS.iter().chain(&[BAGGAGE_KEY]) {
        meta.remove(*key);
    }
    let carrier = Carrier(given);
    let context = TraceContextPropagator::new().extract(&carrier);
    let context = BaggagePropagator::new().extract_with_context(&context, &carrier);
    let mut clean = Outgoing::default();
    if is_remote_parent(&context) {
        TraceContextPropagator::new().inject_context(&context, &mut clean);
    }
    BaggagePropagator::new().inject_context(&context, &mut clean);
    for (key, value) in clean.entries() {
        if !value.is_empty() {
            meta.insert(key.to_owned(), Value::String(value.to_owned()));
        }
    }
}

/// `baggage` without the members the propagator would not write back as they read. It
/// percent-decodes a member's key, value and properties but re-encodes only the value, and
/// only the characters its fragment set names — which `%` is not. So a `%` in a key or a
/// property (`a%255c=1` would reach the provider as `a%5c=1`, a key the next reader decodes to
/// `a\` and drops; a property `x%10y` as a raw control character), and a value that decodes to
/// a `%` (`%25`, or a `%` that starts no escape), would reach the provider as text that reads
/// differently again. What is passed on must read the same to whoever reads it again, in
/// printable ASCII (the relay fuzz target's properties; each such input is a regression).
fn without_escapes_outside_values(baggage: &str) -> String {
    baggage
        .split(',')
        .filter(|member| {
            let (entry, properties) = member.split_once(';').unwrap_or((member, ""));
            // The propagator's reading: the key before the first `=`, the value up to the next.
            let mut parts = entry.split('=');
            let (key, value) = (
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            !key.contains('%') && !properties.contains('%') && !decodes_to_percent(value)
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether percent-decoding `value` leaves a `%` in it: an escaped `%` (`%25`) or a `%` that
/// is not followed by two hex digits.
fn decodes_to_percent(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.iter().enumerate().any(|(at, &byte)| {
        byte == b'%'
            && match (bytes.get(at + 1), bytes.get(at + 2)) {
                (Some(high), Some(low)) if high.is_ascii_hexdigit() && low.is_ascii_hexdigit() => {
                    (*high, *low) == (b'2', b'5')
                }
                _ => true,
            }
    })
}

/// The leading whole members of `state` that fit [`MAX_TRACESTATE_LEN`] (the propagator then
/// checks each member's shape and count).
fn bounded_tracestate(state: &str) -> String {
    let mut kept = String::new();
    for member in state.split(',') {
        let extra = usize::from(!kept.is_empty()) + member.len();
        if kept.len() + extra > MAX_TRACESTATE_LEN {
            break;
        }
        if !kept.is_empty() {
            kept.push(',');
        }
        kept.push_str(member);
    }
    kept
}

/// Entries read as carrier fields.
struct Carrier(HashMap<String, String>);

impl Extractor for Carrier {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
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
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, known)) => *known = value,
            None => self.0.push((key.to_owned(), value)),
        }
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A future as large as a request's (kilobytes of state), ready at once.
    async fn large_request() -> usize {
        let state = [1u8; 8192];
        tokio::task::yield_now().await;
        state.iter().map(|byte| usize::from(*byte)).sum()
    }

    #[test]
    fn a_request_wrapped_for_its_trace_should_not_be_held_twice() {
        let alone = std::mem::size_of_val(&large_request());
        let unsampled = SpanContext::empty_context();
        let wrapped = [
            std::mem::size_of_val(&in_this_request(large_request())),
            std::mem::size_of_val(&in_unsampled(unsampled, large_request())),
        ];
        // A few words for the span and the passed context, not another copy of the request.
        for size in wrapped {
            assert!(
                size < alone + 1024,
                "{size} bytes for a {alone}-byte future"
            );
        }
    }

    #[test]
    fn a_baggage_member_whose_key_is_escaped_should_be_dropped_so_that_it_reads_the_same_again() {
        let mut meta = json!({"baggage": "a%255c=8,userId=alice,b%41=2"});
        let meta = meta.as_object_mut().unwrap();
        sanitize_meta(meta);
        assert_eq!(meta["baggage"], "userId=alice");
        let once = meta.clone();
        sanitize_meta(meta);
        assert_eq!(*meta, once);
    }

    #[test]
    fn a_baggage_value_that_decodes_to_a_percent_should_be_dropped_not_passed_on_decoded() {
        let mut meta = json!({"baggage": "a=L1%2525e2,b=v%:93,c=x%2,d=100%25,e=DF%2028%E2%9C%93"});
        let meta = meta.as_object_mut().unwrap();
        sanitize_meta(meta);
        assert_eq!(meta["baggage"], "e=DF%2028%E2%9C%93");
        let once = meta.clone();
        sanitize_meta(meta);
        assert_eq!(*meta, once);
    }

    #[test]
    fn a_baggage_member_with_an_escaped_property_should_be_dropped_not_passed_on_decoded() {
        let mut meta = json!({"baggage": "a=b%20c;x%10y,userId=alice;role=admin,k=v;p%20q=1"});
        let meta = meta.as_object_mut().unwrap();
        sanitize_meta(meta);
        let baggage = meta["baggage"].as_str().unwrap();
        assert_eq!(baggage, "userId=alice;role=admin");
        let once = meta.clone();
        sanitize_meta(meta);
        assert_eq!(*meta, once);
    }

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
    fn a_valid_trace_context_should_pass_in_canonical_form() {
        let mut meta = json!({"traceparent": PARENT, "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
                              "baggage": "userId=alice,serverNode=DF%2028", "progressToken": 7});
        sanitize_meta(meta.as_object_mut().unwrap());
        assert_eq!(meta["traceparent"], PARENT);
        assert_eq!(
            meta["tracestate"],
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
        );
        let baggage = meta["baggage"].as_str().unwrap();
        let mut members: Vec<&str> = baggage.split(',').collect();
        members.sort_unstable();
        assert_eq!(members, ["serverNode=DF%2028", "userId=alice"], "{baggage}");
        assert_eq!(meta["progressToken"], 7);
    }

    #[test]
    fn an_invalid_or_oversized_trace_context_should_be_dropped() {
        let huge = format!("{PARENT}-{}", "a".repeat(200 * 1024));
        let cases = [
            json!({"traceparent": huge}),
            json!({"traceparent": "00-zz-00f067aa0ba902b7-01", "tracestate": "a=b"}),
            json!({"tracestate": "a=b"}),
            json!({"traceparent": 7}),
        ];
        for case in cases {
            let mut meta = case.clone();
            sanitize_meta(meta.as_object_mut().unwrap());
            assert_eq!(meta, json!({}), "{case}");
        }
        // A line break is no part of any of them: the entry is dropped whole.
        let mut meta = json!({"traceparent": format!("{PARENT}\r\n"), "baggage": "a=b\nX: 1"});
        sanitize_meta(meta.as_object_mut().unwrap());
        assert_eq!(meta, json!({}));
        // A valid parent with a tracestate that is not one: the parent alone.
        let mut meta = json!({"traceparent": PARENT, "tracestate": "a=b\nc=d"});
        sanitize_meta(meta.as_object_mut().unwrap());
        assert_eq!(meta, json!({"traceparent": PARENT}));
        // A 100 KB tracestate keeps the whole members that fit 512 characters.
        let state = (0..10_000)
            .map(|i| format!("k{i}=v{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut meta = json!({"traceparent": PARENT, "tracestate": state});
        sanitize_meta(meta.as_object_mut().unwrap());
        let kept = meta["tracestate"].as_str().unwrap();
        assert!(
            kept.len() <= 512 && kept.starts_with("k0=v0,k1=v1"),
            "{kept}"
        );
        assert!(kept.split(',').count() <= 32, "{kept}");
        // Baggage over the W3C limit, or with a newline, reaches nobody.
        for baggage in ["a=".repeat(5000), "a=b\nc=d".to_owned()] {
            let mut meta = json!({"baggage": baggage});
            sanitize_meta(meta.as_object_mut().unwrap());
            assert!(
                meta.get("baggage")
                    .is_none_or(|b| !b.as_str().unwrap().contains('\n')),
                "{meta}"
            );
            assert!(
                meta.get("baggage")
                    .is_none_or(|b| b.as_str().unwrap().len() <= 8192)
            );
        }
    }

    #[test]
    fn a_hashed_session_id_should_not_contain_the_id() {
        let hashed = hashed_session_id("9f1c2e");
        assert_eq!(hashed.len(), 16);
        assert!(!hashed.contains("9f1c2e"));
        assert_eq!(hashed, hashed_session_id("9f1c2e"));
    }
}
