//! capstan-controller on a real apiserver: Accepted conditions, qualifier verdicts, one writer
//! among two replicas, survival of an apiserver restart, and no writes when nothing changed.
//!
//! The CapabilityBinding CRD is installed with an open spec schema here, standing in for a
//! binding an older, looser CRD admitted: that is what runtime validation exists for, and it
//! lets invalid bindings reach the controller (the admission suite covers the real schema).
//! Trials run one at a time: each starts its own controller processes, and two sets of
//! replicas on one cluster would both write.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use capstan_controller::status::MAX_MESSAGE_LEN;
use capstan_controller::{Leadership, LeaseSettings};
use capstan_e2e::controller::{
    CONTROLLER_ROLE, ControllerProcess, LEADER_ELECTION_ROLE, NAMESPACE, apply_controller_rbac,
    bind_cluster_role, bind_role, service_account, service_account_kubeconfig,
};
use capstan_e2e::objects::{ConditionView, apply, delete, wait_condition};
use capstan_e2e::suite::{Env, Outcome, check, eventually, trial};
use capstan_e2e::{HarnessError, printed, repo_root};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// How long an outcome may take to appear before a trial fails: generous, because the machine
/// may be busy; the trials assert outcomes, not speed.
const PATIENCE: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    capstan_e2e::suite::run(
        "controller",
        true,
        setup,
        vec![
            trial(
                "accepted_should_follow_validation_and_a_fix_should_flip_it",
                accepted_follows_validation,
            ),
            trial(
                "huge_invalid_binding_should_get_a_bounded_message",
                huge_binding_bounded_message,
            ),
            trial(
                "one_invalid_binding_should_not_hold_up_the_others",
                invalid_does_not_block_valid,
            ),
            trial(
                "qualifier_conflict_should_clear_when_one_side_is_deleted",
                qualifier_conflict_clears,
            ),
            trial(
                "qualifiers_beyond_the_limit_should_be_refused",
                qualifier_limit,
            ),
            trial(
                "resyncs_without_change_should_write_nothing",
                resync_writes_nothing,
            ),
            trial(
                "only_the_leader_should_write_and_a_killed_leader_should_hand_over",
                leader_election,
            ),
            trial("an_apiserver_restart_should_be_survived", apiserver_restart),
            trial(
                "a_full_status_queue_should_count_drops_and_retry_them_before_the_resync",
                queue_overflow,
            ),
            trial("an_etcd_restart_should_be_survived", etcd_restart),
            trial(
                "a_gracefully_stopped_leader_should_release_its_lease_for_the_standby",
                graceful_handover,
            ),
            trial(
                "readyz_and_the_lease_should_wait_for_the_first_sync",
                readiness_follows_the_first_sync,
            ),
            trial(
                "a_missing_lease_namespace_should_be_retried_not_fatal",
                lease_namespace_later,
            ),
            trial(
                "a_replica_taking_a_lease_another_holds_should_be_refused",
                held_lease_take_refused,
            ),
        ],
    )
}

