//! The base platform tools on a real apiserver, acting as the caller: a non-admin service
//! account (`alice`, RBAC on one namespace, a TokenRequest token) reads and changes her project
//! through a real sidecar (crd source, its own service account for bindings only), and the
//! audit log is the oracle for who asked and what was written.
//!
//! Trials run one at a time against one sidecar; each uses objects of its own.

use std::process::ExitCode;
use std::sync::Mutex;

use capstan_e2e::controller::{NAMESPACE, account_token, bind_cluster_role, service_account};
use capstan_e2e::sidecar::{Session, SidecarProcess, not_admitted, refusal_is};
use capstan_e2e::suite::{Env, Outcome, check, trial};
use capstan_e2e::{HarnessError, printed};
use libtest_mimic::Failed;
use serde_json::{Value, json};

/// The project every session names (the control plane is the project's).
const PROJECT: &str = "acme";
/// The caller: edits ConfigMaps, Widgets and Gadgets in `team-a`, may list bindings.
const ALICE: &str = "alice";
/// A caller the project does not admit (no RBAC at all).
const BOB: &str = "bob";
/// A second admitted caller: alice's rights, her own identity.
const CAROL: &str = "carol";
/// The sidecar's own service account: reads bindings and qualifiers, nothing else.
const COMPOSER: &str = "composer";
/// The plan-token key of the sidecar under test.
const PLAN_TOKEN_KEY: &str = "e2e-plan-token-key-of-thirty-two-bytes!";

static SIDECAR: Mutex<Option<SidecarProcess>> = Mutex::new(None);

fn main() -> ExitCode {
    let code = capstan_e2e::suite::run(
        "base-tools",
        true,
        setup,
        vec![
            trial(
                "read_tools_should_list_get_and_describe_real_kinds_as_the_caller",
                reads,
            ),
            trial(
                "reading_what_the_caller_may_not_read_should_be_forbidden_not_empty",
                forbidden_reads,
            ),
            trial(
                "the_caller_check_should_admit_only_callers_the_project_admits",
                caller_check,
            ),
            trial(
                "locations_and_quota_should_refuse_loudly_without_the_milo_kinds_and_join_with_them",
                milo_tools,
            ),
            trial(
                "validate_should_name_every_field_path_and_write_nothing",
                validate,
            ),
            trial("plan_then_apply_should_write_in_plan_order", plan_and_apply),
            trial(
                "every_tamper_should_be_refused_with_nothing_written",
                tampering,
            ),
            trial("a_reference_cycle_should_be_refused", cycle),
            trial(
                "base_tools_should_take_no_project_argument_and_never_meter",
                hygiene,
            ),
            trial(
                "without_a_token_no_base_tool_should_be_composed",
                no_token_no_tools,
            ),
            trial(
                "the_python_sdk_should_list_plan_and_apply_over_the_socket",
                python_client,
            ),
            trial(
                "a_2026_07_28_request_should_be_checked_against_the_project_every_time",
                sessionless_caller_check,
            ),
            trial(
                "a_create_should_never_overwrite_an_object_someone_else_created_meanwhile",
                created_meanwhile,
            ),
            trial(
                "a_policy_taken_on_after_the_plan_should_refuse_the_apply_before_any_write",
                policy_after_plan,
            ),
            trial(
                "a_plan_should_be_applied_once_even_after_what_it_created_is_deleted",
                applied_once,
            ),
            trial(
                "a_plan_should_be_applied_only_by_the_caller_who_made_it",
                borrowed_plan,
            ),
            trial(
                "keys_should_rotate_and_the_ledger_hold_across_restarts_of_the_binary",
                rotation_through_the_binary,
            ),
            // Last: the whole run's audit log.
            trial(
                "the_sidecars_own_account_should_only_list_and_watch_bindings_and_qualifiers",
                own_account,
            ),
        ],
    );
    if let Ok(mut sidecar) = SIDECAR.lock()
        && let Some(mut sidecar) = sidecar.take()
    {
        sidecar.stop();
    }
    code
}

fn user(account: &str) -> String {
    format!("system:serviceaccount:{NAMESPACE}:{account}")
}

fn kubectl(env: &Env, args: &[&str], input: Option<&str>) -> Result<String, String> {
    env.plane.kubectl_ok(args, input)
}

const RBAC: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: team-a}}
- {apiVersion: v1, kind: Namespace, metadata: {name: team-b}}
- {apiVersion: v1, kind: Namespace, metadata: {name: milo-system}}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata: {name: editor, namespace: team-a}
  rules:
  - apiGroups: [""]
    resources: [configmaps]
    # delete: undoing a create of a plan that stopped part-way deletes what it created.
    verbs: [get, list, watch, create, update, patch, delete]
  - apiGroups: [example.capstan.dev]
    resources: [widgets, gadgets]
    verbs: [get, list, watch, create, update, patch]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: alice-editor, namespace: team-a}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: editor}
  subjects: [{kind: ServiceAccount, name: alice, namespace: capstan-system}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: carol-editor, namespace: team-a}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: editor}
  subjects: [{kind: ServiceAccount, name: carol, namespace: capstan-system}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: project-reader}
  rules:
  - apiGroups: [capabilities.assistant.miloapis.com]
    resources: [capabilitybindings]
    verbs: [list]
  - apiGroups: [services.miloapis.com, locations.miloapis.com, quota.miloapis.com]
    resources: [serviceavailabilities, locations, resourceregistrations]
    verbs: [get, list]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata: {name: quota-reader, namespace: milo-system}
  rules:
  - apiGroups: [quota.miloapis.com]
    resources: [allowancebuckets]
    verbs: [get, list]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: alice-quota-reader, namespace: milo-system}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: quota-reader}
  subjects: [{kind: ServiceAccount, name: alice, namespace: capstan-system}]
"#;

fn setup(env: &Env) -> Result<(), HarnessError> {
    let run = |args: &[&str], input: Option<&str>| {
        kubectl(env, args, input).map_err(|stderr| HarnessError::Command {
            command: "kubectl".into(),
            status: "failed".into(),
            stderr,
        })
    };
    run(
        &[
            "apply",
            "-f",
            "e2e/fixtures/widgets-crd.yaml",
            "-f",
            "config/rbac/sidecar.yaml",
        ],
        None,
    )?;
    run(
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.capstan.dev",
            "crd/gadgets.example.capstan.dev",
        ],
        None,
    )?;
    run(&["apply", "-f", "-"], Some(RBAC))?;
    // The sidecar's own account reads bindings (config/rbac/sidecar.yaml), nothing more.
    let composer = service_account(&env.plane, COMPOSER)?;
    bind_cluster_role(&env.plane, COMPOSER, "capstan-sidecar")?;
    service_account(&env.plane, ALICE)?;
    bind_cluster_role(&env.plane, ALICE, "project-reader")?;
    service_account(&env.plane, CAROL)?;
    bind_cluster_role(&env.plane, CAROL, "project-reader")?;
    service_account(&env.plane, BOB)?;
    let sidecar = SidecarProcess::start(
        &env.plane,
        &composer,
        "main",
        &[("PLAN_TOKEN_KEY", PLAN_TOKEN_KEY)],
    )?;
    if let Ok(mut slot) = SIDECAR.lock() {
        *slot = Some(sidecar);
    }
    Ok(())
}

/// Runs `body` with the shared sidecar.
fn with_sidecar(body: impl FnOnce(&SidecarProcess) -> Outcome) -> Outcome {
    let guard = SIDECAR.lock().map_err(|_| "the sidecar slot is poisoned")?;
    let sidecar = guard.as_ref().ok_or("no sidecar")?;
    body(sidecar)
}

fn token(env: &Env, account: &str) -> Result<String, Failed> {
    account_token(&env.plane, NAMESPACE, account).map_err(|e| e.to_string().into())
}

fn alice<'a>(env: &Env, sidecar: &'a SidecarProcess) -> Result<Session<'a>, Failed> {
    let token = token(env, ALICE)?;
    Ok(sidecar.session(PROJECT, Some(&token))?)
}

