//! The tenant boundary across project planes: two real control planes (acme, globex) behind a
//! URL template — a stand-in for the front proxy that routes `/projects/{project}/control-plane`
//! to each project's plane — that authenticate the same callers (one static token file) and
//! authorize them apart. A sidecar reads bindings through the template with its own account
//! and checks each caller against the plane of the project it names.
//!
//! Callers: alice and carol (admitted on acme: may list bindings, edit ConfigMaps in team-a),
//! bob (authenticated, admitted nowhere), a garbage token (known to no plane). On globex nobody
//! but the sidecar's own account has any right. Each plane's audit log is the oracle.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use capstan_e2e::sidecar::{PROJECT_HEADER, SidecarProcess, not_admitted, refusal_is};
use capstan_e2e::suite::{Env, Outcome, check, trial};
use capstan_e2e::{ControlPlane, HarnessError, PlaneOptions};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use libtest_mimic::Failed;
use serde_json::{Value, json};

const ACME: &str = "acme";
const GLOBEX: &str = "globex";
const ALICE: &str = "alice-token-of-the-tenancy-suite";
const CAROL: &str = "carol-token-of-the-tenancy-suite";
const BOB: &str = "bob-token-of-the-tenancy-suite";
const COMPOSER: &str = "composer-token-of-the-tenancy-suite";
const GARBAGE: &str = "a-token-no-plane-has-ever-issued";

/// token,user,uid,"groups": the same callers on both planes.
const TOKENS: &str = "\
alice-token-of-the-tenancy-suite,alice,uid-alice,\"tenants\"
carol-token-of-the-tenancy-suite,carol,uid-carol,\"tenants\"
bob-token-of-the-tenancy-suite,bob,uid-bob,\"tenants\"
composer-token-of-the-tenancy-suite,composer,uid-composer,\"capstan\"
";

const PLAN_TOKEN_KEY: &str = "tenancy-plan-token-key-of-thirty-two-bytes";

/// What the suite keeps between setup and trials.
struct World {
    globex: ControlPlane,
    sidecar: SidecarProcess,
}

static WORLD: Mutex<Option<World>> = Mutex::new(None);

fn main() -> ExitCode {
    let tokens = std::env::temp_dir().join(format!("capstan-tenancy-{}.csv", std::process::id()));
    if let Err(error) = std::fs::write(&tokens, TOKENS) {
        eprintln!("tenancy: writing {}: {error}", tokens.display());
        return ExitCode::FAILURE;
    }
    let options = PlaneOptions {
        token_auth_file: Some(tokens.clone()),
    };
    let code = capstan_e2e::suite::run_with(
        "tenancy",
        &options,
        true,
        |env| setup(env, &options),
        vec![
            trial(
                "a_caller_admitted_on_one_plane_should_be_refused_on_another",
                other_plane,
            ),
            trial(
                "a_garbage_token_should_be_refused_by_the_plane_and_read_nothing",
                garbage_token,
            ),
            trial(
                "two_admitted_callers_without_sessions_should_each_act_as_themselves",
                two_callers,
            ),
            trial(
                "a_revoked_caller_should_lose_her_open_session_and_its_stream",
                revoked,
            ),
            // Last: the whole run's audit logs.
            trial(
                "the_sidecars_own_account_should_only_list_bindings_and_qualifiers_on_either_plane",
                own_account,
            ),
        ],
    );
    if let Some(mut world) = capstan_e2e::suite::take_kept(&WORLD) {
        world.sidecar.stop();
        let _ = world.globex.stop();
    }
    let _ = std::fs::remove_file(&tokens);
    code
}

fn harness(message: String) -> HarnessError {
    HarnessError::Command {
        command: "tenancy setup".into(),
        status: "failed".into(),
        stderr: message,
    }
}

/// The sidecar's own account on a plane: what its crd source needs (config/rbac/sidecar.yaml).
const SIDECAR_ACCOUNT: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: capstan-sidecar-composer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: capstan-sidecar}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: composer}]
"#;

/// acme admits alice and carol: list bindings (the caller check), edit ConfigMaps in team-a.
const ACME_RBAC: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: team-a}}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: project-member}
  rules:
  - apiGroups: [capabilities.assistant.miloapis.com]
    resources: [capabilitybindings]
    verbs: [list]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: project-member-alice}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: project-member}
  subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: project-member-carol}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: project-member}
  subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: carol}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata: {name: editor, namespace: team-a}
  rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch, create, update, patch, delete]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: editors, namespace: team-a}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: editor}
  subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: carol}
