//! One body per skill per composition (docs/mcp-surface.md "Skills", docs/pins.md "Skills"):
//! `load_skill` and the skills extension serve the body fetched on first use by either, so a
//! provider that changes a body (or serves each request another) is not seen until the next
//! composition; a pinned skill's body is fetched at composition and served only while it has
//! the pinned digest.
//!
//! A body once fetched is kept for the composition. A failed fetch is kept for
//! [`REFETCH_AFTER`] and then fetched again on the next use, so a provider briefly down does
//! not lose a session its skill, while a caller asking in a loop reaches the provider at most
//! once per [`REFETCH_AFTER`] per skill. Fetches of one skill never overlap: the callers of a
//! fetch under way wait for it (at most the skill timeout) and share its result.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::{Composed, SkillError};
use crate::composition::{BindingOutcome, SkillSummary};
use crate::knowledge;
use crate::pins::{ListedDefinition, PinMismatch, Pinned, body_digest};
use capstan_upstream::credential::SharedCredential;
use capstan_upstream::fetch::{FetchError, Fetched};

/// How long a failed fetch answers for its skill before the next use fetches again. 2 s: a
/// provider restarting or a connection dropped is not kept for a whole session, and a caller
/// asking in a loop costs the provider one request per skill every 2 s at most.
pub const REFETCH_AFTER: Duration = Duration::from_secs(2);

/// The bodies of a composition's skills, one slot per skill in composition order.
#[derive(Debug, Default)]
pub(super) struct SkillBodies {
    slots: Vec<Mutex<Slot>>,
    /// What each skill's fetch authenticates with (its `auth`), by the same index.
    credentials: Vec<Option<SharedCredential>>,
}

impl SkillBodies {
    /// Empty slots for skills fetched with `credentials`, one per skill.
    pub(super) fn new(credentials: Vec<Option<SharedCredential>>) -> Self {
        Self {
            slots: credentials
                .iter()
                .map(|_| Mutex::new(Slot::Unfetched))
                .collect(),
            credentials,
        }
    }
}

#[derive(Debug)]
enum Slot {
    Unfetched,
    /// The body this composition serves, whatever the provider serves later.
    Kept(Arc<SkillBody>),
    /// Why the last fetch failed, and when.
    Failed {
        error: Arc<FetchError>,
        at: Instant,
    },
}

/// A skill body fetched, or why not (the failure shared by the callers that waited for it).
pub(super) type SkillFetch = Result<Arc<SkillBody>, Arc<FetchError>>;

/// A skill's body as its composition serves it.
#[derive(Debug)]
pub struct SkillBody {
    /// The body as fetched (cut at the skill cap).
    pub fetched: Fetched,
    /// Its digest as `skills[].pin` holds it.
    pub digest: String,
}

impl SkillBody {
    fn new(fetched: Fetched) -> Self {
        let digest = body_digest(&fetched.text);
        Self { fetched, digest }
    }
}

/// What `capstanctl pins` prints of a skill whose body was fetched, and the mismatch when its
/// pin names another digest (the body's text is what a reviewer reads before re-pinning).
pub(super) fn skill_pin(
    skill: &SkillSummary,
    body: &SkillBody,
) -> (ListedDefinition, Option<PinMismatch>) {
    let definition = ListedDefinition {
        kind: Pinned::Skill,
        server: String::new(),
        name: skill.name.clone(),
        digest: body.digest.clone(),
        pinned: skill.pin.clone(),
    };
    let mismatch = skill
        .pin
        .as_ref()
        .filter(|pinned| **pinned != body.digest)
        .map(|pinned| PinMismatch {
            kind: Pinned::Skill,
            server: String::new(),
            name: skill.name.clone(),
            pinned: pinned.clone(),
            live: body.digest.clone(),
            listed: Value::String(body.fetched.text.clone()),
        });
    (definition, mismatch)
}

impl Composed {
    /// Fetches a skill's body (once per composition) and frames it with its provenance; a
    /// pinned skill whose body has another digest is withheld.
    pub async fn load_skill(&self, name: &str) -> Result<String, SkillError> {
        let Some(index) = self.composition.skills.iter().position(|s| s.name == name) else {
            return Err(SkillError::Unknown {
                name: name.to_owned(),
            });
        };
        self.served_skill(index).await
    }

