//! What a task serves: one composition, the platform tools beside it, the tools `tools/list`
//! shows and a validator per input schema, and the snapshot it came from.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use capstan_api::validate::pointer_to_path;
use capstan_compose::composer::Composed;
use capstan_compose::interned::Interned;
use capstan_compose::interned::content_key;
use capstan_compose::source::Snapshot;
use capstan_core::tool_error::{ErrorKind, ToolError};
use capstan_platform::BaseTools;
use capstan_upstream::mcp::ParamHeader;
use capstan_upstream::mcp::param_headers;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};
use tracing::warn;

use super::LOAD_SKILL;
use crate::caller::authorization::{Withheld, without_authorization};

/// One composition as a session serves it: the live composition and its tools, the platform
/// tools beside it, and the snapshot it came from (documents, and the qualifiers routed calls
/// obey).
pub struct Served {
    live: Arc<Live>,
    snapshot: Arc<Snapshot>,
}

/// A live composition and what a session shows and checks of it. Each of its upstream
/// sessions closes when the last composition holding it lets go (a call still running on it
/// finishes first; a composition made again keeps the sessions it shares).
struct Live {
    composed: Composed,
    /// The base platform tools, when the caller gets them (they act as the caller).
    base: Option<BaseTools>,
    shown: Arc<Shown>,
    /// What a sidecar without per-tool authorization withholds from every caller: the
    /// offerings of the bindings that require it. Made on first use.
    unauthorized: OnceLock<Arc<Withheld>>,
    /// The search index of the tools shown (`task/search.rs`), made on the first search.
    search: OnceLock<Arc<capstan_search::Index>>,
}

/// The tools `tools/list` shows, their input validators and the arguments they mark to travel
/// as headers: alike for every task of a project that composed the same tools, so one copy
/// serves them all (`Interned`).
struct Shown {
    tools: Vec<Tool>,
    validators: HashMap<String, jsonschema::Validator>,
    /// The `Mcp-Param-*` headers each shown tool that has any asks a 2026-07-28 caller for
    /// (`edge/protocol.rs` checks them against the body).
    headed: BTreeMap<String, Vec<ParamHeader>>,
}

/// What tasks show, one copy per content.
static SHOWN: std::sync::LazyLock<Interned<Shown>> = std::sync::LazyLock::new(Interned::default);

impl Served {
    /// Builds what a session serves from `composed` (made from `snapshot`) and the platform
    /// tools `base`: the tools `tools/list` shows and a validator per input schema — those of
    /// another task that shows the same tools, when one does.
    pub fn new(composed: Composed, base: Option<BaseTools>, snapshot: Arc<Snapshot>) -> Self {
        let tools = shown_tools(&composed, base.as_ref());
        let schemas = checked_schemas(&composed, base.as_ref());
        // The key is all a `Shown` is made from: the tools as shown, and every schema checked
        // (a routed call's schema is not the one its tool shows).
        let key = match (serde_json::to_vec(&tools), serde_json::to_vec(&schemas)) {
            (Ok(shown), Ok(checked)) => Some(content_key([shown.as_slice(), checked.as_slice()])),
            _ => None,
        };
        let make = || Shown {
            validators: validators(&schemas),
            headed: param_headers(&tools),
            tools,
        };
        let shown = match key {
            Some(key) => SHOWN.share(key, make),
            None => Arc::new(make()),
        };
        Self {
            live: Arc::new(Live {
                composed,
                base,
                shown,
                unauthorized: OnceLock::new(),
                search: OnceLock::new(),
            }),
            snapshot,
        }
    }

    /// The same composition, routing by the qualifiers of `snapshot` (whose documents are
    /// those this one was composed from).
    pub fn requalified(&self, snapshot: Arc<Snapshot>) -> Self {
        Self {
            live: self.live.clone(),
            snapshot,
        }
    }

    /// The live composition.
    pub fn composed(&self) -> &Composed {
        &self.live.composed
    }

    /// Ends the upstream sessions this composition alone holds and waits until the servers
    /// were told; a copy still held elsewhere (a task's) keeps them open.
    pub async fn close(self) {
        if let Ok(live) = Arc::try_unwrap(self.live) {
            live.composed.close().await;
        }
    }

    /// The base platform tools, when composed.
    pub fn base(&self) -> Option<&BaseTools> {
        self.live.base.as_ref()
    }

    /// What this composition withholds from every caller when no caller is decided for (per-tool
    /// authorization off): everything of the bindings whose `spec.callerAuthorization` is
    /// `Required` (docs/authorization.md) — for most compositions, nothing.
    pub fn unauthorized(&self) -> Arc<Withheld> {
        self.live
            .unauthorized
            .get_or_init(|| Arc::new(without_authorization(&self.live.composed, &self.snapshot)))
            .clone()
    }

