//! Composing a caller's project: the document reader and the composer, with the source-read
//! and composition metrics. Used by `initialize` (a task's composition) and by inspection.

use std::sync::Arc;
use std::time::Instant;

use capstan_compose::{Composed, Composer, Document, ProjectDocuments};

use crate::identity::Identity;
use crate::task::TaskContext;

/// Composes projects for callers, and hands each task what tasks share.
pub struct ProjectComposer {
    documents: Arc<dyn ProjectDocuments>,
    composer: Composer,
    context: TaskContext,
}

/// A composition for one identity, with the documents it came from.
pub struct ComposedProject {
    /// The live composition (upstream sessions open).
    pub composed: Composed,
    /// The documents composed (shared with the cache, not copied per session).
    pub documents: Arc<Vec<Document>>,
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
        }
    }

    /// What every task shares.
    pub fn context(&self) -> &TaskContext {
        &self.context
    }

    /// Composes the project of `identity`. The caller's token plays no part in composing
    /// provider tools: it is never forwarded to a provider.
    pub async fn compose(&self, identity: &Identity) -> ComposedProject {
        let metrics = &self.context.metrics;
        let started = Instant::now();
        let (documents, outcome) = self.documents.read(&identity.project).await;
        metrics.source_read(outcome.label());
        let composed = self.composer.compose(&documents).await;
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
            documents,
        }
    }
}