fn setup(env: &Env) -> Result<(), HarnessError> {
    env.runtime
        .block_on(env.plane.install_open_binding_crd(&env.client))
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn valid_spec() -> Value {
    let text =
        std::fs::read_to_string(repo_root().join("examples/streamco/capability-bindings.yaml"))
            .unwrap_or_else(|e| panic!("{e}"));
    let binding: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    binding["spec"].clone()
}

/// Waits until the object's Accepted condition has `status` and `reason` for its current
/// generation, and returns it.
async fn wait_accepted(
    client: &Client,
    kind: &str,
    name: &str,
    status: &str,
    reason: &str,
) -> Result<ConditionView, libtest_mimic::Failed> {
    wait_condition(client, kind, name, "Accepted", (status, reason), PATIENCE).await
}

fn controller(
    env: &Env,
    identity: &str,
    args: &[&str],
) -> Result<ControllerProcess, libtest_mimic::Failed> {
    let kubeconfig = service_account_kubeconfig(&env.plane, identity).map_err(|e| e.to_string())?;
    ControllerProcess::start(&env.plane, &kubeconfig, identity, args)
        .map_err(|e| e.to_string().into())
}

/// The writers of the bindings `names` in the audit log, once it shows at least one: the audit
/// event of a write is logged as its response completes, so it may trail the status a reader
/// already sees.
async fn logged_writers(
    env: &Env,
    names: &[String],
) -> Result<BTreeMap<String, usize>, libtest_mimic::Failed> {
    eventually(
        PATIENCE,
        || async {
            let writers = status_writes(env, "capabilitybindings", names);
            (!writers.is_empty()).then_some(writers)
        },
        || format!("the writes of {names:?} in the audit log"),
    )
    .await
}

/// Successful status writes recorded by the apiserver for objects of `resource` named in
/// `names`, by user.
fn status_writes(env: &Env, resource: &str, names: &[String]) -> BTreeMap<String, usize> {
    env.plane
        .status_writes(resource, |name| names.iter().any(|n| n == name))
}

// ---------------------------------------------------------------------------------------------
// Trials

fn accepted_follows_validation(env: &Env) -> Outcome {
    let _controller = controller(env, "solo", &[])?;
    env.runtime.block_on(async {
        let client = &env.client;
        apply(client, "CapabilityBinding", "valid-binding", valid_spec()).await?;
        let mut broken = valid_spec();
        broken.as_object_mut().map(|s| s.remove("serviceName"));
        broken["skills"][0]
            .as_object_mut()
            .map(|s| s.remove("source"));
        apply(client, "CapabilityBinding", "broken-binding", broken).await?;

        let valid = wait_accepted(
            client,
            "CapabilityBinding",
            "valid-binding",
            "True",
            "Validated",
        )
        .await?;
        check(valid.message == "the spec is valid", || {
            format!("{valid:?}")
        })?;
        let invalid = wait_accepted(
            client,
            "CapabilityBinding",
            "broken-binding",
            "False",
            "ValidationFailed",
        )
        .await?;
        check(
            invalid.message == "spec.serviceName: required; spec.skills[0].source: required",
            || format!("{invalid:?}"),
        )?;
        check(invalid.observed_generation == Some(1), || {
            format!("{invalid:?}")
        })?;

        // The producer fixes it: the condition flips, for the new generation.
        apply(client, "CapabilityBinding", "broken-binding", valid_spec()).await?;
        let fixed = wait_accepted(
            client,
            "CapabilityBinding",
            "broken-binding",
            "True",
            "Validated",
        )
        .await?;
        check(fixed.observed_generation == Some(2), || {
            format!("{fixed:?}")
        })
    })?;
    // What a catalog controller or a person runs.
    let output = env.plane.kubectl(&[
        "wait",
        "--for=condition=Accepted",
        "capabilitybinding/valid-binding",
        "--timeout=60s",
    ]);
    check(output.status.success(), || printed(&output))?;
    let output = env
        .plane
        .kubectl(&["get", "capabilitybinding", "broken-binding"]);
    let table = String::from_utf8_lossy(&output.stdout);
    let mut lines = table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>());
    let (header, row) = (
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
    );
    let accepted = header
        .iter()
        .position(|h| *h == "ACCEPTED")
        .and_then(|i| row.get(i));
    check(accepted == Some(&"True"), || printed(&output))
}

fn huge_binding_bounded_message(env: &Env) -> Outcome {
    let _controller = controller(env, "solo", &[])?;
    env.runtime.block_on(async {
        let mut spec = valid_spec();
        // A megabyte of description and 300 skills without a source: hundreds of errors.
        let skill = json!({ "name": "s", "description": "x".repeat(1 << 20) });
        spec["skills"] = Value::Array((0..300).map(|i| {
            let mut s = skill.clone();
            s["name"] = json!(format!("skill-{i}"));
            if i > 0 { s["description"] = json!("short"); }
            s
        }).collect());
        apply(&env.client, "CapabilityBinding", "huge-binding", spec).await?;
        let verdict = wait_accepted(&env.client, "CapabilityBinding", "huge-binding", "False", "ValidationFailed").await?;
        let length = verdict.message.chars().count();
        check(length <= MAX_MESSAGE_LEN, || format!("message of {length} characters"))?;
        check(verdict.message.starts_with("spec.skills: must have at most 64 items, got 300; spec.skills[0].description: must be at most 1024 characters"), || verdict.message.clone())?;
        check(verdict.message.contains(" more)"), || format!("no count of what was left out: {}", verdict.message))?;
        delete(&env.client, "CapabilityBinding", "huge-binding").await;
        Ok(())
    })
}

