//! The MCP requests answered in one step, each by its handler here, with rmcp's models as
//! their types: `initialize` and `server/discover` (`methods/handshake.rs`), the lists (tools,
//! prompts, resources and their templates, skills), a prompt, a resource or a skill read
//! (`methods/forwarded.rs`, `methods/skills.rs`), a completion, the log level, a session's
//! resource subscriptions, and `ping`; any other method is unknown (-32601). The edge's
//! dispatcher (`edge.rs`) has already checked the request's protocol headers
//! (`edge/protocol.rs`) and found its task, and its answer is written for the revision it
//! speaks (`edge/answer.rs`).

use std::sync::Arc;
use std::time::Instant;

use axum::response::Response;
use capstan_api::patterns::is_built_in_tool;
use capstan_compose::composer::OfferingError;
use capstan_compose::composition::ComposedResource;
use capstan_core::tool_error::ErrorKind;
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
use crate::caller::authorization::{Undecided, Withheld};
use crate::message::{Envelope, Params};
use crate::task::{
    Decision, Listing, MAX_SUBSCRIPTIONS, Served, Task, find_tools_tool, report_gap_tool,
};
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
        "tools/list" => Listed::of(task).await.map(|l| l.tools().into()),
        "prompts/list" => Listed::of(task).await.map(|l| l.prompts().into()),
        "resources/list" => Listed::of(task).await.map(|l| l.resources().into()),
        "resources/templates/list" => Listed::of(task).await.map(|l| l.templates().into()),
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

/// What the task's lists show its caller: the composition it serves now, less what the caller
/// may not use, with the lists' caching hints.
struct Listed {
    served: Arc<Served>,
    withheld: Arc<Withheld>,
    /// How long the caller may hold a list: [`LIST_TTL_MS`], and no longer than the decision
    /// it was filtered by.
    ttl_ms: u64,
    /// Whether `find_tools` is offered to this caller, and every tool listed.
    listing: Listing,
    /// Whether `report_capability_gap` is offered.
    gaps: bool,
}

impl Listed {
    async fn of(task: &Task) -> Result<Self, McpError> {
        let served = task.served();
        let Decision { withheld, until } = task.decision(&served).await.map_err(undecided)?;
        let remaining = until.map_or(u64::MAX, |until| {
            let left = until.saturating_duration_since(Instant::now()).as_millis();
            u64::try_from(left).unwrap_or(u64::MAX)
        });
        Ok(Self {
            listing: task.tool_search().listing(&served, &withheld),
            gaps: task.reports_gaps(&served),
            served,
            withheld,
            ttl_ms: LIST_TTL_MS.min(remaining),
        })
    }

    /// A list result with its caching hints: every list depends on the caller (the project's
    /// bindings, what the caller may use, and the base tools on the caller's token), so it is
    /// private to the caller.
    fn cached<T: CachedList>(&self, list: T) -> T {
        list.hinted(self.ttl_ms, CacheScope::Private)
    }

    fn tools(&self) -> ListToolsResult {
        let tools = self.served.tools().iter();
        let usable = tools.filter(|t| self.withheld.tool(&t.name));
        // Above the threshold the built-in and routed tools stay listed; the rest is found.
        let shown = usable.filter(|t| self.listing.whole || is_built_in_tool(&t.name));
        let mut listed: Vec<rmcp::model::Tool> = shown.cloned().collect();
        if self.listing.search {
            listed.push(find_tools_tool());
        }
        if self.gaps {
            listed.push(report_gap_tool());
        }
        self.cached(ListToolsResult::with_all_items(listed))
    }

    fn prompts(&self) -> ListPromptsResult {
        let prompts = self.served.composed().composition.prompts.iter();
        let usable = prompts.filter(|p| self.withheld.prompt(&p.name));
        self.cached(ListPromptsResult::with_all_items(
            usable.map(|p| p.prompt.clone()).collect(),
        ))
    }

