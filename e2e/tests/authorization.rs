//! Per-tool authorization on a real apiserver with RBAC (docs/authorization.md): a sidecar with
//! `CAPSTAN_TOOL_AUTHORIZATION=rbac` asks the project's plane, with each caller's own token,
//! what that caller may `use`, and serves each caller only that — on the session revisions and
//! on 2026-07-28, through the Python SDK's client, with real MCP servers behind it (three
//! demo providers and the Python SDK's StreamCo server).
//!
//! Callers, all admitted to the project (group `tenants` may list bindings):
//! - alice, on call: `use tools` named `streamco__streams_get` and `streamco__streams_restart`;
//! - pat, a product manager: `use tools` named `streamco__streams_list`;
//! - carol: `use capabilitybindings` named `runbooks` (its prompts and resources);
//! - erin: `use capabilitybindings` named `search-cheap`;
//! - frank: the chart's `capstan-tools-user` (everything);
//! - dave: `use capabilitybindings` named `streamco`, removed mid-session.
//!
//! The oracles are the providers' own counts and the apiserver's audit log, never the
//! sidecar's.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use capstan_e2e::callers::{
    PROJECT_MEMBERS, audit_file, audit_lines, offerings, run_with_callers, search_binding,
};
use capstan_e2e::controller::{NAMESPACE, bind_cluster_role, service_account};
use capstan_e2e::sidecar::SidecarProcess;
use capstan_e2e::suite::{Env, Outcome, check, take_kept, trial, with_kept};
use capstan_e2e::{HarnessError, free_address, metric};
use capstan_testkit::{
    DemoProvider, ListeningClient, PythonServer, binding_document, node_dir, repo_root,
};
use serde_json::{Value, json};

const PROJECT: &str = "acme";

/// The callers, each with the token `token-of-<name>` (`capstan_e2e::callers`).
const CALLERS: &[&str] = &["alice", "pat", "carol", "erin", "frank", "dave"];

/// The callers' grants, as a platform team would write them (beside
/// `capstan_e2e::callers::PROJECT_MEMBERS`, which admits them all).
const RBAC: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: streamco-on-call}
  rules:
  - apiGroups: [capabilities.assistant.miloapis.com]
    resources: [tools]
    resourceNames: [streamco__streams_get, streamco__streams_restart]
    verbs: [use]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: runbooks-user}
  rules:
  - apiGroups: [capabilities.assistant.miloapis.com]
    resources: [capabilitybindings]
    resourceNames: [runbooks]
    verbs: [use]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: search-cheap-user}
  rules:
  - apiGroups: [capabilities.assistant.miloapis.com]
    resources: [capabilitybindings]
    resourceNames: [search-cheap]
    verbs: [use]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: streamco-user}
  rules:
  - apiGroups: [capabilities.assistant.miloapis.com]
    resources: [capabilitybindings]
    resourceNames: [streamco]
    verbs: [use]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: alice-on-call}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: streamco-on-call}
  subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: carol-runbooks}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: runbooks-user}
  subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: carol}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: erin-search-cheap}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: search-cheap-user}
  subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: erin}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: frank-tools-user}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: capstan-tools-user}
  subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: frank}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: dave-streamco}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: streamco-user}
  subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: dave}]
"#;

/// What the suite keeps between setup and trials.
struct World {
    sidecar: SidecarProcess,
    streamco: DemoProvider,
    cheap: DemoProvider,
    premium: DemoProvider,
    _runbooks: PythonServer,
    metrics: String,
    /// The sidecar's kubeconfig (its ServiceAccount), for a second sidecar.
    composer: std::path::PathBuf,
}

static WORLD: Mutex<Option<World>> = Mutex::new(None);

fn main() -> ExitCode {
    run_with_callers(
        "authorization",
        CALLERS,
        setup,
        vec![
            trial(
                "two_callers_should_each_see_and_call_only_the_tools_their_roles_name",
                two_callers,
            ),
            trial(
                "the_typescript_sdk_should_see_the_same_refusals",
                typescript_client,
            ),
            trial(
                "a_prompt_and_a_resource_not_granted_should_be_refused_as_unknown_ones",
                offerings_refused_as_unknown,
            ),
            trial(
                "a_routed_call_should_skip_the_provider_the_caller_may_not_use",
                routed_skips_forbidden_provider,
            ),
            trial(
                "a_filtered_list_should_be_private_and_live_no_longer_than_its_decision",
                filtered_list_hints,
            ),
            trial(
                "a_garbage_token_and_a_token_the_apiserver_stopped_accepting_should_be_served_nothing",
                dead_tokens,
            ),
            trial(
                "the_documented_kubectl_check_should_agree_with_what_the_sidecar_serves",
                kubectl_agrees,
            ),
            trial(
                "a_grant_removed_mid_session_should_be_told_as_list_changed_and_refused",
                grant_removed,
            ),
            trial(
                "audit_lines_should_name_the_callers_the_apiservers_audit_log_names",
                audit_names_callers,
            ),
            trial(
                "a_binding_requiring_authorization_should_be_withheld_by_a_sidecar_without_it",
                required_without_authorization,
            ),
        ],
        || {
            if let Some(mut world) = take_kept(&WORLD) {
                world.sidecar.stop();
            }
        },
    )
}

