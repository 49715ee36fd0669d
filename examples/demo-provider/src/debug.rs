//! The provider's debug routes: what it was asked (`GET /debug/requests`), its faults
//! (`PUT /debug/faults`), and list-change notices on demand (`POST /debug/list-changed`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::streamco::Shared;

/// Every request received so far, as JSON.
pub(crate) async fn requests(State(shared): State<Arc<Shared>>) -> Response {
    let requests = shared
        .requests
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    axum::Json(requests).into_response()
}

/// Sends `notifications/tools/list_changed` to every session opened with the `list-changed`
/// switch; answers how many were told.
pub(crate) async fn notify_list_changed(State(shared): State<Arc<Shared>>) -> Response {
    let peers = shared.peers.lock().map(|p| p.clone()).unwrap_or_default();
    let mut told = 0usize;
    for peer in peers {
        if peer.notify_tool_list_changed().await.is_ok() {
            told += 1;
        }
    }
    axum::Json(json!({ "told": told })).into_response()
}

/// Replaces the faults with the JSON array of names in `body`; the tools are rebuilt on next use.
pub(crate) async fn set_faults(
    State(shared): State<Arc<Shared>>,
    body: axum::body::Bytes,
) -> Response {
    match serde_json::from_slice::<Vec<String>>(&body) {
        Ok(faults) => {
            if let Ok(mut current) = shared.faults.lock() {
                *current = faults;
            }
            if let Ok(mut router) = shared.router.lock() {
                *router = None;
            }
            StatusCode::NO_CONTENT.into_response()
        }
        Err(error) => (
            StatusCode::BAD_REQUEST,
            format!("expected a JSON array of fault names: {error}\n"),
        )
            .into_response(),
    }
}