fn invalid_does_not_block_valid(env: &Env) -> Outcome {
    let _controller = controller(env, "solo", &[])?;
    env.runtime.block_on(async {
        let client = &env.client;
        apply(
            client,
            "CapabilityBinding",
            "crowd-invalid",
            json!({ "serviceName": 7 }),
        )
        .await?;
        let names: Vec<String> = (0..30).map(|i| format!("crowd-valid-{i:02}")).collect();
        for name in &names {
            apply(client, "CapabilityBinding", name, valid_spec()).await?;
        }
        for name in &names {
            wait_accepted(client, "CapabilityBinding", name, "True", "Validated").await?;
        }
        let invalid = wait_accepted(
            client,
            "CapabilityBinding",
            "crowd-invalid",
            "False",
            "ValidationFailed",
        )
        .await?;
        check(
            invalid
                .message
                .contains("spec.serviceName: must be a string, got integer"),
            || invalid.message.clone(),
        )
    })
}

fn qualifier_conflict_clears(env: &Env) -> Outcome {
    let _controller = controller(env, "solo", &[])?;
    env.runtime.block_on(async {
        let client = &env.client;
        apply(client, "RouteQualifier", "conflict-a", json!({ "capabilityId": "cap.web.search", "constraint": { "kind": "only", "targets": ["exa"] } })).await?;
        apply(client, "RouteQualifier", "conflict-b", json!({ "constraint": { "kind": "only", "targets": ["brave"] } })).await?;
        let a = wait_accepted(client, "RouteQualifier", "conflict-a", "False", "Conflict").await?;
        check(a.message.starts_with("conflicts with conflict-b on cap.web.search"), || a.message.clone())?;
        let b = wait_accepted(client, "RouteQualifier", "conflict-b", "False", "Conflict").await?;
        check(b.message.starts_with("conflicts with conflict-a on cap.web.search"), || b.message.clone())?;

        delete(client, "RouteQualifier", "conflict-b").await;
        wait_accepted(client, "RouteQualifier", "conflict-a", "True", "Validated").await?;
        delete(client, "RouteQualifier", "conflict-a").await;
        Ok(())
    })
}

fn qualifier_limit(env: &Env) -> Outcome {
    let _controller = controller(env, "solo", &[])?;
    env.runtime.block_on(async {
        let client = &env.client;
        let names: Vec<String> = (0..33).map(|i| format!("limit-{i:02}")).collect();
        for name in &names {
            apply(
                client,
                "RouteQualifier",
                name,
                json!({ "constraint": { "kind": "none" }, "minQuality": 100 }),
            )
            .await?;
        }
        let refused = wait_accepted(
            client,
            "RouteQualifier",
            "limit-32",
            "False",
            "LimitExceeded",
        )
        .await?;
        check(
            refused
                .message
                .starts_with("qualifier 33 in name order; only the first 32 take effect"),
            || refused.message.clone(),
        )?;
        wait_accepted(client, "RouteQualifier", "limit-31", "True", "Validated").await?;
        // Making room lets the 33rd take effect.
        delete(client, "RouteQualifier", "limit-00").await;
        wait_accepted(client, "RouteQualifier", "limit-32", "True", "Validated").await?;
        for name in &names {
            delete(client, "RouteQualifier", name).await;
        }
        Ok(())
    })
}

fn resync_writes_nothing(env: &Env) -> Outcome {
    // Probing off: this trial counts Accepted writes (a probe's first verdict is a transition
    // of its own, NotProbed to Composed; `composed.rs` counts those).
    let controller = controller(
        env,
        "solo",
        &["--resync-seconds", "2", "--probe-interval-seconds", "0"],
    )?;
    env.runtime.block_on(async {
        let client = &env.client;
        let names: Vec<String> = (0..10).map(|i| format!("quiet-{i}")).collect();
        for name in &names {
            apply(client, "CapabilityBinding", name, valid_spec()).await?;
        }
        for name in &names {
            wait_accepted(client, "CapabilityBinding", name, "True", "Validated").await?;
        }
        let before = status_writes(env, "capabilitybindings", &names);
        check(before.values().sum::<usize>() == names.len(), || {
            format!("expected one write per binding, got {before:?}")
        })?;
        let skipped_before = skipped_unchanged(&controller.address);
        // Three resync periods (2 s each) with nothing changed.
        tokio::time::sleep(Duration::from_secs(7)).await;
        let after = status_writes(env, "capabilitybindings", &names);
        check(after == before, || {
            format!("resyncs wrote: before {before:?}, after {after:?}")
        })?;
        // The resyncs did run: each compared and skipped.
        let skipped_after = skipped_unchanged(&controller.address);
        check(
            skipped_after >= skipped_before + 2 * names.len() as u64,
            || format!("skipped_unchanged went from {skipped_before} to {skipped_after} only"),
        )
    })
}

