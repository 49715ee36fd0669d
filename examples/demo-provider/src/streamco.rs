//! The StreamCo MCP server — its tools, as the current faults leave and describe them — and
//! the state every route of the demo provider shares.

use std::sync::{Arc, Mutex};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::service::{NotificationContext, Peer};
use rmcp::{RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::json;

use crate::recording::Recorded;

/// What every route of the provider shares.
#[derive(Default)]
pub(crate) struct Shared {
    /// The faults set now.
    pub(crate) faults: Mutex<Vec<String>>,
    /// Every request received, in order.
    pub(crate) requests: Mutex<Vec<Recorded>>,
    /// The sessions opened with the `list-changed` switch on, told of list changes by
    /// `POST /debug/list-changed`.
    pub(crate) peers: Mutex<Vec<Peer<RoleServer>>>,
    /// The tools as the faults now shape them, rebuilt when the faults change: every session
    /// lists and calls what is current, as a server announcing list changes must.
    pub(crate) router: Mutex<Option<Arc<ToolRouter<StreamCo>>>>,
    /// How many times the runbook was asked for (`runbook-per-request` says which answer).
    pub(crate) runbooks_served: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// The faults set now.
    pub(crate) fn faults(&self) -> Vec<String> {
        self.faults.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// Whether the switch `fault` is set.
    pub(crate) fn has(&self, fault: &str) -> bool {
        self.faults().iter().any(|f| f == fault)
    }

    /// Adds `request` to the record.
    pub(crate) fn record(&self, request: Recorded) {
        if let Ok(mut requests) = self.requests.lock() {
            requests.push(request);
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct StreamName {
    /// The stream's name, e.g. `orders`.
    name: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ProjectName {
    /// A project name.
    #[serde(rename = "Project")]
    project: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct PipelineName {
    /// The pipeline's name, e.g. `orders-to-warehouse`.
    pipeline: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct SearchQuery {
    /// What to search for.
    query: String,
    /// How many results at most.
    limit: Option<u32>,
}

const STREAMS: [(&str, &str, u64); 3] = [
    ("orders", "Healthy", 12),
    ("payments", "Healthy", 3),
    ("clickstream", "Lagging", 48_210),
];

/// The stream named `name`: its name, state and consumer lag.
fn stream(name: &str) -> Option<(&'static str, &'static str, u64)> {
    STREAMS.iter().copied().find(|(n, _, _)| *n == name)
}

/// The StreamCo MCP server.
#[derive(Clone)]
pub(crate) struct StreamCo {
    shared: Arc<Shared>,
    /// Whether this session advertises `tools.listChanged` (the `list-changed` switch).
    list_changed: bool,
}

#[tool_router]
impl StreamCo {
    /// One session's server: it advertises list changes if the `list-changed` switch is set.
    pub(crate) fn new(shared: &Arc<Shared>) -> Self {
        Self {
            shared: shared.clone(),
            list_changed: shared.has("list-changed"),
        }
    }

    /// The tools the current faults leave and describe (built once per change of faults).
    fn router(&self) -> Arc<ToolRouter<Self>> {
        let mut cached = match self.shared.router.lock() {
            Ok(cached) => cached,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(router) = cached.as_ref() {
            return router.clone();
        }
        let mut tool_router = Self::tool_router();
        for fault in self.shared.faults() {
            if let Some(name) = fault.strip_prefix("drop-tool:") {
                tool_router.disable_route(name.to_owned());
            }
            if let Some((name, description)) = fault
                .strip_prefix("describe:")
                .and_then(|rest| rest.split_once('='))
                && let Some(route) = tool_router.map.get_mut(name)
            {
                route.attr.description = Some(description.to_owned().into());
            }
        }
        let router = Arc::new(tool_router);
        *cached = Some(router.clone());
        router
    }

    #[tool(description = "List the streams of this project with their state and consumer lag.")]
    fn streams_list(&self) -> CallToolResult {
        let streams: Vec<_> = STREAMS
            .iter()
            .map(|(name, state, lag)| json!({ "name": name, "state": state, "consumerLag": lag }))
            .collect();
        CallToolResult::structured(json!({ "streams": streams }))
    }

    #[tool(description = "Get one stream by name.")]
    fn streams_get(
        &self,
        Parameters(StreamName { name }): Parameters<StreamName>,
    ) -> CallToolResult {
        match stream(&name) {
            Some((name, state, lag)) => CallToolResult::structured(
                json!({ "name": name, "state": state, "consumerLag": lag, "partitions": 12 }),
            ),
            None => CallToolResult::error(vec![ContentBlock::text(format!(
                "no stream named {name:?}; streams_list shows the streams that exist"
            ))]),
        }
    }

    #[tool(description = "Diagnose a pipeline: where lag builds up and what to check first.")]
    fn pipeline_diagnose(
        &self,
        Parameters(PipelineName { pipeline }): Parameters<PipelineName>,
    ) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(format!(
            "pipeline {pipeline}: consumer group lag 48210 on clickstream partition 7; \
             the consumer restarted 3 times in 10 minutes. Check its memory limit first."
        ))])
    }

    #[tool(
        description = "A stream's consumer lag per partition (a 30-character name: composed under a long server name it must be shortened)."
    )]
    fn streams_consumer_lag_breakdown(
        &self,
        Parameters(StreamName { name }): Parameters<StreamName>,
    ) -> CallToolResult {
        match stream(&name) {
            Some((name, _, lag)) => CallToolResult::structured(
                json!({ "name": name, "partitions": [{ "partition": 7, "consumerLag": lag }] }),
            ),
            None => CallToolResult::error(vec![ContentBlock::text(format!(
                "no stream named {name:?}"
            ))]),
        }
    }

    #[tool(
        description = "Streams of a named project (takes a project argument, which Capstan never exposes)."
    )]
    fn streams_by_project(
        &self,
        Parameters(ProjectName { project }): Parameters<ProjectName>,
    ) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(format!("streams of {project}"))])
    }

    #[tool(
        description = "Search StreamCo's documentation (serves the routed capability cap.web.search)."
    )]
    fn docs_search(
        &self,
        Parameters(SearchQuery { query, limit }): Parameters<SearchQuery>,
    ) -> CallToolResult {
        let results: Vec<_> = STREAMS
            .iter()
            .take(limit.unwrap_or(3) as usize)
            .map(|(name, _, _)| {
                json!({
                    "title": format!("{name} stream"),
                    "url": format!("https://docs.streamco.example/streams/{name}"),
                    "snippet": format!("{query}: how the {name} stream works"),
                })
            })
            .collect();
        CallToolResult::structured(json!({ "results": results }))
    }

    #[tool(description = "Export every stream's configuration (not on the example allow-list).")]
    fn streams_export(&self) -> CallToolResult {
        CallToolResult::structured(json!({ "export": STREAMS.len() }))
    }

    #[tool(
        description = "Restart a stream's consumers (changes something).",
        annotations(read_only_hint = false, destructive_hint = true)
    )]
    fn streams_restart(
        &self,
        Parameters(StreamName { name }): Parameters<StreamName>,
    ) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(format!(
            "consumers of {name} restarted"
        ))])
    }
}

#[tool_handler(router = self.router())]
impl ServerHandler for StreamCo {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.list_changed {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
        ServerConfig::new(capabilities)
            .with_instructions("StreamCo streaming: inspect streams and diagnose pipelines.")
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if self.list_changed
            && let Ok(mut peers) = self.shared.peers.lock()
        {
            peers.push(context.peer);
        }
    }
}
