//! `capstanctl call`: one composed tool called through a capstan-sidecar, in one MCP session
//! (initialize, call, end) over its Unix socket.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use capstan_api::wire::MCP_URL;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};
use serde_json::Value;

use crate::sidecar_client::{SidecarError, Target, fail, runtime};

/// `capstanctl call`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The composed tool name, e.g. `streamco__streams_list`.
    tool: String,
    /// The arguments as a JSON object.
    #[arg(default_value = "{}")]
    arguments: String,
}

/// Runs `call`: exit 0 with the result printed, 1 when the tool reported an error or the call
/// could not be made.
pub fn run(args: &Args) -> ExitCode {
    let arguments: Value = match serde_json::from_str(&args.arguments) {
        Ok(value @ Value::Object(_)) => value,
        Ok(_) => return fail("the arguments must be a JSON object, e.g. '{\"name\": \"orders\"}'"),
        Err(e) => return fail(&format!("the arguments are not JSON: {e}")),
    };
    let result =
        runtime().and_then(|rt| rt.block_on(call_tool(&args.target, &args.tool, arguments)));
    match result {
        Ok((text, is_error)) => {
            print!("{text}");
            if is_error {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => fail(&error.to_string()),
    }
}

async fn call_tool(
    target: &Target,
    tool: &str,
    arguments: Value,
) -> Result<(String, bool), SidecarError> {
    let socket = target.socket.to_string_lossy().into_owned();
    let header = http::HeaderName::try_from(target.project_header.as_str()).map_err(|e| {
        SidecarError::Header {
            field: "--project-header",
            source: e.into(),
        }
    })?;
    let value =
        http::HeaderValue::try_from(target.project.as_str()).map_err(|e| SidecarError::Header {
            field: "--project",
            source: e.into(),
        })?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(MCP_URL)
        .custom_headers(HashMap::from([(header, value)]));
    if let Some(token) = &target.token {
        config = config.auth_header(token.clone());
    }
    let transport = StreamableHttpClientTransport::with_client(
        UnixSocketHttpClient::new(&socket, MCP_URL),
        config,
    );
    let client = ClientConfig::default()
        .serve(transport)
        .await
        .map_err(|e| SidecarError::Session {
            socket: target.socket.clone(),
            source: Box::new(e),
        })?;
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = arguments.as_object().cloned();
    let result = client.call_tool(params).await;
    let _ = client.cancel().await;
    let result = result.map_err(|source| SidecarError::Call {
        tool: tool.to_owned(),
        source,
    })?;
    let mut out = String::new();
    for block in &result.content {
        if let Some(text) = block.as_text() {
            let _ = writeln!(out, "{}", text.text);
        }
    }
    if let Some(structured) = &result.structured_content
        && result.content.is_empty()
    {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(structured).unwrap_or_default()
        );
    }
    Ok((out, result.is_error == Some(true)))
}