"#;

fn setup(env: &Env, options: &PlaneOptions) -> Result<(), HarnessError> {
    let globex = ControlPlane::start_with("tenancy-globex", options)?;
    let prepared = (|| -> Result<SidecarProcess, HarnessError> {
        env.runtime.block_on(async {
            let client = globex.client().await?;
            globex.install_crds(&client).await
        })?;
        for plane in [&env.plane, &globex] {
            plane
                .kubectl_ok(&["apply", "-f", "config/rbac/sidecar.yaml"], None)
                .map_err(harness)?;
            plane
                .kubectl_ok(&["apply", "-f", "-"], Some(SIDECAR_ACCOUNT))
                .map_err(harness)?;
        }
        env.plane
            .kubectl_ok(&["apply", "-f", "-"], Some(ACME_RBAC))
            .map_err(harness)?;
        globex
            .kubectl_ok(&["create", "namespace", "team-a"], None)
            .map_err(harness)?;
        let base = env
            .runtime
            .block_on(serve_project_planes(&[
                (ACME, &env.plane),
                (GLOBEX, &globex),
            ]))
            .map_err(harness)?;
        // The sidecar's own credential: the composer's token; the template names each plane.
        let kubeconfig = env.plane.state_dir().join("kubeconfig-composer-via-proxy");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster: {{server: \"{base}\"}}\n\
             users:\n- name: composer\n  user: {{token: \"{COMPOSER}\"}}\ncontexts:\n- name: proxy\n  \
             context: {{cluster: proxy, user: composer}}\ncurrent-context: proxy\n"
        );
        std::fs::write(&kubeconfig, text).map_err(|source| HarnessError::Io {
            path: kubeconfig.clone(),
            source,
        })?;
        SidecarProcess::start(
            &env.plane,
            &kubeconfig,
            "tenancy",
            &[
                (
                    "CAPABILITY_CRD_URL_TEMPLATE",
                    &format!("{base}/projects/{{project}}/control-plane"),
                ),
                // Short, so revocation is seen within the trial.
                ("CAPSTAN_CALLER_CHECK_TTL_SECONDS", "2"),
                ("PLAN_TOKEN_KEY", PLAN_TOKEN_KEY),
            ],
        )
    })();
    match prepared {
        Ok(sidecar) => {
            if let Ok(mut world) = WORLD.lock() {
                *world = Some(World { globex, sidecar });
            }
            Ok(())
        }
        Err(error) => {
            let _ = globex.stop();
            Err(error)
        }
    }
}

/// A stand-in for the front proxy: `/projects/{project}/control-plane/<path>` is forwarded to
/// that project's plane as it came — method, query, body, the caller's Authorization — and
/// the plane's answer goes back as it came. The proxy holds no credential of its own.
async fn serve_project_planes(planes: &[(&str, &ControlPlane)]) -> Result<String, String> {
    let mut clients = std::collections::HashMap::new();
    for (project, plane) in planes {
        let kubeconfig =
            Kubeconfig::read_from(plane.kubeconfig()).map_err(|e| format!("kubeconfig: {e}"))?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig: {e}"))?;
        // The plane's URL and CA only: who asks is whoever the request says.
        config.auth_info = AuthInfo::default();
        config.headers.clear();
        config.default_retry = false;
        let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
        clients.insert((*project).to_owned(), client);
    }
    let clients = std::sync::Arc::new(clients);
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let clients = clients.clone();
        async move {
            use axum::response::IntoResponse;
            let (parts, body) = request.into_parts();
            let path = parts.uri.path().to_owned();
            let mut segments = path.splitn(5, '/');
            let (Some(""), Some("projects"), Some(project), Some("control-plane")) = (
                segments.next(),
                segments.next(),
                segments.next(),
                segments.next(),
            ) else {
                return (http::StatusCode::NOT_FOUND, "no such project path").into_response();
            };
            let Some(client) = clients.get(project) else {
                return (http::StatusCode::NOT_FOUND, "no such project").into_response();
            };
            let rest = format!("/{}", segments.next().unwrap_or_default());
            let target = match parts.uri.query() {
                Some(query) => format!("{rest}?{query}"),
                None => rest,
            };
            let Ok(body) = axum::body::to_bytes(body, 16 * 1024 * 1024).await else {
                return (http::StatusCode::PAYLOAD_TOO_LARGE, "").into_response();
            };
            let mut forward = http::Request::builder().method(parts.method).uri(target);
            for name in [
                http::header::AUTHORIZATION,
                http::header::CONTENT_TYPE,
                http::header::ACCEPT,
            ] {
                if let Some(value) = parts.headers.get(&name) {
                    forward = forward.header(name, value);
                }
            }
            let Ok(forward) = forward.body(kube::client::Body::from(body.to_vec())) else {
                return (http::StatusCode::BAD_REQUEST, "").into_response();
            };
            match client.send(forward).await {
                Ok(answer) => {
                    let (parts, body) = answer.into_parts();
                    http::Response::from_parts(parts, axum::body::Body::new(body)).into_response()
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
    Ok(format!("http://{address}"))
}

/// Runs `body` with the world.
fn with_world<T>(body: impl FnOnce(&World) -> Result<T, Failed>) -> Result<T, Failed> {
    capstan_e2e::suite::with_kept(&WORLD, body)
}

/// Audit events of `plane` by `user` (ResponseComplete) matching `pick`.
fn events_by(plane: &ControlPlane, user: &str, pick: impl Fn(&Value) -> bool) -> Vec<Value> {
    plane
        .audit_events()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["user"]["username"] == user && e["stage"] == "ResponseComplete" && pick(e))
        .collect()
}

/// ConfigMap lists in team-a by `user` on `plane`.
fn configmap_lists(plane: &ControlPlane, user: &str) -> usize {
    events_by(plane, user, |e| {
        e["verb"] == "list" && e["objectRef"]["resource"] == "configmaps"
    })
    .len()
}

fn list_args() -> Value {
    json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "team-a"})
}

/// The JSON-RPC result of a sidecar answer (JSON, or the last `data:` of an SSE stream).
fn rpc_result(body: &str) -> Option<Value> {
    let text = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:").map(str::trim))
        .rfind(|data| !data.is_empty())
        .unwrap_or(body);
    serde_json::from_str::<Value>(text)
        .ok()?
        .get("result")
        .cloned()
}

/// Finding: no test refused a caller on another project's plane — every sidecar under test
/// read one cluster. alice, admitted on acme, is refused on globex by globex's own plane, and
/// her base-tool reads in acme reach acme's plane only.
fn other_plane(env: &Env) -> Outcome {
    with_world(|world| {
        let globex_sar_before = events_by(&world.globex, "alice", |_| true).len();
        let session = world.sidecar.session(ACME, Some(ALICE))?;
        let listed_before = configmap_lists(&env.plane, "alice");
        let listed = session.ok("resources_list", list_args())?;
        check(listed["count"].is_u64(), || {
            format!("alice's list: {listed}")
        })?;
        check(
            configmap_lists(&env.plane, "alice") == listed_before + 1,
            || "alice's list did not reach acme as alice".into(),
        )?;
        session.end();
        let (status, id, body) = world.sidecar.initialize(GLOBEX, Some(ALICE));
        check(
            status == 403 && id.is_none() && refusal_is(&body, "forbidden", &not_admitted(GLOBEX)),
            || format!("alice on globex: {status} {body}"),
        )?;
        let (status, body) =
            world
                .sidecar
                .sessionless_call(GLOBEX, Some(ALICE), "resources_list", &list_args());
        check(
            status == 403 && refusal_is(&body, "forbidden", &not_admitted(GLOBEX)),
            || format!("alice on globex without a session: {status} {body}"),
        )?;
        // globex was asked (its own plane said no), and alice read nothing there.
        let on_globex = events_by(&world.globex, "alice", |_| true);
        check(
            on_globex.len() > globex_sar_before
                && on_globex.iter().all(|e| {
                    e["objectRef"]["resource"] == "selfsubjectaccessreviews"
                        && e["verb"] == "create"
                }),
            || format!("alice on globex's plane: {on_globex:?}"),
        )?;
        check(configmap_lists(&world.globex, "alice") == 0, || {
            "alice's reads reached globex".into()
        })?;
        // bob is known to acme's plane and admitted by none of it.
        let (status, id, body) = world.sidecar.initialize(ACME, Some(BOB));
        check(
            status == 403 && id.is_none() && refusal_is(&body, "forbidden", &not_admitted(ACME)),
            || format!("bob on acme: {status} {body}"),
        )?;
        offerings_refused(&world.sidecar, BOB, "bob")?;
        check(configmap_lists(&env.plane, "bob") == 0, || {
            "bob's refused session read acme".into()
        })
    })
}

/// Finding: an invalid token (the plane answers 401) was never sent. It is refused — the
/// plane says it does not know the caller — and nothing is read with it.
fn garbage_token(env: &Env) -> Outcome {
    with_world(|world| {
        let before = env.plane.audit_events().map(|e| e.len()).unwrap_or(0);
        let (status, id, body) = world.sidecar.initialize(ACME, Some(GARBAGE));
        check(
            status == 403 && id.is_none() && refusal_is(&body, "forbidden", &not_admitted(ACME)),
            || format!("a garbage token's initialize: {status} {body}"),
        )?;
        let (status, body) =
            world
                .sidecar
                .sessionless_call(ACME, Some(GARBAGE), "resources_list", &list_args());
        check(
            status == 403 && refusal_is(&body, "forbidden", &not_admitted(ACME)),
            || format!("a garbage token without a session: {status} {body}"),
        )?;
        offerings_refused(&world.sidecar, GARBAGE, "a garbage token")?;
        // Nor may it borrow alice's session for them (nor subscribe in it).
        let session = world.sidecar.session(ACME, Some(ALICE))?;
        let subscribe = ("resources/subscribe", json!({"uri": "capstan://b/s/x://y"}));
        for (method, params) in offering_requests().into_iter().chain([subscribe]) {
            let (status, body) =
                request_in_session(&world.sidecar, &session.id, GARBAGE, method, params);
            check(
                status == 403 && refusal_is(&body, "forbidden", "this session belongs to another"),
                || format!("a garbage token's {method} in alice's session: {status} {body}"),
            )?;
        }
        session.end();
        // The plane was asked and said 401; nothing else came with the token.
        let events = env.plane.audit_events().unwrap_or_default();
        let since: Vec<&Value> = events[before..]
            .iter()
            .filter(|e| e["stage"] == "ResponseComplete" || e["stage"] == "ResponseStarted")
            .filter(|e| e["responseStatus"]["code"] == 401)
            .collect();
        check(
            !since.is_empty()
                && since.iter().all(|e| {
                    e["requestURI"]
                        .as_str()
                        .is_some_and(|uri| uri.contains("selfsubjectaccessreviews"))
                }),
            || format!("401s on acme since: {since:?}"),
        )
    })
}

/// The requests of the surface besides tools: each passes the same caller check as
/// `tools/call`.
fn offering_requests() -> [(&'static str, Value); 6] {
    [
        ("prompts/list", json!({})),
        ("prompts/get", json!({"name": "triage"})),
        ("resources/list", json!({})),
        ("resources/templates/list", json!({})),
        (
            "resources/read",
            json!({"uri": "capstan://b/s/streamco://runbooks/lag"}),
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "triage"},
                   "argument": {"name": "stream", "value": "o"}}),
        ),
    ]
}

