//! Composing: a project's documents → one live tool set (open upstream sessions), the
//! instructions text, the skills, and a per-binding outcome. The steps live in `composer/`:
//! opening or keeping upstream sessions (`composer/connect.rs`), assembling what they listed
//! with skills and knowledge (`composer/assemble.rs`), and the live result
//! (`composer/live.rs`); `composition.rs` holds the data it produces.

mod assemble;
mod connect;
mod forwarding;
pub mod fuzzing;
mod live;
mod offerings;
mod skill_bodies;
mod skill_files;
mod uri_scope;
mod uri_template;

use std::sync::Arc;

use rmcp::model::{ErrorData, JsonObject};
use thiserror::Error;
use tracing::field::Empty;
use tracing::{Instrument as _, debug_span};

use self::assemble::Assembly;
pub use self::live::Composed;
pub use self::skill_bodies::REFETCH_AFTER;
pub use self::skill_files::{SKILLS_URI_PREFIX, SkillFile, skill_uri};
use crate::knowledge;
use crate::limits::Limits;
use crate::pins::PinMismatch;
use crate::source::snapshot::Document;
use capstan_upstream::credential::{NoCredentials, SharedCredentials};
use capstan_upstream::fetch::{ClientError, FetchError, Fetcher};
use capstan_upstream::guard::{EndpointGuard, PatternError};
use capstan_upstream::mcp::{CallError, CallerRevision, Connector};
use capstan_upstream::trace_context::span_unless_unsampled;

/// Why a `load_skill` produced no body.
#[derive(Debug, Error)]
pub enum SkillError {
    /// No skill of that name is composed.
    #[error("no skill named {name:?} is available; the instructions list the ones that are")]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The body could not be fetched (the failure is kept a moment for the composition:
    /// `composer/skill_bodies.rs`).
    #[error("skill {name} could not be loaded: {source}")]
    Fetch {
        /// The skill.
        name: String,
        /// Why.
        #[source]
        source: Arc<FetchError>,
    },
    /// The skill is pinned and its body has another digest: withheld.
    #[error("{0}")]
    Withheld(Box<PinMismatch>),
}

/// A composer could not be set up from its settings; each names the setting to fix.
#[derive(Debug, Error)]
pub enum SetupError {
    /// An allow-list entry cannot be read.
    #[error("{setting}: {source}")]
    AllowList {
        /// The setting.
        setting: &'static str,
        /// The entry and why.
        #[source]
        source: PatternError,
    },
    /// An HTTP client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A credential setting is malformed (`credentials::settings`): the setting and why.
    #[error("{0}")]
    Credentials(String),
}

/// Why a composed tool call produced no result.
#[derive(Debug, Error)]
pub enum ToolCallError {
    /// No tool of that name is composed (including names outside every allow-list).
    #[error("no tool named {name:?} is available to this assistant")]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The upstream failed.
    #[error(transparent)]
    Upstream(#[from] CallError),
}

/// Why a forwarded prompt, resource or completion request produced no result.
#[derive(Debug, Error)]
pub enum OfferingError {
    /// No prompt of that name is composed (including names outside every selector).
    #[error("no prompt named {name:?} is available to this assistant")]
    UnknownPrompt {
        /// The name asked for.
        name: String,
    },
    /// No composed resource has that URI and no composed template produces it.
    #[error("no resource {uri:?} is available to this assistant")]
    UnknownResource {
        /// The URI asked for.
        uri: String,
    },
    /// The URI's path holds what could climb out of a template's literal prefix
    /// (`composer/offerings.rs` `unsafe_path`): it reaches no template.
    #[error(
        "resource URI {uri:?} holds {holds} in its path, which no resource template of this \
         assistant reads: name the resource by its plain path"
    )]
    UnsafeUri {
        /// The URI asked for.
        uri: String,
        /// What it holds (a dot segment, an encoded separator, a backslash).
        holds: &'static str,
    },
    /// A completion names a prompt or template that is not composed.
    #[error("no prompt or resource template {name:?} is available to this assistant")]
    UnknownReference {
        /// The name or URI asked for.
        name: String,
    },
    /// The provider answered with an error of its own: the caller gets it as it is.
    #[error("the provider refused the request: {}", .0.message)]
    Refused(ErrorData),
    /// The provider could not be reached or did not answer.
    #[error(transparent)]
    Upstream(#[from] CallError),
}

/// Composes documents into tool sets.
#[derive(Clone, Debug)]
pub struct Composer {
    connector: Connector,
    fetcher: Fetcher,
    limits: Limits,
    /// What [`Composer::compose`] authenticates with; the sidecar passes a caller's own to
    /// [`Composer::compose_reusing`].
    credentials: SharedCredentials,
}

/// Whether an input schema has a top-level property named `project` (in any case).
pub(crate) fn takes_project(schema: &JsonObject) -> bool {
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .is_some_and(|properties| properties.keys().any(|k| k.eq_ignore_ascii_case("project")))
}

impl Composer {
    /// A composer dialing MCP endpoints admitted by `mcp_guard` and fetching knowledge and
    /// skills through `fetcher`.
    pub fn new(mcp_guard: EndpointGuard, fetcher: Fetcher, limits: Limits) -> Self {
        Self {
            connector: Connector::new(mcp_guard, limits.connect_timeout),
            fetcher,
            limits,
            credentials: Arc::new(NoCredentials),
        }
    }

