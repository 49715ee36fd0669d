//! What the change path's unit tests build their cases from: a kind as the plane serves it, a
//! step, and a client of a plane nothing answers (for the paths that never ask it, or that
//! must fail because it cannot be asked).

#![allow(clippy::unwrap_used)]

use kube::api::ApiResource;
use serde_json::{Value, json};

use super::prepare::Prepared;
use super::step::Step;
use crate::manifest::Identity;
use crate::project_api::{Kind, ProjectApi};

/// `kind` of the core group, namespaced or not.
pub(super) fn core_kind(kind: &str, namespaced: bool) -> Kind {
    Kind {
        resource: ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        },
        namespaced,
    }
}

/// `manifest` prepared as a ConfigMap.
pub(super) fn prepared_config_map(manifest: &Value) -> Prepared {
    Prepared {
        kind: core_kind("ConfigMap", true),
        canonical: manifest.clone(),
        identity: Identity::of(manifest),
    }
}

/// The ConfigMap `name` in `default`, as apply found it: absent, or at resource version
/// `before`.
pub(super) fn step(name: &str, before: Option<&str>) -> Step {
    let canonical = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
    });
    Step {
        prepared: prepared_config_map(&canonical),
        before: before.map(|version| json!({"metadata": {"resourceVersion": version}})),
    }
}

/// A client of project `acme` on a plane nothing answers (`https://127.0.0.1:1`).
pub(super) fn unreachable() -> ProjectApi {
    capstan_core::install_crypto_provider();
    let plane = capstan_core::control_plane::ControlPlane::new(
        kube::Config::new("https://127.0.0.1:1".parse().unwrap()),
        None,
    );
    ProjectApi::for_caller(&plane, "acme", "t").unwrap()
}
