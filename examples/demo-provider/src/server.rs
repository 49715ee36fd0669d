//! The demo provider's HTTP app: the StreamCo MCP server on `/mcp`, its knowledge and runbook,
//! and the debug routes, behind the middleware that records every request and applies faults.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::middleware;
use axum::routing::{get, post, put};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::debug::{notify_list_changed, requests, set_faults};
use crate::faults::record_and_fault;
use crate::knowledge::{knowledge, runbook};
use crate::streamco::{Shared, StreamCo};

/// The demo provider's routes, starting with `faults` set (the names `demo-provider`'s
/// documentation lists) and accepting MCP requests addressed to `allowed_hosts` besides
/// localhost, 127.0.0.1 and ::1 (the MCP server's DNS-rebinding check).
pub fn app(faults: Vec<String>, allowed_hosts: Vec<String>) -> Router {
    let shared = Arc::new(Shared {
        faults: Mutex::new(faults),
        ..Shared::default()
    });
    let mcp: StreamableHttpService<StreamCo, LocalSessionManager> = StreamableHttpService::new(
        {
            let shared = shared.clone();
            move || Ok(StreamCo::new(&shared))
        },
        Default::default(),
        StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_allowed_hosts(
                ["localhost", "127.0.0.1", "::1"]
                    .into_iter()
                    .map(str::to_owned)
                    .chain(allowed_hosts),
            ),
    );
    Router::new()
        .route("/llms-full.txt", get(knowledge))
        .route("/runbooks/lag.md", get(runbook))
        .route("/debug/requests", get(requests))
        .route("/debug/faults", put(set_faults))
        .route("/debug/list-changed", post(notify_list_changed))
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            record_and_fault,
        ))
        .with_state(shared)
}
