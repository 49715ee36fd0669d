//! Capstan on a real node (`e2e/kubenode/node`: kubelet, containerd, runc, kube-proxy,
//! CoreDNS, a controller-manager and a scheduler beside the apiserver), installed as README
//! "Install on a cluster" says: the images imported without a registry, both charts installed
//! with Helm into a namespace enforcing the `restricted` Pod Security level, the controller
//! rolled out, the demo provider behind a Service, `examples/assistant` applied, and the
//! assistant calling through its sidecar's socket as another user. Then the faults a platform
//! team meets first: a caller revoked while its session is live, the leader pod deleted, the
//! sidecar killed, an upgrade rolled, three replicas through repeated leader kills and a
//! stall, the release uninstalled. The images are what users install (`make image`'s release
//! build) and the cluster's DNS is a CoreDNS pod with its own account.
//!
//! What the kernel enforces is read from `/proc` (user, capabilities, seccomp, read-only root),
//! who wrote a status from the apiserver's audit log (the pod a service-account token was
//! bound to), and what reached the provider from the provider's own record of requests.
//!
//! Trials run in order and build on each other, as a user's steps do.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use capstan_e2e::kubenode::{Node, on_node, run_on_node};
use capstan_e2e::suite::{Outcome, check};
use capstan_e2e::{printed, repo_root};
use libtest_mimic::Failed;
use serde_json::{Value, json};

mod node_steps;

use node_steps::*;

fn main() -> ExitCode {
    run_on_node(
        "node",
        import_images,
        vec![
            on_node(
                "the_cluster_dns_should_be_a_pod_with_its_own_account",
                dns_is_a_pod_with_its_own_account,
            ),
            on_node(
                "the_charts_should_install_and_the_controller_roll_out_restricted",
                install_and_roll_out,
            ),
            on_node(
                "the_demo_provider_should_serve_behind_its_service",
                deploy_provider,
            ),
            on_node(
                "a_binding_should_be_accepted_and_composed_by_the_controller_pod",
                binding_accepted_and_composed,
            ),
            on_node(
                "the_assistant_should_compose_and_call_through_the_socket_as_another_user",
                assistant_calls,
            ),
            on_node(
                "a_sidecar_should_authenticate_to_a_provider_with_a_token_bound_to_its_pod",
                node_steps::credentials::sidecar_authenticates_as_its_pod,
            ),
            on_node(
                "a_caller_without_rights_should_be_refused_at_the_socket",
                caller_refused,
            ),
            on_node(
                "a_revoked_caller_should_be_refused_in_its_live_session_within_the_ttl",
                revocation_reaches_the_live_session,
            ),
            on_node(
                "deleting_the_leader_pod_should_hand_the_lease_and_the_writes_to_a_synced_replica",
                leader_deleted,
            ),
            on_node(
                "a_killed_sidecar_should_be_restarted_and_serve_the_assistant_again",
                sidecar_killed,
            ),
            on_node(
                "a_wedged_sidecar_should_be_restarted_by_its_liveness_probe",
                sidecar_wedged,
            ),
            on_node(
                "the_disruption_budget_should_refuse_evicting_the_last_ready_replica",
                budget_refuses_eviction,
            ),
            on_node(
                "helm_upgrade_should_roll_the_controller_with_a_ready_replica_throughout",
                upgrade_rolls,
            ),
            on_node(
                "three_replicas_should_never_lead_together_through_leader_kills_and_a_stall",
                one_leader_among_three,
            ),
            on_node(
                "helm_uninstall_should_keep_the_crds_and_every_binding",
                uninstall_keeps_crds,
            ),
        ],
    )
}

