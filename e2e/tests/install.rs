//! Installing Capstan with Helm on a real apiserver: both charts lint strictly, render with
//! default and varied values into objects the apiserver admits, refuse values of the wrong
//! shape, and install; the controller then runs on the host as the chart's ServiceAccount and
//! writes Accepted with nothing but the chart's RBAC, which grants no more than documented.
//! Upgrades land CRD changes, and uninstalling keeps the CRDs and every binding, as README
//! "Upgrades" says. The assistant example and the chart's sidecar template agree.
//!
//! Trials run one at a time, in order: the CRDs are cluster-wide, and the last trial
//! uninstalls and reinstalls both charts.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Output, Stdio};
use std::time::Duration;

use capstan_e2e::controller::{ControllerProcess, account_kubeconfig};
use capstan_e2e::suite::{Env, Outcome, check, eventually, trial};
use capstan_e2e::{HarnessError, printed, repo_root};
use libtest_mimic::Failed;
use serde_json::{Value, json};

/// The namespace both releases go to.
const RELEASE_NAMESPACE: &str = "capstan";
/// The chart's ServiceAccount, as the apiserver names it.
const CHART_ACCOUNT: &str = "system:serviceaccount:capstan:capstan";
/// The example assistant's ServiceAccount.
const ASSISTANT_ACCOUNT: &str = "system:serviceaccount:assistants:assistant";
const CRDS: [&str; 2] = [
    "capabilitybindings.capabilities.assistant.miloapis.com",
    "routequalifiers.capabilities.assistant.miloapis.com",
];
/// How long an outcome may take before a trial fails (a bound, not a performance claim).
const PATIENCE: Duration = Duration::from_secs(90);

fn main() -> ExitCode {
    capstan_e2e::suite::run(
        "install",
        true,
        setup,
        vec![
            trial("both_charts_should_pass_helm_lint_strict", lint),
            trial(
                "default_and_varied_values_should_render_objects_the_apiserver_admits",
                renders_are_admitted,
            ),
            trial(
                "values_of_the_wrong_shape_should_be_refused_by_the_schema",
                schema_refuses,
            ),
            trial(
                "the_controller_should_write_accepted_as_the_charts_service_account",
                controller_as_chart_account,
            ),
            trial(
                "the_chart_account_should_hold_no_more_than_documented",
                least_privilege,
            ),
            trial(
                "the_assistant_example_should_be_admitted_and_match_the_sidecar_template",
                assistant_example,
            ),
            trial(
                "helm_upgrade_should_land_a_changed_crd_and_changed_values",
                upgrade,
            ),
            trial(
                "helm_uninstall_should_keep_the_crds_and_every_binding",
                uninstall_keeps_crds,
            ),
        ],
    )
}

/// The suite starts with the CRDs installed from config/crd; here the CRD chart installs them
/// instead (Helm adopts nothing it did not create), then the controller chart.
fn setup(env: &Env) -> Result<(), HarnessError> {
    let mut delete = vec!["delete", "crd", "--wait"];
    delete.extend(CRDS);
    kubectl_ok(env, &delete, None).map_err(harness_error)?;
    install_both(env).map_err(harness_error)
}

fn harness_error(failed: Failed) -> HarnessError {
    HarnessError::Command {
        command: "install setup".into(),
        status: "failed".into(),
        stderr: failed.message().unwrap_or_default().to_owned(),
    }
}

fn install_both(env: &Env) -> Outcome {
    helm_ok(
        env,
        &[
            "install",
            "capstan-crds",
            "charts/capstan-crds",
            "-n",
            RELEASE_NAMESPACE,
            "--create-namespace",
        ],
    )?;
    let mut established = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    let names: Vec<String> = CRDS.iter().map(|name| format!("crd/{name}")).collect();
    established.extend(names.iter().map(String::as_str));
    kubectl_ok(env, &established, None)?;
    helm_ok(
        env,
        &[
            "install",
            "capstan",
            "charts/capstan",
            "-n",
            RELEASE_NAMESPACE,
        ],
    )
    .map(drop)
}

fn lint(env: &Env) -> Outcome {
    for chart in ["charts/capstan-crds", "charts/capstan"] {
        helm_ok(env, &["lint", "--strict", chart])?;
    }
    Ok(())
}