/// Every request of [`offering_requests`] without a session as `token` is refused by the
/// caller check (403, the plane's "no"), while alice's `prompts/list` is answered — so the
/// refusal is the caller's, not the method's.
fn offerings_refused(sidecar: &SidecarProcess, token: &str, who: &str) -> Outcome {
    let (status, body) = sidecar.sessionless_request(ACME, Some(ALICE), "prompts/list", json!({}));
    check(
        status == 200 && rpc_result(&body).is_some_and(|r| r["prompts"].is_array()),
        || format!("alice's prompts/list: {status} {body}"),
    )?;
    for (method, params) in offering_requests() {
        let (status, body) = sidecar.sessionless_request(ACME, Some(token), method, params);
        check(
            status == 403 && refusal_is(&body, "forbidden", &not_admitted(ACME)),
            || format!("{who}'s {method}: {status} {body}"),
        )?;
    }
    Ok(())
}

/// Finding: two admitted callers on the 2026-07-28 path were never shown to act each as
/// themselves. Each call reads as its caller; carol cannot apply alice's plan; alice can.
fn two_callers(env: &Env) -> Outcome {
    with_world(|world| {
        let sidecar = &world.sidecar;
        for (token, user) in [(ALICE, "alice"), (CAROL, "carol"), (ALICE, "alice")] {
            let before = configmap_lists(&env.plane, user);
            let (status, body) =
                sidecar.sessionless_call(ACME, Some(token), "resources_list", &list_args());
            check(status == 200 && rpc_result(&body).is_some(), || {
                format!("{user}'s list: {status} {body}")
            })?;
            check(configmap_lists(&env.plane, user) == before + 1, || {
                format!("{user}'s list did not reach acme as {user}")
            })?;
        }
        let manifests = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "two-callers", "namespace": "team-a"}, "data": {"k": "v"}}]);
        let (status, body) = sidecar.sessionless_call(
            ACME,
            Some(ALICE),
            "resources_plan",
            &json!({"manifests": manifests}),
        );
        let plan = rpc_result(&body)
            .map(|r| r["structuredContent"].clone())
            .ok_or_else(|| format!("alice's plan: {status} {body}"))?;
        let apply = json!({"manifests": plan["manifests"], "planToken": plan["planToken"]});
        let carol_writes = || {
            events_by(&env.plane, "carol", |e| {
                matches!(e["verb"].as_str(), Some("create" | "patch" | "update"))
                    && e["objectRef"]["resource"] == "configmaps"
            })
            .len()
        };
        let before = carol_writes();
        let (status, body) = sidecar.sessionless_call(ACME, Some(CAROL), "resources_apply", &apply);
        let refused = rpc_result(&body).ok_or_else(|| format!("carol's apply: {status} {body}"))?;
        let error = &refused["structuredContent"]["error"];
        check(
            refused["isError"] == true
                && error["kind"] == "stale_plan"
                && error["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("the plan token was issued to another caller")),
            || format!("carol applying alice's plan: {refused}"),
        )?;
        check(carol_writes() == before, || "carol wrote".into())?;
        let (status, body) = sidecar.sessionless_call(ACME, Some(ALICE), "resources_apply", &apply);
        let applied = rpc_result(&body).ok_or_else(|| format!("alice's apply: {status} {body}"))?;
        check(applied["structuredContent"]["complete"] == true, || {
            format!("alice's apply: {applied}")
        })?;
        let created = events_by(&env.plane, "alice", |e| {
            e["verb"] == "create"
                && e["objectRef"]["name"] == "two-callers"
                && !e["requestURI"]
                    .as_str()
                    .is_some_and(|uri| uri.contains("dryRun"))
        });
        check(created.len() == 1, || {
            format!("the create by alice: {created:?}")
        })
    })
}

