//! MCP upstreams: one rmcp Streamable HTTP client per `mcpServers[]` entry.

use std::collections::BTreeSet;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ErrorCode, JsonObject, Tool,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use thiserror::Error;

use crate::fetch::{ClientError, error_chain, guarded_client_builder};
use crate::guard::{EndpointGuard, Refusal, address_refused};

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
        let http = guarded_client_builder()
            .redirect(reqwest::redirect::Policy::none())
            // No idle pooling: a pooled connection whose last SSE response was not read to
            // the end stalls the next request ~40 ms on Linux's delayed ACK (the composer
            // benchmark measured 42.8 ms per forwarded call with pooling, against 1.3 ms
            // direct). rmcp's own default client makes the same choice.
            .pool_max_idle_per_host(0)
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
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(checked.url.as_str().to_owned()),
    );
    let client = match tokio::time::timeout(timeout, ClientConfig::default().serve(transport)).await
    {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => {
            if let Some(refused) = address_refused(&error) {
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
    let upstream = Upstream {
        server: server.to_owned(),
        endpoint: endpoint.to_owned(),
        allowed,
        client,
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
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = arguments;
        match tokio::time::timeout(timeout, self.client.call_tool(params)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(self.classify(tool, &error)),
            Err(_) => Err(CallError::Unavailable {
                server: self.server.clone(),
                message: format!("no answer within {timeout:?}"),
            }),
        }
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
        self.client.cancellation_token().cancel();
    }
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