    /// Where the search index of the tools it shows is kept once made (`task/search.rs`).
    pub(super) fn search_slot(&self) -> &OnceLock<Arc<capstan_search::Index>> {
        &self.live.search
    }

    /// The snapshot it was composed from (documents and qualifiers).
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// The tools `tools/list` shows.
    pub fn tools(&self) -> &[Tool] {
        &self.live.shown.tools
    }

    /// The arguments `tool` (as shown) marks to travel as `Mcp-Param-*` headers, if any.
    pub fn argument_headers(&self, tool: &str) -> Option<&[ParamHeader]> {
        self.live.shown.headed.get(tool).map(Vec::as_slice)
    }

    /// Checks `arguments` against the input schema of `tool`, if it has a usable one.
    pub(super) fn validate(&self, tool: &str, arguments: &Value) -> Result<(), ToolError> {
        let Some(validator) = self.live.shown.validators.get(tool) else {
            return Ok(());
        };
        let Some(error) = validator.iter_errors(arguments).next() else {
            return Ok(());
        };
        let field = pointer_to_path(arguments, error.instance_path().as_str());
        let shown = if field.is_empty() {
            "arguments"
        } else {
            field.as_str()
        };
        let error = ToolError::new(
            ErrorKind::InvalidInput,
            format!("{shown}: {error}; see the tool's input schema"),
        );
        Err(if field.is_empty() {
            error
        } else {
            error.at(field)
        })
    }
}

/// The tools `tools/list` shows: the composition's, the routed capabilities', `load_skill`
/// when there are skills, and the base platform tools.
fn shown_tools(composed: &Composed, base: Option<&BaseTools>) -> Vec<Tool> {
    let composition = &composed.composition;
    let mut tools: Vec<Tool> = composition
        .tools
        .iter()
        .map(|t| {
            let mut tool = Tool::new(
                t.name.clone(),
                t.description.clone().unwrap_or_default(),
                t.input_schema.clone(),
            );
            tool.annotations = t.annotations.clone();
            tool
        })
        .collect();
    tools.extend(composed.capabilities().map(|c| c.tool.clone()));
    if !composition.skills.is_empty() {
        tools.push(load_skill_tool());
    }
    if let Some(base) = base {
        tools.extend(base.tools().iter().cloned());
    }
    tools
}

/// The schema each tool's arguments are checked against, by tool name. A routed call is
/// checked against the capability's own schema once its routing arguments are taken out.
fn checked_schemas<'a>(
    composed: &'a Composed,
    base: Option<&'a BaseTools>,
) -> Vec<(&'a str, &'a JsonObject)> {
    composed
        .composition
        .tools
        .iter()
        .map(|t| (t.name.as_str(), t.input_schema.as_ref()))
        .chain(base.iter().flat_map(|base| {
            base.tools()
                .iter()
                .map(|t| (t.name.as_ref(), t.input_schema.as_ref()))
        }))
        .chain(
            composed
                .capabilities()
                .map(|c| (c.tool.name.as_ref(), &c.spec.input_schema)),
        )
        .collect()
}

/// A validator per schema; a schema that does not compile leaves its tool unchecked.
fn validators(schemas: &[(&str, &JsonObject)]) -> HashMap<String, jsonschema::Validator> {
    let mut validators = HashMap::new();
    for (name, schema) in schemas {
        match jsonschema::validator_for(&Value::Object((*schema).clone())) {
            Ok(validator) => {
                validators.insert((*name).to_owned(), validator);
            }
            Err(error) => {
                warn!(tool = %name, %error, "input schema not usable for checking; arguments pass unchecked")
            }
        }
    }
    validators
}

fn load_skill_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": { "name": { "type": "string", "description": "The skill's name, as listed under Available skills." } },
        "required": ["name"],
        "additionalProperties": false
    });
    let mut tool = Tool::new(
        LOAD_SKILL,
        "Load the full procedure of one of the Available skills listed in your instructions.",
        Arc::new(schema.as_object().cloned().unwrap_or_default()),
    );
    tool.annotations = Some(ToolAnnotations::new().read_only(true));
    tool
}
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_load_skill_schema_should_take_only_a_name() {
        let tool = load_skill_tool();
        assert_eq!(tool.input_schema["required"], json!(["name"]));
        assert!(tool.input_schema["properties"].get("project").is_none());
    }

    #[test]
    fn load_skill_should_be_a_reserved_name() {
        assert!(capstan_api::patterns::BUILT_IN_TOOLS.contains(&LOAD_SKILL));
    }
}