/// The controller's `status_writes_total{outcome="skipped_unchanged"}` counter.
fn skipped_unchanged(address: &str) -> u64 {
    http_get(address, "/metrics")
        .lines()
        .find_map(|line| {
            line.strip_prefix(
                "capstan_controller_status_writes_total{outcome=\"skipped_unchanged\"} ",
            )
        })
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// GET over plain HTTP with curl (the controller's metrics endpoint), returning the body.
fn http_get(address: &str, path: &str) -> String {
    let output = std::process::Command::new("curl")
        .args(["-s", &format!("http://{address}{path}")])
        .output();
    output
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The HTTP status of a GET on the controller's address (0 when nothing answers).
fn http_status(address: &str, path: &str) -> u16 {
    std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://{address}{path}"))
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0)
}

fn leader_election(env: &Env) -> Outcome {
    let lease = [
        "--lease-name",
        "capstan-e2e-ha",
        "--lease-duration-seconds",
        "4",
        "--lease-grace-seconds",
        "1",
    ];
    let mut replicas = [
        controller(env, "replica-a", &lease)?,
        controller(env, "replica-b", &lease)?,
    ];
    env.runtime.block_on(async {
        let client = &env.client;
        let names: Vec<String> = (0..5).map(|i| format!("ha-{i}")).collect();
        for name in &names {
            apply(client, "CapabilityBinding", name, valid_spec()).await?;
        }
        for name in &names {
            wait_accepted(client, "CapabilityBinding", name, "True", "Validated").await?;
        }
        let writers = status_writes(env, "capabilitybindings", &names);
        check(writers.len() == 1, || {
            format!("expected one writer, got {writers:?}")
        })?;
        let leader = writers.keys().next().cloned().unwrap_or_default();
        let (leader_index, standby) = if leader.ends_with(":replica-a") {
            (0, "replica-b")
        } else {
            (1, "replica-a")
        };

        // The leader dies without releasing its lease; the standby takes over once it expires.
        replicas[leader_index].kill();
        let killed = Instant::now();
        apply(client, "CapabilityBinding", "ha-after", valid_spec()).await?;
        wait_accepted(client, "CapabilityBinding", "ha-after", "True", "Validated").await?;
        let handover = killed.elapsed();
        let after = ["ha-after".to_owned()];
        let writers = logged_writers(env, &after).await?;
        check(
            writers
                .keys()
                .all(|user| user.ends_with(&format!(":{standby}")))
                && writers.len() == 1,
            || format!("after the kill: {writers:?}"),
        )?;
        eprintln!("leader_election: handover after SIGKILL took {handover:?} (lease duration 4 s)");
        Ok(())
    })
}

fn apiserver_restart(env: &Env) -> Outcome {
    let controller = controller(env, "solo", &[])?;
    env.runtime.block_on(async {
        apply(
            &env.client,
            "CapabilityBinding",
            "before-restart",
            valid_spec(),
        )
        .await?;
        wait_accepted(
            &env.client,
            "CapabilityBinding",
            "before-restart",
            "True",
            "Validated",
        )
        .await
    })?;
    env.plane.restart_apiserver().map_err(|e| e.to_string())?;
    let mut controller = controller;
    env.runtime
        .block_on(async {
            // The client's connections died with the old apiserver; a new one comes up on the
            // same address and the controller's watches must reconnect on their own — within
            // their longest pause (10 s, capstan-compose source/watch_backoff.rs), well inside
            // the patience.
            let client = env.plane.client().await.map_err(|e| e.to_string())?;
            apply(&client, "CapabilityBinding", "after-restart", valid_spec()).await?;
            wait_accepted(
                &client,
                "CapabilityBinding",
                "after-restart",
                "True",
                "Validated",
            )
            .await
        })
        .map_err(|failed| {
            format!(
                "{}\ncontroller log:\n{}",
                failed.message().unwrap_or_default(),
                controller.log_text()
            )
        })?;
    check(controller.is_running(), || {
        format!("the controller exited:\n{}", controller.log_text())
    })
}

/// A leader stopped with SIGTERM releases its Lease, so the standby takes over at once. The
/// lease lasts 300 s, five times the trial's patience: the standby can write within the
/// patience only if the lease was released, not because it expired.
fn graceful_handover(env: &Env) -> Outcome {
    let lease = [
        "--lease-name",
        "capstan-e2e-graceful",
        "--lease-duration-seconds",
        "300",
        "--lease-grace-seconds",
        "5",
    ];
    let mut replicas = [
        controller(env, "graceful-a", &lease)?,
        controller(env, "graceful-b", &lease)?,
    ];
    env.runtime.block_on(async {
        let client = &env.client;
        let first = vec!["graceful-before".to_owned()];
        apply(client, "CapabilityBinding", &first[0], valid_spec()).await?;
        wait_accepted(client, "CapabilityBinding", &first[0], "True", "Validated").await?;
        let writers = logged_writers(env, &first).await?;
        check(writers.len() == 1, || format!("writers {writers:?}"))?;
        let (leader, standby) = if writers.keys().any(|u| u.ends_with(":graceful-a")) {
            (0, "graceful-b")
        } else {
            (1, "graceful-a")
        };
        replicas[leader].stop();
        let after = vec!["graceful-after".to_owned()];
        apply(client, "CapabilityBinding", &after[0], valid_spec()).await?;
        wait_accepted(client, "CapabilityBinding", &after[0], "True", "Validated").await?;
        let writers = logged_writers(env, &after).await?;
        check(
            writers.len() == 1 && writers.keys().all(|u| u.ends_with(&format!(":{standby}"))),
            || format!("after the graceful stop: {writers:?}"),
        )
    })
}

/// `/readyz` answers 503 until the controller's caches have synced, then 200, and only then
/// does the replica campaign for its Lease. The controller runs as an account that may hold
/// its Lease but not yet read bindings: its lists are refused (the audit log shows the 403s),
/// it stays unready and never writes the Lease, and once the ClusterRole is bound it becomes
/// ready and takes the Lease.
fn readiness_follows_the_first_sync(env: &Env) -> Outcome {
    let account = "unsynced";
    let plane = &env.plane;
    apply_controller_rbac(plane).map_err(|e| e.to_string())?;
    let kubeconfig = service_account(plane, account).map_err(|e| e.to_string())?;
    bind_role(plane, account, LEADER_ELECTION_ROLE).map_err(|e| e.to_string())?;
    let controller = ControllerProcess::start(
        plane,
        &kubeconfig,
        account,
        &["--lease-name", "capstan-e2e-unsynced"],
    )
    .map_err(|e| e.to_string())?;
    let user = format!("system:serviceaccount:{NAMESPACE}:{account}");
    env.runtime.block_on(async {
        eventually(
            PATIENCE,
            || async {
                let refused = plane
                    .audit_events()
                    .unwrap_or_default()
                    .iter()
                    .any(|event| {
                        event["user"]["username"] == user.as_str()
                            && event["objectRef"]["resource"] == "capabilitybindings"
                            && event["verb"] == "list"
                            && event["responseStatus"]["code"] == 403
                    });
                refused.then_some(())
            },
            || "the unsynced controller's list is refused".to_owned(),
        )
        .await?;
        eventually(
            PATIENCE,
            || async { (http_status(&controller.address, "/healthz") == 200).then_some(()) },
            || "/healthz answers".to_owned(),
        )
        .await?;
        let unready = http_status(&controller.address, "/readyz");
        check(unready == 503, || {
            format!("/readyz answered {unready} before the first sync")
        })?;
        // Unsynced, it does not campaign: a replica that cannot write yet must not take the
        // Lease from a warm standby (the node suite's deleted leader met a fresh pod winning).
        let lease_writes = |events: &[serde_json::Value]| {
            events
                .iter()
                .filter(|event| {
                    event["user"]["username"] == user.as_str()
                        && event["objectRef"]["resource"] == "leases"
                        && matches!(event["verb"].as_str(), Some("create" | "patch" | "update"))
                })
                .count()
        };
        let before_sync = lease_writes(&plane.audit_events().unwrap_or_default());
        check(before_sync == 0, || {
            format!("the unsynced controller wrote its Lease {before_sync} times")
        })?;
        bind_cluster_role(plane, account, CONTROLLER_ROLE).map_err(|e| e.to_string())?;
        eventually(
            PATIENCE,
            || async { (http_status(&controller.address, "/readyz") == 200).then_some(()) },
            || "/readyz answers 200 after the first sync".to_owned(),
        )
        .await?;
        eventually(
            PATIENCE,
            || async {
                (lease_writes(&plane.audit_events().unwrap_or_default()) > 0).then_some(())
            },
            || "the synced controller takes its Lease".to_owned(),
        )
        .await
    })
}

/// A controller whose lease namespace does not exist yet keeps running and says why it is not
/// leading; once the namespace and its Role exist, it leads and writes.
fn lease_namespace_later(env: &Env) -> Outcome {
    let namespace = "capstan-later";
    let controller = controller(env, "later", &["--lease-namespace", namespace])?;
    let mut controller = controller;
    env.runtime.block_on(async {
        eventually(
            PATIENCE,
            || async {
                controller
                    .log_text()
                    .contains("leader election cannot reach its Lease")
                    .then_some(())
            },
            || "the retry log line".to_owned(),
        )
        .await
    })?;
    check(controller.is_running(), || {
        format!("the controller exited:\n{}", controller.log_text())
    })?;
    let account = format!("system:serviceaccount:{NAMESPACE}:later");
    let objects = format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [
            {{"apiVersion": "v1", "kind": "Namespace", "metadata": {{"name": "{namespace}"}}}},
            {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
              "metadata": {{"name": "capstan-controller-leader-election", "namespace": "{namespace}"}},
              "rules": [{{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]}}]}},
            {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
              "metadata": {{"name": "later", "namespace": "{namespace}"}},
              "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "capstan-controller-leader-election"}},
              "subjects": [{{"kind": "User", "name": "{account}"}}]}}
        ]}}"#
    );
    let output = env
        .plane
        .kubectl_with_input(&["apply", "-f", "-"], Some(&objects));
    check(output.status.success(), || printed(&output))?;
    env.runtime.block_on(async {
        apply(
            &env.client,
            "CapabilityBinding",
            "after-namespace",
            valid_spec(),
        )
        .await?;
        wait_accepted(
            &env.client,
            "CapabilityBinding",
            "after-namespace",
            "True",
            "Validated",
        )
        .await
        .map(drop)
    })
}

