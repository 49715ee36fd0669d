//! The composer's CRD source on a real apiserver: CapabilityBindings listed with the
//! sidecar's credential, in creation order, through the same validation as the other sources.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use capstan_compose::{CachedSource, CrdSource, DocumentSource, Outcome as CacheOutcome};
use capstan_e2e::suite::{Env, Outcome, check, trial};
use capstan_e2e::{FIELD_MANAGER, HarnessError};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

fn main() -> ExitCode {
    capstan_e2e::suite::run(
        "crd-source",
        true,
        setup,
        vec![trial(
            "crd_source_should_list_valid_bindings_in_creation_order_and_cache_them",
            lists_in_creation_order,
        )],
    )
}

fn setup(env: &Env) -> Result<(), HarnessError> {
    env.runtime
        .block_on(env.plane.install_open_binding_crd(&env.client))
}

fn bindings(env: &Env) -> Api<DynamicObject> {
    Api::all_with(
        env.client.clone(),
        &ApiResource::erase::<capstan_api::CapabilityBinding>(&()),
    )
}

async fn apply(env: &Env, name: &str, valid: bool) -> Result<(), libtest_mimic::Failed> {
    let mut spec = json!({
        "serviceRef": { "name": name },
        "serviceName": format!("{name}.example"),
        "serviceAgentRef": { "name": "agent" },
        "configurationVersion": "v1",
    });
    if !valid {
        spec.as_object_mut().map(|s| s.remove("serviceName"));
    }
    let object = json!({
        "apiVersion": capstan_api::API_VERSION, "kind": "CapabilityBinding",
        "metadata": { "name": name }, "spec": spec,
    });
    bindings(env)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&object),
        )
        .await
        .map_err(|e| format!("applying {name}: {e}"))?;
    Ok(())
}

fn lists_in_creation_order(env: &Env) -> Outcome {
    env.runtime.block_on(async {
        let kubeconfig = Kubeconfig::read_from(env.plane.kubeconfig())
            .map_err(|e| format!("kubeconfig: {e}"))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig: {e}"))?;
        let source = CrdSource::new(config, None);

        // Created first, named last: creation order wins over names. Timestamps have one
        // second of resolution, hence the pauses.
        apply(env, "zeta", true).await?;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        apply(env, "alpha", true).await?;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        apply(env, "broken", false).await?;

        let documents = source
            .documents("any-project")
            .await
            .map_err(|e| e.to_string())?;
        let names: Vec<&str> = documents.iter().map(|d| d.binding.as_str()).collect();
        check(names == ["zeta", "alpha"], || {
            format!("documents {names:?}")
        })?;

        let cached = CachedSource::new(Arc::new(source), Duration::from_secs(60), 4);
        let (_, first) = cached.documents("p").await;
        let (_, second) = cached.documents("p").await;
        check(
            (first, second) == (CacheOutcome::Miss, CacheOutcome::Hit),
            || format!("outcomes {first:?}, {second:?}"),
        )?;

        for name in ["zeta", "alpha", "broken"] {
            bindings(env)
                .delete(name, &DeleteParams::default())
                .await
                .map_err(|e| format!("deleting {name}: {e}"))?;
        }
        let fresh = CachedSource::new(
            Arc::new(CrdSource::new(
                kube::Config::from_custom_kubeconfig(
                    Kubeconfig::read_from(env.plane.kubeconfig())
                        .map_err(|e| format!("kubeconfig: {e}"))?,
                    &KubeConfigOptions::default(),
                )
                .await
                .map_err(|e| format!("kubeconfig: {e}"))?,
                None,
            )),
            Duration::from_secs(60),
            4,
        );
        let (documents, outcome) = fresh.documents("p").await;
        check(
            documents.is_empty() && outcome == CacheOutcome::Empty,
            || format!("after deleting every binding: {outcome:?}"),
        )
    })
}