    /// The body of the skill at `index` as this composition serves it (`load_skill`, and the
    /// skills extension's file after its frontmatter), framed with its provenance.
    pub(super) async fn served_skill(&self, index: usize) -> Result<String, SkillError> {
        let Some(skill) = self.composition.skills.get(index) else {
            return Err(SkillError::Unknown {
                name: format!("#{index}"),
            });
        };
        let body = self
            .skill_body(index)
            .await
            .map_err(|source| SkillError::Fetch {
                name: skill.name.clone(),
                source,
            })?;
        if let (_, Some(mismatch)) = skill_pin(skill, &body) {
            return Err(SkillError::Withheld(Box::new(mismatch)));
        }
        Ok(knowledge::frame_skill(skill, &body.fetched))
    }

    /// The body of the skill at `index` as this composition serves it: kept once fetched, a
    /// failure fetched again on a use [`REFETCH_AFTER`] after it.
    pub(super) async fn skill_body(&self, index: usize) -> SkillFetch {
        let (Some(skill), Some(slot)) = (
            self.composition.skills.get(index),
            self.skill_bodies.slots.get(index),
        ) else {
            // Slots are made for every composed skill (`assemble.rs` `add_skills`).
            return Err(Arc::new(FetchError::Transport {
                url: String::new(),
                message: format!("skill #{index} is not in this composition"),
            }));
        };
        let mut slot = slot.lock().await;
        match &*slot {
            Slot::Kept(body) => return Ok(body.clone()),
            Slot::Failed { error, at } if at.elapsed() < REFETCH_AFTER => {
                return Err(error.clone());
            }
            _ => {}
        }
        let credential = self.skill_bodies.credentials.get(index).cloned().flatten();
        let fetched = self
            .fetcher
            .fetch_as(
                &skill.source,
                credential.as_ref(),
                self.limits.skill_timeout,
                self.limits.skill_cap,
            )
            .await;
        match fetched {
            Ok(fetched) => {
                let body = Arc::new(SkillBody::new(fetched));
                *slot = Slot::Kept(body.clone());
                Ok(body)
            }
            Err(error) => {
                let error = Arc::new(error);
                *slot = Slot::Failed {
                    error: error.clone(),
                    at: Instant::now(),
                };
                Err(error)
            }
        }
    }

    /// Fetches every pinned skill's body, all at once: what composition compares with the pins
    /// (the body fetched here is the one the composition then serves). Index and result.
    pub(super) async fn fetch_pinned_skills(&self) -> Vec<(usize, SkillFetch)> {
        let pinned = self.composition.skills.iter().enumerate();
        let fetches = pinned
            .filter(|(_, skill)| skill.pin.is_some())
            .map(|(index, _)| async move { (index, self.skill_body(index).await) });
        futures::future::join_all(fetches).await
    }

    /// The bindings' outcomes with every skill's digest in `definitions` (and a pinned skill's
    /// drift in `pinMismatches`), fetching the bodies not fetched yet through this composition:
    /// what `GET /v1/composition` and `capstanctl pins` show. A skill whose body cannot be
    /// fetched has no digest to show and is left out.
    pub async fn outcomes_with_skill_digests(&self) -> Vec<BindingOutcome> {
        let skills = &self.composition.skills;
        let bodies =
            futures::future::join_all((0..skills.len()).map(|index| self.skill_body(index))).await;
        let mut outcomes = self.composition.bindings.clone();
        for outcome in &mut outcomes {
            outcome.definitions.retain(|d| d.kind != Pinned::Skill);
            outcome.pin_mismatches.retain(|m| m.kind != Pinned::Skill);
        }
        for (skill, body) in skills.iter().zip(bodies) {
            let (Ok(body), Some(outcome)) = (
                body,
                outcomes.iter_mut().find(|o| o.binding == skill.binding),
            ) else {
                continue;
            };
            let (definition, mismatch) = skill_pin(skill, &body);
            outcome.definitions.push(definition);
            outcome.pin_mismatches.extend(mismatch);
        }
        outcomes
    }
}
