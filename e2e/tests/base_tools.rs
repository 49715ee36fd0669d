//! The base platform tools on a real apiserver, acting as the caller: a non-admin service
//! account (`alice`, RBAC on one namespace, a TokenRequest token) reads and changes her project
//! through a real sidecar (crd source, its own service account for bindings only), and the
//! audit log is the oracle for who asked and what was written.
//!
//! Trials run one at a time against one sidecar; each uses objects of its own.

use std::process::ExitCode;
use std::sync::Mutex;

use capstan_e2e::controller::{NAMESPACE, account_token, bind_cluster_role, service_account};
use capstan_e2e::sidecar::{Session, SidecarProcess};
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
    let output = env.plane.kubectl_with_input(args, input);
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!("kubectl {}: {}", args.join(" "), printed(&output)))
    }
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
    verbs: [get, list, watch, create, update, patch]
  - apiGroups: [example.capstan.dev]
    resources: [widgets, gadgets]
    verbs: [get, list, watch, create, update, patch]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: alice-editor, namespace: team-a}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: editor}
  subjects: [{kind: ServiceAccount, name: alice, namespace: capstan-system}]
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
    let composer = service_account(&env.plane, "composer")?;
    bind_cluster_role(&env.plane, "composer", "capstan-sidecar")?;
    service_account(&env.plane, ALICE)?;
    bind_cluster_role(&env.plane, ALICE, "project-reader")?;
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
            && e["objectRef"]["resource"] != "selfsubjectaccessreviews"
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
            status == 403 && session.is_none() && body.contains("project globex"),
            || format!("bob's initialize: {status} {body}"),
        )?;
        let (status, _, body) = sidecar.initialize(PROJECT, None);
        check(
            status == 401 && body.contains("bearer token is required"),
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
        check(status == 403, || {
            format!("bob's composition read: {status} {body}")
        })?;
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
    kubectl(
        env,
        &[
            "-n",
            "team-a",
            "create",
            "configmap",
            "existing",
            "--from-literal=a=1",
        ],
        None,
    )?;
    let writes_before = writes_by(env, &user(ALICE)).len();
    with_sidecar(|sidecar| {
        let session = alice(env, sidecar)?;
        let answer = session.ok(
            "resources_validate",
            json!({"manifests": [
                configmap("existing", json!({"a": "2"})),
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "broken", "namespace": "team-a"}, "data": ["a", "b"]},
                {"apiVersion": "example.capstan.dev/v1", "kind": "Widget", "metadata": {"name": "too-big", "namespace": "team-a"}, "spec": {"size": 99}},
                configmap("fresh", json!({"b": "1"})),
            ]}),
        )?;
        let reports = answer["manifests"].as_array().cloned().unwrap_or_default();
        let field = |i: usize| reports[i]["errors"][0]["field"].clone();
        check(
            answer["accepted"] == false
                && reports.len() == 4
                && reports[0]["accepted"] == true
                && reports[0]["exists"] == true
                && reports[0]["action"] == "update"
                && reports[0]["changes"]
                    == json!([{"path": "data.a", "op": "replace", "before": "1", "after": "2"}])
                && reports[1]["accepted"] == false
                && field(1) == "manifests[1].data"
                && reports[2]["accepted"] == false
                && field(2) == "manifests[2].spec.size"
                && reports[3]["accepted"] == true
                && reports[3]["exists"] == false
                && reports[3]["action"] == "create",
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
    })
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
        let applied = session.ok(
            "resources_apply",
            json!({"manifests": plan["manifests"], "planToken": plan["planToken"]}),
        )?;
        check(applied["complete"] == true, || format!("apply: {applied}"))?;
        session.end();
        Ok(())
    })?;
    // The audit log: alice's writes, in the plan's order, each a server-side apply.
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
                ("g-plan".to_owned(), "patch".to_owned()),
                ("w-plan".to_owned(), "patch".to_owned()),
                ("cm-plan".to_owned(), "patch".to_owned()),
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
            json!({"manifests": [configmap("watched", json!({"v": "2"}))]}),
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
        let text = |plan: &Value| plan["planToken"].as_str().unwrap_or_default().to_owned();
        let cases: Vec<(&str, Value, String, &str)> = vec![
            ("a one-character edit", edited, token.clone(), MISMATCH),
            ("a reordered list", reordered, token.clone(), MISMATCH),
            (
                "a token from another project",
                planned.clone(),
                text(&foreign),
                MISMATCH,
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
    })
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
    let python = capstan_demo_provider::harness::python();
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
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "resources_list",
            "arguments": {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "team-a"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    })
    .to_string();
    let authorization = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("X-Capstan-Project", PROJECT),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "resources_list"),
    ];
    if let Some(authorization) = &authorization {
        headers.push(("authorization", authorization));
    }
    let (status, _, body) = sidecar.request("POST", "/mcp", &headers, Some(&body));
    (status, body)
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
        check(status == 403 && body.contains("project acme"), || {
            format!("bob's call without a session: {status} {body}")
        })?;
        let (status, body) = sessionless_list(sidecar, None);
        check(status == 401, || {
            format!("a call without a token: {status} {body}")
        })?;
        check(configmap_lists(BOB) == bob_before, || {
            "a refused call reached the project".to_owned()
        })?;
        Ok(())
    })
}
