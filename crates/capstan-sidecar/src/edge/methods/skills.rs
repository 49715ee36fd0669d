//! Capstan's skills through the MCP skills extension (SEP-2640): `skills/list`, `skills/get`
//! and each skill's `SKILL.md` through `resources/read` (docs/mcp-surface.md "Skills"), beside
//! `load_skill` for clients that do not speak it. A skill's file carries its digest and size;
//! a skill whose body could not be fetched is listed as `dynamic` (read it to see why), one
//! whose body its pin withholds is not listed (a get or read names the pin), and a skill whose
//! name the extension does not admit (upper case, `_`) is left to `load_skill`.

use capstan_compose::composer::Composed;
use capstan_compose::composer::SkillError;
use capstan_compose::composer::SkillFile;
use capstan_compose::pins::PinMismatch;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CacheScope, GetSkillResult, ListSkillsResult, ReadResourceResult, ResourceContents, ResultType,
    SKILLS_EXTENSION_ID, ServerCapabilities, Skill, SkillFrontmatter, SkillResource,
    SkillResources,
};
use serde_json::json;

use super::LIST_TTL_MS;

/// `skill`'s entry: its `SKILL.md` with digest and size, or `dynamic` when the body could not
/// be fetched; `None` when the extension does not admit its name, or its pin withholds it.
fn entry(file: &SkillFile) -> Option<Skill> {
    let resources = match &file.text {
        Ok(text) => SkillResources::Files(vec![SkillResource::from_bytes(
            file.uri.as_str(),
            text.as_bytes(),
        )]),
        Err(SkillError::Withheld(_)) => return None,
        Err(_) => SkillResources::Dynamic,
    };
    let frontmatter = SkillFrontmatter::new(file.name.as_str(), file.description.as_str());
    let skill = Skill::new(file.uri.as_str(), frontmatter, resources);
    skill.validate().is_ok().then_some(skill)
}

/// Takes the skills extension out of the `capabilities` a caller is told when `composed` serves
/// no skill through it: a client told of the extension looks for a skill behind it. The methods
/// stay implemented (answered by the server's own declaration), so a session whose
/// bindings gain a skill later can still list it (docs/mcp-surface.md "Skills").
pub(in crate::edge) fn declare(capabilities: &mut ServerCapabilities, composed: &Composed) {
    let serves = composed.composition.skills.iter().any(|skill| {
        let frontmatter = SkillFrontmatter::new(skill.name.as_str(), skill.description.as_str());
        let uri = capstan_compose::composer::skill_uri(&skill.name);
        Skill::new(uri.as_str(), frontmatter, SkillResources::Dynamic)
            .validate()
            .is_ok()
    });
    if serves {
        return;
    }
    if let Some(extensions) = capabilities.extensions.as_mut() {
        extensions.remove(SKILLS_EXTENSION_ID);
        if extensions.is_empty() {
            capabilities.extensions = None;
        }
    }
}

/// `skills/list`: every skill of the composition the extension admits and no pin withholds.
pub(super) async fn list(composed: &Composed) -> ListSkillsResult {
    let files = composed.skill_files().await;
    let skills = files.iter().filter_map(entry);
    ListSkillsResult::with_all_items(skills.collect())
        .with_ttl_ms(LIST_TTL_MS)
        .with_cache_scope(CacheScope::Private)
}

/// `skills/get`: the entry of the skill whose `SKILL.md` is `uri`; -32602 naming it otherwise,
/// or naming the pin that withholds it.
pub(super) async fn get(composed: &Composed, uri: &str) -> Result<GetSkillResult, McpError> {
    let Some(file) = composed.skill_file(uri).await else {
        return Err(unknown(uri));
    };
    if let Err(SkillError::Withheld(mismatch)) = &file.text {
        return Err(withheld(uri, mismatch));
    }
    match entry(&file) {
        Some(skill) => Ok(GetSkillResult::new(skill)
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private)),
        None => Err(unknown(uri)),
    }
}

/// `resources/read` of a skill's `SKILL.md`: the bytes its digest covers; `None` when `uri`
/// is not one of the composition's skills (the read goes to the providers' resources).
pub(super) async fn read(
    composed: &Composed,
    uri: &str,
) -> Option<Result<ReadResourceResult, McpError>> {
    let file = composed.skill_file(uri).await?;
    Some(match &file.text {
        Ok(text) => {
            let contents =
                ResourceContents::text(text.as_str(), uri).with_mime_type("text/markdown");
            let mut result = ReadResourceResult::new(vec![contents]);
            result.result_type.get_or_insert(ResultType::COMPLETE);
            Ok(result)
        }
        Err(SkillError::Withheld(mismatch)) => Err(withheld(uri, mismatch)),
        // The error names the skill ("skill … could not be loaded: …").
        Err(error) => Err(McpError::internal_error(
            error.to_string(),
            Some(json!({"uri": uri, "kind": "upstream_unavailable", "retryable": true})),
        )),
    })
}

/// A skill whose body its pin withholds: -32602 with both digests (not retryable: the binding
/// must pin the new body first).
fn withheld(uri: &str, mismatch: &PinMismatch) -> McpError {
    McpError::invalid_params(
        mismatch.to_string(),
        Some(
            json!({"uri": uri, "kind": "pin_mismatch", "pinned": mismatch.pinned,
                    "fetched": mismatch.live, "retryable": false}),
        ),
    )
}

/// An unknown skill, as an unknown resource is answered.
fn unknown(uri: &str) -> McpError {
    McpError::invalid_params(
        format!("no skill with the URI {uri} is available to this assistant"),
        Some(json!({ "uri": uri })),
    )
}