/// The images the trials run, imported into the node's containerd: the product's two as
/// `make image` builds them (release binaries of capstan-controller and capstan-sidecar, then
/// scripts/build-image) — what users install, not the tests' debug build — and the demo
/// provider's and an assistant's (e2e/kubenode/image, from the tests' build).
///
/// The release build runs here, in the tests' target directory, so the images are always this
/// tree's (a no-op when nothing changed). `CAPSTAN_NODE_IMAGE_BINARIES=<dir>` takes the two
/// binaries from `<dir>` instead, unbuilt: to run the suite against another build of them
/// (an older commit's, to show a trial failing there).
fn import_images(node: &Node) -> Result<(), String> {
    let binaries = release_binaries()?;
    let out = node.state_dir().join("images");
    let built = Command::new(repo_root().join("scripts/build-image"))
        .arg("--binaries")
        .arg(&binaries)
        .arg("--out")
        .arg(&out)
        .env("CAPSTAN_BUILDAH_ROOT", node.state_dir().join("buildah"))
        .output()
        .map_err(|e| format!("scripts/build-image: {e}"))?;
    if !built.status.success() {
        return Err(format!("scripts/build-image: {}", printed(&built)));
    }
    let version = version();
    for name in ["capstan-controller", "capstan-sidecar"] {
        let archive = out.join(format!("{name}-{version}.tar"));
        node.import(&archive, &format!("{name}:{version}"))
            .map_err(|e| e.to_string())?;
    }
    let pause = capstan_e2e::built_tool("pause").map_err(|e| e.to_string())?;
    test_image(
        node,
        PROVIDER_IMAGE,
        "/usr/local/bin/demo-provider",
        &[(binary("demo-provider"), "/usr/local/bin/demo-provider")],
    )?;
    test_image(
        node,
        ASSISTANT_IMAGE,
        "/pause",
        &[
            (pause, "/pause"),
            (binary("capstanctl"), "/usr/local/bin/capstanctl"),
            (PathBuf::from("/bin/busybox"), "/bin/busybox"),
            // An MCP session held by hand over the socket (the revocation trial).
            (PathBuf::from("/usr/bin/curl"), "/usr/bin/curl"),
        ],
    )
}

/// The tests' target directory (`<target>/debug/capstan-controller` → `<target>`).
fn target_dir() -> Result<PathBuf, String> {
    binary("capstan-controller")
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| "the tests' binaries are in no target directory".to_owned())
}

/// Where the images' binaries are: built now with `make image`'s command, or given.
fn release_binaries() -> Result<PathBuf, String> {
    if let Some(given) = std::env::var_os("CAPSTAN_NODE_IMAGE_BINARIES") {
        return Ok(PathBuf::from(given));
    }
    let target = target_dir()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let started = Instant::now();
    let built = Command::new(cargo)
        .args(RELEASE_BUILD)
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(repo_root())
        .output()
        .map_err(|e| format!("cargo build --release: {e}"))?;
    if !built.status.success() {
        return Err(format!(
            "cargo {}: {}",
            RELEASE_BUILD.join(" "),
            printed(&built)
        ));
    }
    eprintln!(
        "node: the release build of the images' binaries took {:?}",
        started.elapsed()
    );
    Ok(target.join("release"))
}

/// Whether the process `pid` runs `name` exactly as `make image` puts it in the image: this
/// tree's release binary, its debug info stripped as scripts/build-image strips it. (With
/// `CAPSTAN_NODE_IMAGE_BINARIES`, another build's, it does not, and says so.)
fn runs_the_release_binary(node: &Node, pid: u32, name: &str) -> Result<bool, Failed> {
    let release = target_dir()?.join("release").join(name);
    let stripped = node.state_dir().join(format!("{name}.stripped"));
    let output = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(&release)
        .arg(&stripped)
        .output()
        .map_err(|e| format!("objcopy: {e}"))?;
    check(output.status.success(), || printed(&output))?;
    let running = std::fs::read(format!("/proc/{pid}/exe")).map_err(|e| format!("{pid}: {e}"))?;
    let built = std::fs::read(&stripped).map_err(|e| format!("{}: {e}", stripped.display()))?;
    Ok(running == built)
}

