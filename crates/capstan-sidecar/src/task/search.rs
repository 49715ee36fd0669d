//! `find_tools`: tool search over what a session serves (docs/tool-search.md). The index is
//! built from the tools `tools/list` shows, with what Capstan knows of each — its binding and
//! service, the binding's knowledge concepts, the `cap.*` capabilities it serves — once per
//! composition on its first search, and shared by every task that serves the same tools with
//! the same context (`Interned`). A search answers only among the tools the caller may call:
//! the others neither appear nor move the order (`capstan-search` `view.rs`). No state is kept
//! between searches, so a caller with a session and one without get the same answer.

use std::sync::Arc;

use capstan_compose::interned::{Interned, content_key};
use capstan_compose::source::Snapshot;
use capstan_core::tool_error::{ErrorKind, ToolError};
use capstan_search::{Index, ToolDoc};
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use super::LOAD_SKILL;
use super::served::Served;
use crate::caller::authorization::Withheld;
use crate::limits::caller_rate::CallerRate;

/// The search tool's name (reserved in `capstan_api::patterns::BUILT_IN_TOOLS`).
pub const FIND_TOOLS: &str = "find_tools";

/// The longest need searched for, in characters: a need is a sentence or two.
pub const MAX_NEED_CHARS: usize = 1024;

/// How many tools an answer holds unless the caller asks for another number, and at most.
const DEFAULT_LIMIT: u64 = 5;
const MAX_LIMIT: u64 = 20;

/// When `find_tools` is offered and when `tools/list` leaves the rest to it (the sidecar's
/// `--tool-search-min-tools` and `--tool-search-threshold`).
#[derive(Clone)]
pub struct ToolSearch {
    /// Offered to a caller who may call at least this many tools; 0: always.
    pub min_tools: usize,
    /// Above this many tools a caller may call, `tools/list` shows the built-in tools, the
    /// `cap.*` tools and `find_tools` only; 0: every tool is always listed.
    pub threshold: usize,
    /// Each caller's searches a minute; `None`: no limit.
    pub rate: Option<Arc<CallerRate>>,
}

/// The default of `--tool-search-calls-per-minute`: a model searching more often than once a
/// second is in a loop.
pub const DEFAULT_CALLS_PER_MINUTE: u32 = 60;

/// The default of `--tool-search-min-tools`: below it a caller's list is short enough to read.
pub const DEFAULT_MIN_TOOLS: usize = 20;

/// The default of `--tool-search-threshold`. On the evaluation corpus a tool as listed is 253
/// tokens on average (o200k_base; docs/tool-search.md "Progressive disclosure"): 40 tools are
/// about 10,000 tokens, the most a list should take of a 128k context before searching is the
/// better trade.
pub const DEFAULT_THRESHOLD: usize = 40;

/// What a caller's `tools/list` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listing {
    /// Whether `find_tools` is listed (and callable).
    pub search: bool,
    /// Whether every tool the caller may call is listed; when not, the built-in and `cap.*`
    /// tools only, beside `find_tools`.
    pub whole: bool,
}

impl ToolSearch {
    /// What a caller of `served` who may not use `withheld` is listed.
    pub fn listing(&self, served: &Served, withheld: &Withheld) -> Listing {
        let needed = self.min_tools.max(self.threshold.saturating_add(1));
        let usable = searchable(served).filter(|t| withheld.tool(&t.name));
        let counted = usable.take(needed).count();
        // A list cut short always has the search beside it, whatever the smaller threshold.
        let cut = self.threshold > 0 && counted > self.threshold;
        Listing {
            search: cut || self.min_tools == 0 || counted >= self.min_tools,
            whole: !cut,
        }
    }

    /// Whether `find_tools` is offered to a caller of `served` who may not use `withheld`.
    pub fn offered(&self, served: &Served, withheld: &Withheld) -> bool {
        self.listing(served, withheld).search
    }

    /// Adds to `instructions` how and when to search, when `served` has more tools than its
    /// lists show. Decided on the composition's tools: the instructions are the project's,
    /// given before any caller's tools are decided.
    pub fn add_instructions(&self, served: &Served, instructions: &mut Option<String>) {
        if self.listing(served, &Withheld::default()).whole {
            return;
        }
        let text = instructions.get_or_insert_default();
        if !text.is_empty() && !text.ends_with("\n\n") {
            text.push_str(if text.ends_with('\n') { "\n" } else { "\n\n" });
        }
        text.push_str(SEARCH_INSTRUCTIONS);
    }
}

/// How and when to search, for a composition whose lists show only part of its tools.
pub const SEARCH_INSTRUCTIONS: &str = "## Finding tools\n\nThis project offers more tools \
than tools/list shows. Before saying that you cannot do something, call find_tools with the \
need in one sentence (\"delete the Confluence page 'Old Roadmap'\"); call a tool it finds by \
its name, with arguments that fit its inputSchema. When find_tools answers \"match\": \"none\", \
no tool here does it: say so rather than using the nearest tool for something else.\n";