/// Audit events by `user` matching `pick`.
fn events_by(env: &Env, user: &str, pick: impl Fn(&Value) -> bool) -> Vec<Value> {
    env.plane
        .audit_events()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["user"]["username"] == user && e["stage"] == "ResponseComplete" && pick(e))
        .collect()
}

/// Writes (create, update, patch, delete) by `user` that were not dry runs.
fn writes_by(env: &Env, user: &str) -> Vec<Value> {
    events_by(env, user, |e| {
        matches!(
            e["verb"].as_str(),
            Some("create" | "update" | "patch" | "delete")
        ) && !e["requestURI"]
            .as_str()
            .unwrap_or_default()
            .contains("dryRun")
            // Questions, not writes: may I (access review), who am I (the plan's caller).
            && !matches!(
                e["objectRef"]["resource"].as_str(),
                Some("selfsubjectaccessreviews" | "selfsubjectreviews")
            )
    })
}

fn reads(env: &Env) -> Outcome {
    kubectl(
        env,
        &[
            "-n",
            "team-a",
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
        ],
        None,
    )?;
    kubectl(
        env,
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "example.capstan.dev/v1", "kind": "Widget",
                 "metadata": {"name": "w-read", "namespace": "team-a"}, "spec": {"size": 3}}"#,
        ),
    )?;
    // The oracle: what the apiserver lists to the admin.
    let expected: Vec<String> = kubectl(
        env,
        &["-n", "team-a", "get", "configmaps", "-o", "name"],
        None,
    )?
    .lines()
    .map(|l| l.trim_start_matches("configmap/").to_owned())
    .collect();
    let reads_before = events_by(env, &user(ALICE), |e| {
        e["objectRef"]["resource"] == "configmaps"
    })
    .len();
    with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        let list = session.ok(
            "resources_list",
            json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "team-a"}),
        )?;
        let mut names: Vec<String> = list["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let mut expected = expected.clone();
        expected.sort();
        check(names == expected, || {
            format!("listed {names:?}, the apiserver has {expected:?}")
        })?;
        // The read reached the apiserver as alice, not as the sidecar.
        let reads_after = events_by(env, &user(ALICE), |e| {
            e["objectRef"]["resource"] == "configmaps"
        })
        .len();
        check(reads_after > reads_before, || {
            "no ConfigMap read by alice in the audit log".into()
        })?;

        let got = session.ok(
            "resources_get",
            json!({"group": "", "version": "v1", "kind": "ConfigMap", "name": "settings", "namespace": "team-a"}),
        )?;
        let metadata = &got["manifest"]["metadata"];
        check(
            got["manifest"]["data"] == json!({"mode": "fast"})
                && metadata["name"] == "settings"
                && [
                    "managedFields",
                    "resourceVersion",
                    "uid",
                    "creationTimestamp",
                ]
                .iter()
                .all(|f| metadata.get(*f).is_none())
                && got["manifest"].get("status").is_none(),
            || format!("not an editable manifest: {got}"),
        )?;

        let schema = session.ok(
            "schema_get",
            json!({"group": "example.capstan.dev", "version": "v1", "kind": "Widget", "path": "spec"}),
        )?;
        check(
            schema["required"] == json!(["size"])
                && schema["schema"]["properties"]["size"]["maximum"] == 10
                && schema["schema"]["properties"]["colour"]["enum"]
                    == json!(["red", "green", "blue"]),
            || format!("the Widget spec schema: {schema}"),
        )?;
        let config_map = session.ok(
            "schema_get",
            json!({"group": "", "version": "v1", "kind": "ConfigMap"}),
        )?;
        check(
            config_map["schema"]["properties"]["data"]["type"] == "object",
            || {
                format!(
                    "the ConfigMap schema: {}",
                    config_map["schema"]["properties"]
                )
            },
        )?;
        let wrong_path = session.error(
            "schema_get",
            json!({"group": "example.capstan.dev", "version": "v1", "kind": "Widget", "path": "spec.weight"}),
        )?;
        check(
            wrong_path["kind"] == "invalid_input"
                && wrong_path["field"] == "path"
                && wrong_path["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("colour, gadgetRef, size"),
            || format!("a wrong path: {wrong_path}"),
        )?;
        let unknown = session.error(
            "resources_list",
            json!({"group": "example.capstan.dev", "version": "v1", "kind": "Sprocket"}),
        )?;
        check(
            unknown["kind"] == "invalid_input" && unknown["code"] == "kind_not_served",
            || format!("an unknown kind: {unknown}"),
        )?;
        let widgets = session.ok(
            "resources_list",
            json!({"group": "example.capstan.dev", "version": "v1", "kind": "Widget", "namespace": "team-a"}),
        )?;
        check(
            widgets["items"]
                .as_array()
                .is_some_and(|i| i.iter().any(|w| w["name"] == "w-read")),
            || format!("widgets: {widgets}"),
        )?;
        session.end();
        Ok(())
    })
}

fn forbidden_reads(env: &Env) -> Outcome {
    kubectl(
        env,
        &[
            "-n",
            "team-b",
            "create",
            "configmap",
            "hidden",
            "--from-literal=k=v",
        ],
        None,
    )?;
    with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        for (arguments, what) in [
            (
                json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "team-b"}),
                "ConfigMaps in team-b",
            ),
            (
                json!({"group": "", "version": "v1", "kind": "Secret", "namespace": "team-a"}),
                "Secrets in team-a",
            ),
        ] {
            let error = session.error("resources_list", arguments)?;
            check(
                error["kind"] == "forbidden"
                    && error["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("you may not list"),
                || format!("listing {what}: {error}"),
            )?;
        }
        let error = session.error(
            "resources_get",
            json!({"group": "", "version": "v1", "kind": "ConfigMap", "name": "hidden", "namespace": "team-b"}),
        )?;
        check(error["kind"] == "forbidden", || {
            format!("reading team-b/hidden: {error}")
        })?;
        // The apiserver refused alice herself: the sidecar read nothing for her with its own
        // credential.
        let refused = events_by(env, &user(ALICE), |e| {
            e["responseStatus"]["code"] == 403 && e["objectRef"]["namespace"] == "team-b"
        });
        check(!refused.is_empty(), || {
            "no 403 for alice in team-b in the audit log".into()
        })?;
        let sidecar_reads = events_by(env, &user("composer"), |e| {
            e["objectRef"]["resource"] == "configmaps" || e["objectRef"]["resource"] == "secrets"
        });
        check(sidecar_reads.is_empty(), || {
            format!("the sidecar's account read: {sidecar_reads:?}")
        })?;
        session.end();
        Ok(())
    })
}

fn caller_check(env: &Env) -> Outcome {
    let reviews = |account: &str| {
        events_by(env, &user(account), |e| {
            e["objectRef"]["resource"] == "selfsubjectaccessreviews" && e["verb"] == "create"
        })
        .len()
    };
    with_sidecar(|sidecar| {
        let bob = token(env, BOB)?;
        let (status, session, body) = sidecar.initialize("globex", Some(&bob));
        check(
            status == 403
                && session.is_none()
                && refusal_is(&body, "forbidden", &not_admitted("globex")),
            || format!("bob's initialize: {status} {body}"),
        )?;
        let (status, _, body) = sidecar.initialize(PROJECT, None);
        check(
            status == 401
                && refusal_is(
                    &body,
                    "forbidden",
                    "project acme: a bearer token is required (Authorization: Bearer …)",
                ),
            || format!("initialize without a token: {status} {body}"),
        )?;
        let (status, _, body) = sidecar.request(
            "GET",
            "/v1/composition",
            &[
                ("X-Capstan-Project", PROJECT),
                ("authorization", &format!("Bearer {bob}")),
            ],
            None,
        );
        check(
            status == 403 && refusal_is(&body, "forbidden", &not_admitted(PROJECT)),
            || format!("bob's composition read: {status} {body}"),
        )?;
        // Alice is admitted; a second session within the minute asks the plane no second time.
        let alice_token = token(env, ALICE)?;
        let before = reviews(ALICE);
        let first = sidecar.session("initech", Some(&alice_token))?;
        let after_first = reviews(ALICE);
        let second = sidecar.session("initech", Some(&alice_token))?;
        let after_second = reviews(ALICE);
        check(
            after_first == before + 1 && after_second == after_first,
            || {
                format!(
                    "SelfSubjectAccessReviews by alice: {before} before, {after_first} after the first session, {after_second} after the second"
                )
            },
        )?;
        first.end();
        second.end();
        Ok(())
    })
}

