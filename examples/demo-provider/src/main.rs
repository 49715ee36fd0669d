//! `demo-provider`: the StreamCo provider of the examples, as a real MCP server (Streamable
//! HTTP, rmcp) that also serves its knowledge (`/llms-full.txt`) and a runbook
//! (`/runbooks/lag.md`).
//!
//! Faults for tests, set with `--fault` (repeatable), `DEMO_PROVIDER_FAULTS` (comma-separated)
//! or at run time with `PUT /debug/faults` (a JSON array):
//! `hang` (MCP requests never answer), `hang-calls` (`tools/call` requests never answer),
//! `http-500`, `malformed` (MCP answers are not JSON-RPC),
//! `drop-tool:<name>` (left out of `tools/list`), `describe:<name>=<text>` (the tool listed
//! with that description: a changed definition), `oversized-knowledge` (1 MiB of knowledge),
//! `slow-calls:<ms>` (`tools/call` answered after that long), `slow-drip` (MCP answers sent one
//! byte every 200 ms), `list-changed` (sessions opened while it is set advertise
//! `tools.listChanged`; `POST /debug/list-changed` sends them `notifications/tools/list_changed`).
//! `drop-tool` and `describe` apply to every session at once, open ones included: after a list
//! change, `tools/list` on the same session shows the new list, as a server must.
//! Every request's method, path and headers are recorded, and for MCP POSTs the JSON-RPC
//! method and the tool a `tools/call` names; `GET /debug/requests` returns them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::service::{NotificationContext, Peer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The demo provider's settings.
#[derive(Debug, clap::Parser)]
#[command(name = "demo-provider", version, about)]
struct Config {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, env = "DEMO_PROVIDER_LISTEN", default_value = "127.0.0.1:7810")]
    listen: SocketAddr,

    /// Faults to start with (see the module documentation).
    #[arg(long = "fault", env = "DEMO_PROVIDER_FAULTS", value_delimiter = ',')]
    faults: Vec<String>,

    /// Host names MCP requests may carry besides localhost, 127.0.0.1 and ::1 (the MCP
    /// server's DNS-rebinding check), e.g. the name a sidecar dials it by.
    #[arg(
        long = "allowed-host",
        env = "DEMO_PROVIDER_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String>,
}

/// One recorded HTTP request.
#[derive(Clone, Debug, Serialize)]
struct Recorded {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    /// The JSON-RPC messages of an MCP POST: method, and the tool of a `tools/call`.
    rpc: Vec<RpcMessage>,
}

/// What one JSON-RPC message asked for.
#[derive(Clone, Debug, Serialize)]
struct RpcMessage {
    method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
}

impl RpcMessage {
    /// The messages of a body (one message or a batch); nothing for a body that is not JSON.
    fn read(body: &[u8]) -> Vec<Self> {
        let one = |message: &serde_json::Value| Self {
            method: message["method"].as_str().map(str::to_owned),
            tool: (message["method"] == "tools/call")
                .then(|| message["params"]["name"].as_str().map(str::to_owned))
                .flatten(),
        };
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(serde_json::Value::Array(batch)) => batch.iter().map(one).collect(),
            Ok(message) => vec![one(&message)],
            Err(_) => Vec::new(),
        }
    }
}

/// Largest MCP request body the provider reads to record it: far above any test's call.
const MAX_RECORDED_BODY: usize = 16 * 1024 * 1024;

#[derive(Default)]
struct Shared {
    faults: Mutex<Vec<String>>,
    requests: Mutex<Vec<Recorded>>,
    /// The sessions opened with the `list-changed` switch on, told of list changes by
    /// `POST /debug/list-changed`.
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// The tools as the faults now shape them, rebuilt when the faults change: every session
    /// lists and calls what is current, as a server announcing list changes must.
    router: Mutex<Option<Arc<ToolRouter<StreamCo>>>>,
}

impl Shared {
    fn faults(&self) -> Vec<String> {
        self.faults.lock().map(|f| f.clone()).unwrap_or_default()
    }

