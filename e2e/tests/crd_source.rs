//! The composer's CRD source on a real apiserver: CapabilityBindings listed with the
//! sidecar's credential (a service account bound to `config/rbac/sidecar.yaml`, nothing
//! more), in creation order, through the same validation as the other sources, and through a
//! control-plane URL template; without a template, kept by a watch (`source/crd_watch.rs`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use capstan_compose::source::CachedSource;
use capstan_compose::source::CrdSource;
use capstan_compose::source::DocumentSource;
use capstan_compose::source::ProjectDocuments;
use capstan_compose::source::ReadOutcome as CacheOutcome;
use capstan_compose::source::WatchedCluster;
use capstan_e2e::controller::{NAMESPACE, bind_cluster_role, service_account};
use capstan_e2e::sidecar::SidecarProcess;
use capstan_e2e::suite::{Env, Outcome, check, eventually, trial};
use capstan_e2e::{FIELD_MANAGER, HarnessError, free_address};
use capstan_testkit::{DemoProvider, ListeningClient, binding_document, unix_seconds};
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
            trial(
                "the_watched_crd_source_should_see_creates_changes_and_deletes_without_listing_again",
                watches_changes,
            ),
            trial(
                "the_watched_crd_source_should_never_serve_empty_before_its_first_sync_or_across_an_apiserver_restart",
                survives_outages,
            ),
            trial(
                "a_sidecar_with_the_crd_source_should_report_ready_only_after_its_first_sync",
                ready_after_first_sync,
            ),
            trial(
                "a_binding_change_should_reach_a_live_python_session_as_list_changed",
                live_list_changed,
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
        // Without a template the sidecar watches: the documented rule allows that too.
        let watched = WatchedCluster::start(
            kube::Client::try_from(account_config(env, "capstan-sidecar").await?)
                .map_err(|e| e.to_string())?,
        );
        synced(&watched).await?;
        let watched_documents = watched_names(&watched).await;
        check(watched_documents == ["as-sidecar"], || {
            format!("watched documents {watched_documents:?}")
        })?;
        // And the watch itself is allowed: a new binding arrives as an event. (Listing alone
        // would sync too, then fail every watch and fall back to re-listing.)
        let lists = watched.counts().lists.load(Ordering::Relaxed);
        apply(env, "as-sidecar-later", true).await?;
        shown(&watched, "as-sidecar-later", true, WATCH_BOUND).await?;
        let (relists, failures) = (
            watched.counts().lists.load(Ordering::Relaxed) - lists,
            watched.counts().failures.load(Ordering::Relaxed),
        );
        check(relists == 0 && failures == 0, || {
            format!("the sidecar's watch: {failures} failures, {relists} re-lists")
        })?;
        bindings(env)
            .delete("as-sidecar-later", &DeleteParams::default())
            .await
            .map_err(|e| format!("deleting as-sidecar-later: {e}"))?;
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
        // The watch's own list is refused too: counted from here, since the cached read above
        // was refused as the same account.
        let unbound_user = format!("system:serviceaccount:{NAMESPACE}:unbound-sidecar");
        let refused = |lists: &[(String, i64)]| {
            lists
                .iter()
                .filter(|(user, code)| *user == unbound_user && *code == 403)
                .count()
        };
        let refused_before = eventually(
            WATCH_BOUND,
            || async { Some(refused(&binding_lists(env))).filter(|&n| n > 0) },
            || "the unbound account's cached read was not refused with 403".to_owned(),
        )
        .await?;
        let unbound_watch = WatchedCluster::start(
            kube::Client::try_from(account_config(env, "unbound-sidecar").await?)
                .map_err(|e| e.to_string())?,
        );
        eventually(
            WATCH_BOUND,
            || async {
                (unbound_watch.counts().failures.load(Ordering::Relaxed) > 0).then_some(())
            },
            || "the unbound account's watch saw no failure".to_owned(),
        )
        .await?;
        let (documents, outcome) = unbound_watch.read("demo-project").await;
        check(
            !unbound_watch.synced() && documents.is_empty() && outcome == CacheOutcome::Error,
            || format!("unbound account, watched: {outcome:?}"),
        )?;
        eventually(
            WATCH_BOUND,
            || async { (refused(&binding_lists(env)) > refused_before).then_some(()) },
            || "the unbound account's watch list was not refused with 403".to_owned(),
        )
        .await?;
        bindings(env)
            .delete("as-sidecar", &DeleteParams::default())
            .await
            .map_err(|e| format!("deleting as-sidecar: {e}"))?;
        Ok(())
    })
}