fn harness(message: String) -> HarnessError {
    HarnessError::setup("authorization", message)
}

fn setup(env: &Env) -> Result<(), HarnessError> {
    env.plane
        .kubectl_ok(&["apply", "-f", "config/rbac/sidecar.yaml"], None)
        .map_err(harness)?;
    env.plane
        .kubectl_ok(&["apply", "-f", "config/rbac/tools-user.yaml"], None)
        .map_err(harness)?;
    env.plane
        .kubectl_ok(&["apply", "-f", "-"], Some(PROJECT_MEMBERS))
        .map_err(harness)?;
    env.plane
        .kubectl_ok(&["apply", "-f", "-"], Some(RBAC))
        .map_err(harness)?;
    env.plane
        .kubectl_ok(
            &["apply", "-f", "examples/authorization/one-tool.yaml"],
            None,
        )
        .map_err(harness)?;
    let composer = service_account(&env.plane, "composer")?;
    bind_cluster_role(&env.plane, "composer", "capstan-sidecar")?;
    // sam holds a ServiceAccount token bound to a Secret: deleting the Secret makes the
    // apiserver refuse the token, as it refuses an expired one.
    service_account(&env.plane, "sam")?;
    bind_cluster_role(&env.plane, "sam", "project-member")?;
    bind_cluster_role(&env.plane, "sam", "streamco-user")?;
    let streamco = DemoProvider::start(&[]);
    let cheap = DemoProvider::start(&[]);
    let premium = DemoProvider::start(&[]);
    let runbooks = PythonServer::start();
    let mut runbooks_binding = binding_document(
        "runbooks",
        "runbooks",
        &format!("http://{}/mcp", runbooks.address),
        &[],
    );
    let server = &mut runbooks_binding["spec"]["tools"]["mcpServers"][0];
    server["promptSelector"] = json!({"include": ["triage"]});
    server["resourceSelector"] = json!({"include": ["streamco://runbooks/lag"]});
    // streamco's tools can restart streams: it requires that callers be decided for.
    let mut streamco_binding = binding_document(
        "streamco",
        "streamco",
        &streamco.url("/mcp"),
        &["streams_list", "streams_get", "streams_restart"],
    );
    streamco_binding["spec"]["callerAuthorization"] = json!("Required");
    let mut items = vec![
        streamco_binding,
        runbooks_binding,
        search_binding("search-cheap", "cheap", &cheap.url("/mcp"), 6000),
        search_binding("search-premium", "premium", &premium.url("/mcp"), 9500),
    ];
    for item in &mut items {
        item["apiVersion"] = json!("capabilities.assistant.miloapis.com/v1alpha1");
        item["kind"] = json!("CapabilityBinding");
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    env.plane
        .kubectl_ok(&["apply", "-f", "-"], Some(&list))
        .map_err(harness)?;
    let metrics = free_address()?;
    let sidecar = SidecarProcess::start(
        &env.plane,
        &composer,
        "authorization",
        &[
            ("CAPABILITY_MCP_ENDPOINT_HOSTS", "127.0.0.1"),
            ("CAPSTAN_TOOL_AUTHORIZATION", "rbac"),
            // Short, so a removed grant is seen within the trial.
            ("CAPSTAN_CALLER_CHECK_TTL_SECONDS", "2"),
            ("CAPSTAN_BASE_TOOLS", "off"),
            ("CAPSTAN_METRICS_ADDRESS", &metrics),
            ("CAPSTAN_AUDIT_SINK", &audit_path(env)),
        ],
    )?;
    sidecar.wait_synced(&env.runtime, &metrics)?;
    if let Ok(mut world) = WORLD.lock() {
        *world = Some(World {
            sidecar,
            streamco,
            cheap,
            premium,
            _runbooks: runbooks,
            metrics,
            composer,
        });
    }
    Ok(())
}

/// Runs `body` with the world.
fn with_world<T>(
    body: impl FnOnce(&World) -> Result<T, libtest_mimic::Failed>,
) -> Result<T, libtest_mimic::Failed> {
    with_kept(&WORLD, body)
}

/// The Python SDK client's report of `ops` against the sidecar, at `mode`.
fn report(world: &World, mode: &str, ops: &Value) -> Vec<Value> {
    offerings(&world.sidecar, PROJECT, mode, ops)
}

/// The names of the tools a `tools` op listed.
fn tool_names(entry: &Value) -> Vec<String> {
    let mut names: Vec<String> = entry["ok"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// The error of an op, with the name it was about replaced by `NAME`: two refusals are the
/// same when this is.
fn refusal_shape(entry: &Value, name: &str) -> String {
    entry["error"].to_string().replace(name, "NAME")
}

/// Finding: every admitted caller saw and could call every tool the project composed. alice
/// (on call) and pat (product manager) now see only what their ClusterRoles name, each is
/// refused the other's tool exactly as a tool that does not exist is refused, and the
/// provider counts only the calls that were allowed.
fn two_callers(env: &Env) -> Outcome {
    with_world(|world| {
        for mode in ["legacy", "2026-07-28"] {
            let before = env.runtime.block_on(world.streamco.tool_calls());
            let ops = json!([
                {"op": "tools", "client": "alice"},
                {"op": "tools", "client": "pat"},
                {"op": "call", "client": "alice", "name": "streamco__streams_list"},
                {"op": "call", "client": "pat", "name": "streamco__streams_get",
                 "arguments": {"name": "clickstream"}},
                {"op": "call", "client": "pat", "name": "streamco__no_such_tool"},
                {"op": "call", "client": "alice", "name": "streamco__streams_get",
                 "arguments": {"name": "clickstream"}},
                {"op": "call", "client": "pat", "name": "streamco__streams_list"},
            ]);
            let report = report(world, mode, &ops);
            check(report.len() == 8, || format!("{mode}: {report:?}"))?;
            check(
                tool_names(&report[0]) == ["streamco__streams_get", "streamco__streams_restart"],
                || format!("{mode}: alice's list: {}", report[0]),
            )?;
            check(tool_names(&report[1]) == ["streamco__streams_list"], || {
                format!("{mode}: pat's list: {}", report[1])
            })?;
            let unknown = refusal_shape(&report[4], "streamco__no_such_tool");
            check(unknown.contains("is available to this assistant"), || {
                format!("{mode}: the unknown tool's refusal: {}", report[4])
            })?;
            for (entry, name, who) in [
                (&report[2], "streamco__streams_list", "alice"),
                (&report[3], "streamco__streams_get", "pat"),
            ] {
                check(refusal_shape(entry, name) == unknown, || {
                    format!("{mode}: {who} calling {name}: {entry} (unknown: {unknown})")
                })?;
            }
            for (entry, who) in [(&report[5], "alice"), (&report[6], "pat")] {
                check(
                    entry["ok"]["isError"] != true && entry["ok"]["content"].is_array(),
                    || format!("{mode}: {who}'s own tool: {entry}"),
                )?;
            }
            let after = env.runtime.block_on(world.streamco.tool_calls());
            let new: Vec<&String> = after[before.len()..].iter().collect();
            check(new == ["streams_get", "streams_list"], || {
                format!("{mode}: the provider saw {new:?}")
            })?;
        }
        Ok(())
    })
}

/// Finding: prompts and resources had no per-caller rule. pat, granted one tool, is refused
/// the runbooks binding's prompt, its resource and a completion of the prompt — each in the
/// words an unknown one gets — while carol, granted the binding, gets all three.
fn offerings_refused_as_unknown(_env: &Env) -> Outcome {
    with_world(|world| {
        let uri = "capstan://runbooks/runbooks/streamco://runbooks/lag";
        let unknown_uri = "capstan://runbooks/runbooks/streamco://runbooks/none";
        for mode in ["legacy", "2026-07-28"] {
            let ops = |client: &str| {
                json!([
                    {"op": "prompts", "client": client},
                    {"op": "resources", "client": client},
                    {"op": "get", "client": client, "name": "runbooks__triage",
                     "arguments": {"stream": "orders"}},
                    {"op": "get", "client": client, "name": "runbooks__no_such_prompt",
                     "arguments": {"stream": "orders"}},
                    {"op": "read", "client": client, "uri": uri},
                    {"op": "read", "client": client, "uri": unknown_uri},
                    {"op": "complete", "client": client, "prompt": "runbooks__triage",
                     "argument": "stream", "value": "ord"},
                    {"op": "complete", "client": client, "prompt": "runbooks__no_such_prompt",
                     "argument": "stream", "value": "ord"},
                ])
            };
            let pat = report(world, mode, &ops("pat"));
            let carol = report(world, mode, &ops("carol"));
            check(
                pat[0]["ok"]["prompts"] == json!([]) && pat[1]["ok"]["resources"] == json!([]),
                || format!("{mode}: pat's lists: {} {}", pat[0], pat[1]),
            )?;
            check(
                carol[0]["ok"]["prompts"][0]["name"] == "runbooks__triage"
                    && carol[1]["ok"]["resources"][0]["uri"] == uri,
                || format!("{mode}: carol's lists: {} {}", carol[0], carol[1]),
            )?;
            for (granted, refused, unknown, name) in [
                (2, 2, 3, "runbooks__triage"),
                (4, 4, 5, uri),
                (6, 6, 7, "runbooks__triage"),
            ] {
                let unknown_name = match unknown {
                    3 | 7 => "runbooks__no_such_prompt",
                    _ => unknown_uri,
                };
                let expected = refusal_shape(&pat[unknown], unknown_name);
                check(
                    pat[refused].get("error").is_some()
                        && refusal_shape(&pat[refused], name) == expected,
                    || {
                        format!(
                            "{mode}: pat's {name}: {} (unknown: {expected})",
                            pat[refused]
                        )
                    },
                )?;
                check(carol[granted].get("ok").is_some(), || {
                    format!("{mode}: carol's {name}: {}", carol[granted])
                })?;
            }
        }
        Ok(())
    })
}

/// Finding: a routed call chose among every provider of the capability, whoever called.
/// frank (everything) is routed to the premium provider; erin, granted only the cheap one,
/// is routed to it — the premium provider counts frank's call and nothing of erin's.
fn routed_skips_forbidden_provider(env: &Env) -> Outcome {
    with_world(|world| {
        let calls = |provider: &DemoProvider| env.runtime.block_on(provider.tool_calls()).len();
        let search = json!({"query": "consumer lag"});
        for (who, token, to_premium, to_cheap) in [
            ("frank", "token-of-frank", 1, 0),
            ("erin", "token-of-erin", 0, 1),
        ] {
            let (premium, cheap) = (calls(&world.premium), calls(&world.cheap));
            let (status, body) =
                world
                    .sidecar
                    .sessionless_call(PROJECT, Some(token), "cap__web_search", &search);
            check(status == 200 && !body.contains("\"isError\":true"), || {
                format!("{who}'s routed call: {status} {body}")
            })?;
            check(
                calls(&world.premium) == premium + to_premium
                    && calls(&world.cheap) == cheap + to_cheap,
                || format!("{who}'s routed call reached the wrong provider: {body}"),
            )?;
        }
        // erin pinning the route to the provider she may not use: nothing is eligible, the
        // premium provider sees nothing, and the refusal names no provider of hers to use
        // but her own.
        let premium = calls(&world.premium);
        let pinned = json!({"query": "consumer lag", "route": {"pin": "search-premium"}});
        let (status, body) = world.sidecar.sessionless_call(
            PROJECT,
            Some("token-of-erin"),
            "cap__web_search",
            &pinned,
        );
        check(
            status == 200
                && body.contains("\"isError\":true")
                && !body.contains("premium__docs_search")
                && calls(&world.premium) == premium,
            || format!("erin pinning the premium provider: {status} {body}"),
        )?;
        // pat may use neither provider: the capability is unknown to him.
        let (status, body) = world.sidecar.sessionless_call(
            PROJECT,
            Some("token-of-pat"),
            "cap__web_search",
            &search,
        );
        check(
            status == 200 && body.contains("no tool named \\\"cap__web_search\\\""),
            || format!("pat's routed call: {status} {body}"),
        )
    })
}

/// A list filtered per caller says so on 2026-07-28: private to the caller, and held no longer
/// than the decision it was filtered by (the caller check's TTL, 2 s here). frank's whole
/// grant costs one review, then none while it lives.
fn filtered_list_hints(_env: &Env) -> Outcome {
    with_world(|world| {
        let reviews = || {
            metric(
                &world.metrics,
                "capstan_sidecar_access_reviews_total{outcome=\"allowed\"} ",
            )
        };
        let before = reviews();
        let (status, body) = world.sidecar.sessionless_request(
            PROJECT,
            Some("token-of-frank"),
            "tools/list",
            json!({}),
        );
        let result: Value =
            serde_json::from_str::<Value>(&body).unwrap_or_default()["result"].clone();
        check(
            status == 200 && result["tools"].as_array().is_some_and(|t| t.len() >= 5),
            || format!("frank's list: {status} {body}"),
        )?;
        check(
            result["cacheScope"] == "private"
                && result["ttlMs"].as_u64().is_some_and(|ttl| ttl <= 2000),
            || format!("frank's list hints: {result}"),
        )?;
        let asked = reviews() - before;
        let (status, _) = world.sidecar.sessionless_request(
            PROJECT,
            Some("token-of-frank"),
            "tools/list",
            json!({}),
        );
        check(
            status == 200 && asked <= 1.0 && reviews() - before == asked,
            || {
                format!(
                    "frank's reviews: {asked} for the first list, {} after the second",
                    reviews() - before
                )
            },
        )
    })
}

/// Finding: a grant removed from a caller with an open session changed nothing until the
/// session ended. dave's ClusterRoleBinding to the streamco binding is deleted while his
/// Python SDK client waits, in a session and on a 2026-07-28 listen stream: each is told
/// its tools changed, lists again without streamco's tools, and its call of one is refused
/// as unknown; the provider sees no call of dave's after the grant went.
fn grant_removed(env: &Env) -> Outcome {
    with_world(|world| {
        let line = Duration::from_secs(60);
        let clients: Vec<ListeningClient> = ["legacy", "auto"]
            .into_iter()
            .map(|mode| {
                ListeningClient::start(
                    &world.sidecar.socket,
                    PROJECT,
                    "token-of-dave",
                    mode,
                    Some("streamco__streams_list"),
                )
            })
            .collect();
        for (client, version) in clients.iter().zip(["2025-11-25", "2026-07-28"]) {
            let first = client.next(line);
            check(
                first["tools"]
                    == json!([
                        "streamco__streams_get",
                        "streamco__streams_list",
                        "streamco__streams_restart"
                    ]),
                || {
                    format!(
                        "{version}: dave's first list: {first}\n{}",
                        world.sidecar.log_text()
                    )
                },
            )?;
        }
        let calls_before = env.runtime.block_on(world.streamco.tool_calls()).len();
        let removed = Instant::now();
        env.plane
            .kubectl_ok(&["delete", "clusterrolebinding", "dave-streamco"], None)?;
        for (client, version) in clients.iter().zip(["2025-11-25", "2026-07-28"]) {
            let notified = client.next(line);
            check(notified["notifiedAt"].is_number(), || {
                format!(
                    "{version}: no notification: {notified}\n{}",
                    world.sidecar.log_text()
                )
            })?;
            eprintln!(
                "{version}: list_changed reached dave {:.1} s after the grant was removed",
                removed.elapsed().as_secs_f64()
            );
            let again = client.next(line);
            check(again["tools"] == json!([]), || {
                format!("{version}: dave's list after: {again}")
            })?;
            let gone = client.next(line);
            check(
                gone["gone"]["error"].as_str().is_some_and(|e| {
                    e.contains("no tool named \"streamco__streams_list\" is available")
                }),
                || format!("{version}: dave's call after: {gone}"),
            )?;
        }
        let calls_after = env.runtime.block_on(world.streamco.tool_calls()).len();
        check(calls_after == calls_before, || {
            format!(
                "the provider saw {} calls after the grant went",
                calls_after - calls_before
            )
        })
    })
}

/// The checks docs/authorization.md gives a platform engineer answer as the sidecar serves:
/// `kubectl auth can-i --list` shows pat's one tool and not alice's; a SubjectAccessReview
/// says yes for pat's tool and no for alice; `kubectl auth can-i use` on a binding (a served
/// resource, which kubectl can name) says yes for carol and no for pat.
fn kubectl_agrees(env: &Env) -> Outcome {
    let kubectl = |args: &[&str], input: Option<&str>| {
        let output = env.plane.kubectl_with_input(args, input);
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    let rule =
        "tools.capabilities.assistant.miloapis.com   []                  [streamco__streams_list]";
    for (who, listed) in [("pat", true), ("alice", false)] {
        let rules = kubectl(&["auth", "can-i", "--list", "--as", who], None);
        let shown = rules.lines().any(|line| {
            line.contains("tools.capabilities.assistant.miloapis.com")
                && line.contains("[streamco__streams_list]")
                && line.contains("[use]")
        });
        check(shown == listed, || {
            format!("kubectl auth can-i --list --as {who}:\n{rules}\n(looked for {rule:?})")
        })?;
    }
    for (who, expected) in [("pat", "true"), ("alice", "false")] {
        let review = format!(
            "{{\"apiVersion\": \"authorization.k8s.io/v1\", \"kind\": \"SubjectAccessReview\",
              \"spec\": {{\"user\": \"{who}\", \"resourceAttributes\": {{
                \"group\": \"capabilities.assistant.miloapis.com\", \"resource\": \"tools\",
                \"verb\": \"use\", \"name\": \"streamco__streams_list\"}}}}}}"
        );
        let allowed = kubectl(
            &["create", "-f", "-", "-o", "jsonpath={.status.allowed}"],
            Some(&review),
        );
        let allowed = if allowed.is_empty() {
            "false".to_owned()
        } else {
            allowed
        };
        check(allowed == expected, || {
            format!("the SubjectAccessReview of {who}: {allowed:?}, not {expected}")
        })?;
    }
    let binding = "capabilitybindings.capabilities.assistant.miloapis.com/runbooks";
    for (who, expected) in [("carol", "yes"), ("pat", "no")] {
        let answer = kubectl(&["auth", "can-i", "use", binding, "--as", who], None);
        check(answer == expected, || {
            format!("kubectl auth can-i use {binding} --as {who}: {answer:?}, not {expected}")
        })?;
    }
    Ok(())
}

/// A caller the apiserver does not know is refused by the caller check, before any access
/// review: a garbage token, and sam's token once the Secret it is bound to is gone (the
/// apiserver refuses it as it refuses an expired one; a TokenRequest lives at least ten
/// minutes). Neither is served a tool, no review is asked for either, and the provider sees
/// no call.
fn dead_tokens(env: &Env) -> Outcome {
    with_world(|world| {
        let sidecar = &world.sidecar;
        let reviews = || {
            ["allowed", "denied", "error"]
                .iter()
                .map(|o| {
                    metric(
                        &world.metrics,
                        &format!("capstan_sidecar_access_reviews_total{{outcome=\"{o}\"}} "),
                    )
                })
                .sum::<f64>()
        };
        let secret = "sam-token-holder";
        env.plane.kubectl_ok(
            &["create", "secret", "generic", secret, "-n", NAMESPACE],
            None,
        )?;
        let token = env
            .plane
            .kubectl_ok(
                &[
                    "create",
                    "token",
                    "sam",
                    "-n",
                    NAMESPACE,
                    "--duration",
                    "1h",
                    "--bound-object-kind",
                    "Secret",
                    "--bound-object-name",
                    secret,
                ],
                None,
            )?
            .trim()
            .to_owned();
        let list = |token: &str| {
            sidecar.sessionless_request(PROJECT, Some(token), "tools/list", json!({}))
        };
        let (status, body) = list(&token);
        check(
            status == 200 && body.contains("streamco__streams_restart"),
            || format!("sam's list while the token lives: {status} {body}"),
        )?;
        let calls = env.runtime.block_on(world.streamco.tool_calls()).len();
        env.plane
            .kubectl_ok(&["delete", "secret", secret, "-n", NAMESPACE], None)?;
        let started = Instant::now();
        let refused = loop {
            let (status, body) = list(&token);
            if status == 403 {
                break body;
            }
            check(
                status == 200 && started.elapsed() < Duration::from_secs(30),
                || format!("sam's list after the Secret went: {status} {body}"),
            )?;
            std::thread::sleep(Duration::from_millis(200));
        };
        eprintln!(
            "sam's dead token refused {:.1} s after its Secret was deleted",
            started.elapsed().as_secs_f64()
        );
        let before = reviews();
        for token in [token.as_str(), "a-token-no-apiserver-has-ever-issued"] {
            let (status, body) = sidecar.sessionless_call(
                PROJECT,
                Some(token),
                "streamco__streams_list",
                &json!({}),
            );
            check(status == 403 && !body.contains("\"result\""), || {
                format!("a dead token's call: {status} {body}")
            })?;
            let (status, body) = list(token);
            check(status == 403 && !body.contains("streamco__"), || {
                format!("a dead token's list: {status} {body}")
            })?;
        }
        check(refused.contains("forbidden"), || {
            format!("the refusal: {refused}")
        })?;
        check(reviews() == before, || {
            format!("{} reviews were asked for dead tokens", reviews() - before)
        })?;
        let after = env.runtime.block_on(world.streamco.tool_calls()).len();
        check(after == calls, || {
            format!("the provider saw {} calls", after - calls)
        })
    })
}

/// The TypeScript SDK's report of `calls` as the caller holding `token`
/// (`crates/capstan-sidecar/tests/node/authorized.mjs`, run from a copy beside the SDK: ES
/// modules find packages next to the script).
fn typescript_report(world: &World, token: &str, calls: &Value) -> Result<Value, String> {
    let copy = node_dir().join(format!("authorization-{}.mjs", std::process::id()));
    std::fs::copy(
        repo_root().join("crates/capstan-sidecar/tests/node/authorized.mjs"),
        &copy,
    )
    .map_err(|e| format!("copying the TypeScript client: {e}"))?;
    let output = std::process::Command::new("node")
        .arg(&copy)
        .arg(&world.sidecar.socket)
        .args([PROJECT, token, &calls.to_string()])
        .output()
        .map_err(|e| format!("running the TypeScript client: {e}"));
    let _ = std::fs::remove_file(&copy);
    let output = output?;
    serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "the TypeScript client: {e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The official TypeScript SDK, an independent client of its own, sees what the Python one
/// does: pat is shown his one tool, and alice's tool is refused him with the words of a tool
/// that does not exist; the provider counts only his allowed call.
fn typescript_client(env: &Env) -> Outcome {
    with_world(|world| {
        let before = env.runtime.block_on(world.streamco.tool_calls()).len();
        let calls = json!([
            {"name": "streamco__streams_get", "arguments": {"name": "clickstream"}},
            {"name": "streamco__no_such_tool"},
            {"name": "streamco__streams_list"},
        ]);
        let report = typescript_report(world, "token-of-pat", &calls)?;
        check(report["tools"] == json!(["streamco__streams_list"]), || {
            format!("pat's list through the TypeScript SDK: {report}")
        })?;
        let refused = report["calls"][0]["error"].to_string();
        let unknown = report["calls"][1]["error"].to_string();
        check(
            !refused.is_empty()
                && refused != "null"
                && refused.replace("streamco__streams_get", "NAME")
                    == unknown.replace("streamco__no_such_tool", "NAME"),
            || format!("pat's refused call {refused} against the unknown tool's {unknown}"),
        )?;
        check(report["calls"][2]["ok"]["isError"] == false, || {
            format!("pat's own tool: {report}")
        })?;
        let after = env.runtime.block_on(world.streamco.tool_calls());
        check(after[before..] == ["streams_list".to_owned()], || {
            format!("the provider saw {:?}", &after[before..])
        })
    })
}

/// Where the sidecar writes its audit trail.
fn audit_path(env: &Env) -> String {
    audit_file(env.plane.state_dir())
}

/// `sha256:` of `text`, by coreutils: an oracle the sidecar did not compute.
fn sha256sum(text: &str) -> Result<String, String> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("sha256sum: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("sha256sum: no stdin")?
        .write_all(text.as_bytes())
        .map_err(|e| format!("sha256sum: {e}"))?;
    let output = child
        .wait_with_output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    let hex = String::from_utf8_lossy(&output.stdout);
    Ok(format!(
        "sha256:{}",
        hex.split_whitespace().next().unwrap_or_default()
    ))
}

/// Finding: nothing recorded which person a call was made for. Each tool call — refused or
/// served — is an audit line naming the caller as the apiserver authenticated their token:
/// the users of alice's and pat's lines are the users the apiserver's own audit log records
/// for the sidecar's SelfSubjectReviews, with their uids; the allowed call carries its
/// authorization, its provider and the digest of its arguments (computed here by sha256sum
/// over the canonical JSON) and never their value; the withheld call is recorded as withheld
/// and unknown.
fn audit_names_callers(env: &Env) -> Outcome {
    with_world(|world| {
        let ops = json!([
            {"op": "call", "client": "alice", "name": "streamco__streams_get",
             "arguments": {"name": "orders"}},
            {"op": "call", "client": "alice", "name": "streamco__streams_list"},
            {"op": "call", "client": "pat", "name": "streamco__streams_list"},
        ]);
        let report = report(world, "2026-07-28", &ops);
        check(report.len() == 4, || format!("{report:?}"))?;
        let lines = audit_lines(&audit_path(env));
        let text = std::fs::read_to_string(audit_path(env)).unwrap_or_default();
        check(!text.contains("\"orders\""), || {
            "an argument value reached the audit trail".to_owned()
        })?;
        let find = |user: &str, tool: &str, outcome: &str| {
            lines
                .iter()
                .rev()
                .find(|l| l["user"] == user && l["tool"] == tool && l["outcome"] == outcome)
                .cloned()
        };
        let allowed = find("alice", "streamco__streams_get", "ok")
            .ok_or_else(|| format!("no line of alice's allowed call in {lines:?}"))?;
        let digest = sha256sum(r#"{"name":"orders"}"#)?;
        check(
            allowed["uid"] == "uid-alice"
                && allowed["authorization"] == "allowed"
                && allowed["limit"] == "none"
                && allowed["providerTool"] == "streamco__streams_get"
                && allowed["argumentsDigest"] == digest.as_str(),
            || format!("alice's allowed call: {allowed} (digest {digest})"),
        )?;
        let withheld = find("alice", "streamco__streams_list", "unknown_tool")
            .ok_or_else(|| format!("no line of alice's withheld call in {lines:?}"))?;
        check(
            withheld["authorization"] == "withheld" && withheld.get("providerTool").is_none(),
            || format!("alice's withheld call: {withheld}"),
        )?;
        find("pat", "streamco__streams_list", "ok")
            .ok_or_else(|| format!("no line of pat's call in {lines:?}"))?;
        // The oracle: who the apiserver says asked it SelfSubjectReviews.
        let asked: std::collections::BTreeSet<(String, String)> =
            std::fs::read_to_string(env.plane.audit_log())
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|e| e["objectRef"]["resource"] == "selfsubjectreviews")
                .map(|e| {
                    (
                        e["user"]["username"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        e["user"]["uid"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
        let named: std::collections::BTreeSet<(String, String)> = lines
            .iter()
            .filter_map(|l| {
                Some((
                    l["user"].as_str()?.to_owned(),
                    l["uid"].as_str()?.to_owned(),
                ))
            })
            .collect();
        check(!named.is_empty() && named.is_subset(&asked), || {
            format!("the audit trail names {named:?}; the apiserver authenticated {asked:?}")
        })?;
        check(
            named.contains(&("alice".into(), "uid-alice".into()))
                && named.contains(&("pat".into(), "uid-pat".into())),
            || format!("alice and pat among {named:?}"),
        )
    })
}

/// Finding: a provider whose tools can change things could not keep them from sidecars that
/// give every admitted caller everything. streamco's binding says `callerAuthorization:
/// Required`: the rbac sidecar serves frank (granted everything) its tools, while a second
/// sidecar on the same plane without per-tool authorization lists none of them, refuses a call
/// of one as unknown, and still serves the other bindings; the provider sees no call.
fn required_without_authorization(env: &Env) -> Outcome {
    with_world(|world| {
        let ops = json!([
            {"op": "tools", "client": "frank"},
            {"op": "call", "client": "frank", "name": "streamco__streams_list"},
        ]);
        let decided = report(world, "2026-07-28", &ops);
        check(
            tool_names(&decided[0]).contains(&"streamco__streams_list".to_owned()),
            || format!("the rbac sidecar's list for frank: {}", decided[0]),
        )?;
        let mut plain = SidecarProcess::start(
            &env.plane,
            &world.composer,
            "authorization-off",
            &[
                ("CAPABILITY_MCP_ENDPOINT_HOSTS", "127.0.0.1"),
                ("CAPSTAN_BASE_TOOLS", "off"),
            ],
        )
        .map_err(|e| format!("the second sidecar: {e:?}"))?;
        let before = env.runtime.block_on(world.streamco.tool_calls()).len();
        let listed = once_synced(&plain, &ops);
        plain.stop();
        let names = listed.first().map(tool_names).unwrap_or_default();
        check(
            names.contains(&"cheap__docs_search".to_owned())
                && !names.iter().any(|n| n.starts_with("streamco__")),
            || format!("the sidecar without authorization lists {names:?}"),
        )?;
        let unknown = listed
            .get(1)
            .map(|e| e["error"].to_string())
            .unwrap_or_default();
        check(unknown.contains("is available to this assistant"), || {
            format!("its call of streamco__streams_list: {unknown}")
        })?;
        let after = env.runtime.block_on(world.streamco.tool_calls()).len();
        check(after == before, || {
            format!("streamco saw {} calls from it", after - before)
        })?;
        // The binding stops requiring it under a live session: the session is told its list
        // changed, lists streamco's tools, and its call reaches streamco.
        let plain = SidecarProcess::start(
            &env.plane,
            &world.composer,
            "authorization-off-live",
            &[
                ("CAPABILITY_MCP_ENDPOINT_HOSTS", "127.0.0.1"),
                ("CAPSTAN_BASE_TOOLS", "off"),
            ],
        )
        .map_err(|e| format!("the third sidecar: {e:?}"))?;
        let flipped = flip_required(env, world, &plain);
        let restored = env.plane.kubectl_ok(
            &[
                "patch",
                "capabilitybinding",
                "streamco",
                "--type=merge",
                "-p",
                r#"{"spec":{"callerAuthorization":"Required"}}"#,
            ],
            None,
        );
        let mut plain = plain;
        plain.stop();
        restored?;
        flipped
    })
}

/// The report of `ops` on `sidecar` once it has read the bindings (the search providers'
/// tools show it), or the last one after 20 s.
fn once_synced(sidecar: &SidecarProcess, ops: &Value) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let answer = offerings(sidecar, PROJECT, "2026-07-28", ops);
        let names = answer.first().map(tool_names).unwrap_or_default();
        if names.contains(&"cheap__docs_search".to_owned())
            || started.elapsed() > Duration::from_secs(20)
        {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// On `plain` (no per-tool authorization), a session of frank's lists no streamco tool; once
/// streamco's binding says `Optional`, the session is told its tools changed, lists
/// `streamco__streams_list`, and its call of it reaches streamco.
fn flip_required(env: &Env, world: &World, plain: &SidecarProcess) -> Outcome {
    once_synced(plain, &json!([{"op": "tools", "client": "frank"}]));
    let line = Duration::from_secs(30);
    let client = ListeningClient::start(
        &plain.socket,
        PROJECT,
        "token-of-frank",
        "legacy",
        Some("streamco__streams_list"),
    );
    let first = client.next(line);
    let names = |v: &Value| -> Vec<String> {
        v["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect()
    };
    check(
        !names(&first).is_empty() && !names(&first).iter().any(|n| n.starts_with("streamco__")),
        || format!("frank's first list: {first}"),
    )?;
    let before = env.runtime.block_on(world.streamco.tool_calls()).len();
    env.plane.kubectl_ok(
        &[
            "patch",
            "capabilitybinding",
            "streamco",
            "--type=merge",
            "-p",
            r#"{"spec":{"callerAuthorization":"Optional"}}"#,
        ],
        None,
    )?;
    let notified = client.next(line);
    check(notified["notifiedAt"].is_number(), || {
        format!("no list_changed after the binding stopped requiring authorization: {notified}")
    })?;
    let again = client.next(line);
    check(
        names(&again).contains(&"streamco__streams_list".to_owned()),
        || format!("frank's list after: {again}"),
    )?;
    let called = client.next(line);
    check(called["gone"]["isError"] == false, || {
        format!("frank's call after: {called}")
    })?;
    let after = env.runtime.block_on(world.streamco.tool_calls()).len();
    check(after == before + 1, || {
        format!("streamco saw {} calls, not 1", after - before)
    })
}