    fn has(&self, fault: &str) -> bool {
        self.faults().iter().any(|f| f == fault)
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
struct StreamCo {
    shared: Arc<Shared>,
    /// Whether this session advertises `tools.listChanged` (the `list-changed` switch).
    list_changed: bool,
}

#[tool_router]
impl StreamCo {
    fn new(shared: &Arc<Shared>) -> Self {
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

const KNOWLEDGE: &str = "# StreamCo streaming\n\nStreamCo runs managed event streams. A Stream \
    carries ordered events in partitions; consumers read them in groups. Consumer lag is the \
    number of events written but not yet read: sustained lag means consumers are too slow or \
    restarting.\n";

const LAG_RUNBOOK: &str = "# Triage consumer lag\n\n1. Call streams_list and find streams whose \
    state is Lagging.\n2. Call pipeline_diagnose for the pipeline reading that stream.\n3. If the \
    consumer restarted recently, check its memory limit before anything else.\n4. Recommend \
    scaling consumers only when lag grows while consumers are healthy.\n";

async fn knowledge(State(shared): State<Arc<Shared>>) -> Response {
    if shared.has("oversized-knowledge") {
        // 1 MiB: well past the composer's 256 KiB per-source cap.
        return KNOWLEDGE
            .repeat(1024 * 1024 / KNOWLEDGE.len() + 1)
            .into_response();
    }
    KNOWLEDGE.into_response()
}

async fn runbook() -> &'static str {
    LAG_RUNBOOK
}

async fn requests(State(shared): State<Arc<Shared>>) -> Response {
    let requests = shared
        .requests
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    axum::Json(requests).into_response()
}

/// Sends `notifications/tools/list_changed` to every session opened with the `list-changed`
/// switch; answers how many were told.
async fn notify_list_changed(State(shared): State<Arc<Shared>>) -> Response {
    let peers = shared.peers.lock().map(|p| p.clone()).unwrap_or_default();
    let mut told = 0usize;
    for peer in peers {
        if peer.notify_tool_list_changed().await.is_ok() {
            told += 1;
        }
    }
    axum::Json(json!({ "told": told })).into_response()
}

async fn set_faults(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
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

/// Records every request; applies the transport-level faults to `/mcp`.
async fn record_and_fault(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let is_mcp = parts.uri.path().starts_with("/mcp");
    let (body, rpc) = if is_mcp && parts.method == axum::http::Method::POST {
        match axum::body::to_bytes(body, MAX_RECORDED_BODY).await {
            Ok(bytes) => {
                let rpc = RpcMessage::read(&bytes);
                (Body::from(bytes), rpc)
            }
            Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "body too large\n").into_response(),
        }
    } else {
        (body, Vec::new())
    };
    let calls_a_tool = rpc.iter().any(|m| m.tool.is_some());
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        rpc,
    };
    if let Ok(mut requests) = shared.requests.lock() {
        requests.push(recorded);
    }
    let request = Request::from_parts(parts, body);
    if is_mcp {
        if shared.has("hang") || (calls_a_tool && shared.has("hang-calls")) {
            std::future::pending::<()>().await;
        }
        if calls_a_tool
            && let Some(ms) = shared
                .faults()
                .iter()
                .find_map(|f| f.strip_prefix("slow-calls:")?.parse::<u64>().ok())
        {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        if shared.has("slow-drip") {
            let response = next.run(request).await;
            let (parts, body) = response.into_parts();
            let bytes = axum::body::to_bytes(body, MAX_RECORDED_BODY)
                .await
                .unwrap_or_default();
            let drip = futures::stream::unfold(0usize, move |at| {
                let bytes = bytes.clone();
                async move {
                    if at >= bytes.len() {
                        return None;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    Some((
                        Ok::<_, std::convert::Infallible>(bytes.slice(at..at + 1)),
                        at + 1,
                    ))
                }
            });
            return Response::from_parts(parts, Body::from_stream(drip));
        }
        if shared.has("http-500") {
            return (StatusCode::INTERNAL_SERVER_ERROR, "injected fault\n").into_response();
        }
        if shared.has("malformed") {
            return Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from("{\"jsonrpc\": \"2.0\", \"id\": oops"))
                .unwrap_or_default();
        }
    }
    next.run(request).await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = <Config as clap::Parser>::parse();
    let shared = Arc::new(Shared {
        faults: Mutex::new(config.faults),
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
                    .chain(config.allowed_hosts),
            ),
    );
    let app = Router::new()
        .route("/llms-full.txt", get(knowledge))
        .route("/runbooks/lag.md", get(runbook))
        .route("/debug/requests", get(requests))
        .route("/debug/faults", axum::routing::put(set_faults))
        .route(
            "/debug/list-changed",
            axum::routing::post(notify_list_changed),
        )
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            record_and_fault,
        ))
        .with_state(shared);
    capstan_demo_provider::serve("demo-provider", config.listen, app).await
}
