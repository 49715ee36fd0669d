//! The fixture source: documents from a local file, read on every call.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

use super::objects::{found_in, scoped};
use super::snapshot::Snapshot;
use super::{DocumentSource, SourceError, check_project};

/// Documents from a local JSON or YAML file (a bare array or a `{"items": […]}` List), read
/// on every call so an edited fixture takes effect without a restart.
#[derive(Clone, Debug)]
pub struct FixtureSource {
    path: PathBuf,
}

impl FixtureSource {
    /// A source reading `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl DocumentSource for FixtureSource {
    fn documents<'a>(&'a self, project: &'a str) -> BoxFuture<'a, Result<Snapshot, SourceError>> {
        Box::pin(async move {
            check_project("fixture", project)?;
            let error = |message: String| SourceError::new("fixture", project, message);
            let origin = self.path.display().to_string();
            let text = tokio::fs::read_to_string(&self.path)
                .await
                .map_err(|e| error(format!("reading {origin}: {e}")))?;
            let parsed = capstan_api::parse(&text).map_err(|e| error(format!("{origin}: {e}")))?;
            Ok(scoped(found_in(parsed, &origin), project, &origin))
        })
    }
}