const MILO_OBJECTS: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: locations.miloapis.com/v1alpha1
  kind: Location
  metadata: {name: dfw}
  spec: {locationClassRef: {name: shared-edge}, topology: {topology.datum.net/city-code: DFW, topology.datum.net/region: us-central}, coordinates: {latitude: "32.89", longitude: "-97.04"}}
- apiVersion: locations.miloapis.com/v1alpha1
  kind: Location
  metadata: {name: ams}
  spec: {locationClassRef: {name: shared-edge}, topology: {topology.datum.net/city-code: AMS}}
- apiVersion: services.miloapis.com/v1alpha1
  kind: ServiceAvailability
  metadata: {name: compute--dfw}
  spec: {serviceRef: {name: compute}, locationRef: {name: dfw}}
- apiVersion: services.miloapis.com/v1alpha1
  kind: ServiceAvailability
  metadata: {name: compute--ams}
  spec: {serviceRef: {name: compute}, locationRef: {name: ams}}
- apiVersion: services.miloapis.com/v1alpha1
  kind: ServiceAvailability
  metadata: {name: dns--dfw}
  spec: {serviceRef: {name: dns}, locationRef: {name: dfw}}
- apiVersion: quota.miloapis.com/v1alpha1
  kind: ResourceRegistration
  metadata: {name: compute-vcpus}
  spec: {consumerType: {apiGroup: resourcemanager.miloapis.com, kind: Project}, type: Allocation, resourceType: compute.datumapis.com/vcpus, baseUnit: millicore, displayUnit: core, unitConversionFactor: 1000, description: Virtual CPUs}
- apiVersion: quota.miloapis.com/v1alpha1
  kind: ResourceRegistration
  metadata: {name: compute-memory}
  spec: {consumerType: {apiGroup: resourcemanager.miloapis.com, kind: Project}, type: Allocation, resourceType: compute.datumapis.com/memory, baseUnit: MiB, displayUnit: GiB, unitConversionFactor: 1024}
- apiVersion: quota.miloapis.com/v1alpha1
  kind: AllowanceBucket
  metadata: {name: bucket-vcpus, namespace: milo-system, labels: {quota.miloapis.com/consumer-kind: Project, quota.miloapis.com/consumer-name: acme}}
  spec: {consumerRef: {apiGroup: resourcemanager.miloapis.com, kind: Project, name: acme}, resourceType: compute.datumapis.com/vcpus}
- apiVersion: quota.miloapis.com/v1alpha1
  kind: AllowanceBucket
  metadata: {name: bucket-memory, namespace: milo-system, labels: {quota.miloapis.com/consumer-kind: Project, quota.miloapis.com/consumer-name: acme}}
  spec: {consumerRef: {apiGroup: resourcemanager.miloapis.com, kind: Project, name: acme}, resourceType: compute.datumapis.com/memory}
- apiVersion: quota.miloapis.com/v1alpha1
  kind: AllowanceBucket
  metadata: {name: bucket-org, namespace: milo-system, labels: {quota.miloapis.com/consumer-kind: Organization}}
  spec: {consumerRef: {kind: Organization, name: acme-org}, resourceType: compute.datumapis.com/vcpus}
"#;

fn status_patch(env: &Env, target: &str, namespace: Option<&str>, status: Value) -> Outcome {
    let patch = json!({ "status": status }).to_string();
    let mut args = vec![
        "patch",
        target,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ];
    if let Some(namespace) = namespace {
        args.extend(["-n", namespace]);
    }
    kubectl(env, &args, None).map(drop).map_err(Failed::from)
}

fn milo_tools(env: &Env) -> Outcome {
    with_sidecar(|sidecar| {
        // Without the kinds: a loud refusal naming the missing kind, never an empty answer.
        let session = alice(env, sidecar)?;
        let locations = session.error("locations_list", json!({"service": "compute"}))?;
        let text = locations["message"].as_str().unwrap_or_default();
        check(
            locations["kind"] == "upstream_unavailable"
                && locations["code"] == "kind_not_served"
                && locations["retryable"] == false
                && text.contains("ServiceAvailability")
                && text.contains("nothing you did caused it"),
            || format!("locations_list without the kinds: {locations}"),
        )?;
        let quota = session.error("quota_get", json!({}))?;
        let text = quota["message"].as_str().unwrap_or_default();
        check(
            quota["code"] == "kind_not_served"
                && text.contains("AllowanceBucket")
                && text.contains("not the same as no limit"),
            || format!("quota_get without the kinds: {quota}"),
        )?;
        session.end();
        Ok(())
    })?;
    kubectl(env, &["apply", "-f", "e2e/fixtures/milo-crds.yaml"], None)?;
    kubectl(
        env,
        &[
            "wait",
            "--for=condition=Established",
            "crd/serviceavailabilities.services.miloapis.com",
            "crd/locations.locations.miloapis.com",
            "crd/allowancebuckets.quota.miloapis.com",
            "crd/resourceregistrations.quota.miloapis.com",
        ],
        None,
    )?;
    kubectl(env, &["apply", "-f", "-"], Some(MILO_OBJECTS))?;
    let ready = |status: &str| json!({"conditions": [{"type": "Ready", "status": status, "reason": if status == "True" {"Ready"} else {"MissingTopology"}, "message": "", "lastTransitionTime": "2026-11-30T00:00:00Z"}]});
    status_patch(env, "location/dfw", None, ready("True"))?;
    status_patch(env, "location/ams", None, ready("False"))?;
    status_patch(
        env,
        "serviceavailability/compute--dfw",
        None,
        json!({"conditions": [{"type": "Available", "status": "True", "reason": "ServiceOperational", "message": "", "lastTransitionTime": "2026-11-30T00:00:00Z"}]}),
    )?;
    status_patch(
        env,
        "allowancebucket/bucket-vcpus",
        Some("milo-system"),
        json!({"limit": 6000, "allocated": 1500, "available": 4500, "claimCount": 3, "grantCount": 1}),
    )?;
    status_patch(
        env,
        "allowancebucket/bucket-memory",
        Some("milo-system"),
        json!({"limit": 8192, "allocated": 2048, "available": 6144, "claimCount": 2, "grantCount": 1}),
    )?;
    with_sidecar(|sidecar| {
        // A new session: discovery is cached per session.
        let session = alice(env, sidecar)?;
        let answer = session.ok("locations_list", json!({"service": "compute"}))?;
        let rows = answer["locations"].as_array().cloned().unwrap_or_default();
        let dfw = rows
            .iter()
            .find(|r| r["location"] == "dfw")
            .cloned()
            .unwrap_or_default();
        let ams = rows
            .iter()
            .find(|r| r["location"] == "ams")
            .cloned()
            .unwrap_or_default();
        check(
            rows.len() == 2
                && dfw["class"] == "shared-edge"
                && dfw["topology"]["topology.datum.net/city-code"] == "DFW"
                && dfw["coordinates"]["latitude"] == "32.89"
                && dfw["ready"]["status"] == "True"
                && dfw["available"]["reason"] == "ServiceOperational"
                && ams["ready"]["status"] == "False"
                && ams["available"].is_null(),
            || format!("locations of compute: {answer}"),
        )?;
        let dns = session.ok("locations_list", json!({"service": "storage"}))?;
        check(dns["count"] == 0, || {
            format!("a service offered nowhere: {dns}")
        })?;

        let quota = session.ok("quota_get", json!({"service": "compute.datumapis.com"}))?;
        let rows = quota["quotas"].as_array().cloned().unwrap_or_default();
        let vcpus = rows
            .iter()
            .find(|r| r["resourceType"] == "compute.datumapis.com/vcpus")
            .cloned()
            .unwrap_or_default();
        let memory = rows
            .iter()
            .find(|r| r["resourceType"] == "compute.datumapis.com/memory")
            .cloned()
            .unwrap_or_default();
        // 6000 millicores = 6 cores; 1500 = 1.5; 8192 MiB = 8 GiB; the organization's bucket is
        // not the project's.
        check(
            rows.len() == 2
                && vcpus["unit"] == "core"
                && vcpus["limit"] == 6
                && vcpus["used"] == 1.5
                && vcpus["available"] == 4.5
                && memory["unit"] == "GiB"
                && memory["limit"] == 8
                && memory["used"] == 2
                && memory["available"] == 6,
            || format!("quota of compute: {quota}"),
        )?;
        session.end();
        Ok(())
    })
}

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "team-a"}, "data": data})
}