fn renders_are_admitted(env: &Env) -> Outcome {
    // The CRD chart with its defaults, as an update of the installed CRDs.
    let crds = admitted(
        env,
        "capstan-crds",
        RELEASE_NAMESPACE,
        "charts/capstan-crds",
        &[],
    )?;
    check(
        names(&crds)
            == set(&[
                &format!("CustomResourceDefinition/{}", CRDS[0]),
                &format!("CustomResourceDefinition/{}", CRDS[1]),
            ]),
        || format!("the CRD chart rendered {:?}", names(&crds)),
    )?;
    for crd in &crds {
        check(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep",
            || {
                format!(
                    "{} is not kept on uninstall: {}",
                    crd["metadata"]["name"], crd["metadata"]
                )
            },
        )?;
    }

    // Default values.
    let objects = admitted(env, "capstan", RELEASE_NAMESPACE, "charts/capstan", &[])?;
    check(
        names(&objects)
            == set(&[
                "ServiceAccount/capstan",
                "ClusterRole/capstan",
                "ClusterRole/capstan-sidecar",
                "ClusterRole/capstan-tools-user",
                "ClusterRoleBinding/capstan",
                "Role/capstan-leader-election",
                "RoleBinding/capstan-leader-election",
                "Deployment/capstan",
                "PodDisruptionBudget/capstan",
                "Service/capstan-metrics",
            ]),
        || format!("default values rendered {:?}", names(&objects)),
    )?;
    // Everything a caller may use with per-tool authorization, aggregated into edit and admin
    // only, and the same rule as the file for installs without Helm.
    let tools_user = objects
        .iter()
        .find(|o| o["metadata"]["name"] == "capstan-tools-user")
        .ok_or("no tools-user role")?;
    let labels = &tools_user["metadata"]["labels"];
    let file: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("config/rbac/tools-user.yaml"))
            .map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    check(
        labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
            && labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
            && labels
                .get("rbac.authorization.k8s.io/aggregate-to-view")
                .is_none()
            && tools_user["rules"] == file["rules"]
            && file["metadata"]["labels"]
                == json!({
                "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                "rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        || format!("the tools-user role: {tools_user} (the file: {file})"),
    )?;
    let deployment = find(&objects, "Deployment")?;
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    check(deployment["spec"]["replicas"] == 2, || {
        format!("replicas: {}", deployment["spec"]["replicas"])
    })?;
    check(
        pod["securityContext"]["runAsNonRoot"] == true
            && pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
            && container["securityContext"]["readOnlyRootFilesystem"] == true
            && container["securityContext"]["allowPrivilegeEscalation"] == false
            && container["securityContext"]["capabilities"]["drop"] == json!(["ALL"]),
        || format!("the pod is not locked down: {pod}"),
    )?;
    check(
        container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            && container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            && container["resources"]["requests"]["memory"] == "64Mi",
        || format!("probes or resources: {container}"),
    )?;
    check(
        env_var(container, "CAPSTAN_LEASE_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"]
            == "metadata.namespace",
        || format!("the lease namespace is not the pod's own: {container}"),
    )?;
    let role = find(&objects, "Role")?;
    check(
        role["metadata"]["namespace"] == RELEASE_NAMESPACE
            && role["rules"]
                == json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                           "verbs": ["get", "create", "patch"]}]),
        || format!("the leader-election Role: {role}"),
    )?;
    let cluster_role = find_named(&objects, "ClusterRole", "capstan")?;
    check(
        cluster_role["rules"]
            == json!([
                {"apiGroups": ["capabilities.assistant.miloapis.com"],
                 "resources": ["capabilitybindings", "routequalifiers"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["capabilities.assistant.miloapis.com"],
                 "resources": ["capabilitybindings/status", "routequalifiers/status"],
                 "verbs": ["patch"]}
            ]),
        || format!("the ClusterRole: {cluster_role}"),
    )?;

    // One replica, no extras, the service account of someone else, allow-lists, probing off.
    let objects = admitted(
        env,
        "single",
        "capstan-single",
        "charts/capstan",
        &[
            "--set",
            "replicas=1,metrics.service.enabled=false,sidecarRBAC.create=false,toolsUserRole.create=false",
            "--set",
            "serviceAccount.create=false,serviceAccount.name=existing-account",
            "--set",
            "probe.intervalSeconds=0,controller.logFormat=text",
            "--set-json",
            r#"allowLists={"mcpEndpointHosts": ["*.providers.example", "10.0.0.0/8"], "fetchHosts": ["docs.example"]}"#,
        ],
    )?;
    check(
        names(&objects)
            == set(&[
                "ClusterRole/single-capstan",
                "ClusterRoleBinding/single-capstan",
                "Role/single-capstan-leader-election",
                "RoleBinding/single-capstan-leader-election",
                "Deployment/single-capstan",
            ]),
        || format!("the single-replica values rendered {:?}", names(&objects)),
    )?;
    let deployment = find(&objects, "Deployment")?;
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    check(
        deployment["spec"]["replicas"] == 1
            && deployment["spec"]["template"]["spec"]["serviceAccountName"] == "existing-account"
            && env_var(container, "CAPABILITY_MCP_ENDPOINT_HOSTS")["value"]
                == "*.providers.example,10.0.0.0/8"
            && env_var(container, "CAPABILITY_FETCH_HOSTS")["value"] == "docs.example"
            && env_var(container, "CAPSTAN_PROBE_INTERVAL_SECONDS")["value"] == "0"
            && env_var(container, "CAPSTAN_LOG_FORMAT")["value"] == "text",
        || format!("the single-replica Deployment: {deployment}"),
    )?;
    let subject = &find(&objects, "ClusterRoleBinding")?["subjects"][0];
    check(
        subject["name"] == "existing-account" && subject["namespace"] == "capstan-single",
        || format!("the ClusterRoleBinding binds {subject}"),
    )?;

    credentials_render(env)?;

    // A ServiceMonitor (the Prometheus Operator's CRD, the part the chart uses) and other ports.
    kubectl_ok(env, &["apply", "-f", "-"], Some(SERVICE_MONITOR_CRD))?;
    kubectl_ok(
        env,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/servicemonitors.monitoring.coreos.com",
        ],
        None,
    )?;
    let objects = admitted(
        env,
        "monitored",
        "capstan-monitored",
        "charts/capstan",
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.interval=15s",
            "--set",
            "metrics.serviceMonitor.labels.release=prometheus,metrics.port=9090,metrics.service.port=9100",
        ],
    )?;
    let monitor = find(&objects, "ServiceMonitor")?;
    let service = find(&objects, "Service")?;
    let container = &find(&objects, "Deployment")?["spec"]["template"]["spec"]["containers"][0];
    check(
        monitor["spec"]["endpoints"][0]["interval"] == "15s"
            && monitor["metadata"]["labels"]["release"] == "prometheus"
            && service["spec"]["ports"][0]["port"] == 9100
            && container["ports"][0]["containerPort"] == 9090
            && env_var(container, "CAPSTAN_LISTEN_ADDRESS")["value"] == "0.0.0.0:9090",
        || format!("monitoring: {monitor}\n{service}\n{container}"),
    )?;

    // Scheduling, an image from a registry, and pod metadata, from a values file.
    let values = env.plane.state_dir().join("platform-values.yaml");
    std::fs::write(&values, PLATFORM_VALUES).map_err(|e| format!("{}: {e}", values.display()))?;
    let values = values.display().to_string();
    let objects = admitted(
        env,
        "platform",
        "capstan-platform",
        "charts/capstan",
        &["-f", &values],
    )?;
    let pod = &find(&objects, "Deployment")?["spec"]["template"];
    let spec = &pod["spec"];
    check(
        spec["containers"][0]["image"] == "registry.example/capstan-controller:0.1.0-rc1"
            && spec["containers"][0]["resources"]["limits"]["memory"] == "1Gi"
            && spec["nodeSelector"]["node-role.example/platform"] == "true"
            && spec["tolerations"][0]["key"] == "platform"
            && spec["affinity"]["podAntiAffinity"].is_object()
            && spec["imagePullSecrets"][0]["name"] == "registry-credentials"
            && pod["metadata"]["annotations"]["example.com/team"] == "platform"
            && pod["metadata"]["labels"]["example.com/tier"] == "control",
        || format!("the platform Deployment's pod: {pod}"),
    )?;
    Ok(())
}

