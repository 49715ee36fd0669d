//! The MCP requests answered in one step, each by its handler here, with rmcp's models as
//! their types: `initialize` and `server/discover` (`methods/handshake.rs`), the lists (tools,
//! prompts, resources and their templates, skills), a prompt, a resource or a skill read
//! (`methods/forwarded.rs`, `methods/skills.rs`), a completion, the log level, a session's
//! resource subscriptions, and `ping`; any other method is unknown (-32601). The edge's
//! dispatcher (`edge.rs`) has already checked the request's protocol headers
//! (`edge/protocol.rs`) and found its task, and its answer is written for the revision it
//! speaks (`edge/answer.rs`).

use std::sync::Arc;

use axum::response::Response;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CacheScope, CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, GetSkillRequestParams, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ResultType, ServerResult, SubscribeRequestParams, UnsubscribeRequestParams,
    skill_name_from_uri, validate_skills,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::answer::Revision;
use super::answer::{answer, json};
use super::request::Checked;
use crate::message::{Envelope, Params};
use crate::task::{MAX_SUBSCRIPTIONS, Task};
use crate::tasks::TaskStarter;

pub(super) mod forwarded;
pub(super) mod handshake;
pub(super) mod skills;

use self::forwarded::{answer as provider_answer, params as forwarded_params, response};

/// How long a client may treat a list as fresh without hearing of a change: a list is
/// recomposed when a binding or a provider changes, and a session hears of it at once
/// (`notifications/*/list_changed`); a client that does not listen re-lists within this.
pub(super) const LIST_TTL_MS: u64 = 10_000;

/// Serves `initialize` (`message`) for the caller `checked` names, starting its session's
/// task with `starter`.
pub(super) async fn initialize(
    starter: &TaskStarter,
    checked: &Checked,
    message: Box<Envelope>,
    revision: Revision,
) -> Response {
    let Envelope { id, params, .. } = *message;
    let id = id.unwrap_or_default();
    let params = match params {
        Params::Other(params) => params,
        Params::Absent | Params::Call(_) => Value::Null,
    };
    let result = match typed(params) {
        Ok(params) => handshake::initialize(starter, checked, params).await,
        Err(error) => Err(error),
    };
    json(&answer(&id, result, revision), revision)
}

/// Serves the request `message` with `task`, answering in `revision`.
pub(super) async fn serve(task: Arc<Task>, message: Box<Envelope>, revision: Revision) -> Response {
    let Envelope {
        id, method, params, ..
    } = *message;
    let id = id.unwrap_or_default();
    let params = match params {
        Params::Other(params) => params,
        Params::Absent => Value::Null,
        Params::Call(params) => serde_json::to_value(params).unwrap_or_default(),
    };
    let result = served(
        &task,
        method.as_deref().unwrap_or_default(),
        params,
        revision,
    )
    .await;
    json(&answer(&id, result, revision), revision)
}

/// The result of `method` with `params`, from `task`. `ping` and a session's subscriptions
/// belong to the revisions with sessions; 2026-07-28 has neither (it listens instead).
async fn served(
    task: &Arc<Task>,
    method: &str,
    params: Value,
    revision: Revision,
) -> Result<ServerResult, McpError> {
    let sessions_only = |method: &'static str| {
        if revision.modern {
            Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                method,
                None,
            ))
        } else {
            Ok(())
        }
    };
    match method {
        "ping" => sessions_only("ping").map(|()| ServerResult::empty(())),
        "server/discover" => Ok(handshake::discover(task)),
        "tools/list" => Ok(list_tools(task).into()),
        "prompts/list" => Ok(list_prompts(task).into()),
        "resources/list" => Ok(list_resources(task).into()),
        "resources/templates/list" => Ok(list_resource_templates(task).into()),
        "prompts/get" => get_prompt(task, typed(params)?, revision)
            .await
            .map(Into::into),
        "resources/read" => read_resource(task, typed(params)?, revision)
            .await
            .map(Into::into),
        "completion/complete" => complete(task, typed(params)?).await.map(Into::into),
        "logging/setLevel" => set_level(task, typed(params)?).await,
        "resources/subscribe" => {
            sessions_only("resources/subscribe")?;
            subscribe(task, typed(params)?).await
        }
        "resources/unsubscribe" => {
            sessions_only("resources/unsubscribe")?;
            unsubscribe(task, typed(params)?).await
        }
        "skills/list" => list_skills(task).await,
        "skills/get" => get_skill(task, typed(params)?).await,
        _ => Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            method.to_owned(),
            None,
        )),
    }
}