/// `make image`'s build: the two binaries the images hold, release profile.
const RELEASE_BUILD: [&str; 7] = [
    "build",
    "--release",
    "-p",
    "capstan-controller",
    "-p",
    "capstan-sidecar",
    "--bins",
];

fn test_image(
    node: &Node,
    name: &str,
    entrypoint: &str,
    files: &[(PathBuf, &str)],
) -> Result<(), String> {
    let archive = node
        .state_dir()
        .join("images")
        .join(format!("{}.tar", name.replace([':', '/'], "-")));
    let mut command = Command::new(repo_root().join("e2e/kubenode/image"));
    command
        .arg("--out")
        .arg(&archive)
        .args(["--name", name, "--entrypoint", entrypoint]);
    for (source, dest) in files {
        command.arg(format!("{}:{dest}", source.display()));
    }
    let output = command
        .output()
        .map_err(|e| format!("e2e/kubenode/image: {e}"))?;
    if !output.status.success() {
        return Err(format!("e2e/kubenode/image {name}: {}", printed(&output)));
    }
    node.import(&archive, name).map_err(|e| e.to_string())
}

fn binary(name: &str) -> PathBuf {
    capstan_testkit::binary(name)
}

/// README "Install on a cluster", step by step, in a namespace enforcing `restricted`.
fn install_and_roll_out(node: &Node) -> Outcome {
    restricted_namespace(node, RELEASE_NAMESPACE)?;
    helm(
        node,
        &[
            "install",
            "capstan-crds",
            "charts/capstan-crds",
            "-n",
            RELEASE_NAMESPACE,
        ],
    )?;
    controller_release(node, "install", &[])?;
    rollout(node, RELEASE_NAMESPACE, "capstan", 180)?;
    let ready = ready_controller_pods(node)?;
    check(ready.len() == 2, || {
        format!("after rollout status, ready controller pods: {ready:?}, not 2")
    })?;
    // What the kernel enforces on each controller process, not what the manifest asks.
    let processes = node.pod_processes("capstan-controller");
    check(processes.len() == 2, || {
        format!("controller processes on the node: {processes:?}, not 2")
    })?;
    for process in &processes {
        check(
            process.uids.iter().all(|&uid| uid == 65532)
                && process.capabilities == "0000000000000000"
                && process.seccomp == "2"
                && process.no_new_privileges == "1"
                && process.root_mount_options.split(',').any(|o| o == "ro"),
            || {
                format!(
                    "a controller runs with {process:?}: want uid 65532, no capabilities, seccomp filter, no new privileges, read-only root"
                )
            },
        )?;
    }
    // What users install: the release build `make image` makes, not the tests' debug build.
    for process in &processes {
        check(
            runs_the_release_binary(node, process.pid, "capstan-controller")?,
            || {
                format!(
                    "controller process {} does not run the release image's binary",
                    process.pid
                )
            },
        )?;
    }
    let holder = lease_holder(node)?;
    check(ready.contains(&holder), || {
        format!("the Lease is held by {holder:?}, not one of the ready pods {ready:?}")
    })
}

