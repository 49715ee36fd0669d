//! Composing a caller's project: the document reader and the composer, with the source-read
//! and composition metrics. Used by `initialize` (a task's composition) and by inspection.

use std::sync::Arc;
use std::time::Instant;

use capstan_compose::composer::Composed;
use capstan_compose::composer::Composer;
use capstan_compose::source::ProjectDocuments;
use capstan_compose::source::Snapshot;
use capstan_core::control_plane::ControlPlane;
use capstan_platform::{BaseTools, ChangePath, ProjectApi};
use capstan_upstream::credential::{NoCredentials, SharedCredentials};
use capstan_upstream::mcp::CallerRevision;
use tracing::warn;

use crate::caller::identity::Identity;
use crate::task::{Served, TaskContext};
use capstan_compose::credentials::UpstreamCredentials;

/// Composes projects for callers, and hands each task what tasks share.
pub struct ProjectComposer {
    documents: Arc<dyn ProjectDocuments>,
    composer: Composer,
    context: TaskContext,
    base: Option<BaseToolsSetup>,
    /// What endpoints with an `auth` block authenticate with (docs/upstream-auth.md); none:
    /// every `auth` block is unavailable.
    credentials: Option<Arc<UpstreamCredentials>>,
}

/// What the base platform tools need: the projects' control planes, and the change path when
/// a plan-token key is available.
#[derive(Clone, Debug)]
pub struct BaseToolsSetup {
    /// Where each project's plane is (the caller's token replaces the sidecar's credential).
    pub plane: ControlPlane,
    /// The change path, composed only with a plan-token key.
    pub change_path: Option<ChangePath>,
}

/// A composition for one identity, with the snapshot it came from and the platform tools the
/// caller gets beside it.
pub struct ComposedProject {
    /// The live composition (upstream sessions open).
    pub composed: Composed,
    /// The base platform tools, acting as the caller (a token and a known plane).
    pub base: Option<BaseTools>,
    /// The documents composed and the qualifiers routed calls obey (shared with the cache,
    /// not copied per session).
    pub snapshot: Arc<Snapshot>,
}

impl ProjectComposer {
    /// Reads documents from `documents` and composes them with `composer`; tasks share
    /// `context`.
    pub fn new(
        documents: Arc<dyn ProjectDocuments>,
        composer: Composer,
        context: TaskContext,
    ) -> Self {
        Self {
            documents,
            composer,
            context,
            base: None,
            credentials: None,
        }
    }

    /// The same composer, endpoints with an `auth` block authenticating with `credentials`.
    pub fn with_credentials(mut self, credentials: Arc<UpstreamCredentials>) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The same composer, composing the base platform tools for callers with a token.
    pub fn with_base_tools(mut self, setup: BaseToolsSetup) -> Self {
        self.base = Some(setup);
        self
    }

    /// What every task shares.
    pub fn context(&self) -> &TaskContext {
        &self.context
    }

    /// Where documents are read from.
    pub fn documents(&self) -> &Arc<dyn ProjectDocuments> {
        &self.documents
    }

    /// Composes the project of `identity`, a caller of `revision` (its upstreams are opened
    /// in that revision where the server offers it). The caller's token plays no part in
    /// composing provider tools (it is never forwarded to a provider); the base platform tools
    /// act with it on the project's own control plane, and without it they are not composed —
    /// there is no fallback to reading as the sidecar.
    pub async fn compose(&self, identity: &Identity, revision: CallerRevision) -> ComposedProject {
        let (snapshot, outcome) = self.documents.read(&identity.project).await;
        self.context.metrics.source_read(outcome.label());
        self.compose_with(identity, snapshot, None, revision).await
    }

    /// Composes `snapshot` (already read) for `identity`, as [`ProjectComposer::compose`]
    /// does, keeping what it can of `previous` (what the task serves until now): the upstream
    /// sessions of unchanged bindings, and the base tools' client. When a live session's
    /// documents or upstreams change (`composition/refresh.rs`).
    pub async fn compose_snapshot(
        &self,
        identity: &Identity,
        snapshot: Arc<Snapshot>,
        previous: Option<&Served>,
    ) -> ComposedProject {
        // A composition after the first keeps the revisions of the task's first.
        let revision = CallerRevision::default();
        self.compose_with(identity, snapshot, previous, revision)
            .await
    }

    async fn compose_with(
        &self,
        identity: &Identity,
        snapshot: Arc<Snapshot>,
        previous: Option<&Served>,
        revision: CallerRevision,
    ) -> ComposedProject {
        let metrics = &self.context.metrics;
        let started = Instant::now();
        let credentials: SharedCredentials = match &self.credentials {
            Some(credentials) => credentials.for_caller(
                &identity.project,
                identity
                    .token()
                    .map(|token| (identity.fingerprint(), Arc::from(token))),
            ),
            None => Arc::new(NoCredentials),
        };
        let composed = self
            .composer
            .compose_reusing(
                &snapshot.documents,
                previous.map(Served::composed),
                revision,
                &credentials,
            )
            .await;
        let base = match previous {
            Some(previous) => previous.base().cloned(),
            None => self.base_tools(identity),
        };
        metrics
            .compose_duration
            .observe(started.elapsed().as_secs_f64());
        let failures = composed
            .composition
            .bindings
            .iter()
            .map(|b| b.upstream_errors.len() + b.refused.len())
            .sum::<usize>();
        metrics
            .upstream_connect_failures
            .inc_by(u64::try_from(failures).unwrap_or(u64::MAX));
        ComposedProject {
            composed,
            base,
            snapshot,
        }
    }

    /// The base platform tools of `identity`: acting with its token on its project's plane,
    /// when both are known; never a fallback to the sidecar's credential.
    fn base_tools(&self, identity: &Identity) -> Option<BaseTools> {
        let (setup, token) = (self.base.as_ref()?, identity.token()?);
        match ProjectApi::for_caller(&setup.plane, &identity.project, token) {
            Ok(api) => Some(BaseTools::new(api, setup.change_path.clone())),
            Err(error) => {
                warn!(project = %identity.project, %error, "the base platform tools are not composed: no client for the project's control plane");
                None
            }
        }
    }
}