/// A request's params as their type: -32602 naming what does not fit.
fn typed<T: DeserializeOwned>(params: Value) -> Result<T, McpError> {
    serde_json::from_value(params).map_err(|e| McpError::invalid_params(e.to_string(), None))
}

/// A list result with its caching hints: every list depends on the caller (the project's
/// bindings, and the base tools on the caller's token), so it is private to the caller.
fn cached<T: CachedList>(list: T) -> T {
    list.hinted(LIST_TTL_MS, CacheScope::Private)
}

/// The list results that carry caching hints.
trait CachedList {
    fn hinted(self, ttl_ms: u64, scope: CacheScope) -> Self;
}

macro_rules! cached_list {
    ($($list:ty),*) => {$(
        impl CachedList for $list {
            fn hinted(self, ttl_ms: u64, scope: CacheScope) -> Self {
                self.with_ttl_ms(ttl_ms).with_cache_scope(scope)
            }
        }
    )*};
}
cached_list!(
    ListToolsResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult
);

fn list_tools(task: &Task) -> ListToolsResult {
    cached(ListToolsResult::with_all_items(
        task.served().tools().to_vec(),
    ))
}

fn list_prompts(task: &Task) -> ListPromptsResult {
    let served = task.served();
    let prompts = served.composed().composition.prompts.iter();
    cached(ListPromptsResult::with_all_items(
        prompts.map(|p| p.prompt.clone()).collect(),
    ))
}

fn list_resources(task: &Task) -> ListResourcesResult {
    let served = task.served();
    let resources = served.composed().composition.resources.iter();
    cached(ListResourcesResult::with_all_items(
        resources.filter_map(|r| r.resource.clone()).collect(),
    ))
}

fn list_resource_templates(task: &Task) -> ListResourceTemplatesResult {
    let served = task.served();
    let resources = served.composed().composition.resources.iter();
    cached(ListResourceTemplatesResult::with_all_items(
        resources
            .filter_map(|r| r.resource_template.clone())
            .collect(),
    ))
}

/// `prompts/get`, forwarded to the provider that offers the prompt; its `input_required`
/// answer reaches only a 2026-07-28 caller (`forwarded.rs`).
async fn get_prompt(
    task: &Arc<Task>,
    request: GetPromptRequestParams,
    revision: Revision,
) -> Result<GetPromptResponse, McpError> {
    let task = task.clone().live()?;
    let mut params = forwarded_params(&request)?;
    task.open_params(&mut params, "prompts/get", &request.name)?;
    let result = task.served().composed().get_prompt(params).await;
    let result = result.map(|answer| task.seal_answer(answer, "prompts/get", &request.name));
    response::<GetPromptResult, _>(result, "prompts/get", revision.modern)
}

/// `resources/read`: a skill's `SKILL.md`, or forwarded to the provider that offers the
/// resource.
async fn read_resource(
    task: &Arc<Task>,
    request: ReadResourceRequestParams,
    revision: Revision,
) -> Result<ReadResourceResponse, McpError> {
    let task = task.clone().live()?;
    let served = task.served();
    if let Some(read) = skills::read(served.composed(), &request.uri).await {
        return read.map(ReadResourceResponse::Complete);
    }
    let mut params = forwarded_params(&request)?;
    task.open_params(&mut params, "resources/read", &request.uri)?;
    let result = served.composed().read_resource(params).await;
    let result = result.map(|answer| task.seal_answer(answer, "resources/read", &request.uri));
    response::<ReadResourceResult, _>(result, "resources/read", revision.modern)
}

