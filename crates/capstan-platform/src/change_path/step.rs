//! One step of an apply: the object as apply found it before writing, the write it makes
//! (with its precondition), and what that write left to undo.

use serde_json::{Value, json};

use super::prepare::Prepared;
use super::resource_version;
use crate::project_api::{ApiFailure, ProjectApi};

/// What apply found of one object before writing: the manifest to write and the object as it
/// is now (`None`: it must not exist, so it is created).
pub(super) struct Step {
    pub(super) prepared: Prepared,
    pub(super) before: Option<Value>,
}

/// A write apply made, remembered so it can be undone.
pub(super) enum Written {
    /// An object created: deleted again if it is still exactly this one.
    Created {
        uid: String,
        resource_version: String,
    },
    /// An object updated: put back as it was if nobody changed it since.
    Updated { resource_version: String },
    /// Applied without a change (the same resource version): nothing to undo.
    Unchanged,
}

impl Step {
    /// The write this step makes: a create when the object does not exist (refused if it
    /// exists by then), else a server-side apply on the resource version it has (refused if it
    /// has moved on); never forced over another field manager.
    pub(super) async fn write(&self, api: &ProjectApi, dry_run: bool) -> Result<Value, ApiFailure> {
        let kind = &self.prepared.kind;
        match self.before.as_ref().and_then(resource_version) {
            None => api.create(kind, &self.prepared.canonical, dry_run).await,
            Some(version) => {
                let mut manifest = self.prepared.canonical.clone();
                if let Some(metadata) = manifest.get_mut("metadata").and_then(Value::as_object_mut)
                {
                    metadata.insert("resourceVersion".into(), json!(version));
                }
                api.apply(kind, &manifest, dry_run).await
            }
        }
    }

    /// What a refused precondition says of this step's object.
    pub(super) fn moved_since(&self, message: &str) -> String {
        let object = &self.prepared.identity;
        match self.before {
            None => format!(
                "{object} was created by someone else after the plan was checked, so creating it \
                 would overwrite theirs ({message})"
            ),
            Some(_) => format!(
                "{object} was changed by someone else after the plan was checked, or another \
                 field manager owns a field the plan sets ({message})"
            ),
        }
    }
}

impl Written {
    /// What writing `step` did, from the object the plane returned: a create when there was no
    /// object before, an update when its resource version moved, else nothing.
    pub(super) fn of(step: &Step, object: &Value) -> Self {
        let version = resource_version(object).unwrap_or_default();
        match step.before.as_ref().and_then(resource_version) {
            None => Written::Created {
                uid: object
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                resource_version: version,
            },
            Some(before) if before == version => Written::Unchanged,
            Some(_) => Written::Updated {
                resource_version: version,
            },
        }
    }
}