/// The cluster's DNS is a pod, as on any cluster: CoreDNS in kube-system, non-root, reading
/// the API as its own ServiceAccount (the audit log) — no process of the node's with the admin
/// credential. Every Service name the suite resolves goes through it.
fn dns_is_a_pod_with_its_own_account(node: &Node) -> Outcome {
    const ACCOUNT: &str = "system:serviceaccount:kube-system:coredns";
    let pods =
        node.kubectl_json(&["-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns"])?;
    let uid = pods["items"][0]["metadata"]["uid"]
        .as_str()
        .ok_or("no CoreDNS pod (k8s-app=kube-dns) in kube-system")?
        .to_owned();
    let processes: Vec<_> = machine_processes_named("coredns");
    let in_pod = node.pod_processes("coredns");
    check(
        processes.len() == 1
            && in_pod.len() == 1
            && in_pod[0].pod_uid == uid
            && in_pod[0].uids.iter().all(|&u| u == 65532),
        || {
            format!(
                "coredns processes on the machine: {processes:?}; in the node's pods: {in_pod:?}; want one, in pod {uid}, as 65532"
            )
        },
    )?;
    let events = node.audit_events();
    let by_coredns: Vec<&Value> = events
        .iter()
        .filter(|e| {
            // CoreDNS/<version> git_commit:… (or coredns/… from client-go's default).
            e["userAgent"]
                .as_str()
                .is_some_and(|agent| agent.to_ascii_lowercase().starts_with("coredns"))
        })
        .collect();
    let others: Vec<&str> = by_coredns
        .iter()
        .filter_map(|e| e["user"]["username"].as_str())
        .filter(|user| *user != ACCOUNT)
        .collect();
    let listed = by_coredns.iter().any(|e| {
        // A list, or a watch sending the initial events in its place (client-go's WatchList).
        e["objectRef"]["resource"] == "endpointslices"
            && matches!(e["verb"].as_str(), Some("list" | "watch"))
            && e["responseStatus"]["code"] == 200
    });
    check(listed && others.is_empty(), || {
        format!(
            "CoreDNS's requests: {} in all, EndpointSlices read: {listed}, made as others than {ACCOUNT}: {others:?}",
            by_coredns.len()
        )
    })
}

/// Processes on the whole machine whose executable is named `name`.
fn machine_processes_named(name: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let exe = std::fs::read_link(entry.path().join("exe")).ok()?;
            exe.file_name().is_some_and(|n| n == name).then_some(pid)
        })
        .collect()
}

/// The demo provider as a user would run one: a Deployment and a Service in a namespace of
/// its own, also enforcing `restricted`.
fn deploy_provider(node: &Node) -> Outcome {
    restricted_namespace(node, PROVIDER_NAMESPACE)?;
    apply(node, &provider_objects())?;
    rollout(node, PROVIDER_NAMESPACE, "demo-provider", 120)?;
    // Ready is not yet routed: kube-proxy programs the Service once it sees the endpoint.
    wait(
        PATIENCE,
        "the provider to answer through its Service",
        || provider_requests(node).ok().filter(Value::is_array),
    )
    .map(drop)
}

/// The StreamCo binding, pointed at the provider's Service name: the controller pod accepts
/// it and its probe (dialing through cluster DNS and the Service) writes Composed=True.
fn binding_accepted_and_composed(node: &Node) -> Outcome {
    let writes_before = status_writers(node, BINDING).len();
    apply(node, &binding(BINDING))?;
    let conditions = wait_for_conditions(node, BINDING, &["Accepted", "Composed"], PATIENCE)?;
    let writers = status_writers(node, BINDING);
    let holder = lease_holder(node)?;
    check(
        writers.len() > writes_before
            && writers
                .iter()
                .all(|(user, pod)| user == CHART_ACCOUNT && pod == &holder),
        || {
            format!(
                "status writes of {BINDING}: {writers:?}; want them all by {CHART_ACCOUNT} from the leader pod {holder} ({conditions})"
            )
        },
    )
}