fn validate(env: &Env) -> Outcome {
    for (name, literal) in [("existing", "a=1"), ("owned", "k=1")] {
        kubectl(
            env,
            &[
                "-n",
                "team-a",
                "create",
                "configmap",
                name,
                &format!("--from-literal={literal}"),
            ],
            None,
        )?;
    }
    let writes_before = writes_by(env, &user(ALICE)).len();
    with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        let answer = session.ok(
            "resources_validate",
            json!({"manifests": [
                configmap("existing", json!({"b": "2"})),
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "broken", "namespace": "team-a"}, "data": ["a", "b"]},
                {"apiVersion": "example.capstan.dev/v1", "kind": "Widget", "metadata": {"name": "too-big", "namespace": "team-a"}, "spec": {"size": 99}},
                configmap("fresh", json!({"b": "1"})),
                // kubectl owns data.k: setting it to another value is refused, never taken over.
                configmap("owned", json!({"k": "2"})),
            ]}),
        )?;
        let reports = answer["manifests"].as_array().cloned().unwrap_or_default();
        let field = |i: usize| reports[i]["errors"][0]["field"].clone();
        let message = |i: usize| {
            reports[i]["errors"][0]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        check(
            answer["accepted"] == false
                && reports.len() == 5
                && reports[0]["accepted"] == true
                && reports[0]["exists"] == true
                && reports[0]["action"] == "update"
                && reports[0]["changes"] == json!([{"path": "data.b", "op": "add", "after": "2"}])
                && reports[1]["accepted"] == false
                && field(1) == "manifests[1].data"
                && reports[2]["accepted"] == false
                && field(2) == "manifests[2].spec.size"
                && reports[3]["accepted"] == true
                && reports[3]["exists"] == false
                && reports[3]["action"] == "create"
                && reports[4]["accepted"] == false
                && field(4) == "manifests[4]"
                && message(4).contains("conflict with \"kubectl-create\"")
                && message(4).contains(".data.k")
                && message(4).contains("never takes a field from another field manager"),
            || format!("validate: {answer}"),
        )?;
        session.end();
        Ok(())
    })?;
    let written = writes_by(env, &user(ALICE));
    check(written.len() == writes_before, || {
        format!("validate wrote: {:?}", &written[writes_before..])
    })?;
    let fresh = env
        .plane
        .kubectl(&["-n", "team-a", "get", "configmap", "fresh"]);
    check(!fresh.status.success(), || {
        "validate created team-a/fresh".into()
    })?;
    let owned = kubectl(
        env,
        &[
            "-n",
            "team-a",
            "get",
            "configmap",
            "owned",
            "-o",
            "jsonpath={.data.k}",
        ],
        None,
    )?;
    check(owned == "1", || format!("owned's data.k is {owned}"))
}

fn widget(name: &str, gadget: &str) -> Value {
    json!({"apiVersion": "example.capstan.dev/v1", "kind": "Widget",
           "metadata": {"name": name, "namespace": "team-a"},
           "spec": {"size": 2, "gadgetRef": {"name": gadget, "kind": "Gadget"}}})
}

fn gadget(name: &str) -> Value {
    json!({"apiVersion": "example.capstan.dev/v1", "kind": "Gadget",
           "metadata": {"name": name, "namespace": "team-a"}, "spec": {"mode": "on"}})
}