/// The tools a search looks among: every tool shown but the search itself and `load_skill`
/// (the instructions say when to load a skill).
fn searchable(served: &Served) -> impl Iterator<Item = &Tool> {
    served.tools().iter().filter(|t| t.name != LOAD_SKILL)
}

/// Search indexes, one per content (the tools and what is known of them).
static INDEXES: std::sync::LazyLock<Interned<Index>> = std::sync::LazyLock::new(Interned::default);

/// The index of `served`'s searchable tools, made on its first search: another task's, when
/// it serves the same tools with the same context.
fn index(served: &Served) -> Arc<Index> {
    served
        .search_slot()
        .get_or_init(|| index_of(served))
        .clone()
}

fn index_of(served: &Served) -> Arc<Index> {
    let docs = documents(served);
    let key = serde_json::to_vec(&docs)
        .ok()
        .map(|bytes| content_key([bytes.as_slice()]));
    let make = || Index::build(docs);
    match key {
        Some(key) => INDEXES.share(key, make),
        None => Arc::new(make()),
    }
}

/// The searchable tools as the index reads them.
fn documents(served: &Served) -> Vec<ToolDoc> {
    let composed = served.composed();
    let snapshot = served.snapshot();
    searchable(served)
        .map(|tool| {
            let mut doc = ToolDoc {
                name: tool.name.to_string(),
                tool: tool.name.to_string(),
                description: tool.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object(tool.input_schema.as_ref().clone()),
                annotations: tool
                    .annotations
                    .as_ref()
                    .and_then(|a| serde_json::to_value(a).ok()),
                titles: tool
                    .title
                    .iter()
                    .chain(tool.annotations.as_ref().and_then(|a| a.title.as_ref()))
                    .cloned()
                    .collect(),
                ..ToolDoc::default()
            };
            if let Some(composed_tool) = composed
                .composition
                .tools
                .iter()
                .find(|t| t.name == tool.name)
            {
                doc.tool = composed_tool.upstream_tool.clone();
                doc.service = composed_tool.service_name.clone();
                doc.service_aliases =
                    vec![composed_tool.binding.clone(), composed_tool.server.clone()];
                doc.context = binding_context(
                    snapshot,
                    &composed_tool.binding,
                    &composed_tool.server,
                    &composed_tool.upstream_tool,
                );
            } else if let Some(routed) = composed.capability(&tool.name) {
                doc.service = "capstan".into();
                doc.titles.push(routed.spec.display_name.clone());
                doc.context = std::iter::once(routed.spec.capability_id.clone())
                    .chain(routed.candidates.iter().filter_map(|c| c.service.clone()))
                    .collect();
            } else {
                doc.service = "platform".into();
                doc.service_aliases = vec!["project".into()];
            }
            doc
        })
        .collect()
}

/// What `binding` says of its server's tool: its knowledge concepts (kind and summary) and
/// the capabilities the tool serves, with their features.
fn binding_context(snapshot: &Snapshot, binding: &str, server: &str, tool: &str) -> Vec<String> {
    let Some(document) = snapshot.documents.iter().find(|d| d.binding == binding) else {
        return Vec::new();
    };
    let spec = &document.spec;
    let concepts = spec.knowledge.iter().flat_map(|k| &k.concepts);
    let mut context: Vec<String> = concepts
        .map(|c| format!("{} {}", c.gvk.kind, c.summary))
        .collect();
    let servers = spec.tools.iter().flat_map(|t| &t.mcp_servers);
    for mapping in servers
        .filter(|s| s.name == server)
        .flat_map(|s| &s.capabilities)
    {
        if mapping.tool == tool {
            context.push(mapping.capability_id.clone());
            context.extend(mapping.features.iter().cloned());
        }
    }
    context
}

/// The `find_tools` tool as `tools/list` shows it.
pub fn find_tools_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "need": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_NEED_CHARS,
                "description": "What the person needs done, in a sentence (\"delete the Confluence page 'Old Roadmap'\")."
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "default": DEFAULT_LIMIT,
                "description": "How many tools to answer with at most."
            }
        },
        "required": ["need"],
        "additionalProperties": false
    });
    let mut tool = Tool::new(
        FIND_TOOLS,
        "Find the tools that serve a need among all the tools you may call, best first, with \
         their input schemas. A tool found is callable by its name at once, even when tools/list \
         does not show it. When no tool serves the need well the answer says so (\"match\": \
         \"none\") and lists the nearest only for you to judge.",
        Arc::new(schema.as_object().cloned().unwrap_or_default()),
    );
    tool.annotations = Some(ToolAnnotations::new().read_only(true).idempotent(true));
    tool
}

