//! MCP upstreams: one rmcp Streamable HTTP client per `mcpServers[]` entry.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ErrorCode, JsonObject, Tool,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use sse_stream::SseStream;
use std::sync::atomic::{AtomicBool, AtomicU64};
use thiserror::Error;

use crate::fetch::{ClientError, error_chain, guarded_client_builder};
use crate::guard::{EndpointGuard, Refusal, address_refused};
use crate::pooled::{DrainOnDrop, PooledClient};

/// How long an idle upstream connection is kept for reuse.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// Why an upstream contributed no tools.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConnectError {
    /// The endpoint is outside the allow-list or resolves to a refused address.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Connecting or initializing failed or took too long.
    #[error("connecting to {endpoint}: {message}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// What failed.
        message: String,
    },
    /// `tools/list` failed.
    #[error("listing the tools of {endpoint}: {message}")]
    List {
        /// The endpoint.
        endpoint: String,
        /// What failed.
        message: String,
    },
}

/// Why a forwarded call produced no result. Each maps onto one of design.md's error kinds.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CallError {
    /// The tool is not on the server's allow-list.
    #[error("tool {tool} is not allowed on MCP server {server}")]
    NotAllowed {
        /// The MCP server entry.
        server: String,
        /// The tool's upstream name.
        tool: String,
    },
    /// The upstream refused the arguments.
    #[error("{server} refused the arguments of {tool}: {message}")]
    InvalidInput {
        /// The MCP server entry.
        server: String,
        /// The tool's upstream name.
        tool: String,
        /// The upstream's message.
        message: String,
    },
    /// The upstream cannot be reached or did not answer in time.
    #[error("{server} is unavailable: {message}")]
    Unavailable {
        /// The MCP server entry.
        server: String,
        /// What failed.
        message: String,
    },
    /// The upstream answered with something that is not a tool result.
    #[error("{server} answered with a malformed response: {message}")]
    Malformed {
        /// The MCP server entry.
        server: String,
        /// What was wrong.
        message: String,
    },
}

/// An initialized client of one MCP server, limited to its allow-list.
pub struct Upstream {
    /// The `mcpServers[].name` entry.
    pub server: String,
    /// The endpoint URL.
    pub endpoint: String,
    allowed: BTreeSet<String>,
    client: RunningService<RoleClient, ClientConfig>,
    direct: Option<DirectCalls>,
    closed: AtomicBool,
}

/// What a tool call needs to go straight to the server (see [`Upstream::call`]).
struct DirectCalls {
    http: reqwest::Client,
    url: String,
    session: String,
    version: String,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("server", &self.server)
            .field("endpoint", &self.endpoint)
            .field("allowed", &self.allowed)
            .finish_non_exhaustive()
    }
}

/// Opens MCP upstream sessions through one shared, guarded HTTP client. One client for every
/// upstream: building a client parses the TLS root store (the sidecar benchmark measured
/// ~250 KiB and a visible share of session setup per client).
#[derive(Clone, Debug)]
pub struct Connector {
    guard: EndpointGuard,
    http: reqwest::Client,
    timeout: Duration,
}

impl Connector {
    /// A connector admitting what `guard` admits, giving each upstream `timeout` to connect,
    /// initialize and list its tools.
    pub fn new(guard: EndpointGuard, timeout: Duration) -> Result<Self, ClientError> {
        // MCP follows no redirects: a redirect would move the session somewhere unchecked.
        let http = guarded_client_builder(&guard)
            .redirect(reqwest::redirect::Policy::none())
            // Kept-alive connections are reused: `PooledClient` reads every response stream
            // to its end, which is what makes pooling safe (see pooled.rs).
            .pool_idle_timeout(POOL_IDLE)
            .connect_timeout(timeout)
            .build()?;
        Ok(Self {
            guard,
            http,
            timeout,
        })
    }

    /// Connects to `endpoint` (guard first) and lists its tools.
    pub async fn connect(
        &self,
        server: &str,
        endpoint: &str,
        allowed: BTreeSet<String>,
    ) -> Result<(Upstream, Vec<Tool>), ConnectError> {
        connect(
            &self.guard,
            self.http.clone(),
            server,
            endpoint,
            allowed,
            self.timeout,
        )
        .await
    }
}