fn plan_and_apply(env: &Env) -> Outcome {
    let before = writes_by(env, &user(ALICE)).len();
    with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        // Given in the wrong order: the Widget refers to the Gadget.
        let plan = session.ok(
            "resources_plan",
            json!({"manifests": [widget("w-plan", "g-plan"), gadget("g-plan"), configmap("cm-plan", json!({"k": "v"}))]}),
        )?;
        let order: Vec<&str> = plan["steps"]
            .as_array()
            .map(|steps| steps.iter().filter_map(|s| s["name"].as_str()).collect())
            .unwrap_or_default();
        check(order == ["g-plan", "w-plan", "cm-plan"], || {
            format!("plan order: {plan}")
        })?;
        check(
            plan["steps"]
                .as_array()
                .is_some_and(|s| s.iter().all(|s| s["action"] == "create")),
            || format!("plan actions: {plan}"),
        )?;
        let nothing_yet = writes_by(env, &user(ALICE)).len();
        check(nothing_yet == before, || "resources_plan wrote".into())?;
        applied_as_planned(&session, &plan)?;
        session.end();
        Ok(())
    })?;
    // The audit log: alice's writes, in the plan's order, each a create (the object must not
    // exist: a create, never an apply that would take over someone else's object).
    let writes: Vec<(String, String)> = writes_by(env, &user(ALICE))[before..]
        .iter()
        .map(|e| {
            (
                e["objectRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["verb"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    check(
        writes
            == [
                ("g-plan".to_owned(), "create".to_owned()),
                ("w-plan".to_owned(), "create".to_owned()),
                ("cm-plan".to_owned(), "create".to_owned()),
            ],
        || format!("alice's writes: {writes:?}"),
    )?;
    let managers = kubectl(
        env,
        &[
            "-n",
            "team-a",
            "get",
            "widget",
            "w-plan",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}",
        ],
        None,
    )?;
    check(managers == "capstan", || {
        format!("w-plan's field managers: {managers}")
    })
}

fn tampering(env: &Env) -> Outcome {
    kubectl(
        env,
        &[
            "-n",
            "team-a",
            "create",
            "configmap",
            "watched",
            "--from-literal=v=1",
        ],
        None,
    )?;
    with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        let manifests = json!([
            configmap("t-one", json!({"k": "v"})),
            configmap("t-two", json!({"k": "w"}))
        ]);
        let plan = session.ok("resources_plan", json!({"manifests": manifests}))?;
        let planned = plan["manifests"].clone();
        let token = plan["planToken"].as_str().unwrap_or_default().to_owned();

        let mut edited = planned.clone();
        edited[1]["data"]["k"] = json!("x");
        let mut reordered = planned.clone();
        if let Some(list) = reordered.as_array_mut() {
            list.swap(0, 1);
        }
        let mut flipped = token.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).map_err(|e| e.to_string())?;
        let mut parts: Vec<&str> = token.split('.').collect();
        parts[1] = "retired-key";
        let unknown_key = parts.join(".");

        // A token minted in another project.
        let elsewhere = sidecar.session("globex", Some(&token_of(env)?))?;
        let foreign = elsewhere.ok("resources_plan", json!({"manifests": manifests}))?;
        elsewhere.end();
        // An object changed by someone else between plan and apply.
        let update = session.ok(
            "resources_plan",
            // A field kubectl does not own: the plan is accepted.
            json!({"manifests": [configmap("watched", json!({"w": "2"}))]}),
        )?;
        kubectl(
            env,
            &[
                "-n",
                "team-a",
                "label",
                "configmap",
                "watched",
                "touched=yes",
            ],
            None,
        )?;
        // A token from a sidecar with another key.
        let other = SidecarProcess::start(
            &env.plane,
            &env.plane
                .state_dir()
                .join("kubeconfig-capstan-system-composer"),
            "other-key",
            &[("PLAN_TOKEN_KEY", "another-key-of-at-least-thirty-two-bytes")],
        )
        .map_err(|e| e.to_string())?;
        let other_session = other.session(PROJECT, Some(&token_of(env)?))?;
        let other_plan = other_session.ok("resources_plan", json!({"manifests": manifests}))?;
        other_session.end();
        // An expired token: a sidecar with the same key whose plans live one second.
        let short = SidecarProcess::start(
            &env.plane,
            &env.plane
                .state_dir()
                .join("kubeconfig-capstan-system-composer"),
            "short-ttl",
            &[
                ("PLAN_TOKEN_KEY", PLAN_TOKEN_KEY),
                ("CAPSTAN_PLAN_TOKEN_TTL_SECONDS", "1"),
            ],
        )
        .map_err(|e| e.to_string())?;
        let short_session = short.session(PROJECT, Some(&token_of(env)?))?;
        let short_plan = short_session.ok("resources_plan", json!({"manifests": manifests}))?;
        short_session.end();
        let expires_at = short_plan["expiresAt"].clone();
        // Expiry is in whole seconds: past it for sure after two and a half.
        std::thread::sleep(std::time::Duration::from_millis(2500));

        let before = writes_by(env, &user(ALICE)).len();
        // Each case with the reason apply must give (the refusal's own words).
        const MISMATCH: &str = "does not match";
        const NOT_HELD: &str = "which this sidecar does not hold";
        const OTHER_CALLER: &str = "issued to another caller (or for another project";
        let text = |plan: &Value| plan["planToken"].as_str().unwrap_or_default().to_owned();
        let cases: Vec<(&str, Value, String, &str)> = vec![
            ("a one-character edit", edited, token.clone(), MISMATCH),
            ("a reordered list", reordered, token.clone(), MISMATCH),
            (
                "a token from another project",
                planned.clone(),
                text(&foreign),
                OTHER_CALLER,
            ),
            (
                "an object changed since the plan",
                update["manifests"].clone(),
                text(&update),
                MISMATCH,
            ),
            (
                "a flipped byte in the token",
                planned.clone(),
                flipped,
                MISMATCH,
            ),
            ("an unknown key id", planned.clone(), unknown_key, NOT_HELD),
            (
                "another sidecar's key",
                other_plan["manifests"].clone(),
                text(&other_plan),
                NOT_HELD,
            ),
            (
                "an expired token",
                short_plan["manifests"].clone(),
                text(&short_plan),
                "expired",
            ),
        ];
        for (what, manifests, token, reason) in cases {
            let error = session.error(
                "resources_apply",
                json!({"manifests": manifests, "planToken": token}),
            )?;
            let message = error["message"].as_str().unwrap_or_default();
            check(
                error["kind"] == "stale_plan"
                    && message.contains(reason)
                    && message.contains("Nothing was changed")
                    && message.contains("resources_plan"),
                || format!("{what} (want {reason:?}; plan expired at {expires_at}): {error}"),
            )?;
        }
        let after = writes_by(env, &user(ALICE));
        check(after.len() == before, || {
            format!("tampered applies wrote: {:?}", &after[before..])
        })?;
        // The untampered plan still applies.
        let applied = session.ok(
            "resources_apply",
            json!({"manifests": planned, "planToken": token}),
        )?;
        check(applied["complete"] == true, || {
            format!("the real plan: {applied}")
        })?;
        session.end();
        Ok(())
    })?;
    // The watched object kept someone else's change and was not overwritten.
    let watched = kubectl(
        env,
        &[
            "-n",
            "team-a",
            "get",
            "configmap",
            "watched",
            "-o",
            "jsonpath={.data.v}/{.metadata.labels.touched}",
        ],
        None,
    )?;
    check(watched == "1/yes", || format!("watched is {watched}"))
}

fn token_of(env: &Env) -> Result<String, Failed> {
    token(env, ALICE)
}

fn cycle(env: &Env) -> Outcome {
    with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        let mut gadget_a = gadget("g-cycle");
        gadget_a["spec"]["widgetRefs"] = json!([{"name": "w-cycle"}]);
        let error = session.error(
            "resources_plan",
            json!({"manifests": [widget("w-cycle", "g-cycle"), gadget_a]}),
        )?;
        check(
            error["kind"] == "rejected"
                && error["code"] == "cycle"
                && error["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("Widget team-a/w-cycle"),
            || format!("a cycle: {error}"),
        )?;
        session.end();
        Ok(())
    })
}

fn hygiene(env: &Env) -> Outcome {
    with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        let tools = session.tools()?;
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        for expected in [
            "resources_list",
            "resources_get",
            "schema_get",
            "locations_list",
            "quota_get",
            "resources_validate",
            "resources_plan",
            "resources_apply",
        ] {
            check(names.contains(&expected), || {
                format!("{expected} missing from {names:?}")
            })?;
        }
        for tool in &tools {
            check(
                tool["inputSchema"]["properties"]
                    .as_object()
                    .is_none_or(|p| !p.keys().any(|k| k.eq_ignore_ascii_case("project"))),
                || format!("{} takes a project: {}", tool["name"], tool["inputSchema"]),
            )?;
            let mutating = matches!(
                tool["name"].as_str(),
                Some("resources_plan" | "resources_apply")
            );
            check(tool["annotations"]["readOnlyHint"] == !mutating, || {
                format!("{}'s annotations: {}", tool["name"], tool["annotations"])
            })?;
        }
        let alice_token = token(env, ALICE)?;
        let (status, _, body) = sidecar.request(
            "GET",
            "/v1/composition",
            &[
                ("X-Capstan-Project", PROJECT),
                ("authorization", &format!("Bearer {alice_token}")),
            ],
            None,
        );
        let composition: Value =
            serde_json::from_str(&body).map_err(|e| format!("{status} {body}: {e}"))?;
        let mut mutating: Vec<&str> = composition["mutating"]
            .as_array()
            .map(|m| m.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        mutating.sort_unstable();
        check(mutating == ["resources_apply", "resources_plan"], || {
            format!(
                "the composition's mutating set: {}",
                composition["mutating"]
            )
        })?;
        session.ok(
            "resources_list",
            json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "team-a"}),
        )?;
        session.end();
        Ok(())
    })?;
    with_sidecar(|sidecar| {
        let events = sidecar.meter_events();
        check(events.is_empty(), || {
            format!("base tools were metered: {events:?}")
        })
    })?;
    metering_counts_providers_only(env)
}

/// The other half of "never meters base tools": in one session a provider tool is metered —
/// exactly once, named by its binding's service — and the base tools beside it are not, so
/// an empty metering log above is the rule at work, not metering that never works.
fn metering_counts_providers_only(env: &Env) -> Outcome {
    let provider = capstan_testkit::DemoProvider::start(&[]);
    let mut binding = capstan_testkit::binding_document(
        "metered",
        "streamco",
        &provider.url("/mcp"),
        &["streams_list"],
    );
    binding["apiVersion"] = json!("capabilities.assistant.miloapis.com/v1alpha1");
    binding["kind"] = json!("CapabilityBinding");
    kubectl(env, &["apply", "-f", "-"], Some(&binding.to_string()))?;
    let outcome = (|| -> Outcome {
        let sidecar = another_sidecar(
            env,
            "metering",
            &[("CAPABILITY_MCP_ENDPOINT_HOSTS", &provider.host())],
        )?;
        let session = sidecar.session(PROJECT, Some(&token(env, ALICE)?))?;
        let calls_before = env.runtime.block_on(provider.tool_calls()).len();
        session.ok("streamco__streams_list", json!({}))?;
        session.ok(
            "resources_list",
            json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "team-a"}),
        )?;
        session.ok(
            "schema_get",
            json!({"group": "", "version": "v1", "kind": "ConfigMap"}),
        )?;
        session.end();
        let calls = env.runtime.block_on(provider.tool_calls());
        check(calls[calls_before..] == ["streams_list"], || {
            format!("the provider saw {:?}", &calls[calls_before..])
        })?;
        let events = sidecar.meter_events();
        check(
            events.len() == 1
                && events[0]["tool"] == "streamco__streams_list"
                && events[0]["service"] == "metered.example"
                && events[0]["outcome"] == "ok",
            || format!("metering: {events:?}"),
        )
    })();
    kubectl(env, &["delete", "capabilitybinding", "metered"], None)?;
    outcome
}

