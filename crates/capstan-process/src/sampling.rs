//! Head sampling: whether a request's trace is exported, decided when the request arrives and
//! before any span of it is built (docs/observability.md "Sampling").
//!
//! The OpenTelemetry SDK decides a span's sampling only when the span starts, and
//! `tracing-opentelemetry` starts a span when it closes or when its context is read: by then
//! the span, its attributes and its children have all been built, and an unsampled request
//! pays for nearly all of what a sampled one does. So a process that serves requests asks
//! [`HeadSampler::decide`] first, with the parent the caller sent. A sampled request's first
//! span is parented with the context it returns, which carries a marker every span under it
//! inherits, and the provider's sampler ([`HeadFirst`]) samples them all without asking again;
//! an unsampled request builds no span (`telemetry.rs`'s filter refuses them while the process
//! says it serves one) and passes on the context [`Head::Unsampled`] names, so the next hop
//! knows the decision. Spans outside requests (a watch, a reconcile) are decided by the
//! environment's sampler as before.

use opentelemetry::trace::{
    Link, SpanContext, SpanKind, TraceContextExt as _, TraceFlags, TraceId,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{
    Config, IdGenerator as _, RandomIdGenerator, SamplingDecision, SamplingResult, ShouldSample,
};

/// The marker in the context a request sampled at its head parents its first span with.
#[derive(Clone, Copy, Debug)]
struct HeadSampled;

/// The environment's sampler (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`, read by the
/// SDK itself), asked once per request.
#[derive(Clone, Debug)]
pub struct HeadSampler {
    inner: Box<dyn ShouldSample>,
    ids: RandomIdGenerator,
}

/// What a request's head decision is.
#[derive(Debug)]
pub enum Head {
    /// Sampled: the context to parent the request's first span with (the caller's parent, if
    /// any, and the marker).
    Sampled(Context),
    /// Not sampled: the span context to pass on to the next hop in place of a span of ours —
    /// the caller's trace id (a new one for a request without a parent), a new span id, and
    /// the sampled flag off.
    Unsampled(SpanContext),
}

impl HeadSampler {
    /// The sampler the environment configures, as the SDK reads it.
    pub(crate) fn from_env() -> Self {
        Self::new(Config::default().sampler)
    }

    /// A head sampler asking `inner`.
    pub fn new(inner: Box<dyn ShouldSample>) -> Self {
        Self {
            inner,
            ids: RandomIdGenerator::default(),
        }
    }

    /// The environment's sampler itself.
    pub(crate) fn into_inner(self) -> Box<dyn ShouldSample> {
        self.inner
    }

    /// The decision for a request named `name` whose caller sent `parent` (an empty context
    /// when it sent none), as the environment's sampler makes it for a span of kind server.
    pub fn decide(&self, parent: &Context, name: &str) -> Head {
        let parent_span = parent.span();
        let parent_context = parent_span.span_context();
        let trace_id = if parent_context.is_valid() {
            parent_context.trace_id()
        } else {
            self.ids.new_trace_id()
        };
        let result =
            self.inner
                .should_sample(Some(parent), trace_id, name, &SpanKind::Server, &[], &[]);
        match result.decision {
            SamplingDecision::Drop => Head::Unsampled(SpanContext::new(
                trace_id,
                self.ids.new_span_id(),
                TraceFlags::default(),
                false,
                parent_context.trace_state().clone(),
            )),
            SamplingDecision::RecordOnly | SamplingDecision::RecordAndSample => {
                Head::Sampled(parent.with_value(HeadSampled))
            }
        }
    }
}

/// The tracer provider's sampler: a span under a request sampled at its head is sampled; any
/// other span is `0`'s (the environment's sampler) to decide.
#[derive(Clone, Debug)]
pub(crate) struct HeadFirst(pub(crate) Box<dyn ShouldSample>);

impl ShouldSample for HeadFirst {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        match parent_context {
            Some(parent) if parent.get::<HeadSampled>().is_some() => SamplingResult {
                decision: SamplingDecision::RecordAndSample,
                attributes: Vec::new(),
                trace_state: parent.span().span_context().trace_state().clone(),
            },
            _ => self
                .0
                .should_sample(parent_context, trace_id, name, span_kind, attributes, links),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use opentelemetry::trace::{SpanId, TraceState};
    use opentelemetry_sdk::trace::Sampler;

    use super::*;

    fn remote(sampled: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c_u128),
            SpanId::from(0xb7ad_6b71_6920_3331_u64),
            flags,
            true,
            TraceState::from_key_value([("vendor", "x")]).unwrap(),
        ))
    }

    fn parent_based_always_on() -> HeadSampler {
        HeadSampler::new(Box::new(Sampler::ParentBased(Box::new(Sampler::AlwaysOn))))
    }

    #[test]
    fn an_unsampled_parent_should_pass_its_trace_on_unsampled() {
        let parent = remote(false);
        let Head::Unsampled(passed) = parent_based_always_on().decide(&parent, "mcp.server") else {
            panic!("a parent-based sampler followed an unsampled parent into sampling");
        };
        let given = parent.span().span_context().clone();
        assert_eq!(passed.trace_id(), given.trace_id());
        assert_ne!(passed.span_id(), given.span_id());
        assert!(!passed.is_sampled());
        assert_eq!(passed.trace_state().get("vendor"), Some("x"));
    }

    #[test]
    fn a_sampled_parent_should_mark_the_context_and_keep_the_parent() {
        let parent = remote(true);
        let Head::Sampled(context) = parent_based_always_on().decide(&parent, "mcp.server") else {
            panic!("a parent-based sampler dropped a sampled parent");
        };
        assert!(context.get::<HeadSampled>().is_some());
        assert_eq!(context.span().span_context(), parent.span().span_context());
    }

    #[test]
    fn a_ratio_of_zero_should_sample_no_request_and_one_every_request() {
        let never = HeadSampler::new(Box::new(Sampler::TraceIdRatioBased(0.0)));
        let always = HeadSampler::new(Box::new(Sampler::TraceIdRatioBased(1.0)));
        for _ in 0..100 {
            assert!(matches!(
                never.decide(&Context::new(), "r"),
                Head::Unsampled(c) if c.is_valid() && !c.is_sampled()
            ));
            assert!(matches!(
                always.decide(&Context::new(), "r"),
                Head::Sampled(_)
            ));
        }
    }

    #[test]
    fn spans_under_a_sampled_head_should_be_sampled_whatever_the_inner_sampler_says() {
        let head_first = HeadFirst(Box::new(Sampler::AlwaysOff));
        let trace = TraceId::from(7_u128);
        let ask = |parent: &Context| {
            head_first
                .should_sample(Some(parent), trace, "s", &SpanKind::Client, &[], &[])
                .decision
        };
        let marked = remote(true).with_value(HeadSampled);
        assert_eq!(ask(&marked), SamplingDecision::RecordAndSample);
        // Without the marker the environment's sampler decides: a span outside a request.
        assert_eq!(ask(&remote(true)), SamplingDecision::Drop);
        assert_eq!(ask(&Context::new()), SamplingDecision::Drop);
    }
}
