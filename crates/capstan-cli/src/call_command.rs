//! `capstanctl call`: one composed tool called through a capstan-sidecar, in one MCP session
//! (initialize, call, end) over its Unix socket.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use capstan_api::wire::MCP_URL;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};
use rmcp::{ServiceError, ServiceExt};
use serde_json::Value;

use crate::output::{Output, column_width, print_json};
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
    #[command(flatten)]
    output: Output,
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
        Ok(result) => {
            if args.output.is_json() {
                print_json(&serde_json::to_value(&result).unwrap_or_default());
            } else if args.tool == FIND_TOOLS
                && let Some(found) = result.structured_content.as_ref().and_then(render_found)
            {
                print!("{found}");
            } else {
                print!("{}", render(&result));
            }
            if result.is_error == Some(true) {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(SidecarError::Call {
            tool,
            source: ServiceError::McpError(error),
        }) => fail(&format!(
            "calling {tool}: refused ({}): {}",
            error.code.0, error.message
        )),
        Err(error) => fail(&error.to_string()),
    }
}

/// A result for a person: a tool error as `error: <kind>: <message>` (and when to retry), the
/// kind the model acts on (README "Errors"); otherwise the text blocks, or the structured
/// content when there is no text.
fn render(result: &CallToolResult) -> String {
    let mut out = String::new();
    let error = result
        .structured_content
        .as_ref()
        .and_then(|structured| structured.get("error"))
        .filter(|_| result.is_error == Some(true));
    if let Some(error) = error
        && let Some(kind) = error["kind"].as_str()
    {
        let message = error["message"].as_str().unwrap_or_default();
        let _ = writeln!(out, "error: {kind}: {message}");
        if error["retryable"] == true {
            let retry = error["retryAfterMs"].as_u64().map_or_else(
                || "retryable".to_owned(),
                |ms| format!("retryable: after {ms} ms"),
            );
            let _ = writeln!(out, "{retry}");
        }
        return out;
    }
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
    out
}

/// The sidecar's search tool (docs/tool-search.md), whose answer reads best as a table.
const FIND_TOOLS: &str = "find_tools";

/// A `find_tools` answer for a person: whether it matched and the note, then one row per tool
/// found, best first — its name, binding and service, arguments (`?` marks the optional ones)
/// and the first line of its description. `None` when the answer is not one (an error): printed as any other result.
fn render_found(answer: &Value) -> Option<String> {
    let tools = answer["tools"].as_array()?;
    let mut out = String::new();
    let matched = answer["match"].as_str()?;
    let note = answer["note"].as_str().unwrap_or_default();
    let _ = writeln!(out, "match: {matched} — {note}");
    if tools.is_empty() {
        return Some(out);
    }
    let rows: Vec<[String; 4]> = tools
        .iter()
        .map(|tool| {
            let text = |key: &str| tool[key].as_str().unwrap_or_default().to_owned();
            let place = format!("{} / {}", text("binding"), text("service"));
            let description = text("description")
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            [
                text("name"),
                place,
                arguments(&tool["inputSchema"]),
                description,
            ]
        })
        .collect();
    let headers = ["TOOL", "BINDING / SERVICE", "ARGUMENTS", "DESCRIPTION"];
    let widths: Vec<usize> = (0..3)
        .map(|i| column_width(headers[i], rows.iter().map(|row| row[i].clone())))
        .collect();
    let line = |cells: [&str; 4]| {
        let [name, place, args, description] = cells;
        let (w0, w1, w2) = (widths[0], widths[1], widths[2]);
        format!("{name:<w0$}  {place:<w1$}  {args:<w2$}  {description}")
    };
    let _ = writeln!(out, "\n{}", line(headers).trim_end());
    for row in &rows {
        let _ = writeln!(
            out,
            "{}",
            line(row.each_ref().map(String::as_str)).trim_end()
        );
    }
    Some(out)
}

/// A tool's arguments by name, the required first, the optional marked `?`.
fn arguments(schema: &Value) -> String {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = schema["properties"].as_object();
    let names = properties.into_iter().flat_map(|p| p.keys());
    let (needed, optional): (Vec<&String>, Vec<&String>) =
        names.partition(|name| required.contains(&name.as_str()));
    let optional = optional.into_iter().map(|name| format!("{name}?"));
    let all: Vec<String> = needed.into_iter().cloned().chain(optional).collect();
    if all.is_empty() {
        "-".to_owned()
    } else {
        all.join(", ")
    }
}

async fn call_tool(
    target: &Target,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, SidecarError> {
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
    result.map_err(|source| SidecarError::Call {
        tool: tool.to_owned(),
        source,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rmcp::model::ContentBlock;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_tool_error_should_read_as_its_kind_and_message_with_when_to_retry() {
        let refused = CallToolResult::structured_error(json!({"error": {
            "kind": "invalid_input", "message": "name: 42 is not of type \"string\"",
            "retryable": false, "field": "name"}}));
        assert_eq!(
            render(&refused),
            "error: invalid_input: name: 42 is not of type \"string\"\n"
        );
        let limited = CallToolResult::structured_error(json!({"error": {
            "kind": "rate_limited", "message": "over 60 calls a minute", "retryable": true,
            "retryAfterMs": 1500}}));
        assert_eq!(
            render(&limited),
            "error: rate_limited: over 60 calls a minute\nretryable: after 1500 ms\n"
        );
    }

    #[test]
    fn a_search_answer_should_read_as_a_table_best_first_with_each_tools_arguments() {
        let answer = json!({"match": "good", "note": "Best first.", "tools": [
            {"name": "streamco__pipeline_diagnose", "binding": "streamco-binding",
             "service": "streaming.streamco.example", "description": "Diagnose a pipeline.",
             "inputSchema": {"type": "object", "required": ["pipeline"],
                             "properties": {"since": {}, "pipeline": {}}}},
            {"name": "archive__docs_search", "binding": "archive-binding",
             "service": "search.archive.example", "description": "Search the archive.",
             "inputSchema": {"type": "object"}}]});
        assert_eq!(
            render_found(&answer).unwrap(),
            "match: good — Best first.\n\n\
             TOOL                         BINDING / SERVICE                              ARGUMENTS         DESCRIPTION\n\
             streamco__pipeline_diagnose  streamco-binding / streaming.streamco.example  pipeline, since?  Diagnose a pipeline.\n\
             archive__docs_search         archive-binding / search.archive.example       -                 Search the archive.\n"
        );
        let none = json!({"match": "none", "note": "No tool serves this need well.", "tools": []});
        assert_eq!(
            render_found(&none).unwrap(),
            "match: none — No tool serves this need well.\n"
        );
        assert_eq!(
            render_found(&json!({"error": {"kind": "rate_limited"}})),
            None
        );
    }

    #[test]
    fn a_success_should_print_its_text_and_never_read_as_an_error() {
        // A provider's own answer may carry a member named `error`: only an error result is one.
        let mut answer = CallToolResult::success(vec![ContentBlock::text("{\"error\": \"none\"}")]);
        answer.structured_content = Some(json!({"error": {"kind": "invalid_input"}}));
        assert_eq!(render(&answer), "{\"error\": \"none\"}\n");
    }
}
