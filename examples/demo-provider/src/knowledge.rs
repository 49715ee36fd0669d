//! The provider's knowledge (`/llms-full.txt`) and its runbook (`/runbooks/lag.md`).

use std::sync::Arc;

use axum::extract::State;
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

/// The lag runbook.
pub(crate) async fn runbook() -> &'static str {
    LAG_RUNBOOK
}