/// Opens a session's GET stream over the socket and reads it until it ends, for at most
/// `limit` (keep-alive comments arrive meanwhile): `Ok` when the sidecar ended it.
fn stream_until_end(
    socket: &std::path::Path,
    session: &str,
    token: &str,
    limit: Duration,
) -> Result<String, String> {
    let mut stream = std::os::unix::net::UnixStream::connect(socket).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(limit))
        .map_err(|e| e.to_string())?;
    let request = format!(
        "GET /mcp HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\
         accept: text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n\
         mcp-session-id: {session}\r\n{PROJECT_HEADER}: {ACME}\r\n\
         authorization: Bearer {token}\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    capstan_testkit::read_until_end(&mut stream, limit).map_err(|e| e.to_string())
}

/// Finding: after carol's grant was removed her open session kept calling tools, its idle
/// timer reset by every request. The answer lives 2 s here: her next request is refused and
/// her session ended (403, then 404), the GET stream she held closes without her asking, and
/// nothing more is read as her.
fn revoked(env: &Env) -> Outcome {
    with_world(|world| {
        let sidecar = &world.sidecar;
        let session = sidecar.session(ACME, Some(CAROL))?;
        session.ok("resources_list", list_args())?;
        let socket = sidecar.socket.clone();
        let id = session.id.clone();
        let streaming = std::thread::spawn(move || {
            stream_until_end(&socket, &id, CAROL, Duration::from_secs(60))
        });
        // The stream is open before the grant goes.
        std::thread::sleep(Duration::from_millis(300));
        env.plane.kubectl_ok(
            &["delete", "clusterrolebinding", "project-member-carol"],
            None,
        )?;
        let mut last = String::new();
        let started = Instant::now();
        // Her request is refused (403) and her session ended, unless the re-check of callers
        // holding streams (every half TTL) reached the revocation first and ended it: then
        // the session is gone (404) before any request is refused. Either is the revocation
        // reaching her open session; the refusal's wording is checked on the call without a
        // session below.
        let refused = loop {
            let (status, body) = in_session(sidecar, &session.id, CAROL);
            match status {
                403 => break Some(body),
                404 => break None,
                _ => {}
            }
            check(
                status == 200 && started.elapsed() < Duration::from_secs(30),
                || format!("carol's session after the revocation: {status} {body} (last {last})"),
            )?;
            last = body;
            std::thread::sleep(Duration::from_millis(200));
        };
        let refused_at = env.plane.audit_events().map(|e| e.len()).unwrap_or(0);
        if let Some(refused) = &refused {
            check(
                refusal_is(refused, "forbidden", &not_admitted(ACME)),
                || format!("the revocation's refusal: {refused}"),
            )?;
        }
        let (status, body) = in_session(sidecar, &session.id, CAROL);
        check(status == 404, || {
            format!("carol's ended session: {status} {body}")
        })?;
        let (status, body) =
            sidecar.sessionless_call(ACME, Some(CAROL), "resources_list", &list_args());
        check(
            status == 403 && refusal_is(&body, "forbidden", &not_admitted(ACME)),
            || format!("carol without a session: {status} {body}"),
        )?;
        offerings_refused(sidecar, CAROL, "carol revoked")?;
        let streamed = streaming.join().map_err(|_| "the stream reader panicked")?;
        check(streamed.is_ok(), || {
            format!("carol's stream after the revocation: {streamed:?}")
        })?;
        // Once the plane's answer was "no", nothing more was read as carol — neither her
        // session's calls nor the call without one.
        let events = env.plane.audit_events().unwrap_or_default();
        let reads: Vec<&Value> = events[refused_at..]
            .iter()
            .filter(|e| {
                e["user"]["username"] == "carol"
                    && e["stage"] == "ResponseComplete"
                    && e["objectRef"]["resource"] == "configmaps"
            })
            .collect();
        check(reads.is_empty(), || {
            format!("carol's reads after: {reads:?}")
        })
    })
}