fn no_token_no_tools(env: &Env) -> Outcome {
    // With the caller check off, a session without a token is served — without base tools:
    // there is no fallback to reading as the sidecar.
    let sidecar = SidecarProcess::start(
        &env.plane,
        &env.plane
            .state_dir()
            .join("kubeconfig-capstan-system-composer"),
        "no-check",
        &[
            ("CAPSTAN_CALLER_CHECK", "none"),
            ("PLAN_TOKEN_KEY", PLAN_TOKEN_KEY),
        ],
    )
    .map_err(|e| e.to_string())?;
    let session = sidecar.session(PROJECT, None)?;
    let tools = session.tools()?;
    check(tools.is_empty(), || {
        format!("tools without a token: {tools:?}")
    })?;
    let answer = session.call(
        "resources_list",
        json!({"group": "", "version": "v1", "kind": "ConfigMap"}),
    );
    check(
        answer.as_ref().is_err_and(|e| e.contains("no tool named")),
        || format!("resources_list without a token: {answer:?}"),
    )?;
    session.end();
    Ok(())
}

fn python_client(env: &Env) -> Outcome {
    let python = capstan_testkit::python();
    let script = capstan_e2e::repo_root().join("e2e/python/change_path.py");
    let token = token(env, ALICE)?;
    let socket = with_socket()?;
    let output = std::process::Command::new(python)
        .arg(script)
        .arg(&socket)
        .arg(PROJECT)
        .arg(&token)
        .output()
        .map_err(|e| e.to_string())?;
    check(output.status.success(), || printed(&output))?;
    let report: Value =
        serde_json::from_slice(&output.stdout).map_err(|e| format!("{e}: {}", printed(&output)))?;
    check(
        report["listed"].as_array().is_some_and(|l| !l.is_empty())
            && report["planned"] == json!(["py-gadget", "py-widget"])
            && report["applied"] == true,
        || format!("the Python client: {report}"),
    )?;
    // The objects are there, written by alice.
    let widget = kubectl(
        env,
        &[
            "-n",
            "team-a",
            "get",
            "widget",
            "py-widget",
            "-o",
            "jsonpath={.spec.gadgetRef.name}",
        ],
        None,
    )?;
    check(widget == "py-gadget", || format!("py-widget: {widget}"))
}

fn with_socket() -> Result<std::path::PathBuf, Failed> {
    let guard = SIDECAR.lock().map_err(|_| "the sidecar slot is poisoned")?;
    Ok(guard.as_ref().ok_or("no sidecar")?.socket.clone())
}

/// One 2026-07-28 `tools/call` of `resources_list` (ConfigMaps in team-a) as `token`, with no
/// session: (status, body).
fn sessionless_list(sidecar: &SidecarProcess, token: Option<&str>) -> (u16, String) {
    sidecar.sessionless_call(
        PROJECT,
        token,
        "resources_list",
        &json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "team-a"}),
    )
}

/// Without a session, every request is checked like an `initialize`: a caller the project
/// does not admit — even right after an admitted caller's task was composed — never reaches a
/// tool, and the admitted caller's call acts as her. The audit log is the oracle.
fn sessionless_caller_check(env: &Env) -> Outcome {
    let configmap_lists = |account: &str| {
        events_by(env, &user(account), |e| {
            e["objectRef"]["resource"] == "configmaps" && e["verb"] == "list"
        })
        .len()
    };
    with_sidecar(|sidecar| {
        let alice_token = token(env, ALICE)?;
        let bob_token = token(env, BOB)?;
        let alice_before = configmap_lists(ALICE);
        let (status, body) = sessionless_list(sidecar, Some(&alice_token));
        check(status == 200 && body.contains("\"items\""), || {
            format!("alice's call without a session: {status} {body}")
        })?;
        check(configmap_lists(ALICE) == alice_before + 1, || {
            "alice's call did not list ConfigMaps as alice".to_owned()
        })?;
        // Another token than the cached task's: bob is refused; so is no token at all.
        let bob_before = configmap_lists(BOB);
        let (status, body) = sessionless_list(sidecar, Some(&bob_token));
        check(
            status == 403 && refusal_is(&body, "forbidden", &not_admitted(PROJECT)),
            || format!("bob's call without a session: {status} {body}"),
        )?;
        let (status, body) = sessionless_list(sidecar, None);
        check(
            status == 401
                && refusal_is(
                    &body,
                    "forbidden",
                    "project acme: a bearer token is required (Authorization: Bearer …)",
                ),
            || format!("a call without a token: {status} {body}"),
        )?;
        check(configmap_lists(BOB) == bob_before, || {
            "a refused call reached the project".to_owned()
        })?;
        Ok(())
    })
}

/// Starts another sidecar with the composer's account and `env` (its own socket).
fn another_sidecar(env: &Env, name: &str, vars: &[(&str, &str)]) -> Result<SidecarProcess, Failed> {
    SidecarProcess::start(
        &env.plane,
        &env.plane
            .state_dir()
            .join(format!("kubeconfig-capstan-system-{COMPOSER}")),
        name,
        vars,
    )
    .map_err(|e| e.to_string().into())
}

/// The JSON `data` of ConfigMap `team-a/name`, or `None` when it does not exist.
fn configmap_data(env: &Env, name: &str) -> Option<Value> {
    let output = env
        .plane
        .kubectl(&["-n", "team-a", "get", "configmap", name, "-o", "json"]);
    if !output.status.success() {
        return None;
    }
    let object: Value = serde_json::from_slice(&output.stdout).ok()?;
    Some(object["data"].clone())
}

/// The field managers of ConfigMap `team-a/name`, with their operations.
fn managers(env: &Env, name: &str) -> Result<Vec<String>, Failed> {
    let text = kubectl(
        env,
        &[
            "-n",
            "team-a",
            "get",
            "configmap",
            name,
            "-o",
            "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation} {end}",
        ],
        None,
    )?;
    Ok(text.split_whitespace().map(str::to_owned).collect())
}

/// The arguments of `resources_apply` for `plan` as it was planned: its manifests and token.
fn as_planned(plan: &Value) -> Value {
    json!({"manifests": plan["manifests"], "planToken": plan["planToken"]})
}

/// Applies `plan` as it was planned, which must complete.
fn applied_as_planned(session: &Session<'_>, plan: &Value) -> Outcome {
    let applied = session.ok("resources_apply", as_planned(plan))?;
    check(applied["complete"] == true, || format!("apply: {applied}"))
}

/// Expects `resources_apply` of `plan` (its manifests and token) in `session` to be refused as
/// stale, its message containing each of `reasons`; returns the message.
fn refused_apply(session: &Session<'_>, plan: &Value, reasons: &[&str]) -> Result<String, Failed> {
    let error = session.error("resources_apply", as_planned(plan))?;
    let message = error["message"].as_str().unwrap_or_default().to_owned();
    check(
        error["kind"] == "stale_plan"
            && reasons.iter().all(|reason| message.contains(reason))
            && message.contains("Nothing was changed"),
        || format!("want stale_plan with {reasons:?}: {error}"),
    )?;
    Ok(message)
}