/// `examples/assistant` applied as README "Wire the sidecar" says (the image and allow-lists
/// edited, the assistant container running as user 1001); from inside the assistant
/// container, `capstanctl` composes and calls through the socket in the shared emptyDir.
fn assistant_calls(node: &Node) -> Outcome {
    deploy_assistant(node)?;
    let id = exec_assistant(node, &["/bin/busybox", "id"])?;
    check(id.contains("uid=1001") && id.contains("65532"), || {
        format!("the assistant runs as {id:?}: want uid 1001 with group 65532 (fsGroup)")
    })?;
    // The native sidecar starts first: the assistant's very first request, sent the moment
    // it starts (without a token), is answered by the sidecar — refused for want of a token,
    // not failed for want of a socket.
    let first = exec_assistant(node, &["/bin/busybox", "cat", "/first-ask/compose"])?;
    check(first.contains("401 Unauthorized"), || {
        format!("the assistant's first request at start got:\n{first}")
    })?;
    let sidecars = node.pod_processes("capstan-sidecar");
    check(
        sidecars.len() == 1 && sidecars[0].uids.iter().all(|&uid| uid == 65532),
        || format!("sidecar processes: {sidecars:?}; want one, as uid 65532"),
    )?;
    check(
        runs_the_release_binary(node, sidecars[0].pid, "capstan-sidecar")?,
        || "the sidecar does not run the release image's binary".to_owned(),
    )?;
    let token = person_token(node, PERSON)?;
    let composed = capstanctl(node, &["compose", "--project", PROJECT, "--token", &token])?;
    check(composed.contains("streamco__streams_list"), || {
        format!("capstanctl compose in the assistant printed:\n{composed}")
    })?;
    one_call_reaches_the_provider(node, &token, "from the assistant")?;
    let leaked = provider_requests(node)?.to_string().contains(&token);
    check(!leaked, || {
        "the person's token reached the provider in a request it recorded".into()
    })
}

/// A token that may not list bindings, and a token that is no token at all, get the sidecar's
/// refusal, and the provider sees nothing of either.
fn caller_refused(node: &Node) -> Outcome {
    let stranger = person_token(node, STRANGER)?;
    // A token the apiserver does not know at all.
    let garbage = "not-a-token".to_owned();
    let calls_before = provider_calls(node, "streams_list")?;
    for (who, token) in [("mallory", &stranger), ("a garbage token", &garbage)] {
        let refused = call_streams_list(node, token);
        let Err(message) = refused else {
            return Err(format!("{who} called: {refused:?}").into());
        };
        check(
            ["401", "403", "forbidden"]
                .iter()
                .any(|why| message.contains(why)),
            || format!("{who}: the refusal does not say why: {message}"),
        )?;
    }
    let calls_after = provider_calls(node, "streams_list")?;
    check(calls_after == calls_before, || {
        format!(
            "the provider saw {} calls from refused callers",
            calls_after - calls_before
        )
    })
}

/// A person admitted by a ClusterRoleBinding of their own holds a live MCP session from the
/// assistant container (curl over the socket) and calls through it; the binding is deleted;
/// the next request in that session, sent once the caller check's answer has outlived its TTL,
/// is refused as forbidden, the session is over, and the provider's own record shows no call
/// after the revocation.
fn revocation_reaches_the_live_session(node: &Node) -> Outcome {
    use node_steps::revocation::{CALLER_CHECK_TTL, call_in_session, open_session};
    let binding = format!("{REVOKED}-lists-bindings");
    kubectl(
        node,
        &["-n", "assistants", "create", "serviceaccount", REVOKED],
    )?;
    kubectl(
        node,
        &[
            "create",
            "clusterrolebinding",
            &binding,
            "--clusterrole=capstan-sidecar",
            &format!("--serviceaccount=assistants:{REVOKED}"),
        ],
    )?;
    let token = person_token(node, REVOKED)?;
    let session = open_session(node, &token)?;
    let calls_before = provider_calls(node, "streams_list")?;
    let served = call_in_session(node, &token, &session, 2)?;
    check(
        served.status == 200 && served.body.contains("clickstream"),
        || format!("a call in the live session before the revocation: {served:?}"),
    )?;
    let calls_admitted = provider_calls(node, "streams_list")?;
    check(calls_admitted == calls_before + 1, || {
        format!("the provider recorded {calls_before} calls before, {calls_admitted} after")
    })?;
    kubectl(node, &["delete", "clusterrolebinding", &binding])?;
    let revoked = Instant::now();
    // The answer cached before the revocation is at most the TTL old by then.
    std::thread::sleep(CALLER_CHECK_TTL + std::time::Duration::from_secs(1));
    let refused = call_in_session(node, &token, &session, 3)?;
    let after = revoked.elapsed();
    check(
        refused.status == 403 && refused.body.contains("forbidden"),
        || format!("the first call {after:?} after the revocation: {refused:?}"),
    )?;
    let again = call_in_session(node, &token, &session, 4)?;
    check(again.status == 403 || again.status == 404, || {
        format!("a second call after the revocation: {again:?}")
    })?;
    let calls_after = provider_calls(node, "streams_list")?;
    check(calls_after == calls_admitted, || {
        format!(
            "the provider recorded {} calls after the revocation",
            calls_after - calls_admitted
        )
    })?;
    eprintln!(
        "revocation: the live session's next call, {after:?} after the binding was deleted (TTL {CALLER_CHECK_TTL:?}), was refused: {}",
        refused.status
    );
    Ok(())
}