fn schema_refuses(env: &Env) -> Outcome {
    // The control: the same command with no wrong value renders.
    helm_ok(env, &["template", "capstan", "charts/capstan"])?;
    let cases: [(&str, &[&str], &str); 7] = [
        ("charts/capstan", &["--set", "replicas=two"], "replicas"),
        (
            "charts/capstan",
            &["--set", "controller.logFormat=xml"],
            "logFormat",
        ),
        (
            "charts/capstan",
            &["--set", "probe.intervalSeconds=-1"],
            "intervalSeconds",
        ),
        (
            "charts/capstan",
            &["--set", "unknownValue=1"],
            "unknownValue",
        ),
        (
            "charts/capstan",
            &[
                "--set-json",
                r#"allowLists.mcpEndpointHosts=["a.example,b.example"]"#,
            ],
            "mcpEndpointHosts",
        ),
        (
            "charts/capstan",
            &[
                "--set-json",
                r#"resources={"requests": {"memory": {"size": 1}}}"#,
            ],
            "memory",
        ),
        (
            "charts/capstan-crds",
            &["--set", "keepOnUninstall=yes"],
            "keepOnUninstall",
        ),
    ];
    for (chart, values, field) in cases {
        let mut args = vec!["template", "x", chart];
        args.extend(values);
        let output = helm(env, &args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        check(
            !output.status.success()
                && stderr.contains("values don't meet the specifications of the schema")
                && stderr.contains(field),
            || {
                format!(
                    "`helm {}` was not refused naming {field}:\n{}",
                    args.join(" "),
                    printed(&output)
                )
            },
        )?;
    }
    Ok(())
}

fn controller_as_chart_account(env: &Env) -> Outcome {
    let kubeconfig = account_kubeconfig(&env.plane, RELEASE_NAMESPACE, "capstan")
        .map_err(|e| format!("a token for the chart's account: {e}"))?;
    kubectl_ok(
        env,
        &[
            "apply",
            "-f",
            "examples/streamco/capability-bindings.yaml",
            "-f",
            "examples/streamco/route-qualifiers.yaml",
        ],
        None,
    )?;
    let forbidden_before = forbidden(env, CHART_ACCOUNT)?;
    let writes_before = writes_by(env, CHART_ACCOUNT);
    let mut controller = ControllerProcess::start(
        &env.plane,
        &kubeconfig,
        "chart-account",
        &[
            "--lease-namespace",
            RELEASE_NAMESPACE,
            "--lease-name",
            "capstan",
        ],
    )
    .map_err(|e| format!("start the controller: {e}"))?;
    let waited = kubectl(
        env,
        &[
            "wait",
            "--for=condition=Accepted",
            "--timeout=90s",
            "capb/streamco-binding",
            "rq/search-eu-only",
            "rq/quality-floor",
        ],
        None,
    );
    check(waited.status.success(), || {
        format!(
            "{}\ncontroller log:\n{}",
            printed(&waited),
            controller.log_text()
        )
    })?;
    // The probe writes Composed with the same permission; wait for it too.
    env.runtime.block_on(eventually(
        PATIENCE,
        || async {
            let out = kubectl_ok(
                env,
                &[
                    "get",
                    "capb/streamco-binding",
                    "-o",
                    r#"jsonpath={.status.conditions[?(@.type=="Composed")].reason}"#,
                ],
                None,
            )
            .ok()?;
            (!out.is_empty() && out != "NotProbed").then_some(())
        },
        || {
            format!(
                "no probed Composed condition; controller log:\n{}",
                controller.log_text()
            )
        },
    ))?;
    let holder = kubectl_ok(
        env,
        &[
            "-n",
            RELEASE_NAMESPACE,
            "get",
            "lease",
            "capstan",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    )?;
    controller.stop();
    check(holder == "chart-account", || {
        format!("the Lease capstan/capstan is held by {holder:?}")
    })?;
    // The audit log is the oracle: nothing the controller tried was forbidden, and it wrote.
    let forbidden_after = forbidden(env, CHART_ACCOUNT)?;
    check(forbidden_after == forbidden_before, || {
        format!(
            "requests forbidden to the chart's account: {:?}",
            &forbidden_after[forbidden_before.len()..]
        )
    })?;
    let writes_after = writes_by(env, CHART_ACCOUNT);
    check(writes_after > writes_before, || {
        format!(
            "no status writes by {CHART_ACCOUNT} ({writes_before} before, {writes_after} after)"
        )
    })
}

fn least_privilege(env: &Env) -> Outcome {
    // (verb, resource, subresource, namespace, allowed)
    let matrix: &[(&str, &str, &str, &str, bool)] = &[
        ("get", "capabilitybindings", "", "", true),
        ("list", "capabilitybindings", "", "", true),
        ("watch", "capabilitybindings", "", "", true),
        ("list", "routequalifiers", "", "", true),
        ("watch", "routequalifiers", "", "", true),
        ("patch", "capabilitybindings", "status", "", true),
        ("patch", "routequalifiers", "status", "", true),
        ("get", "leases", "", RELEASE_NAMESPACE, true),
        ("create", "leases", "", RELEASE_NAMESPACE, true),
        ("patch", "leases", "", RELEASE_NAMESPACE, true),
        // Never a spec write.
        ("create", "capabilitybindings", "", "", false),
        ("update", "capabilitybindings", "", "", false),
        ("patch", "capabilitybindings", "", "", false),
        ("delete", "capabilitybindings", "", "", false),
        ("patch", "routequalifiers", "", "", false),
        ("update", "capabilitybindings", "status", "", false),
        // No Secrets, anywhere.
        ("get", "secrets", "", RELEASE_NAMESPACE, false),
        ("list", "secrets", "", "", false),
        ("get", "configmaps", "", RELEASE_NAMESPACE, false),
        ("create", "pods", "", RELEASE_NAMESPACE, false),
        (
            "create",
            "serviceaccounts",
            "token",
            RELEASE_NAMESPACE,
            false,
        ),
        // Leases only in the release namespace, and only what leader election does.
        ("get", "leases", "", "kube-system", false),
        ("create", "leases", "", "default", false),
        ("patch", "leases", "", "kube-system", false),
        ("list", "leases", "", RELEASE_NAMESPACE, false),
        ("watch", "leases", "", RELEASE_NAMESPACE, false),
        ("delete", "leases", "", RELEASE_NAMESPACE, false),
        ("get", "customresourcedefinitions", "", "", false),
    ];
    can_i(env, CHART_ACCOUNT, matrix)
}

fn assistant_example(env: &Env) -> Outcome {
    kubectl_ok(
        env,
        &["apply", "-f", "examples/assistant/assistant.yaml"],
        None,
    )?;
    can_i(
        env,
        ASSISTANT_ACCOUNT,
        &[
            ("list", "capabilitybindings", "", "", true),
            ("list", "routequalifiers", "", "", true),
            // The crd source without a URL template keeps both with a watch.
            ("watch", "capabilitybindings", "", "", true),
            ("watch", "routequalifiers", "", "", true),
            ("get", "capabilitybindings", "", "", false),
            ("create", "capabilitybindings", "", "", false),
            ("get", "secrets", "", "assistants", false),
            ("list", "pods", "", "assistants", false),
        ],
    )?;
    let stored: Value = serde_json::from_str(&kubectl_ok(
        env,
        &["-n", "assistants", "get", "pod", "assistant", "-o", "json"],
        None,
    )?)
    .map_err(|e| format!("the example pod: {e}"))?;
    let example = &stored["spec"]["initContainers"][0];

    // A chart of an assistant team, depending on the capstan chart for its template.
    let parent = env.plane.state_dir().join("assistant-chart");
    std::fs::create_dir_all(parent.join("templates")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(parent.join("charts")).map_err(|e| e.to_string())?;
    let copied = Command::new("cp")
        .arg("-r")
        .arg(repo_root().join("charts/capstan"))
        .arg(parent.join("charts/"))
        .output()
        .map_err(|e| e.to_string())?;
    check(copied.status.success(), || printed(&copied))?;
    std::fs::write(
        parent.join("Chart.yaml"),
        "apiVersion: v2\nname: assistant\nversion: 0.1.0\n",
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(parent.join("templates/pods.yaml"), ASSISTANT_PODS)
        .map_err(|e| e.to_string())?;
    let parent = parent.display().to_string();
    let rendered = helm_ok(
        env,
        &[
            "template",
            "assistant",
            &parent,
            "--show-only",
            "templates/pods.yaml",
        ],
    )?;
    let objects = dry_run(env, &rendered)?;
    let native = find_named(&objects, "Pod", "assistant-native")?;
    let plain = find_named(&objects, "Pod", "assistant-plain")?;
    let from_template = &native["spec"]["initContainers"][0];
    check(from_template == example, || {
        format!(
            "examples/assistant/assistant.yaml and the capstan.sidecar template differ:\nexample:  {example}\ntemplate: {from_template}"
        )
    })?;
    let plain_sidecar = plain["spec"]["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "capstan-sidecar"))
        .cloned()
        .unwrap_or_default();
    check(
        plain_sidecar["restartPolicy"].is_null()
            && plain_sidecar["command"] == json!(["/usr/local/bin/capstan-sidecar"]),
        || format!("the plain-container sidecar: {plain_sidecar}"),
    )?;
    // The plain form is also given call limits: each set one becomes its variable, and
    // nothing else of them is set (docs/limits.md).
    let limits = env_named(&plain_sidecar, |name| {
        name.starts_with("CAPSTAN_DEFAULT_") || name.starts_with("CAPSTAN_MAX_C")
    });
    let expected: Vec<(String, String)> = [
        ("CAPSTAN_DEFAULT_CALLS_PER_MINUTE_PER_CALLER", "60"),
        ("CAPSTAN_MAX_CALLS_PER_MINUTE", "6000"),
        ("CAPSTAN_MAX_CONCURRENT_CALLS_PER_CALLER", "8"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
    .collect();
    let mut sorted = limits.clone();
    sorted.sort();
    check(sorted == expected, || {
        format!("the sidecar template's call limits: {limits:?}, expected {expected:?}")
    })?;
    let audit = env_named(&plain_sidecar, |name| name.starts_with("CAPSTAN_AUDIT_"));
    check(
        audit
            == [
                ("CAPSTAN_AUDIT_SINK".to_owned(), "stderr".to_owned()),
                ("CAPSTAN_AUDIT_NAMES".to_owned(), "digest".to_owned()),
            ],
        || format!("the sidecar template's audit settings: {audit:?}"),
    )?;
    // And upstream credentials: its own account from the downward API, bound to its pod.
    let credentials = env_named(&plain_sidecar, |name| {
        [
            "CAPSTAN_CREDENTIALS_NAMESPACE",
            "CAPSTAN_WORKLOAD_SERVICE_ACCOUNT",
            "CAPSTAN_WORKLOAD_AUDIENCES",
            "CAPSTAN_TOKEN_ENDPOINT_HOSTS",
        ]
        .contains(&name)
    });
    check(
        credentials
            == [
                (
                    "CAPSTAN_CREDENTIALS_NAMESPACE".to_owned(),
                    "provider-credentials".to_owned(),
                ),
                (
                    "CAPSTAN_WORKLOAD_SERVICE_ACCOUNT".to_owned(),
                    "$(CAPSTAN_POD_NAMESPACE)/$(CAPSTAN_POD_SERVICE_ACCOUNT)".to_owned(),
                ),
                (
                    "CAPSTAN_WORKLOAD_AUDIENCES".to_owned(),
                    "mcp=mcp.example".to_owned(),
                ),
                (
                    "CAPSTAN_TOKEN_ENDPOINT_HOSTS".to_owned(),
                    "auth.example".to_owned(),
                ),
            ]
            && env_var(&plain_sidecar, "CAPSTAN_POD_SERVICE_ACCOUNT")["valueFrom"]["fieldRef"]["fieldPath"]
                == "spec.serviceAccountName",
        || format!("the sidecar template's credentials: {credentials:?}"),
    )?;
    // And tool search: both numbers, 0 among them (a value, not an absence).
    let search = env_named(&plain_sidecar, |name| {
        name.starts_with("CAPSTAN_TOOL_SEARCH_")
    });
    check(
        search
            == [
                ("CAPSTAN_TOOL_SEARCH_MIN_TOOLS".to_owned(), "0".to_owned()),
                ("CAPSTAN_TOOL_SEARCH_THRESHOLD".to_owned(), "60".to_owned()),
            ],
        || format!("the sidecar template's tool search: {search:?}"),
    )?;
    check(
        example["env"].as_array().into_iter().flatten().all(|e| {
            let name = e["name"].as_str().unwrap_or("");
            !name.starts_with("CAPSTAN_DEFAULT_") && !name.starts_with("CAPSTAN_WORKLOAD_")
        }),
        || "the example sets no call limit and no workload identity".to_owned(),
    )
}

/// The environment variables of `container` whose names `keep` holds, as (name, value), in
/// order.
/// Upstream credentials (docs/upstream-auth.md): the Secrets named, readable by the probe and
/// the assistant's account only, each account allowed tokens of itself alone, and the probe
/// told who it is.
fn credentials_render(env: &Env) -> Outcome {
    let namespaces = r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capstan-credentials"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "assistants"}}]}"#;
    kubectl_ok(env, &["apply", "-f", "-"], Some(namespaces))?;
    let objects = admitted(
        env,
        "credentialed",
        "capstan-credentialed",
        "charts/capstan",
        &[
            "--set-json",
            r#"credentials={"secrets": ["streamco-api-key"], "probe": {"enabled": true},
                "sidecarServiceAccounts": [{"namespace": "assistants", "name": "assistant"}],
                "workloadAudiences": ["mcp=mcp.example"]}"#,
        ],
    )?;
    let prober = "credentialed-capstan";
    let roles: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Role").collect();
    let secrets = roles
        .iter()
        .find(|r| r["metadata"]["name"] == "credentialed-capstan-credentials")
        .ok_or("no credentials Role")?;
    check(
        secrets["metadata"]["namespace"] == "capstan-credentials"
            && secrets["rules"]
                == json!([{"apiGroups": [""], "resources": ["secrets"],
                           "resourceNames": ["streamco-api-key"], "verbs": ["get", "list", "watch"]}]),
        || format!("the credentials Role: {secrets}"),
    )?;
    for (namespace, account) in [
        ("capstan-credentialed", prober),
        ("assistants", "assistant"),
    ] {
        let name = format!("credentialed-capstan-workload-identity-{account}");
        let role = roles
            .iter()
            .find(|r| r["metadata"]["name"] == name.as_str())
            .ok_or(format!("no Role {name}"))?;
        check(
            role["metadata"]["namespace"] == namespace
                && role["rules"]
                    == json!([{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                               "resourceNames": [account], "verbs": ["create"]}]),
            || format!("{name}: {role}"),
        )?;
    }
    let container = &find(&objects, "Deployment")?["spec"]["template"]["spec"]["containers"][0];
    check(
        env_var(container, "CAPSTAN_WORKLOAD_SERVICE_ACCOUNT")["value"]
            == format!("capstan-credentialed/{prober}")
            && env_var(container, "CAPSTAN_WORKLOAD_AUDIENCES")["value"] == "mcp=mcp.example"
            && env_var(container, "CAPSTAN_POD_UID")["valueFrom"]["fieldRef"]["fieldPath"]
                == "metadata.uid",
        || format!("the probe's identity: {container}"),
    )
}

fn env_named(container: &Value, keep: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e["name"].as_str()?;
            keep(name).then(|| {
                (
                    name.to_owned(),
                    e["value"].as_str().unwrap_or("").to_owned(),
                )
            })
        })
        .collect()
}

fn upgrade(env: &Env) -> Outcome {
    // A copy of the CRD chart whose CapabilityBinding gains a printer column.
    let copy = env.plane.state_dir().join("capstan-crds-next");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(repo_root().join("charts/capstan-crds"))
        .arg(&copy)
        .output()
        .map_err(|e| e.to_string())?;
    check(copied.status.success(), || printed(&copied))?;
    let file = copy.join("files/capabilitybindings.yaml");
    let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
    let changed = text.replacen(
        "  - additionalPrinterColumns:\n",
        "  - additionalPrinterColumns:\n    - description: Added by an upgrade\n      jsonPath: .spec.serviceName\n      name: Service\n      type: string\n",
        1,
    );
    check(changed != text, || "no printer columns to extend".into())?;
    std::fs::write(&file, changed).map_err(|e| e.to_string())?;
    let columns = || {
        kubectl_ok(
            env,
            &[
                "get",
                "crd",
                CRDS[0],
                "-o",
                "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}",
            ],
            None,
        )
    };
    let before = columns()?;
    let copy = copy.display().to_string();
    helm_ok(
        env,
        &["upgrade", "capstan-crds", &copy, "-n", RELEASE_NAMESPACE],
    )?;
    let after = columns()?;
    check(
        !before.contains("Service") && after.contains("Service"),
        || format!("printer columns before {before:?}, after the upgrade {after:?}"),
    )?;
    // What a user sees: the new column in `kubectl get`.
    let listed = kubectl_ok(env, &["get", "capb"], None)?;
    check(
        listed.contains("SERVICE") && listed.contains("streaming.streamco.example"),
        || format!("kubectl get capb after the upgrade:\n{listed}"),
    )?;
    // Back to the repository's chart: the column goes again.
    helm_ok(
        env,
        &[
            "upgrade",
            "capstan-crds",
            "charts/capstan-crds",
            "-n",
            RELEASE_NAMESPACE,
        ],
    )?;
    let restored = columns()?;
    check(restored == before, || {
        format!("printer columns after the downgrade {restored:?}")
    })?;

    // A changed value on the controller chart reaches its Deployment.
    helm_ok(
        env,
        &[
            "upgrade",
            "capstan",
            "charts/capstan",
            "-n",
            RELEASE_NAMESPACE,
            "--reuse-values",
            "--set",
            "replicas=3",
        ],
    )?;
    let replicas = kubectl_ok(
        env,
        &[
            "-n",
            RELEASE_NAMESPACE,
            "get",
            "deployment",
            "capstan",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        None,
    )?;
    check(replicas == "3", || {
        format!("replicas after the upgrade: {replicas}")
    })?;
    let history = helm_ok(
        env,
        &[
            "history",
            "capstan-crds",
            "-n",
            RELEASE_NAMESPACE,
            "-o",
            "json",
        ],
    )?;
    let revisions = serde_json::from_str::<Value>(&history)
        .ok()
        .and_then(|h| h.as_array().map(Vec::len));
    check(revisions == Some(3), || {
        format!("capstan-crds history: {history}")
    })
}

fn uninstall_keeps_crds(env: &Env) -> Outcome {
    let bindings = || kubectl_ok(env, &["get", "capb", "-o", "name"], None);
    let before = bindings()?;
    check(before.contains("streamco-binding"), || {
        format!("bindings before: {before}")
    })?;
    helm_ok(env, &["uninstall", "capstan", "-n", RELEASE_NAMESPACE])?;
    helm_ok(env, &["uninstall", "capstan-crds", "-n", RELEASE_NAMESPACE])?;
    // The controller chart's objects are gone ...
    let role = kubectl(env, &["get", "clusterrole", "capstan"], None);
    check(!role.status.success(), || {
        format!("the ClusterRole outlived its release: {}", printed(&role))
    })?;
    // ... the CRDs and every binding are not.
    let mut get = vec!["get", "crd"];
    get.extend(CRDS);
    kubectl_ok(env, &get, None)?;
    let after = bindings()?;
    check(after == before, || {
        format!("bindings before {before:?}, after {after:?}")
    })?;
    let releases = helm_ok(env, &["list", "-A", "-q"])?;
    check(releases.trim().is_empty(), || {
        format!("releases left: {releases}")
    })?;
    // Installing again adopts the kept CRDs (README "Upgrades").
    install_both(env)
}

/// Renders `chart` as `release` in `namespace` (created first) with `values`, and returns the
/// objects as the apiserver admitted them in a server-side dry run.
fn admitted(
    env: &Env,
    release: &str,
    namespace: &str,
    chart: &str,
    values: &[&str],
) -> Result<Vec<Value>, Failed> {
    let namespace_object =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    kubectl_ok(
        env,
        &["apply", "-f", "-"],
        Some(&namespace_object.to_string()),
    )?;
    let mut args = vec!["template", release, chart, "-n", namespace];
    args.extend(values);
    let rendered = helm_ok(env, &args)?;
    dry_run(env, &rendered)
}

/// `kubectl apply --dry-run=server` of `manifests`: the objects as admitted.
fn dry_run(env: &Env, manifests: &str) -> Result<Vec<Value>, Failed> {
    let out = kubectl_ok(
        env,
        &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
        Some(manifests),
    )?;
    let value: Value =
        serde_json::from_str(&out).map_err(|e| format!("dry-run output: {e}\n{out}"))?;
    Ok(match value["kind"].as_str() {
        Some("List") => value["items"].as_array().cloned().unwrap_or_default(),
        _ => vec![value],
    })
}

/// `Kind/name` of each object.
fn names(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> Result<&'a Value, Failed> {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .ok_or_else(|| format!("no {kind} among {:?}", names(objects)).into())
}

fn find_named<'a>(objects: &'a [Value], kind: &str, name: &str) -> Result<&'a Value, Failed> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .ok_or_else(|| format!("no {kind}/{name} among {:?}", names(objects)).into())
}

/// The env entry `name` of a container (null when absent).
fn env_var(container: &Value, name: &str) -> Value {
    container["env"]
        .as_array()
        .and_then(|vars| vars.iter().find(|v| v["name"] == name))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Checks each (verb, resource, subresource, namespace, allowed) with `kubectl auth can-i`.
fn can_i(env: &Env, user: &str, matrix: &[(&str, &str, &str, &str, bool)]) -> Outcome {
    let mut wrong = Vec::new();
    for &(verb, resource, subresource, namespace, allowed) in matrix {
        let mut args = vec!["auth", "can-i", verb, resource];
        let subresource_flag = format!("--subresource={subresource}");
        if !subresource.is_empty() {
            args.push(&subresource_flag);
        }
        if namespace.is_empty() {
            args.push("--all-namespaces");
        } else {
            args.extend(["-n", namespace]);
        }
        let as_flag = format!("--as={user}");
        args.push(&as_flag);
        let output = kubectl(env, &args, None);
        let answer = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if answer != if allowed { "yes" } else { "no" } {
            wrong.push(format!("`kubectl {}` said {answer:?}", args.join(" ")));
        }
    }
    check(wrong.is_empty(), || {
        format!("{user}:\n{}", wrong.join("\n"))
    })
}

/// Audit events the apiserver answered 403 for `user`, as `verb resource` lines.
fn forbidden(env: &Env, user: &str) -> Result<Vec<String>, Failed> {
    let events = env.plane.audit_events().map_err(|e| e.to_string())?;
    Ok(events
        .iter()
        .filter(|e| {
            e["user"]["username"] == user
                && e["stage"] == "ResponseComplete"
                && e["responseStatus"]["code"] == 403
        })
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect())
}

/// Successful status writes by `user` on bindings and qualifiers.
fn writes_by(env: &Env, user: &str) -> usize {
    ["capabilitybindings", "routequalifiers"]
        .iter()
        .map(|resource| {
            env.plane
                .status_writes(resource, |_| true)
                .get(user)
                .copied()
                .unwrap_or(0)
        })
        .sum()
}

/// helm, as `e2e/build-tools` built it.
fn helm_binary() -> Result<PathBuf, Failed> {
    capstan_e2e::built_tool("helm").map_err(|e| e.to_string().into())
}

/// helm against the test plane, with its own cache and config in the plane's state directory.
fn helm(env: &Env, args: &[&str]) -> Output {
    let binary = helm_binary().unwrap_or_else(|e| panic!("{}", e.message().unwrap_or_default()));
    let home = env.plane.state_dir().join("helm");
    Command::new(binary)
        .args(args)
        .arg("--kubeconfig")
        .arg(env.plane.kubeconfig())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("helm: {e}"))
}

/// helm, failing with what it printed; its stdout on success.
fn helm_ok(env: &Env, args: &[&str]) -> Result<String, Failed> {
    stdout_of("helm", args, &helm(env, args))
}

fn kubectl(env: &Env, args: &[&str], input: Option<&str>) -> Output {
    env.plane.kubectl_with_input(args, input)
}

/// kubectl, failing with what it printed; its stdout on success.
fn kubectl_ok(env: &Env, args: &[&str], input: Option<&str>) -> Result<String, Failed> {
    stdout_of("kubectl", args, &kubectl(env, args, input))
}

/// What `program args` printed on stdout when it succeeded, else a failure showing everything.
fn stdout_of(program: &str, args: &[&str], output: &Output) -> Result<String, Failed> {
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!("`{program} {}`: {}", args.join(" "), printed(output)).into())
    }
}

/// Values a platform team might set for scheduling and a private registry.
const PLATFORM_VALUES: &str = r#"
image:
  repository: registry.example/capstan-controller
  tag: 0.1.0-rc1
imagePullSecrets:
- name: registry-credentials
serviceAccount:
  annotations:
    example.com/owner: platform
resources:
  requests: {cpu: 100m, memory: 128Mi}
  limits: {memory: 1Gi}
nodeSelector:
  node-role.example/platform: "true"
tolerations:
- {key: platform, operator: Exists, effect: NoSchedule}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels: {app.kubernetes.io/name: capstan-controller}
podAnnotations:
  example.com/team: platform
podLabels:
  example.com/tier: control
"#;

/// The part of the Prometheus Operator's ServiceMonitor v1 schema the chart writes (selector,
/// endpoints with port, path and interval, the operator's duration pattern), strict about
/// unknown fields as kubectl's server-side field validation is.
const SERVICE_MONITOR_CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
  "spec": {
    "group": "monitoring.coreos.com",
    "scope": "Namespaced",
    "names": {"kind": "ServiceMonitor", "listKind": "ServiceMonitorList",
              "plural": "servicemonitors", "singular": "servicemonitor"},
    "versions": [{
      "name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {
          "spec": {
            "type": "object",
            "required": ["selector"],
            "properties": {
              "selector": {"type": "object", "properties": {
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
              "endpoints": {"type": "array", "items": {"type": "object", "properties": {
                "port": {"type": "string"},
                "path": {"type": "string"},
                "interval": {"type": "string",
                  "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
              }}}
            }
          }
        }
      }}
    }]
  }
}"#;