/// A self-signed certificate for 127.0.0.1 (the webhook's), written to `dir`: (cert, key).
fn webhook_certificate(
    dir: &std::path::Path,
) -> Result<(std::path::PathBuf, std::path::PathBuf), Failed> {
    let (cert, key) = (dir.join("webhook.crt"), dir.join("webhook.key"));
    let output = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args([
            "-days",
            "1",
            "-subj",
            "/CN=race-webhook",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .map_err(|e| e.to_string())?;
    check(output.status.success(), || printed(&output))?;
    Ok((cert, key))
}

/// The webhook process (`e2e/python/race_webhook.py`), stopped on drop.
struct RaceWebhook(std::process::Child);

impl Drop for RaceWebhook {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A ValidatingAdmissionPolicy that refuses a ConfigMap carrying the key `forbidden`.
const FORBIDDEN_KEY_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-forbidden-key}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.data) || !('forbidden' in object.data)"
    message: configmaps may not carry the key forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-forbidden-key}
spec: {policyName: no-forbidden-key, validationActions: [Deny]}
"#;

/// A policy the plane takes on between plan and apply refuses the apply at its dry run of
/// every step: nothing is written (not written and undone), and the refusal names the
/// manifest and the policy's words.
fn policy_after_plan(env: &Env) -> Outcome {
    let before = writes_by(env, &user(ALICE)).len();
    let outcome = with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        let plan = session.ok(
            "resources_plan",
            json!({"manifests": [
                configmap("vp-first", json!({"a": "1"})),
                configmap("vp-second", json!({"forbidden": "yes"})),
            ]}),
        )?;
        kubectl(env, &["apply", "-f", "-"], Some(FORBIDDEN_KEY_POLICY))?;
        // The policy is in force once the plane refuses a dry run it covers (its informer
        // syncs on its own time); each try is bounded, and so is the wait.
        let probe = [
            "-n",
            "team-a",
            "create",
            "configmap",
            "vp-probe",
            "--from-literal=forbidden=yes",
            "--dry-run=server",
        ];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while kubectl(env, &probe, None).is_ok() {
            check(std::time::Instant::now() < deadline, || {
                "the policy was not in force within 60 s".into()
            })?;
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let error = session.error("resources_apply", as_planned(&plan))?;
        let message = error["message"].as_str().unwrap_or_default();
        check(
            error["kind"] == "rejected"
                && message
                    .starts_with("nothing was applied: the platform refused 1 of 2 manifests — ")
                && message.contains("(ConfigMap team-a/vp-second)")
                && message.contains("configmaps may not carry the key forbidden"),
            || format!("want the apply refused at its dry run: {error}"),
        )?;
        session.end();
        Ok(())
    });
    let removed = kubectl(
        env,
        &[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            "no-forbidden-key",
        ],
        None,
    );
    outcome?;
    removed?;
    let written = writes_by(env, &user(ALICE));
    check(written.len() == before, || {
        format!("the refused apply wrote: {:?}", &written[before..])
    })?;
    check(configmap_data(env, "vp-first").is_none(), || {
        "vp-first exists".into()
    })
}

/// Finding: a planned create overwrote an object another manager created between the check
/// and the write (server-side apply with force). A webhook plays the other manager: admitting
/// the real create of `rt-first`, it creates `rt-victim` — which the plan creates next. Apply
/// must refuse as stale, naming rt-victim, leave its data alone, and undo what it wrote before
/// (rt-first deleted, rt-kept put back with its fields and managers as they were).
fn created_meanwhile(env: &Env) -> Outcome {
    use std::io::BufRead as _;

    kubectl(
        env,
        &[
            "-n",
            "team-a",
            "create",
            "configmap",
            "rt-kept",
            "--from-literal=v=1",
        ],
        None,
    )?;
    let kept_managers = managers(env, "rt-kept")?;
    let dir = env.plane.state_dir().join("race-webhook");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (cert, key) = webhook_certificate(&dir)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let mut child = std::process::Command::new("python3")
        .arg(capstan_e2e::repo_root().join("e2e/python/race_webhook.py"))
        .arg(port.to_string())
        .arg(&cert)
        .arg(&key)
        .arg(env.plane.kubeconfig())
        .args(["team-a", "rt-first=rt-victim,rt-second=rt-victim-2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    // Its lines arrive on a channel, each awaited for a bounded time: a trial never hangs on
    // a line that does not come.
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let webhook = RaceWebhook(child);
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    let ready = lines.recv_timeout(std::time::Duration::from_secs(20)).ok();
    check(ready.as_deref() == Some("ready"), || {
        "the webhook did not start".into()
    })?;
    let ca = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(&cert).map_err(|e| e.to_string())?)
    };
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "race"},
        "webhooks": [{
            "name": "race.capstan.dev",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "NoneOnDryRun",
            "failurePolicy": "Fail",
            "timeoutSeconds": 15,
            "objectSelector": {"matchLabels": {"capstan-e2e/race": "yes"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["configmaps"]}],
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/"), "caBundle": ca},
        }],
    });
    kubectl(env, &["apply", "-f", "-"], Some(&configuration.to_string()))?;
    let outcome = with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        let mut first = configmap("rt-first", json!({"mine": "yes"}));
        first["metadata"]["labels"] = json!({"capstan-e2e/race": "yes"});
        let plan = session.ok(
            "resources_plan",
            json!({"manifests": [
                configmap("rt-kept", json!({"w": "2"})),
                first,
                configmap("rt-victim", json!({"mine": "yes"})),
            ]}),
        )?;
        let actions: Vec<&str> = plan["steps"]
            .as_array()
            .map(|s| s.iter().filter_map(|s| s["action"].as_str()).collect())
            .unwrap_or_default();
        check(actions == ["update", "create", "create"], || {
            format!("plan: {plan}")
        })?;
        refused_apply(
            &session,
            &plan,
            &[
                "step 3: ConfigMap team-a/rt-victim was created by someone else after the plan \
                 was checked",
                "every write before it was undone (undone: ConfigMap team-a/rt-kept, ConfigMap \
                 team-a/rt-first)",
            ],
        )?;
        // A write alice may not undo (she may create Gadgets, not delete them) is named as
        // left written, never passed over.
        let mut second = configmap("rt-second", json!({"mine": "yes"}));
        second["metadata"]["labels"] = json!({"capstan-e2e/race": "yes"});
        let plan = session.ok(
            "resources_plan",
            json!({"manifests": [
                gadget("rt-gadget"),
                second,
                configmap("rt-victim-2", json!({"mine": "yes"})),
            ]}),
        )?;
        let error = session.error("resources_apply", as_planned(&plan))?;
        let message = error["message"].as_str().unwrap_or_default();
        check(
            error["kind"] == "rejected"
                && error["code"] == "partially_applied"
                && message.contains("ConfigMap team-a/rt-victim-2 was created by someone else")
                && message.contains("left written")
                && message.contains("Gadget team-a/rt-gadget (")
                && message.contains("cannot delete resource \"gadgets\"")
                && message.contains("(undone: ConfigMap team-a/rt-second)"),
            || format!("a write that cannot be undone: {error}"),
        )?;
        session.end();
        Ok(())
    });
    let _ = kubectl(
        env,
        &["delete", "validatingwebhookconfiguration", "race"],
        None,
    );
    // Printed before each admission answer, so they are in; the bound only keeps a missing
    // one from hanging the trial.
    let played: Vec<String> =
        std::iter::from_fn(|| lines.recv_timeout(std::time::Duration::from_secs(2)).ok())
            .take(2)
            .collect();
    drop(webhook);
    outcome?;
    check(
        played == ["created rt-victim", "created rt-victim-2"],
        || format!("the webhook did not play the other manager: {played:?}"),
    )?;
    check(configmap_data(env, "rt-second").is_none(), || {
        "rt-second was left created".into()
    })?;
    // The other manager's object is theirs, untouched; nothing of the plan is left.
    let victim = configmap_data(env, "rt-victim");
    check(victim == Some(json!({"owner": "someone-else"})), || {
        format!("rt-victim holds {victim:?}")
    })?;
    check(configmap_data(env, "rt-first").is_none(), || {
        "rt-first was left created".into()
    })?;
    let kept = configmap_data(env, "rt-kept");
    check(kept == Some(json!({"v": "1"})), || {
        format!("rt-kept holds {kept:?}")
    })?;
    let now = managers(env, "rt-kept")?;
    check(now == kept_managers, || {
        format!("rt-kept's managers were {kept_managers:?}, now {now:?}")
    })
}