/// The leader pod deleted as `kubectl delete pod` does: it releases the Lease, and another
/// replica — the standby, or the Deployment's replacement pod if it campaigns first — takes
/// it within the lease duration and a few seconds, having synced its caches first (its
/// `/readyz` answers 200 when it is first seen holding), and accepts a new binding.
fn leader_deleted(node: &Node) -> Outcome {
    let leader = lease_holder(node)?;
    let standby = ready_controller_pods(node)?
        .into_iter()
        .find(|pod| pod != &leader)
        .ok_or("no standby pod is ready")?;
    let started = Instant::now();
    kubectl(
        node,
        &[
            "-n",
            RELEASE_NAMESPACE,
            "delete",
            "pod",
            &leader,
            "--wait=false",
        ],
    )?;
    let holder = wait(TAKEOVER, "another pod to hold the Lease", || {
        lease_holder(node).ok().filter(|holder| holder != &leader)
    })?;
    let took_over = started.elapsed();
    let readyz = controller_readyz(node, &holder)?;
    check(readyz == 200, || {
        format!(
            "{holder} holds the Lease while its /readyz answers {readyz}: it campaigned before its caches synced"
        )
    })?;
    apply(node, &binding(SECOND_BINDING))?;
    wait_for_conditions(node, SECOND_BINDING, &["Accepted"], TAKEOVER)?;
    let accepted = started.elapsed();
    let writers = status_writers(node, SECOND_BINDING);
    let which = if holder == standby {
        "the standby"
    } else {
        "the replacement pod"
    };
    eprintln!(
        "leader {leader} deleted: {which} {holder} held the Lease after {took_over:?}, a new binding was accepted after {accepted:?}"
    );
    check(
        !writers.is_empty() && writers.iter().all(|(_, pod)| pod == &holder),
        || format!("status writes of {SECOND_BINDING}: {writers:?}; want them all from {holder}"),
    )?;
    rollout(node, RELEASE_NAMESPACE, "capstan", 120).map(drop)
}

/// The sidecar's process killed on the machine: kubelet restarts the native sidecar and the
/// assistant's next session calls through it.
fn sidecar_killed(node: &Node) -> Outcome {
    // The socket is back when the sidecar is started; a call is one fresh session.
    signal_the_sidecar_and_call_again(node, "KILL", "after the restart")
}

/// The sidecar's process stopped (SIGSTOP: alive, answering nothing, as a deadlocked process
/// would be): its liveness probe fails, kubelet restarts it, and the assistant calls again.
fn sidecar_wedged(node: &Node) -> Outcome {
    signal_the_sidecar_and_call_again(node, "STOP", "after the wedged sidecar was restarted")
}