async fn connect(
    guard: &EndpointGuard,
    http: reqwest::Client,
    server: &str,
    endpoint: &str,
    allowed: BTreeSet<String>,
    timeout: Duration,
) -> Result<(Upstream, Vec<Tool>), ConnectError> {
    let checked = guard.check(endpoint)?;
    let connect_error = |message: String| ConnectError::Connect {
        endpoint: endpoint.to_owned(),
        message,
    };
    let pooled = PooledClient::new(http.clone());
    let transport = StreamableHttpClientTransport::with_client(
        pooled.clone(),
        StreamableHttpClientTransportConfig::with_uri(checked.url.as_str().to_owned()),
    );
    let client = match tokio::time::timeout(timeout, ClientConfig::default().serve(transport)).await
    {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => {
            if let Some(refused) = pooled.refused().or_else(|| address_refused(&error)) {
                return Err(ConnectError::Refused(Refusal {
                    url: endpoint.to_owned(),
                    reason: refused.to_string(),
                }));
            }
            return Err(connect_error(error_chain(&error)));
        }
        Err(_) => return Err(connect_error(format!("no answer within {timeout:?}"))),
    };
    let tools = match tokio::time::timeout(timeout, client.list_all_tools()).await {
        Ok(Ok(tools)) => tools,
        Ok(Err(error)) => {
            let _ = client.cancel().await;
            return Err(ConnectError::List {
                endpoint: endpoint.to_owned(),
                message: error_chain(&error),
            });
        }
        Err(_) => {
            let _ = client.cancel().await;
            return Err(ConnectError::List {
                endpoint: endpoint.to_owned(),
                message: format!("no answer within {timeout:?}"),
            });
        }
    };
    // Direct calls need a session: every revision up to 2025-11-25 has one. A server that
    // assigned none is called through rmcp only.
    let version = client
        .peer_info()
        .map(|info| info.protocol_version.as_str().to_owned());
    let direct = match (pooled.session(), version) {
        (Some(session), Some(version)) if version.as_str() <= SESSION_REVISIONS_UP_TO => {
            Some(DirectCalls {
                http,
                url: checked.url.as_str().to_owned(),
                session: session.to_owned(),
                version,
                next_id: AtomicU64::new(1),
            })
        }
        _ => None,
    };
    let upstream = Upstream {
        server: server.to_owned(),
        endpoint: endpoint.to_owned(),
        allowed,
        client,
        direct,
        closed: AtomicBool::new(false),
    };
    Ok((upstream, tools))
}

impl Upstream {
    /// Whether `tool` (the upstream's own name) is on the allow-list.
    pub fn allows(&self, tool: &str) -> bool {
        self.allowed.contains(tool)
    }