    /// The same composer, [`Composer::compose`] authenticating with `credentials` (the
    /// controller's probe). Without: every `auth` block is unavailable and its endpoint is not
    /// sent anything.
    pub fn with_credentials(mut self, credentials: SharedCredentials) -> Self {
        self.credentials = credentials;
        self
    }

    /// A composer from the two allow-list settings both binaries share
    /// (`CAPABILITY_MCP_ENDPOINT_HOSTS`, `CAPABILITY_FETCH_HOSTS`: comma-separated entries).
    pub fn from_allow_lists(
        mcp_endpoint_hosts: &str,
        fetch_hosts: &str,
        limits: Limits,
    ) -> Result<Self, SetupError> {
        let allow_list = |setting: &'static str, list: &str| {
            EndpointGuard::from_list(list)
                .map_err(|source| SetupError::AllowList { setting, source })
        };
        let mcp = allow_list("CAPABILITY_MCP_ENDPOINT_HOSTS", mcp_endpoint_hosts)?;
        let fetch = allow_list("CAPABILITY_FETCH_HOSTS", fetch_hosts)?;
        Ok(Self::new(mcp, Fetcher::new(fetch)?, limits))
    }

    /// The MCP allow-list admits nothing (the binaries warn about it).
    pub fn dials_nothing(&self) -> bool {
        self.connector.admits_nothing()
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Composes `documents` (already validated, in first-wins order). Upstreams are connected
    /// and knowledge fetched concurrently; the result depends only on the inputs and what the
    /// servers answer, never on which answered first.
    pub async fn compose(&self, documents: &[Document]) -> Composed {
        self.compose_reusing(
            documents,
            None,
            CallerRevision::default(),
            &self.credentials,
        )
        .await
    }

    /// Composes `documents` again for the task that holds `previous`: an upstream session of
    /// `previous` whose binding is unchanged (the same name and spec) is kept — re-listed on
    /// its own session if the server said its list changed — and only the others are opened.
    /// A binding edited, added or removed reopens (or closes) its own servers' sessions only,
    /// and a provider's list change costs one `tools/list` at that provider. The task's
    /// upstreams are opened for a caller of `revision` — those of `previous` (the task's
    /// caller's) when there is one. Endpoints with an `auth` block authenticate with
    /// `credentials` (the caller's, for a token exchange).
    pub async fn compose_reusing(
        &self,
        documents: &[Document],
        previous: Option<&Composed>,
        revision: CallerRevision,
        credentials: &SharedCredentials,
    ) -> Composed {
        let span = span_unless_unsampled(|| {
            debug_span!(
                "capstan.compose",
                otel.name = "compose",
                capstan.documents = documents.len(),
                capstan.recompose = previous.is_some(),
                capstan.tools = Empty,
            )
        });
        let composed = self
            .assemble(documents, previous, revision, credentials)
            .instrument(span.clone())
            .await;
        span.record("capstan.tools", composed.composition.tools.len());
        composed
    }

    async fn assemble(
        &self,
        documents: &[Document],
        previous: Option<&Composed>,
        revision: CallerRevision,
        credentials: &SharedCredentials,
    ) -> Composed {
        let changes = previous.map(|p| p.changes.clone()).unwrap_or_default();
        let revision = previous.map_or(revision, |p| p.revision);
        let servers = connect::connect_all(
            &self.connector,
            self.limits.connect_timeout,
            documents,
            previous,
            &changes,
            revision,
            credentials,
        );
        let knowledge = knowledge::fetch_all(&self.fetcher, credentials, documents, &self.limits);
        let mut assembly = Assembly::new(
            documents,
            Composed::empty(
                self.fetcher.clone(),
                self.limits.clone(),
                changes.clone(),
                revision,
                credentials.clone(),
            ),
        );
        // Skills first (no I/O): the pinned ones' bodies are fetched with everything else.
        assembly.add_skills();
        let pinned = assembly.composed().fetch_pinned_skills();
        let (servers, knowledge, pinned) = futures::join!(servers, knowledge, pinned);
        for server in servers {
            assembly.add_server(server);
        }
        assembly.add_skill_pins(&pinned);
        assembly.add_knowledge(&knowledge, self.limits.knowledge_total_cap);
        assembly.finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::composition::BindingOutcome;

    #[test]
    fn degradation_should_follow_the_contract() {
        let mut outcome = BindingOutcome {
            knowledge_total: 2,
            knowledge_errors: vec!["a failed".into()],
            knowledge_truncated: 1,
            ..BindingOutcome::default()
        };
        assert!(
            !outcome.degraded(),
            "one of two sources lost, one truncated"
        );
        outcome.knowledge_errors.push("b failed".into());
        assert_eq!(
            outcome.reasons(),
            ["all 2 knowledge sources failed: a failed; b failed"]
        );
        let refused = BindingOutcome {
            refused: vec!["endpoint http://x/ was not dialed: …".into()],
            ..BindingOutcome::default()
        };
        assert!(refused.degraded());
    }
}