/// One `tools/call` of `resources_list` in session `id` as `token`: (status, body).
fn in_session(sidecar: &SidecarProcess, id: &str, token: &str) -> (u16, String) {
    request_in_session(
        sidecar,
        id,
        token,
        "tools/call",
        json!({"name": "resources_list", "arguments": list_args()}),
    )
}

/// One request in session `id` as `token`: (status, body).
fn request_in_session(
    sidecar: &SidecarProcess,
    id: &str,
    token: &str,
    method: &str,
    params: Value,
) -> (u16, String) {
    let authorization = format!("Bearer {token}");
    let (status, _, body) = sidecar.request(
        "POST",
        "/mcp",
        &[
            (PROJECT_HEADER, ACME),
            ("mcp-session-id", id),
            ("mcp-protocol-version", "2025-11-25"),
            ("authorization", &authorization),
        ],
        Some(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string()),
    );
    (status, body)
}

/// Over the whole run: on both planes the sidecar's own account only listed CapabilityBindings
/// and RouteQualifiers (with a template it lists, never watches); every read of a project as a
/// caller — discovery and OpenAPI included — was made with the caller's token.
fn own_account(env: &Env) -> Outcome {
    with_world(|world| {
        for (name, plane) in [(ACME, &env.plane), (GLOBEX, &world.globex)] {
            let events = events_by(plane, "composer", |_| true);
            for event in &events {
                let verb = event["verb"].as_str().unwrap_or_default();
                let resource = event["objectRef"]["resource"].as_str().unwrap_or_default();
                check(
                    verb == "list" && matches!(resource, "capabilitybindings" | "routequalifiers"),
                    || {
                        format!(
                            "{name}: the sidecar's own account made {verb} {}",
                            event["requestURI"]
                        )
                    },
                )?;
            }
            // acme's callers were served, so its bindings were read: the oracle has
            // something to judge. (globex admitted nobody, so nothing of it was composed.)
            check(
                name != ACME
                    || events
                        .iter()
                        .any(|e| e["objectRef"]["resource"] == "capabilitybindings"),
                || {
                    format!(
                        "{name}: the sidecar never read its bindings ({} events)",
                        events.len()
                    )
                },
            )?;
        }
        Ok(())
    })
}
