//! The composer's CRD source on a real apiserver: CapabilityBindings listed with the
//! sidecar's credential (a service account bound to `config/rbac/sidecar.yaml`, nothing
//! more), in creation order, through the same validation as the other sources, and through a
//! control-plane URL template.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use capstan_compose::{CachedSource, CrdSource, DocumentSource, ReadOutcome as CacheOutcome};
use capstan_e2e::controller::{NAMESPACE, bind_cluster_role, service_account};
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
        vec![
            trial(
                "crd_source_should_list_valid_bindings_in_creation_order_and_cache_them",
                lists_in_creation_order,
            ),
            trial(
                "crd_source_should_read_with_the_sidecars_own_account_and_the_documented_rbac",
                reads_as_the_sidecar,
            ),
            trial(
                "crd_source_should_reach_each_projects_control_plane_through_the_url_template",
                follows_the_url_template,
            ),
        ],
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
        let names: Vec<&str> = documents
            .documents
            .iter()
            .map(|d| d.binding.as_str())
            .collect();
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

/// A kube config authenticating as service account `account`.
async fn account_config(env: &Env, account: &str) -> Result<kube::Config, libtest_mimic::Failed> {
    let path = service_account(&env.plane, account).map_err(|e| e.to_string())?;
    let kubeconfig = Kubeconfig::read_from(&path).map_err(|e| format!("kubeconfig: {e}"))?;
    Ok(
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("kubeconfig: {e}"))?,
    )
}

/// The users who listed CapabilityBindings, with the response codes they got.
fn binding_lists(env: &Env) -> Vec<(String, i64)> {
    env.plane
        .audit_events()
        .unwrap_or_default()
        .iter()
        .filter(|event| {
            event["verb"] == "list"
                && event["stage"] == "ResponseComplete"
                && event["objectRef"]["resource"] == "capabilitybindings"
        })
        .map(|event| {
            (
                event["user"]["username"].as_str().unwrap_or("?").to_owned(),
                event["responseStatus"]["code"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

fn reads_as_the_sidecar(env: &Env) -> Outcome {
    let output = env
        .plane
        .kubectl(&["apply", "-f", "config/rbac/sidecar.yaml"]);
    check(output.status.success(), || capstan_e2e::printed(&output))?;
    env.runtime.block_on(async {
        apply(env, "as-sidecar", true).await?;
        // The documented rule, bound to the sidecar's account: it reads.
        let config = account_config(env, "capstan-sidecar").await?;
        bind_cluster_role(&env.plane, "capstan-sidecar", "capstan-sidecar")
            .map_err(|e| e.to_string())?;
        let documents = CrdSource::new(config, None)
            .documents("demo-project")
            .await
            .map_err(|e| e.to_string())?;
        let names: Vec<&str> = documents
            .documents
            .iter()
            .map(|d| d.binding.as_str())
            .collect();
        check(names == ["as-sidecar"], || format!("documents {names:?}"))?;
        // The list went out as the sidecar's account, not the admin's.
        let sidecar = format!("system:serviceaccount:{NAMESPACE}:capstan-sidecar");
        let lists = binding_lists(env);
        check(lists.contains(&(sidecar.clone(), 200)), || {
            format!("no list by {sidecar}: {lists:?}")
        })?;
        // An account without the rule is refused, and that reads as an error, never as a
        // project without capabilities.
        let unbound = account_config(env, "unbound-sidecar").await?;
        let cached = CachedSource::new(
            Arc::new(CrdSource::new(unbound, None)),
            Duration::from_secs(60),
            4,
        );
        let (documents, outcome) = cached.documents("demo-project").await;
        check(
            documents.is_empty() && outcome == CacheOutcome::Error,
            || {
                format!(
                    "unbound account: {outcome:?}, {} documents",
                    documents.documents.len()
                )
            },
        )?;
        let unbound_user = format!("system:serviceaccount:{NAMESPACE}:unbound-sidecar");
        check(binding_lists(env).contains(&(unbound_user, 403)), || {
            "the unbound account's list was not refused with 403".to_owned()
        })?;
        bindings(env)
            .delete("as-sidecar", &DeleteParams::default())
            .await
            .map_err(|e| format!("deleting as-sidecar: {e}"))?;
        Ok(())
    })
}

/// A stand-in for a front proxy that routes `/projects/{project}/control-plane/...` to each
/// project's control plane: here every project's plane is the test apiserver, reached with the
/// admin client. It records the paths it was asked for.
async fn serve_project_planes(
    client: kube::Client,
) -> Result<(String, Arc<std::sync::Mutex<Vec<String>>>), libtest_mimic::Failed> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let app = axum::Router::new().fallback(move |uri: http::Uri| {
        let client = client.clone();
        let recorded = recorded.clone();
        async move {
            use axum::response::IntoResponse;
            let path = uri.path().to_owned();
            if let Ok(mut seen) = recorded.lock() {
                seen.push(path.clone());
            }
            // /projects/<project>/control-plane/<the apiserver's path>
            let rest = path
                .splitn(5, '/')
                .nth(4)
                .filter(|_| path.starts_with("/projects/"))
                .map(|rest| format!("/{rest}"));
            let Some(rest) = rest else {
                return (http::StatusCode::NOT_FOUND, "no such project path").into_response();
            };
            let target = match uri.query() {
                Some(query) => format!("{rest}?{query}"),
                None => rest,
            };
            let request = match http::Request::get(target).body(Vec::new()) {
                Ok(request) => request,
                Err(error) => {
                    return (http::StatusCode::BAD_REQUEST, error.to_string()).into_response();
                }
            };
            match client.request_text(request).await {
                Ok(text) => {
                    ([(http::header::CONTENT_TYPE, "application/json")], text).into_response()
                }
                Err(error) => (http::StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{address}"), seen))
}

fn follows_the_url_template(env: &Env) -> Outcome {
    env.runtime.block_on(async {
        apply(env, "routed", true).await?;
        let (base, seen) = serve_project_planes(env.client.clone()).await?;
        let template = format!("{base}/projects/{{project}}/control-plane");
        let config = account_config(env, "capstan-sidecar-routed").await?;
        let source = CrdSource::new(config, Some(template));
        for project in ["demo-project", "team-b.prod"] {
            let documents = source
                .documents(project)
                .await
                .map_err(|e| format!("{project}: {e}"))?;
            let names: Vec<&str> = documents.documents.iter().map(|d| d.binding.as_str()).collect();
            check(names == ["routed"], || format!("{project}: documents {names:?}"))?;
        }
        // Bindings and RouteQualifiers are listed together, in either order.
        let mut seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        seen.sort();
        let expected: Vec<String> = ["demo-project", "team-b.prod"]
            .iter()
            .flat_map(|p| {
                ["capabilitybindings", "routequalifiers"].map(|kind| {
                    format!(
                        "/projects/{p}/control-plane/apis/capabilities.assistant.miloapis.com/v1alpha1/{kind}"
                    )
                })
            })
            .collect();
        check(seen == expected, || format!("paths asked: {seen:?}"))?;
        bindings(env)
            .delete("routed", &DeleteParams::default())
            .await
            .map_err(|e| format!("deleting routed: {e}"))?;
        Ok(())
    })
}