/// Two replicas that both read their Lease free both try to take it, each with a server-side
/// apply of its own field manager (the take of the election used until issue 55); the
/// apiserver must let only one through.
/// Here replica A holds the lease (a real `Leadership`), and replica B's take, sent as B would
/// from its stale read, is refused with a conflict: the holder stays A and A still leads. When
/// every replica wrote the Lease as one field manager, that apply went through and both
/// replicas led until A's next renewal (a binding's writes came from both pods on a node).
fn held_lease_take_refused(env: &Env) -> Outcome {
    let settings = |identity: &str| LeaseSettings {
        name: "capstan-e2e-take".into(),
        // The apiserver makes `default` itself; this trial starts no controller process.
        namespace: "default".into(),
        identity: identity.into(),
        duration_seconds: 300,
        grace_seconds: 5,
    };
    env.runtime.block_on(async {
        let (_synced, synced) = tokio::sync::watch::channel(true);
        let a = Leadership::start(env.client.clone(), settings("take-a"), synced);
        let mut leads = a.leader();
        let led = tokio::time::timeout(PATIENCE, leads.wait_for(|leads| *leads)).await;
        check(matches!(led, Ok(Ok(_))), || "replica A never led".into())?;
        let leases: Api<Lease> = Api::namespaced(env.client.clone(), "default");
        let holder = || async {
            leases
                .get("capstan-e2e-take")
                .await
                .ok()
                .and_then(|lease| lease.spec?.holder_identity)
        };
        check(holder().await.as_deref() == Some("take-a"), || {
            "the Lease does not name replica A".into()
        })?;
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let take = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "spec": {
                "acquireTime": now,
                "renewTime": now,
                "holderIdentity": "take-b",
                "leaseDurationSeconds": 300,
            },
        });
        let as_b = PatchParams::apply(&settings("take-b").field_manager());
        let taken = leases
            .patch("capstan-e2e-take", &as_b, &Patch::Apply(take))
            .await;
        let refused = matches!(&taken, Err(kube::Error::Api(status)) if status.code == 409);
        let after = holder().await;
        let still_leads = *a.leader().borrow();
        a.stop().await;
        check(refused, || {
            let holder = taken.map(|lease| lease.spec.and_then(|spec| spec.holder_identity));
            format!("replica B's take of A's lease was not refused; the Lease names {holder:?}")
        })?;
        check(after.as_deref() == Some("take-a") && still_leads, || {
            format!("after B's take the Lease names {after:?}; A leads: {still_leads}")
        })
    })
}