/// `completion/complete`, forwarded to the provider of the prompt or template it names.
async fn complete(
    task: &Arc<Task>,
    request: CompleteRequestParams,
) -> Result<CompleteResult, McpError> {
    let task = task.clone().live()?;
    let result = task
        .served()
        .composed()
        .complete(forwarded_params(&request)?)
        .await;
    let mut result = provider_answer::<CompleteResult>(result, "completion/complete")?;
    result.result_type.get_or_insert(ResultType::COMPLETE);
    Ok(result)
}

/// `logging/setLevel`, passed to the providers. Logging is deprecated in rmcp (the 2026-07-28
/// revision drops it, SEP-2577); the session revisions have it, and the providers behind
/// Capstan may use it.
#[allow(deprecated)]
async fn set_level(
    task: &Task,
    request: rmcp::model::SetLevelRequestParams,
) -> Result<ServerResult, McpError> {
    let level = serde_json::to_value(request.level)
        .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
    task.set_log_level(level).await;
    Ok(ServerResult::empty(()))
}

/// `resources/subscribe`: held by the session (at most [`MAX_SUBSCRIPTIONS`]) and followed at
/// the provider.
#[allow(deprecated)]
async fn subscribe(
    task: &Arc<Task>,
    request: SubscribeRequestParams,
) -> Result<ServerResult, McpError> {
    let task = task.clone().live()?;
    if !task.subscribe(&request.uri) {
        return Err(McpError::invalid_request(
            format!(
                "a session holds at most {MAX_SUBSCRIPTIONS} subscriptions; unsubscribe from one first"
            ),
            Some(json!({ "uri": request.uri })),
        ));
    }
    let result = task
        .served()
        .composed()
        .subscription("resources/subscribe", forwarded_params(&request)?)
        .await;
    if let Err(error) = provider_answer::<Value>(result, "resources/subscribe") {
        task.unsubscribe(&request.uri);
        return Err(error);
    }
    Ok(ServerResult::empty(()))
}

/// `resources/unsubscribe`.
#[allow(deprecated)]
async fn unsubscribe(
    task: &Task,
    request: UnsubscribeRequestParams,
) -> Result<ServerResult, McpError> {
    task.unsubscribe(&request.uri);
    let result = task
        .served()
        .composed()
        .subscription("resources/unsubscribe", forwarded_params(&request)?)
        .await;
    provider_answer::<Value>(result, "resources/unsubscribe").map(|_| ServerResult::empty(()))
}

/// `skills/list`: the skills the extension admits (each checked as the extension requires).
async fn list_skills(task: &Task) -> Result<ServerResult, McpError> {
    let result = skills::list(task.served().composed()).await;
    validate_skills(&result.skills).map_err(invalid_result)?;
    Ok(ServerResult::ListSkillsResult(result))
}

/// `skills/get` of the skill whose `SKILL.md` is the request's URI.
async fn get_skill(task: &Task, request: GetSkillRequestParams) -> Result<ServerResult, McpError> {
    if skill_name_from_uri(&request.uri).is_none() {
        return Err(McpError::invalid_params(
            format!("{} is not the uri of a SKILL.md", request.uri),
            None,
        ));
    }
    let result = skills::get(task.served().composed(), &request.uri).await?;
    if result.skill.uri != request.uri {
        return Err(invalid_result(format_args!(
            "skill uri {} does not match the request {}",
            result.skill.uri, request.uri
        )));
    }
    result.skill.validate().map_err(invalid_result)?;
    Ok(ServerResult::GetSkillResult(result))
}

/// A result of the sidecar's own that breaks the extension's rules.
fn invalid_result(error: impl std::fmt::Display) -> McpError {
    McpError::internal_error(format!("handler returned an invalid result: {error}"), None)
}