/// Sends `signal` to the one sidecar process on the machine, waits for kubelet to have
/// restarted the container (restart count up, started), and makes one call through it.
fn signal_the_sidecar_and_call_again(node: &Node, signal: &str, when: &str) -> Outcome {
    let restarts_before = sidecar_restarts(node)?;
    let sidecars = node.pod_processes("capstan-sidecar");
    let [sidecar] = sidecars.as_slice() else {
        return Err(format!("sidecar processes: {sidecars:?}; want one").into());
    };
    let sent = Command::new("kill")
        .args([format!("-{signal}"), sidecar.pid.to_string()])
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    check(sent.success(), || {
        format!("kill -{signal} {} failed", sidecar.pid)
    })?;
    wait(
        PATIENCE,
        &format!("kubelet to restart the sidecar (SIG{signal})"),
        || {
            let restarts = sidecar_restarts(node).ok()?;
            let started = sidecar_started(node).ok()?;
            (restarts > restarts_before && started).then_some(())
        },
    )?;
    let token = person_token(node, PERSON)?;
    one_call_reaches_the_provider(node, &token, when)
}

/// Evictions (what `kubectl drain` sends) honour the chart's PodDisruptionBudget: one of two
/// ready replicas may go, the last ready one may not.
fn budget_refuses_eviction(node: &Node) -> Outcome {
    let ready = ready_controller_pods(node)?;
    let [first, second] = ready.as_slice() else {
        return Err(format!("ready controller pods: {ready:?}, not 2").into());
    };
    evict(node, first).map_err(|e| format!("evicting the first of two ready pods: {e}"))?;
    let refused = evict(node, second);
    let Err(message) = refused else {
        return Err(format!("evicting {second} with only it ready was allowed").into());
    };
    check(message.contains("disruption budget"), || {
        format!("the second eviction failed for another reason: {message}")
    })?;
    rollout(node, RELEASE_NAMESPACE, "capstan", 120).map(drop)
}

/// `helm upgrade` changing a value rolls new pods; at no moment is no replica ready.
fn upgrade_rolls(node: &Node) -> Outcome {
    let pods_before = ready_controller_pods(node)?;
    let (upgraded, seen) = counting_ready_replicas(node, || {
        controller_release(node, "upgrade", &["--set", "controller.logLevel=debug"])
            .and_then(|_| rollout(node, RELEASE_NAMESPACE, "capstan", 180))
    });
    upgraded?;
    let pods_after = ready_controller_pods(node)?;
    check(
        pods_after.iter().all(|pod| !pods_before.contains(pod)),
        || format!("pods before {pods_before:?}, after {pods_after:?}: the upgrade rolled nothing"),
    )?;
    check(
        !seen.is_empty() && seen.iter().all(|&ready| ready >= 1),
        || format!("ready replicas seen during the upgrade: {seen:?}"),
    )
}