/// A status queue of one: a burst of new bindings overflows it. Every drop is counted, and each
/// dropped binding is reconciled again soon — the resync is an hour away — so every binding
/// reaches Accepted anyway (docs/reliability.md).
fn queue_overflow(env: &Env) -> Outcome {
    let controller = controller(
        env,
        "solo",
        &[
            "--status-queue-capacity",
            "1",
            "--resync-seconds",
            "3600",
            "--probe-interval-seconds",
            "0",
        ],
    )?;
    env.runtime.block_on(async {
        let client = &env.client;
        let names: Vec<String> = (0..40).map(|i| format!("burst-{i:02}")).collect();
        futures::future::try_join_all(
            names
                .iter()
                .map(|name| apply(client, "CapabilityBinding", name, valid_spec())),
        )
        .await?;
        for name in &names {
            wait_accepted(client, "CapabilityBinding", name, "True", "Validated").await?;
        }
        let metrics = http_get(&controller.address, "/metrics");
        let metric = |name: &str| {
            metrics
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|value| value.trim().parse::<u64>().ok())
        };
        let dropped = metric("capstan_controller_status_queue_total{outcome=\"dropped\"} ");
        let overflow = metric("capstan_controller_status_queue_overflow ");
        check(overflow == Some(0), || {
            format!("every binding is Accepted, yet {overflow:?} wait in the overflow")
        })?;
        check(dropped.unwrap_or(0) > 0, || {
            format!(
                "no drop counted with a queue of one:\n{}",
                http_get(&controller.address, "/metrics")
                    .lines()
                    .filter(|l| l.contains("status_queue"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        })?;
        for name in &names {
            delete(client, "CapabilityBinding", name).await;
        }
        Ok(())
    })
}

/// etcd stopped and started again under a running controller: the apiserver reconnects to its
/// storage, the controller's watches carry on, and a binding created afterwards is Accepted.
fn etcd_restart(env: &Env) -> Outcome {
    let controller = controller(env, "solo", &["--probe-interval-seconds", "0"])?;
    env.runtime.block_on(async {
        apply(
            &env.client,
            "CapabilityBinding",
            "before-etcd",
            valid_spec(),
        )
        .await?;
        wait_accepted(
            &env.client,
            "CapabilityBinding",
            "before-etcd",
            "True",
            "Validated",
        )
        .await
    })?;
    env.plane.restart_etcd().map_err(|e| e.to_string())?;
    env.runtime.block_on(async {
        let client = env.plane.client().await.map_err(|e| e.to_string())?;
        // The apiserver may answer 5xx for a moment while it reconnects to etcd.
        eventually(
            PATIENCE,
            || async {
                apply(&client, "CapabilityBinding", "after-etcd", valid_spec())
                    .await
                    .ok()
            },
            || "creating a binding after the etcd restart".to_owned(),
        )
        .await?;
        wait_accepted(
            &client,
            "CapabilityBinding",
            "after-etcd",
            "True",
            "Validated",
        )
        .await?;
        // The binding from before the restart kept its status (etcd kept its data).
        wait_accepted(
            &client,
            "CapabilityBinding",
            "before-etcd",
            "True",
            "Validated",
        )
        .await?;
        delete(&client, "CapabilityBinding", "before-etcd").await;
        delete(&client, "CapabilityBinding", "after-etcd").await;
        Ok::<_, libtest_mimic::Failed>(())
    })?;
    let mut controller = controller;
    check(controller.is_running(), || {
        format!("the controller exited:\n{}", controller.log_text())
    })
}
