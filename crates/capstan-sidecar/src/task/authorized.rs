//! What of its composition the task's caller may use: decided by the tool authorizer
//! (`caller/authorization.rs`) for the composition served, kept beside it until its oldest
//! answer's TTL passes, and decided again at the first request (or stream re-check,
//! `tasks/reaper.rs`) after. A decision that changes what the caller sees is told to its
//! client as the lists' changes. Without per-tool authorization nothing is asked, and only
//! what bindings requiring it offer is withheld (`served.rs` `unauthorized`).

use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::caller::authorization::{Offered, Undecided, Withheld};

use super::outbox::Change;
use super::{Served, Task};

/// What a caller may not use of one composition, and until when that holds (`None`: for as
/// long as the composition, without per-tool authorization).
#[derive(Clone)]
pub struct Decision {
    /// What is withheld.
    pub withheld: Arc<Withheld>,
    /// When the decision's oldest answer expires.
    pub until: Option<Instant>,
}

/// A decision and the composition it was made for.
pub(super) struct Decided {
    /// The composition: a decision holds for it alone (its names are that composition's).
    served: Weak<Served>,
    /// When its oldest answer expires.
    until: Instant,
    withheld: Arc<Withheld>,
}

impl Task {
    /// What `served` (the task's composition, now or when a call started) withholds from the
    /// task's caller. Decided once per composition and TTL; concurrent requests wait for one
    /// decision.
    pub async fn withheld(&self, served: &Arc<Served>) -> Result<Arc<Withheld>, Undecided> {
        self.decision(served)
            .await
            .map(|decision| decision.withheld)
    }

    /// What `served` withholds from the task's caller, and until when that holds.
    pub async fn decision(&self, served: &Arc<Served>) -> Result<Decision, Undecided> {
        let Some(authorizer) = &self.context.authorizer else {
            return Ok(Decision {
                withheld: served.unauthorized(),
                until: None,
            });
        };
        let mut decided = self.decided.lock().await;
        let now = Instant::now();
        if let Some(kept) = decided.as_ref()
            && kept.until > now
            && std::ptr::eq(kept.served.as_ptr(), Arc::as_ptr(served))
        {
            return Ok(Decision {
                withheld: kept.withheld.clone(),
                until: Some(kept.until),
            });
        }
        let offered = Offered::of(served.composed());
        let (withheld, oldest) = authorizer.withheld(&self.identity, &offered).await?;
        let withheld = Arc::new(withheld);
        if let Some(before) = decided.as_ref() {
            self.tell_withheld_changes(&before.withheld, &withheld);
        }
        let until = oldest + authorizer.ttl();
        *decided = Some(Decided {
            served: Arc::downgrade(served),
            until,
            withheld: withheld.clone(),
        });
        Ok(Decision {
            withheld,
            until: Some(until),
        })
    }

    /// Of `uris`, those whose resources the caller may use in what the task serves now; a
    /// withheld one is dropped as an unknown one is (nothing offers it to this caller), and
    /// all are when the plane cannot be asked.
    pub async fn usable_uris(&self, uris: Vec<String>) -> Vec<String> {
        let served = self.served();
        let Ok(withheld) = self.withheld(&served).await else {
            return Vec::new();
        };
        if withheld.bindings.is_empty() {
            return uris;
        }
        let composed = served.composed();
        uris.into_iter()
            .filter(|uri| {
                composed
                    .resource_binding(uri)
                    .is_none_or(|binding| withheld.binding(binding))
            })
            .collect()
    }

    /// Tells the client which of its lists a new decision changed.
    /// Which of its lists (tools, prompts, resources) a new composition `after` changes for
    /// this task's caller by what it withholds from every caller without per-tool
    /// authorization — a binding's `callerAuthorization` turned on or off leaves the composed
    /// set as it was. With per-tool authorization the next decision tells its own changes.
    pub fn unauthorized_changes(&self, before: &Served, after: &Served) -> (bool, bool, bool) {
        if self.context.authorizer.is_some() {
            return (false, false, false);
        }
        let (before, after) = (before.unauthorized(), after.unauthorized());
        (
            before.tools != after.tools,
            before.prompts != after.prompts,
            before.bindings != after.bindings,
        )
    }

    fn tell_withheld_changes(&self, before: &Withheld, now: &Withheld) {
        if before.tools != now.tools {
            self.tell(Change::ToolList);
        }
        if before.prompts != now.prompts {
            self.tell(Change::PromptList);
        }
        if before.bindings != now.bindings {
            self.tell(Change::ResourceList);
        }
    }
}
