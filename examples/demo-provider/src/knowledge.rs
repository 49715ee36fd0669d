//! The provider's knowledge (`/llms-full.txt`) and its runbook (`/runbooks/lag.md`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::streamco::Shared;

const KNOWLEDGE: &str = "# StreamCo streaming\n\nStreamCo runs managed event streams. A Stream \
    carries ordered events in partitions; consumers read them in groups. Consumer lag is the \
    number of events written but not yet read: sustained lag means consumers are too slow or \
    restarting.\n";

const LAG_RUNBOOK: &str = "# Triage consumer lag\n\n1. Call streams_list and find streams whose \
    state is Lagging.\n2. Call pipeline_diagnose for the pipeline reading that stream.\n3. If the \
    consumer restarted recently, check its memory limit before anything else.\n4. Recommend \
    scaling consumers only when lag grows while consumers are healthy.\n";

/// The knowledge document (1 MiB of it under `oversized-knowledge`).
pub(crate) async fn knowledge(State(shared): State<Arc<Shared>>) -> Response {
    if shared.has("oversized-knowledge") {
        // 1 MiB: well past the composer's 256 KiB per-source cap.
        return KNOWLEDGE
            .repeat(1024 * 1024 / KNOWLEDGE.len() + 1)
            .into_response();
    }
    KNOWLEDGE.into_response()
}

/// The lag runbook, as the faults shape it: unavailable (`runbook-unavailable`, 503), replaced
/// (`runbook:<text>`, served as given), longer than any skill cap (`oversized-runbook`, 1 MiB),
/// another on every request (`runbook-per-request`: it ends saying which request it answered,
/// counting from 1), or sent one byte every 200 ms (`slow-runbook`).
pub(crate) async fn runbook(State(shared): State<Arc<Shared>>) -> Response {
    let served = shared.runbooks_served.fetch_add(1, Ordering::Relaxed) + 1;
    if shared.has("runbook-unavailable") {
        return (StatusCode::SERVICE_UNAVAILABLE, "runbook unavailable\n").into_response();
    }
    let faults = shared.faults();
    if let Some(text) = faults.iter().find_map(|f| f.strip_prefix("runbook:")) {
        return text.to_owned().into_response();
    }
    if shared.has("oversized-runbook") {
        return LAG_RUNBOOK
            .repeat(1024 * 1024 / LAG_RUNBOOK.len() + 1)
            .into_response();
    }
    if shared.has("runbook-per-request") {
        return format!("{LAG_RUNBOOK}\nServed as response {served}.\n").into_response();
    }
    if shared.has("slow-runbook") {
        return crate::faults::drip(LAG_RUNBOOK.into_response(), crate::faults::SLOW_DRIP).await;
    }
    LAG_RUNBOOK.into_response()
}