    fn resources(&self) -> ListResourcesResult {
        let resources = self.usable_resources();
        self.cached(ListResourcesResult::with_all_items(
            resources.filter_map(|r| r.resource.clone()).collect(),
        ))
    }

    fn templates(&self) -> ListResourceTemplatesResult {
        let resources = self.usable_resources();
        self.cached(ListResourceTemplatesResult::with_all_items(
            resources
                .filter_map(|r| r.resource_template.clone())
                .collect(),
        ))
    }

    fn usable_resources(&self) -> impl Iterator<Item = &ComposedResource> {
        let resources = self.served.composed().composition.resources.iter();
        resources.filter(|r| self.withheld.binding(&r.binding))
    }
}

/// The answer when what the caller may use could not be decided: nothing is served.
fn undecided(undecided: Undecided) -> McpError {
    McpError::internal_error(
        undecided.to_string(),
        Some(json!({ "kind": ErrorKind::UpstreamUnavailable.as_str(), "retryable": true })),
    )
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
    let served = task.served();
    let withheld = task.withheld(&served).await.map_err(undecided)?;
    if !withheld.prompt(&request.name) {
        let unknown = OfferingError::UnknownPrompt {
            name: request.name.clone(),
        };
        return response::<GetPromptResult, _>(Err(unknown), "prompts/get", revision.modern);
    }
    let result = served.composed().get_prompt(params).await;
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
    if let Some(unknown) = withheld_resource(&task, &served, &request.uri).await? {
        return response::<ReadResourceResult, _>(Err(unknown), "resources/read", revision.modern);
    }
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
    let served = task.served();
    let params = forwarded_params(&request)?;
    let withheld = task.withheld(&served).await.map_err(undecided)?;
    let reference = &params["ref"];
    let usable = match reference["type"].as_str() {
        _ if withheld.is_empty() => true,
        Some("ref/prompt") => withheld.prompt(reference["name"].as_str().unwrap_or_default()),
        _ => served
            .composed()
            .reference_binding(reference)
            .is_none_or(|binding| withheld.binding(binding)),
    };
    let result = if usable {
        served.composed().complete(params).await
    } else {
        let name = reference.get("name").or_else(|| reference.get("uri"));
        Err(OfferingError::UnknownReference {
            name: name.and_then(Value::as_str).unwrap_or_default().to_owned(),
        })
    };
    let mut result = provider_answer::<CompleteResult>(result, "completion/complete")?;
    result.result_type.get_or_insert(ResultType::COMPLETE);
    Ok(result)
}

/// The refusal of a resource `uri` of `served` whose binding the caller may not use — the
/// one an unknown URI gets — or `None` when the caller may read it (or nothing offers it,
/// which the composer refuses in the same words).
async fn withheld_resource(
    task: &Task,
    served: &Arc<Served>,
    uri: &str,
) -> Result<Option<OfferingError>, McpError> {
    let withheld = task.withheld(served).await.map_err(undecided)?;
    // Nothing withheld (authorization off, or a caller granted every binding): the URI is not
    // resolved here and again by the composer.
    if withheld.bindings.is_empty() {
        return Ok(None);
    }
    let binding = served.composed().resource_binding(uri);
    Ok(binding
        .filter(|binding| !withheld.binding(binding))
        .map(|_| OfferingError::UnknownResource {
            uri: uri.to_owned(),
        }))
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
    let served = task.served();
    if let Some(unknown) = withheld_resource(&task, &served, &request.uri).await? {
        return provider_answer::<Value>(Err(unknown), "resources/subscribe")
            .map(|_| ServerResult::empty(()));
    }
    if !task.subscribe(&request.uri) {
        return Err(McpError::invalid_request(
            format!(
                "a session holds at most {MAX_SUBSCRIPTIONS} subscriptions; unsubscribe from one first"
            ),
            Some(json!({ "uri": request.uri })),
        ));
    }
    let result = served
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
