//! The composition's skills as files of the MCP skills extension (SEP-2640;
//! docs/mcp-surface.md "Skills"): each skill is `capstan://_skills/<name>/SKILL.md`, a file
//! of YAML frontmatter (its name and description) and the body `load_skill` returns. The
//! bodies are fetched once per composition, when first listed or read, so the digest a
//! client was given matches the bytes it reads.

use crate::composition::SkillSummary;

use super::Composed;

/// Where skills live: no binding can be named `_skills` (binding names are DNS names), so no
/// resource URI of a binding's server (`capstan://<binding>/<server>/…`) is ever one.
pub const SKILLS_URI_PREFIX: &str = "capstan://_skills/";

/// One skill as a `SKILL.md` file.
#[derive(Debug)]
pub struct SkillFile {
    /// The skill's name.
    pub name: String,
    /// Its one-line description.
    pub description: String,
    /// `capstan://_skills/<name>/SKILL.md`.
    pub uri: String,
    /// The file's text, or why its body could not be fetched.
    pub text: Result<String, String>,
}

/// The URI of skill `name`'s `SKILL.md`.
pub fn skill_uri(name: &str) -> String {
    format!("{SKILLS_URI_PREFIX}{name}/SKILL.md")
}

impl Composed {
    /// Every skill of the composition as a file, in composition order (fetched concurrently
    /// the first time, then kept with the composition).
    pub async fn skill_files(&self) -> &[SkillFile] {
        self.skill_files
            .get_or_init(|| async {
                let fetches = self.composition.skills.iter().map(|skill| async move {
                    let text = self
                        .load_skill(&skill.name)
                        .await
                        .map(|body| skill_md(skill, &body))
                        .map_err(|error| error.to_string());
                    SkillFile {
                        name: skill.name.clone(),
                        description: skill.description.clone(),
                        uri: skill_uri(&skill.name),
                        text,
                    }
                });
                futures::future::join_all(fetches).await
            })
            .await
    }

    /// The skill file at `uri`, if `uri` names one of the composition's skills.
    pub async fn skill_file(&self, uri: &str) -> Option<&SkillFile> {
        if !uri.starts_with(SKILLS_URI_PREFIX) {
            return None;
        }
        self.skill_files().await.iter().find(|file| file.uri == uri)
    }
}

/// `SKILL.md`: frontmatter holding the skill's name and description (the description as a
/// double-quoted YAML scalar, which JSON string syntax is), then the body as `load_skill`
/// frames it (with its provenance).
fn skill_md(skill: &SkillSummary, framed: &str) -> String {
    let description = serde_json::Value::from(skill.description.as_str());
    format!(
        "---\nname: {}\ndescription: {description}\n---\n\n{framed}",
        skill.name
    )
}
