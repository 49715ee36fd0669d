//! What the sidecar tells a caller about itself: `initialize` (a session revision's handshake,
//! which starts the session's task) and `server/discover` (2026-07-28, from the caller's
//! task). Both answer with the same declaration ([`server_config`]), the caller's instructions,
//! and the skills extension only when the caller's composition has a skill.

use capstan_upstream::mcp::CallerRevision;
use capstan_upstream::mcp::ClientAsks;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    DiscoverResult, Implementation, InitializeRequestParams, InitializeResult, ProtocolVersion,
    ServerCapabilities, ServerConfig, ServerResult,
};
use serde_json::json;
use tracing::info;

use super::skills;
use crate::edge::protocol::SUPPORTED_VERSIONS;
use crate::edge::request::Checked;
use crate::task::Task;
use crate::tasks::{Admitted, TaskStarter};

/// What the sidecar declares of itself, the same to every caller before its composition is known.
/// listChanged: a session's tools follow its bindings and upstreams (`composition/refresh.rs`).
/// logging: `logging/setLevel` is passed to the providers, and their messages about a call reach
/// its caller (capstan-upstream `mcp/relay.rs`). prompts, resources, completions: what the task's
/// bindings select, forwarded to the provider that offers it (`composer/offerings.rs` in
/// capstan-compose); their list changes and the updates of subscribed resources reach the caller
/// (`composition/refresh.rs`). skills: the bindings' skills through the MCP skills extension
/// (`edge/methods/skills.rs`), told to a caller only when its composition has one
/// (`skills::declare`).
// `enable_logging` is deprecated in rmcp with the capability (SEP-2577); the session
// revisions have it.
#[allow(deprecated)]
pub(in crate::edge) fn server_config() -> ServerConfig {
    let capabilities = ServerCapabilities::builder()
        .enable_logging()
        .enable_tools()
        .enable_tool_list_changed()
        .enable_prompts()
        .enable_prompts_list_changed()
        .enable_resources()
        .enable_resources_list_changed()
        .enable_resources_subscribe()
        .enable_completions()
        .enable_skills()
        .build();
    ServerConfig::new(capabilities).with_server_info(Implementation::new(
        "capstan-sidecar",
        env!("CARGO_PKG_VERSION"),
    ))
}

/// `initialize`: composes the caller's project and starts the session's task, in the place
/// the gate admitted (the gate binds it to the session id it mints when this answers).
pub(in crate::edge) async fn initialize(
    starter: &TaskStarter,
    checked: &Checked,
    request: InitializeRequestParams,
) -> Result<ServerResult, McpError> {
    if checked.session.is_some() {
        return Err(McpError::invalid_request(
            "the session is already initialized",
            None,
        ));
    }
    let mut result = server_config();
    result.protocol_version = negotiated(&request.protocol_version)?;
    let asks = ClientAsks::from_capabilities(&json!(request.capabilities));
    let identity = checked.identity.clone();
    let project = starter
        .compose(&identity, CallerRevision::Sessions(asks))
        .await;
    let instructions = &project.composed.composition.instructions;
    if !instructions.is_empty() {
        result.instructions = Some(instructions.clone());
    }
    skills::declare(&mut result.capabilities, &project.composed);
    let admitted = checked.admitted.as_ref();
    let place = admitted.and_then(Admitted::take_place);
    let task = starter.start(identity, project, place, Some(asks));
    if let Some(admitted) = admitted {
        admitted.started(&task);
    }
    let served = task.served();
    task.tool_search()
        .add_instructions(&served, &mut result.instructions);
    let bindings = &served.composed().composition.bindings;
    info!(
        project = %task.identity().project,
        tools = served.tools().len(),
        degraded = bindings.iter().filter(|b| b.degraded()).count(),
        "session initialized"
    );
    Ok(ServerResult::InitializeResult(result))
}

/// The revision a session speaks: the one its client asks for, if the sidecar speaks it over
/// `initialize`; else the newest the sidecar speaks so (the client then decides whether it can).
fn negotiated(asked: &ProtocolVersion) -> Result<ProtocolVersion, McpError> {
    if asked.has_initialize() && SUPPORTED_VERSIONS.contains(asked) {
        return Ok(asked.clone());
    }
    SUPPORTED_VERSIONS
        .iter()
        .filter(|version| version.has_initialize())
        .max_by(|left, right| left.as_str().cmp(right.as_str()))
        .cloned()
        .ok_or_else(|| McpError::unsupported_protocol_version(asked.clone(), SUPPORTED_VERSIONS))
}

/// `server/discover`: the declaration with the caller's instructions (discovering composes
/// the caller's task, which the requests that follow reuse).
pub(super) fn discover(task: &Task) -> ServerResult {
    let mut info: InitializeResult = server_config();
    let served = task.served();
    let instructions = &served.composed().composition.instructions;
    if !instructions.is_empty() {
        info.instructions = Some(instructions.clone());
    }
    task.tool_search()
        .add_instructions(&served, &mut info.instructions);
    skills::declare(&mut info.capabilities, served.composed());
    ServerResult::DiscoverResult(DiscoverResult::from_server_info(
        SUPPORTED_VERSIONS.to_vec(),
        info,
    ))
}