/// Finding: a token re-created what was deleted — "did not exist" is true again after a
/// delete. A token is applied once.
fn applied_once(env: &Env) -> Outcome {
    with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        let plan = session.ok(
            "resources_plan",
            json!({"manifests": [configmap("rt-once", json!({"k": "v"}))]}),
        )?;
        applied_as_planned(&session, &plan)?;
        kubectl(
            env,
            &["-n", "team-a", "delete", "configmap", "rt-once"],
            None,
        )?;
        let before = writes_by(env, &user(ALICE)).len();
        refused_apply(&session, &plan, &["the plan token was applied already"])?;
        let after = writes_by(env, &user(ALICE));
        check(after.len() == before, || {
            format!("the replay wrote: {:?}", &after[before..])
        })?;
        check(configmap_data(env, "rt-once").is_none(), || {
            "the replay re-created rt-once".into()
        })?;
        session.end();
        Ok(())
    })
}

/// Finding: a second admitted caller applied the first one's plan with her own rights. A plan
/// is bound to the caller who made it (user and uid, from a SelfSubjectReview).
fn borrowed_plan(env: &Env) -> Outcome {
    with_sidecar(|sidecar| {
        let alice_session = alice(env, sidecar)?;
        let plan = alice_session.ok(
            "resources_plan",
            json!({"manifests": [configmap("rt-borrowed", json!({"k": "v"}))]}),
        )?;
        let carol = sidecar.session(PROJECT, Some(&token(env, CAROL)?))?;
        let before = writes_by(env, &user(CAROL)).len();
        refused_apply(
            &carol,
            &plan,
            &["the plan token was issued to another caller"],
        )?;
        let after = writes_by(env, &user(CAROL));
        check(after.len() == before, || {
            format!("carol wrote: {:?}", &after[before..])
        })?;
        check(configmap_data(env, "rt-borrowed").is_none(), || {
            "carol's apply created rt-borrowed".into()
        })?;
        carol.end();
        // The token itself was good: its caller applies it.
        applied_as_planned(&alice_session, &plan)?;
        alice_session.end();
        Ok(())
    })
}

/// Rotation and single use through the binary itself: a sidecar signing with key `old`, then
/// restarted with `[new, old]`, then with `[new]`, the same ledger file throughout, and last
/// without it.
fn rotation_through_the_binary(env: &Env) -> Outcome {
    let dir = env.plane.state_dir().join("rotation");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let old = r#"{"id": "old", "secret": "the old key of the rotation trial, 32+ bytes"}"#;
    let new = r#"{"id": "new", "secret": "the new key of the rotation trial, 32+ bytes"}"#;
    let file = |name: &str, keys: &[&str]| -> Result<String, Failed> {
        let path = dir.join(name);
        std::fs::write(&path, format!(r#"{{"keys": [{}]}}"#, keys.join(", ")))
            .map_err(|e| e.to_string())?;
        Ok(path.display().to_string())
    };
    let (only_old, rotated, only_new) = (
        file("old.json", &[old])?,
        file("rotated.json", &[new, old])?,
        file("new.json", &[new])?,
    );
    let ledger = dir.join("plan-ledger").display().to_string();
    let alice_token = token(env, ALICE)?;
    let plan = |session: &Session<'_>, name: &str| {
        session.ok(
            "resources_plan",
            json!({"manifests": [configmap(name, json!({"k": "v"}))]}),
        )
    };

    // 1. Key `old`: three plans, one applied.
    let (first, second, retired) = {
        let sidecar = another_sidecar(
            env,
            "rotation-1",
            &[
                ("PLAN_TOKEN_KEYS_FILE", &only_old),
                ("CAPSTAN_PLAN_LEDGER", &ledger),
            ],
        )?;
        let session = sidecar.session(PROJECT, Some(&alice_token))?;
        let first = plan(&session, "rot-a")?;
        check(
            first["planToken"]
                .as_str()
                .is_some_and(|t| t.starts_with("cpt2.old.")),
            || format!("signed with: {}", first["planToken"]),
        )?;
        applied_as_planned(&session, &first)?;
        let second = plan(&session, "rot-b")?;
        let retired = plan(&session, "rot-e")?;
        session.end();
        (first, second, retired)
    };
    // 2. `[new, old]`, the same ledger: what was applied stays applied; a plan of `old` made
    // before the restart applies; new plans are signed with `new`.
    let (third, fourth) = {
        let sidecar = another_sidecar(
            env,
            "rotation-2",
            &[
                ("PLAN_TOKEN_KEYS_FILE", &rotated),
                ("CAPSTAN_PLAN_LEDGER", &ledger),
            ],
        )?;
        let session = sidecar.session(PROJECT, Some(&alice_token))?;
        refused_apply(&session, &first, &["the plan token was applied already"])?;
        applied_as_planned(&session, &second)?;
        let third = plan(&session, "rot-c")?;
        check(
            third["planToken"]
                .as_str()
                .is_some_and(|t| t.starts_with("cpt2.new.")),
            || format!("signed with: {}", third["planToken"]),
        )?;
        let fourth = plan(&session, "rot-d")?;
        session.end();
        (third, fourth)
    };
    // 3. `[new]`: the retired key's plans are refused; the new key's apply.
    {
        let sidecar = another_sidecar(
            env,
            "rotation-3",
            &[
                ("PLAN_TOKEN_KEYS_FILE", &only_new),
                ("CAPSTAN_PLAN_LEDGER", &ledger),
            ],
        )?;
        let session = sidecar.session(PROJECT, Some(&alice_token))?;
        refused_apply(
            &session,
            &retired,
            &["signed with key \"old\", which this sidecar does not hold"],
        )?;
        applied_as_planned(&session, &third)?;
        session.end();
    }
    // 4. The same key without the ledger: it cannot know what was applied, so it refuses.
    {
        let sidecar = another_sidecar(env, "rotation-4", &[("PLAN_TOKEN_KEYS_FILE", &only_new)])?;
        let session = sidecar.session(PROJECT, Some(&alice_token))?;
        refused_apply(&session, &fourth, &["issued by another sidecar"])?;
        session.end();
    }
    for (name, exists) in [
        ("rot-a", true),
        ("rot-b", true),
        ("rot-c", true),
        ("rot-d", false),
        ("rot-e", false),
    ] {
        check(configmap_data(env, name).is_some() == exists, || {
            format!("{name} exists: {}", !exists)
        })?;
    }
    Ok(())
}

/// Over the whole run (so it runs last): the sidecar's own account only listed and watched
/// CapabilityBindings and RouteQualifiers — every read of the project as a caller was made
/// with the caller's token, discovery and OpenAPI included.
fn own_account(env: &Env) -> Outcome {
    let events = events_by(env, &user(COMPOSER), |_| true);
    let mut seen = std::collections::BTreeSet::new();
    for event in &events {
        let verb = event["verb"].as_str().unwrap_or_default();
        let resource = event["objectRef"]["resource"].as_str().unwrap_or_default();
        check(
            matches!(verb, "list" | "watch")
                && matches!(resource, "capabilitybindings" | "routequalifiers"),
            || {
                format!(
                    "the sidecar's own account made {verb} {} ({resource})",
                    event["requestURI"]
                )
            },
        )?;
        seen.insert((verb.to_owned(), resource.to_owned()));
    }
    // The oracle has something to judge: the sidecars did read with their own account.
    check(
        seen.contains(&("list".to_owned(), "capabilitybindings".to_owned()))
            && seen.contains(&("watch".to_owned(), "capabilitybindings".to_owned()))
            && seen.contains(&("list".to_owned(), "routequalifiers".to_owned())),
        || {
            format!(
                "the sidecar's own account: {seen:?} in {} events",
                events.len()
            )
        },
    )
}
