//! The composition's skills as files of the MCP skills extension (SEP-2640;
//! docs/mcp-surface.md "Skills"): each skill is `capstan://_skills/<name>/SKILL.md`, a file
//! of YAML frontmatter (its name and description) and the body `load_skill` returns. Both read
//! the one body the composition keeps (`skill_bodies.rs`), so the digest a client was given
//! matches the bytes it reads and `load_skill` returns the same body.

use crate::composition::SkillSummary;

use super::{Composed, SkillError};

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
    /// The file's text, or why there is none: the body could not be fetched, or it is
    /// withheld by the skill's pin.
    pub text: Result<String, SkillError>,
}

/// The URI of skill `name`'s `SKILL.md`.
pub fn skill_uri(name: &str) -> String {
    format!("{SKILLS_URI_PREFIX}{name}/SKILL.md")
}

impl Composed {
    /// Every skill of the composition as a file, in composition order (bodies not fetched yet
    /// are fetched concurrently; `skill_bodies.rs` keeps them with the composition).
    pub async fn skill_files(&self) -> Vec<SkillFile> {
        let skills = self.composition.skills.iter().enumerate();
        let files = skills.map(|(index, skill)| self.file_of(index, skill));
        futures::future::join_all(files).await
    }

    /// The skill file at `uri`, if `uri` names one of the composition's skills.
    pub async fn skill_file(&self, uri: &str) -> Option<SkillFile> {
        if !uri.starts_with(SKILLS_URI_PREFIX) {
            return None;
        }
        let (index, skill) = self
            .composition
            .skills
            .iter()
            .enumerate()
            .find(|(_, skill)| skill_uri(&skill.name) == uri)?;
        Some(self.file_of(index, skill).await)
    }

    /// The file of `skill`, the composition's skill at `index`: the body `load_skill` returns,
    /// under frontmatter.
    async fn file_of(&self, index: usize, skill: &SkillSummary) -> SkillFile {
        SkillFile {
            name: skill.name.clone(),
            description: skill.description.clone(),
            uri: skill_uri(&skill.name),
            text: self
                .served_skill(index)
                .await
                .map(|body| skill_md(skill, &body)),
        }
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