/// An assistant team's pods using the chart's sidecar template: the native sidecar with the
/// parameters examples/assistant/assistant.yaml documents, and the plain-container form.
const ASSISTANT_PODS: &str = r#"
{{- $sidecar := dict
      "image" "capstan-sidecar:0.1.0"
      "planTokenSecret" "capstan-plan-token"
      "mcpEndpointHosts" (list "*.providers.example" "10.96.0.0/12")
      "fetchHosts" (list "*.providers.example") }}
apiVersion: v1
kind: Pod
metadata:
  name: assistant-native
  namespace: assistants
spec:
  serviceAccountName: assistant
  volumes:
  - name: capstan-socket
    emptyDir: {}
  - name: capstan-state
    emptyDir: {}
  initContainers:
  {{- include "capstan.sidecar" $sidecar | nindent 2 }}
  containers:
  - name: assistant
    image: registry.example/assistant:latest
---
apiVersion: v1
kind: Pod
metadata:
  name: assistant-plain
  namespace: assistants
spec:
  serviceAccountName: assistant
  volumes:
  - name: capstan-socket
    emptyDir: {}
  - name: capstan-state
    emptyDir: {}
  containers:
  {{- include "capstan.sidecar" (merge (dict "native" false "audit" (dict "sink" "stderr" "names" "digest") "callLimits" (dict "defaults" (dict "callsPerMinutePerCaller" 60) "ceilings" (dict "callsPerMinute" 6000 "concurrentCallsPerCaller" 8)) "credentials" (dict "namespace" "provider-credentials" "workloadIdentity" true "workloadAudiences" (list "mcp=mcp.example") "tokenEndpointHosts" (list "auth.example")) "toolSearch" (dict "minTools" 0 "threshold" 60)) $sidecar) | nindent 2 }}
  - name: assistant
    image: registry.example/assistant:latest
"#;