    /// Forwards one call. The allow-list is checked here again, whatever the caller checked.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
    ) -> Result<CallToolResult, CallError> {
        if !self.allows(tool) {
            return Err(CallError::NotAllowed {
                server: self.server.clone(),
                tool: tool.to_owned(),
            });
        }
        let answer = match &self.direct {
            Some(direct) if !self.closed.load(std::sync::atomic::Ordering::Acquire) => {
                tokio::time::timeout(timeout, self.call_direct(direct, tool, arguments)).await
            }
            _ => {
                let mut params = CallToolRequestParams::new(tool.to_owned());
                params.arguments = arguments;
                tokio::time::timeout(timeout, async {
                    self.client
                        .call_tool(params)
                        .await
                        .map_err(|error| self.classify(tool, &error))
                })
                .await
            }
        };
        answer.unwrap_or_else(|_| {
            Err(CallError::Unavailable {
                server: self.server.clone(),
                message: format!("no answer within {timeout:?}"),
            })
        })
    }

    /// One `tools/call` POSTed in the caller's own task on the session rmcp opened.
    ///
    /// rmcp's client routes every request through its service loop, its transport worker and
    /// a task per response stream, and back (the sidecar benchmark's profile was dominated by
    /// those task switches; this path cut the forwarded call's latency by a third). The
    /// session's lifecycle — initialize, tools/list, the GET stream, DELETE — stays with
    /// rmcp; this sends one request and reads its answer (JSON, or the SSE stream up to the
    /// response with this request's id), under the same limits rmcp applies.
    async fn call_direct(
        &self,
        direct: &DirectCalls,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, CallError> {
        let unavailable = |message: String| CallError::Unavailable {
            server: self.server.clone(),
            message,
        };
        let malformed = |message: String| CallError::Malformed {
            server: self.server.clone(),
            message,
        };
        let id = format!(
            "capstan-{}",
            direct
                .next_id
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let request = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": { "name": tool, "arguments": arguments.unwrap_or_default() },
        });
        let response = direct
            .http
            .post(&direct.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-session-id", &direct.session)
            .header("mcp-protocol-version", &direct.version)
            .body(serde_json::to_vec(&request).unwrap_or_default())
            .send()
            .await
            .map_err(|error| unavailable(error_chain(&error)))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(unavailable(
                "the server no longer knows this session (HTTP 404)".into(),
            ));
        }
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        let mut answer = match content_type.as_str() {
            "application/json" => {
                let body = read_limited(response, MAX_ANSWER_BYTES)
                    .await
                    .map_err(|e| unavailable(error_chain(&e)))?;
                serde_json::from_slice::<Value>(&body)
                    .map_err(|e| malformed(format!("the answer is not JSON: {e}")))?
            }
            "text/event-stream" if status.is_success() => {
                let mut size = 0usize;
                let bytes = response.bytes_stream().map(move |chunk| {
                    let chunk = chunk?;
                    size += chunk.len();
                    if size > MAX_ANSWER_BYTES {
                        return Err(ReadError::TooLarge);
                    }
                    Ok(chunk)
                });
                let mut events = DrainOnDrop::new(SseStream::from_bytes_stream(bytes).boxed());
                loop {
                    let Some(event) = events.next().await else {
                        return Err(malformed(
                            "the response stream ended without an answer".into(),
                        ));
                    };
                    let event = event.map_err(|e| unavailable(error_chain(&e)))?;
                    let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                        continue;
                    };
                    let message = serde_json::from_str::<Value>(&data)
                        .map_err(|e| malformed(format!("an event is not JSON: {e}")))?;
                    // Notifications (progress, logs) are not forwarded.
                    if message.get("id") == Some(&Value::String(id.clone())) {
                        break message;
                    }
                }
            }
            _ => {
                return Err(if status.is_success() {
                    malformed(format!("unexpected content type {content_type:?}"))
                } else {
                    unavailable(format!("HTTP {status}"))
                });
            }
        };
        if let Some(error) = answer.get("error") {
            let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            return Err(if code == i64::from(ErrorCode::INVALID_PARAMS.0) {
                CallError::InvalidInput {
                    server: self.server.clone(),
                    tool: tool.to_owned(),
                    message,
                }
            } else {
                unavailable(format!("error {code}: {message}"))
            });
        }
        let Some(result) = answer.get_mut("result").map(Value::take) else {
            return Err(malformed(
                "the answer to tools/call has neither a result nor an error".into(),
            ));
        };
        serde_json::from_value::<CallToolResult>(result)
            .map_err(|_| malformed("the answer to tools/call is not a tool result".into()))
    }

    fn classify(&self, tool: &str, error: &ServiceError) -> CallError {
        let server = self.server.clone();
        match error {
            ServiceError::McpError(data) if data.code == ErrorCode::INVALID_PARAMS => {
                CallError::InvalidInput {
                    server,
                    tool: tool.to_owned(),
                    message: data.message.to_string(),
                }
            }
            ServiceError::UnexpectedResponse => CallError::Malformed {
                server,
                message: "the answer to tools/call is not a tool result".into(),
            },
            other => {
                let message = error_chain(other);
                if looks_malformed(&message) {
                    CallError::Malformed { server, message }
                } else {
                    CallError::Unavailable { server, message }
                }
            }
        }
    }

    /// Ends the session with the upstream and waits until it is closed.
    pub async fn close(self) {
        let _ = self.client.cancel().await;
    }

    /// Ends the session with the upstream without waiting (usable from `Drop`); calls made
    /// afterwards fail as unavailable.
    pub fn shutdown(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.client.cancellation_token().cancel();
    }
}

/// The largest answer a direct call reads: rmcp's own limit for a JSON response.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// The newest protocol revision with sessions (later ones are served through rmcp only).
const SESSION_REVISIONS_UP_TO: &str = "2025-11-25";

/// Why an answer could not be read.
#[derive(Debug, Error)]
enum ReadError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("the answer exceeds {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
}

async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// rmcp reports an undecodable body as a transport error; its text names the decoding step.
fn looks_malformed(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    [
        "deserialize",
        "parse",
        "expected value",
        "invalid type",
        "unexpected content type",
        "json",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}