/// A `find_tools` call of `caller`: the best of the tools the caller may call for the need,
/// or a plain "no good match" with the nearest; refused past the caller's searches a minute.
pub(super) fn find_tools(
    search: &ToolSearch,
    served: &Served,
    withheld: &Withheld,
    caller: &[u8; 32],
    arguments: &Value,
) -> Result<CallToolResult, ToolError> {
    let (need, limit) = search_arguments(arguments)?;
    if let Some(rate) = &search.rate
        && let Err(wait) = rate.check(caller)
    {
        return Err(ToolError::new(
            ErrorKind::RateLimited,
            "find_tools takes only so many searches a minute from one caller; search again \
             after retryAfterMs, or use the tools already found",
        )
        .retry_after(wait));
    }
    let index = index(served);
    let docs = index.docs();
    let answer = index.search(need, limit, |doc| withheld.tool(&docs[doc].name));
    let shown = served.tools();
    let tools: Vec<Value> = answer
        .hits
        .iter()
        .filter_map(|hit| {
            let doc = &docs[hit.doc];
            let tool = shown.iter().find(|t| t.name == doc.name)?;
            Some(found(tool, doc))
        })
        .collect();
    let note = if answer.matched {
        "Best first. Call a tool by its name with arguments that fit its inputSchema."
    } else {
        "No tool serves this need well; these are only the nearest. Use one only if it truly \
         fits; otherwise tell the person that no tool available here does this."
    };
    let structured = json!({
        "match": if answer.matched { "good" } else { "none" },
        "note": note,
        "tools": tools,
    });
    let mut result = CallToolResult::success(vec![ContentBlock::text(structured.to_string())]);
    result.structured_content = Some(structured);
    Ok(result)
}

/// The bindings of the `count` tools nearest `need` among those the caller may call, nearest
/// first, each once.
pub(super) fn nearest_bindings(
    served: &Served,
    withheld: &Withheld,
    need: &str,
    count: usize,
) -> Vec<String> {
    let index = index(served);
    let docs = index.docs();
    let answer = index.search(need, count, |doc| withheld.tool(&docs[doc].name));
    let tools = &served.composed().composition.tools;
    let mut bindings: Vec<String> = Vec::new();
    for hit in &answer.hits {
        let composed = tools.iter().find(|t| t.name == docs[hit.doc].name);
        if let Some(binding) = composed.map(|t| &t.binding)
            && !bindings.contains(binding)
        {
            bindings.push(binding.clone());
        }
    }
    bindings
}

/// One found tool: what calling it takes, and whose it is.
fn found(tool: &Tool, doc: &ToolDoc) -> Value {
    let mut entry = Map::new();
    entry.insert("name".into(), json!(tool.name));
    if let Some(title) = &tool.title {
        entry.insert("title".into(), json!(title));
    }
    entry.insert(
        "description".into(),
        json!(tool.description.as_deref().unwrap_or_default()),
    );
    entry.insert(
        "inputSchema".into(),
        Value::Object(tool.input_schema.as_ref().clone()),
    );
    if let Some(annotations) = tool
        .annotations
        .as_ref()
        .and_then(|a| serde_json::to_value(a).ok())
    {
        entry.insert("annotations".into(), annotations);
    }
    if let Some(binding) = doc
        .service_aliases
        .first()
        .filter(|_| doc.service != "capstan" && doc.service != "platform")
    {
        entry.insert("binding".into(), json!(binding));
    }
    entry.insert("service".into(), json!(doc.service));
    Value::Object(entry)
}

/// The need and the limit of a call's arguments, or what is wrong with them.
fn search_arguments(arguments: &Value) -> Result<(&str, usize), ToolError> {
    let invalid =
        |field: &str, message: String| ToolError::new(ErrorKind::InvalidInput, message).at(field);
    let need = arguments
        .get("need")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            invalid(
                "need",
                "need: required, a sentence saying what the person needs done".into(),
            )
        })?;
    let chars = need.chars().count();
    if need.trim().is_empty() || chars > MAX_NEED_CHARS {
        return Err(invalid(
            "need",
            format!(
                "need: 1 to {MAX_NEED_CHARS} characters of text (this one has {chars}); say the need in a sentence"
            ),
        ));
    }
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(value) => value
            .as_u64()
            .filter(|l| (1..=MAX_LIMIT).contains(l))
            .ok_or_else(|| invalid("limit", format!("limit: a whole number from 1 to {MAX_LIMIT}, or leave it out for {DEFAULT_LIMIT}")))?,
    };
    if let Some(extra) = arguments
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "need" && *k != "limit"))
    {
        return Err(invalid(
            extra,
            format!("{extra}: not an argument of find_tools (need, limit)"),
        ));
    }
    Ok((need, limit as usize))
}