/// One request the project-plane proxy forwarded: the path, the query as sent, and the
/// resourceVersion of the list the apiserver answered with.
#[derive(Clone, Debug)]
struct Asked {
    path: String,
    query: Option<String>,
    answered_version: Option<String>,
    /// Why the apiserver did not answer with a list, if it did not.
    refused: Option<String>,
}

/// A resourceVersion no apiserver of this suite has reached: the proxy puts it in place of
/// the one `team-b.prod`'s reads send, so the apiserver refuses those lists.
const UNREACHED_VERSION: &str = "999999999999";

/// A stand-in for a front proxy that routes `/projects/{project}/control-plane/...` to each
/// project's control plane: here every project's plane is the test apiserver, reached with the
/// admin client. It records what it was asked; for project `team-b.prod` it replaces any
/// `resourceVersion` with [`UNREACHED_VERSION`].
async fn serve_project_planes(
    client: kube::Client,
) -> Result<(String, Arc<std::sync::Mutex<Vec<Asked>>>), libtest_mimic::Failed> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let app = axum::Router::new().fallback(move |uri: http::Uri| {
        let client = client.clone();
        let recorded = recorded.clone();
        async move {
            use axum::response::IntoResponse;
            let path = uri.path().to_owned();
            // /projects/<project>/control-plane/<the apiserver's path>
            let mut parts = path.splitn(5, '/');
            let project = parts.nth(2).unwrap_or_default().to_owned();
            let rest = parts
                .nth(1)
                .filter(|_| path.starts_with("/projects/"))
                .map(|rest| format!("/{rest}"));
            let Some(rest) = rest else {
                return (http::StatusCode::NOT_FOUND, "no such project path").into_response();
            };
            let query = uri.query().map(|query| {
                if project != "team-b.prod" {
                    return query.to_owned();
                }
                query
                    .split('&')
                    .map(|pair| match pair.split_once('=') {
                        Some(("resourceVersion", _)) => {
                            format!("resourceVersion={UNREACHED_VERSION}")
                        }
                        _ => pair.to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join("&")
            });
            let target = match &query {
                Some(query) => format!("{rest}?{query}"),
                None => rest,
            };
            let answer = match http::Request::get(target).body(Vec::new()) {
                Ok(request) => client.request_text(request).await,
                Err(error) => {
                    return (http::StatusCode::BAD_REQUEST, error.to_string()).into_response();
                }
            };
            let answered_version = answer.as_ref().ok().and_then(|text| {
                let list: serde_json::Value = serde_json::from_str(text).ok()?;
                Some(list["metadata"]["resourceVersion"].as_str()?.to_owned())
            });
            if let Ok(mut seen) = recorded.lock() {
                seen.push(Asked {
                    path: path.clone(),
                    query: uri.query().map(str::to_owned),
                    answered_version,
                    refused: answer.as_ref().err().map(ToString::to_string),
                });
            }
            match answer {
                Ok(text) => {
                    ([(http::header::CONTENT_TYPE, "application/json")], text).into_response()
                }
                // The apiserver's refusal passed on as it came.
                Err(kube::Error::Api(status)) => (
                    http::StatusCode::from_u16(status.code)
                        .unwrap_or(http::StatusCode::BAD_GATEWAY),
                    axum::Json(status),
                )
                    .into_response(),
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

/// The value of `key` in a query string.
fn query_value<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?
        .split('&')
        .find_map(|pair| pair.split_once('=').filter(|(k, _)| *k == key))
        .map(|(_, value)| value)
}

fn follows_the_url_template(env: &Env) -> Outcome {
    env.runtime.block_on(async {
        apply(env, "routed", true).await?;
        // The proxy forwards each request once (kube's client would retry the refusals).
        let kubeconfig =
            Kubeconfig::read_from(env.plane.kubeconfig()).map_err(|e| format!("kubeconfig: {e}"))?;
        let mut admin = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("kubeconfig: {e}"))?;
        admin.default_retry = false;
        let admin = kube::Client::try_from(admin).map_err(|e| e.to_string())?;
        let (base, seen) = serve_project_planes(admin).await?;
        let template = format!("{base}/projects/{{project}}/control-plane");
        let config = account_config(env, "capstan-sidecar-routed").await?;
        let source = CrdSource::new(config, Some(template));
        let path = |project: &str, kind: &str| {
            format!(
                "/projects/{project}/control-plane/apis/capabilities.assistant.miloapis.com/v1alpha1/{kind}"
            )
        };
        // Each project read twice: the second read lists from the version the first saw.
        for read in 1..=2 {
            for project in ["demo-project", "team-b.prod"] {
                let documents = source
                    .documents(project)
                    .await
                    .map_err(|e| format!("{project}, read {read}: {e}"))?;
                let names: Vec<&str> =
                    documents.documents.iter().map(|d| d.binding.as_str()).collect();
                check(names == ["routed"], || {
                    format!("{project}, read {read}: documents {names:?}")
                })?;
            }
        }
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        // A list throttled while a new kind's storage initializes is retried by the source
        // and left out here.
        let asked = |project: &str, kind: &str| -> Vec<Asked> {
            let path = path(project, kind);
            seen.iter()
                .filter(|a| a.path == path)
                .filter(|a| !a.refused.as_deref().is_some_and(|r| r.contains("TooManyRequests")))
                .cloned()
                .collect()
        };
        for kind in ["capabilitybindings", "routequalifiers"] {
            // demo-project: a consistent list, then one not older than what it answered.
            let demo = asked("demo-project", kind);
            let [first, second] = demo.as_slice() else {
                return Err(format!("demo-project {kind}: asked {demo:?}").into());
            };
            check(query_value(first.query.as_deref(), "resourceVersion").is_none(), || {
                format!("demo-project {kind}: the first list named a version: {first:?}")
            })?;
            check(
                query_value(second.query.as_deref(), "resourceVersionMatch")
                    == Some("NotOlderThan")
                    && query_value(second.query.as_deref(), "resourceVersion")
                        == first.answered_version.as_deref()
                    && first.answered_version.is_some(),
                || format!("demo-project {kind}: the second list {second:?} after {first:?}"),
            )?;
            // team-b.prod: the version it sent was refused (the proxy made it one the
            // apiserver has not reached), so it listed again without one and still read.
            let team = asked("team-b.prod", kind);
            let shapes: Vec<(Option<&str>, bool)> = team
                .iter()
                .map(|a| {
                    (
                        query_value(a.query.as_deref(), "resourceVersionMatch"),
                        a.answered_version.is_some(),
                    )
                })
                .collect();
            check(
                shapes == [(None, true), (Some("NotOlderThan"), false), (None, true)],
                || format!("team-b.prod {kind}: asked {team:?}"),
            )?;
        }
        bindings(env)
            .delete("routed", &DeleteParams::default())
            .await
            .map_err(|e| format!("deleting routed: {e}"))?;
        Ok(())
    })
}

/// How long a watched change may take to show. A bound on waiting, not a latency claim (the
/// benchmark measures that).
const WATCH_BOUND: Duration = Duration::from_secs(5);

/// Waits for `watched`'s first sync.
async fn synced(watched: &WatchedCluster) -> Result<(), libtest_mimic::Failed> {
    let mut first = watched.first_sync();
    tokio::time::timeout(Duration::from_secs(30), first.wait_for(|synced| *synced))
        .await
        .map_err(|_| "the watch did not sync within 30 s".to_owned())?
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Waits up to `bound` until binding `name` is (`present`) or is not in what a session
/// composing now would get.
async fn shown(
    watched: &WatchedCluster,
    name: &str,
    present: bool,
    bound: Duration,
) -> Result<(), libtest_mimic::Failed> {
    eventually(
        bound,
        || async move {
            (watched_names(watched).await.iter().any(|n| n == name) == present).then_some(())
        },
        || format!("binding {name:?} shown: expected {present}"),
    )
    .await
}

/// The bindings a session composing now would get.
async fn watched_names(watched: &WatchedCluster) -> Vec<String> {
    let (snapshot, _) = watched.read("p").await;
    snapshot
        .documents
        .iter()
        .map(|d| d.binding.clone())
        .collect()
}

fn watches_changes(env: &Env) -> Outcome {
    env.runtime.block_on(async {
        let watched = WatchedCluster::start(env.client.clone());
        synced(&watched).await?;
        let lists = watched.counts().lists.load(Ordering::Relaxed);
        let shows = |present: bool| shown(&watched, "watched", present, WATCH_BOUND);
        apply(env, "watched", true).await?;
        shows(true).await?;
        // Changed to an invalid spec: it leaves the composition; fixed: it is back.
        apply(env, "watched", false).await?;
        shows(false).await?;
        apply(env, "watched", true).await?;
        shows(true).await?;
        bindings(env)
            .delete("watched", &DeleteParams::default())
            .await
            .map_err(|e| format!("deleting watched: {e}"))?;
        shows(false).await?;
        let relists = watched.counts().lists.load(Ordering::Relaxed) - lists;
        check(relists == 0, || {
            format!("{relists} LISTs after the first sync: changes should arrive as events")
        })
    })
}

fn survives_outages(env: &Env) -> Outcome {
    let watched = env.runtime.block_on(async {
        // Started while nothing answers at the address: not synced, and reads are an outage
        // (the reason is logged), never "this project has no capabilities".
        let mut config = admin_config(env).await?;
        config.cluster_url = "https://127.0.0.1:9".parse().map_err(|e| format!("{e}"))?;
        let down =
            WatchedCluster::start(kube::Client::try_from(config).map_err(|e| e.to_string())?);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (snapshot, outcome) = down.read("p").await;
        check(
            !down.synced() && outcome == CacheOutcome::Error && snapshot.is_empty(),
            || format!("before a first sync: {outcome:?}"),
        )?;
        drop(down);

        apply(env, "survivor", true).await?;
        let watched = WatchedCluster::start(env.client.clone());
        synced(&watched).await?;
        shown(&watched, "survivor", true, WATCH_BOUND).await?;
        Ok::<_, libtest_mimic::Failed>(Arc::new(watched))
    })?;
    // Read all through the restart, not only once it is over: a snapshot cleared on the
    // watch's error and filled again by the re-list would pass a read made afterwards.
    let failures_before = watched.counts().failures.load(Ordering::Relaxed);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let reader = env.runtime.spawn({
        let watched = watched.clone();
        async move {
            let (mut reads, mut without) = (0_usize, Vec::new());
            let mut stopped = std::pin::pin!(stopped);
            loop {
                let (snapshot, outcome) = watched.read("p").await;
                reads += 1;
                if !snapshot.documents.iter().any(|d| d.binding == "survivor") {
                    without.push(format!(
                        "{outcome:?}, {} documents",
                        snapshot.documents.len()
                    ));
                }
                tokio::select! {
                    _ = &mut stopped => return (reads, without),
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
        }
    });
    env.plane.restart_apiserver().map_err(|e| e.to_string())?;
    env.runtime.block_on(async {
        // The watch comes back on its own: a binding created now is seen.
        let client = env.plane.client().await.map_err(|e| e.to_string())?;
        let api: Api<DynamicObject> =
            Api::all_with(client, &ApiResource::erase::<capstan_api::CapabilityBinding>(&()));
        let object = json!({
            "apiVersion": capstan_api::API_VERSION, "kind": "CapabilityBinding",
            "metadata": { "name": "after-restart" },
            "spec": { "serviceRef": { "name": "after-restart" }, "serviceName": "after-restart.example",
                      "serviceAgentRef": { "name": "agent" }, "configurationVersion": "v1" },
        });
        api.patch("after-restart", &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&object))
            .await
            .map_err(|e| format!("applying after-restart: {e}"))?;
        // The watch re-lists with backoff after the restart: a longer bound.
        shown(&watched, "after-restart", true, Duration::from_secs(30)).await?;
        let _ = stop.send(());
        let (reads, without) = reader.await.map_err(|e| format!("the reader: {e}"))?;
        let failures = watched.counts().failures.load(Ordering::Relaxed) - failures_before;
        check(failures > 0, || {
            "the watch saw no failure: the restart was not observed".to_owned()
        })?;
        check(without.is_empty(), || {
            format!(
                "{} of {reads} reads across the restart lacked survivor, the first: {:?}",
                without.len(),
                &without[..without.len().min(3)]
            )
        })?;
        for name in ["survivor", "after-restart"] {
            api.delete(name, &DeleteParams::default())
                .await
                .map_err(|e| format!("deleting {name}: {e}"))?;
        }
        Ok(())
    })
}

/// The admin kube config of the test plane.
async fn admin_config(env: &Env) -> Result<kube::Config, libtest_mimic::Failed> {
    let kubeconfig =
        Kubeconfig::read_from(env.plane.kubeconfig()).map_err(|e| format!("kubeconfig: {e}"))?;
    Ok(
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("kubeconfig: {e}"))?,
    )
}

/// The HTTP status and body of a GET on `address` (status 0 when nothing answers).
fn http_get(address: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

fn http_status(address: &str, path: &str) -> u16 {
    http_get(address, path).0
}

fn ready_after_first_sync(env: &Env) -> Outcome {
    // The same kubeconfig with a server nothing answers at.
    let text = std::fs::read_to_string(env.plane.kubeconfig()).map_err(|e| e.to_string())?;
    let dead: String = text
        .lines()
        .map(|line| match line.trim_start().strip_prefix("server: ") {
            Some(_) => "    server: https://127.0.0.1:9".to_owned(),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let dead_path = env.plane.state_dir().join("kubeconfig-unreachable");
    std::fs::write(&dead_path, dead).map_err(|e| e.to_string())?;

    let (down_address, up_address) = (free_address()?, free_address()?);
    let down = SidecarProcess::start(
        &env.plane,
        &dead_path,
        "unsynced",
        &[("CAPSTAN_METRICS_ADDRESS", down_address.as_str())],
    )
    .map_err(|e| e.to_string())?;
    let up = SidecarProcess::start(
        &env.plane,
        env.plane.kubeconfig(),
        "synced",
        &[("CAPSTAN_METRICS_ADDRESS", up_address.as_str())],
    )
    .map_err(|e| e.to_string())?;
    env.runtime.block_on(eventually(
        Duration::from_secs(30),
        || async { (http_status(&up_address, "/readyz") == 200).then_some(()) },
        || format!("the synced sidecar is not ready:\n{}", up.log_text()),
    ))?;
    // Its watches listed each kind once, and report it.
    let (_, metrics) = http_get(&up_address, "/metrics");
    // And what that cost in bytes: at least the two lists' bodies.
    let read_bytes: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("capstan_sidecar_crd_read_bytes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    check(
        metrics.contains("capstan_sidecar_crd_lists_total 2") && read_bytes > 100,
        || {
            format!(
                "crd metrics of the synced sidecar:\n{}",
                metrics
                    .lines()
                    .filter(|l| l.contains("crd_"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        },
    )?;
    // Serving, alive, but not ready: it has never read the bindings.
    let (ready, alive) = (
        http_status(&down_address, "/readyz"),
        http_status(&down_address, "/healthz"),
    );
    check(ready == 503 && alive == 200, || {
        format!(
            "unsynced sidecar: /readyz {ready}, /healthz {alive}\n{}",
            down.log_text()
        )
    })
}

/// Live clients of the Python SDK — one in a session (2025-11-25), one without (2026-07-28, a
/// `subscriptions/listen` stream) — on a sidecar whose crd source watches the cluster: a
/// binding changed with the apiserver reaches both as `notifications/tools/list_changed`, their
/// next `tools/list` shows the new set, and the tool that left reads as unknown. The time from
/// the apply to each notification is printed (measured, never asserted).
fn live_list_changed(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    let address = free_address()?;
    let hosts = provider.host();
    let spec = |include: &[&str]| {
        binding_document("live", "live", &provider.url("/mcp"), include)["spec"].clone()
    };
    env.runtime.block_on(async {
        capstan_e2e::objects::apply(
            &env.client,
            "CapabilityBinding",
            "live",
            spec(&["streams_list", "streams_get"]),
        )
        .await?;
        Ok::<(), libtest_mimic::Failed>(())
    })?;
    let sidecar = SidecarProcess::start(
        &env.plane,
        env.plane.kubeconfig(),
        "live",
        &[
            ("CAPSTAN_METRICS_ADDRESS", address.as_str()),
            ("CAPABILITY_MCP_ENDPOINT_HOSTS", hosts.as_str()),
            // Neither is what this trial is about: the caller and the base tools.
            ("CAPSTAN_CALLER_CHECK", "none"),
            ("CAPSTAN_BASE_TOOLS", "off"),
        ],
    )
    .map_err(|e| e.to_string())?;
    env.runtime.block_on(eventually(
        Duration::from_secs(30),
        || async { (http_status(&address, "/readyz") == 200).then_some(()) },
        || format!("the sidecar is not ready:\n{}", sidecar.log_text()),
    ))?;
    let line = Duration::from_secs(90);
    // A session revision (its session's stream) and 2026-07-28 (a listen stream), side by side.
    let clients: Vec<ListeningClient> = ["legacy", "auto"]
        .into_iter()
        .map(|mode| {
            ListeningClient::start(
                &sidecar.socket,
                "demo-project",
                "t",
                mode,
                Some("live__streams_get"),
            )
        })
        .collect();
    for (client, version) in clients.iter().zip(["2025-11-25", "2026-07-28"]) {
        let first = client.next(line);
        check(
            first["tools"] == json!(["live__streams_get", "live__streams_list"])
                && first["protocolVersion"] == version,
            || format!("first list: {first}\n{}", sidecar.log_text()),
        )?;
    }
    // Counted before the change: once notified, each client calls the tool that left at once.
    let calls_before = env.runtime.block_on(provider.tool_calls());
    let applied_at = env.runtime.block_on(async {
        capstan_e2e::objects::apply(
            &env.client,
            "CapabilityBinding",
            "live",
            spec(&["streams_list", "pipeline_diagnose"]),
        )
        .await?;
        Ok::<f64, libtest_mimic::Failed>(unix_seconds())
    })?;
    for (client, version) in clients.iter().zip(["2025-11-25", "2026-07-28"]) {
        let notified = client.next(line);
        let Some(notified_at) = notified["notifiedAt"].as_f64() else {
            return Err(format!(
                "{version}: no notification: {notified}\n{}",
                sidecar.log_text()
            )
            .into());
        };
        eprintln!(
            "{version}: list_changed reached the Python client {:.3} s after the apply returned",
            notified_at - applied_at
        );
        let again = client.next(line);
        check(
            again["tools"] == json!(["live__pipeline_diagnose", "live__streams_list"]),
            || format!("{version}: second list: {again}"),
        )?;
        let gone = client.next(line);
        check(
            gone["gone"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("no tool named \"live__streams_get\" is available")),
            || format!("{version}: the call of the tool that left: {gone}"),
        )?;
    }
    let calls_after = env.runtime.block_on(provider.tool_calls());
    check(calls_after == calls_before, || {
        format!("the provider saw {calls_after:?} after {calls_before:?}")
    })?;
    env.runtime.block_on(async {
        capstan_e2e::objects::delete(&env.client, "CapabilityBinding", "live").await;
    });
    Ok(())
}