/// The chart with `replicas: 3`: the leader is ended six times — five SIGKILLs (it dies
/// holding the Lease, both standbys wake to the same expired lease) and, third, a SIGSTOP past
/// the lease duration (a stalled leader that comes back believing it leads). In each round the
/// Lease changes hands once, straight to another replica (never cleared by a replica that did
/// not hold it: the watch sees every version) — in another pod when the old leader lives on;
/// after a kill the restarted container is a new candidate like the standbys —, no earlier
/// holder writes the Lease after the successor's first write, and every status write in the
/// round comes from the pod holding the Lease at that moment (the audit log: the pod each
/// token was bound to).
fn one_leader_among_three(node: &Node) -> Outcome {
    use k8s_openapi::jiff::Timestamp;
    use node_steps::leadership::{
        Fault, LeaseHistory, TICKING_BINDING, Written, end_the_leader, one_writer_at_a_time,
        pod_of, steady_leader, while_ticking, writes,
    };
    // The upgrade trial's log level again, so that only the replica count changes.
    controller_release(
        node,
        "upgrade",
        &["--set", "controller.logLevel=debug", "--set", "replicas=3"],
    )?;
    rollout(node, RELEASE_NAMESPACE, "capstan", 180)?;
    let history = LeaseHistory::watch(node);
    let faults = [
        Fault::Kill,
        Fault::Kill,
        Fault::Stall,
        Fault::Kill,
        Fault::Kill,
        Fault::Kill,
    ];
    let rounds = while_ticking(node, || {
        let mut rounds = Vec::new();
        for fault in faults {
            let leader = steady_leader(node)?;
            let since = Timestamp::now();
            let round = end_the_leader(node, leader, fault)?;
            // The successor leads a while: its writes are part of the round.
            std::thread::sleep(std::time::Duration::from_secs(3));
            rounds.push((round, since, Timestamp::now()));
        }
        Ok::<_, Failed>(rounds)
    })??;
    let lease = writes(node, Written::Lease);
    let statuses = writes(node, Written::Status(TICKING_BINDING));
    for (number, (round, since, until)) in rounds.iter().enumerate() {
        let same_pod = pod_of(&round.successor) == pod_of(&round.leader);
        eprintln!(
            "round {}: {:?} of {}; {} held the Lease {:?} later{}",
            number + 1,
            round.fault,
            round.leader,
            round.successor,
            round.took_over,
            if same_pod {
                " (the killed leader's restarted container)"
            } else {
                ""
            }
        );
        let holders = history.holders_between(*since, *until);
        let expected = [Some(round.leader.clone()), Some(round.successor.clone())];
        check(holders == expected || holders == expected[1..], || {
            format!(
                "round {}: the Lease named {holders:?} in turn; want {expected:?}",
                number + 1
            )
        })?;
        let leader_pod = pod_of(&round.leader).unwrap_or_default();
        let successor_pod = pod_of(&round.successor).unwrap_or_default();
        // Leadership moves: to another process always (a killed leader's restarted container
        // is a new candidate and may win); out of the pod when the old leader lives on.
        let moved = match round.fault {
            Fault::Kill => round.successor != round.leader,
            Fault::Stall => successor_pod != leader_pod,
        };
        check(moved, || {
            format!(
                "round {}: the Lease went from {} to {}: leadership did not move",
                number + 1,
                round.leader,
                round.successor
            )
        })?;
        one_writer_at_a_time(
            (&lease, &statuses),
            (*since, *until),
            (&leader_pod, &successor_pod),
        )
        .map_err(|e| format!("round {}: {}", number + 1, e.message().unwrap_or_default()))?;
    }
    Ok(())
}

/// README "Upgrades": uninstalling both releases keeps the CRDs and every binding.
fn uninstall_keeps_crds(node: &Node) -> Outcome {
    helm(
        node,
        &["uninstall", "capstan", "-n", RELEASE_NAMESPACE, "--wait"],
    )?;
    helm(
        node,
        &["uninstall", "capstan-crds", "-n", RELEASE_NAMESPACE],
    )?;
    for crd in CRDS {
        kubectl(node, &["get", "crd", crd])?;
    }
    for name in [BINDING, SECOND_BINDING] {
        kubectl(node, &["get", "capabilitybinding", name])?;
    }
    let pods = controller_pods(node)?;
    check(pods.is_empty(), || {
        format!("controller pods left after uninstall: {pods:?}")
    })
}

/// `helm install` or `helm upgrade` of the controller chart with the allow-lists a platform
/// team sets for providers in the `providers` namespace, and `extra` values.
fn controller_release(node: &Node, verb: &str, extra: &[&str]) -> Result<String, Failed> {
    let allow_lists = json!({
        "mcpEndpointHosts": ALLOWED_HOSTS,
        "fetchHosts": ALLOWED_HOSTS,
    });
    let values = format!("allowLists={allow_lists}");
    let mut args = vec![verb, "capstan", "charts/capstan", "-n", RELEASE_NAMESPACE];
    args.extend(["--set-json", &values]);
    args.extend(extra);
    helm(node, &args)
}
