//! The node suite's vocabulary: the objects a user applies, and what a user reads back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use capstan_e2e::kubenode::Node;
use capstan_e2e::suite::Outcome;
use libtest_mimic::Failed;
use serde_json::{Value, json};

pub mod credentials;
pub mod leadership;
pub mod revocation;

/// The namespace both releases go to.
pub const RELEASE_NAMESPACE: &str = "capstan";
/// `kubectl` arguments listing the controller's pods.
const CONTROLLER_PODS: [&str; 6] = [
    "-n",
    RELEASE_NAMESPACE,
    "get",
    "pods",
    "-l",
    "app.kubernetes.io/name=capstan-controller",
];
/// The chart's ServiceAccount, as the apiserver names it.
pub const CHART_ACCOUNT: &str = "system:serviceaccount:capstan:capstan";
pub const CRDS: [&str; 2] = [
    "capabilitybindings.capabilities.assistant.miloapis.com",
    "routequalifiers.capabilities.assistant.miloapis.com",
];
/// Where the demo provider runs, and its images.
pub const PROVIDER_NAMESPACE: &str = "providers";
pub const PROVIDER_IMAGE: &str = "capstan-demo-provider:e2e";
pub const ASSISTANT_IMAGE: &str = "capstan-assistant:e2e";
/// The provider's Service, by the name a binding gives it.
pub const PROVIDER_HOST: &str = "demo-provider.providers.svc.cluster.local";
/// The allow-list entries a platform team writes for providers in the `providers`
/// namespace: their Service names, and the cluster's Service range those names resolve into
/// (examples/assistant's form: `*.providers.example,10.96.0.0/12`).
pub const ALLOWED_HOSTS: [&str; 2] = ["*.providers.svc.cluster.local", "10.96.0.0/12"];
pub const BINDING: &str = "streamco-on-node";
pub const SECOND_BINDING: &str = "streamco-after-takeover";
/// The project the assistant's callers name (bindings are cluster-scoped: any name reads the
/// cluster's).
pub const PROJECT: &str = "streamco-platform";
/// A person who may list bindings, and one who may not.
pub const PERSON: &str = "alice";
pub const STRANGER: &str = "mallory";
/// A person admitted by a ClusterRoleBinding of their own, deleted while their session is live.
pub const REVOKED: &str = "carol";
/// What the assistant runs at start: one `capstanctl compose` (no token: the sidecar's
/// refusal proves it was serving), its output kept in /first-ask/compose, then it idles.
const FIRST_ASK: &str = "/usr/local/bin/capstanctl compose --project streamco-platform \
     >/first-ask/compose 2>&1; echo \"exit $?\" >>/first-ask/compose; exec /pause";
/// The assistant container's user: not the sidecar's 65532.
const ASSISTANT_USER: i64 = 1001;
/// How long an outcome may take before a trial fails (a bound, not a performance claim).
pub const PATIENCE: Duration = Duration::from_secs(120);
/// The chart's lease duration (15 s) and a few seconds: the standby's bound to take over.
pub const TAKEOVER: Duration = Duration::from_secs(25);

pub fn kubectl(node: &Node, args: &[&str]) -> Result<String, Failed> {
    node.kubectl(args, None).map_err(Failed::from)
}

pub fn helm(node: &Node, args: &[&str]) -> Result<String, Failed> {
    node.helm(args).map_err(Failed::from)
}

/// A namespace enforcing the `restricted` Pod Security Standard, as a platform team labels
/// the namespaces Capstan and its tenants run in.
pub fn restricted_namespace(node: &Node, name: &str) -> Outcome {
    kubectl(node, &["create", "namespace", name])?;
    kubectl(
        node,
        &[
            "label",
            "namespace",
            name,
            "pod-security.kubernetes.io/enforce=restricted",
        ],
    )
    .map(drop)
}

/// `kubectl rollout status` of a Deployment, waiting at most `seconds`.
pub fn rollout(
    node: &Node,
    namespace: &str,
    deployment: &str,
    seconds: u32,
) -> Result<String, Failed> {
    kubectl(
        node,
        &[
            "-n",
            namespace,
            "rollout",
            "status",
            &format!("deployment/{deployment}"),
            &format!("--timeout={seconds}s"),
        ],
    )
}

/// `capstanctl call streamco__streams_list` in the assistant, as the holder of `token`.
pub fn call_streams_list(node: &Node, token: &str) -> Result<String, String> {
    capstanctl(
        node,
        &[
            "call",
            "--project",
            PROJECT,
            "--token",
            token,
            "streamco__streams_list",
        ],
    )
}

/// One `capstanctl call` in the assistant as the holder of `token`: it prints the provider's
/// answer, and the provider records exactly one call (its own count, before and after).
pub fn one_call_reaches_the_provider(node: &Node, token: &str, when: &str) -> Outcome {
    let calls_before = provider_calls(node, "streams_list")?;
    let result = call_streams_list(node, token)?;
    if !result.contains("clickstream") {
        return Err(format!("{when}, capstanctl call printed:\n{result}").into());
    }
    let calls_after = provider_calls(node, "streams_list")?;
    if calls_after != calls_before + 1 {
        return Err(format!(
            "{when}, the provider recorded {calls_before} streams_list calls before one call, {calls_after} after"
        )
        .into());
    }
    Ok(())
}

/// `kubectl apply` of a JSON object or List.
pub fn apply(node: &Node, objects: &Value) -> Outcome {
    node.kubectl(&["apply", "-f", "-"], Some(&objects.to_string()))
        .map(drop)
        .map_err(Failed::from)
}

/// The version the binaries (and so the images and the chart's appVersion) carry.
pub fn version() -> String {
    let output = std::process::Command::new(capstan_testkit::binary("capstan-controller"))
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("capstan-controller --version: {e}"));
    let printed = String::from_utf8_lossy(&output.stdout);
    printed
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("capstan-controller --version printed {printed:?}"))
        .to_owned()
}

/// Polls `probe` every 250 ms until it returns `Some`, failing after `timeout`.
pub fn wait<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> Option<T>,
) -> Result<T, Failed> {
    let started = Instant::now();
    loop {
        if let Some(value) = probe() {
            return Ok(value);
        }
        if started.elapsed() > timeout {
            return Err(format!("waited {timeout:?} for {what}").into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The controller's pods (name, ready), as the apiserver lists them.
pub fn controller_pods(node: &Node) -> Result<Vec<(String, bool)>, Failed> {
    let list = node.kubectl_json(&CONTROLLER_PODS)?;
    Ok(list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
        .map(|pod| {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            (name.to_owned(), is_ready(pod))
        })
        .collect())
}

pub fn ready_controller_pods(node: &Node) -> Result<Vec<String>, Failed> {
    Ok(controller_pods(node)?
        .into_iter()
        .filter_map(|(name, ready)| ready.then_some(name))
        .collect())
}

/// The pod holding the controller's Lease (its identity is `<pod>-<process id>-<random>`).
pub fn lease_holder(node: &Node) -> Result<String, Failed> {
    let identity = leadership::holder_identity(node)?;
    leadership::pod_of(&identity).ok_or_else(|| {
        format!("the Lease's holder {identity:?} is not <pod>-<process id>-<random>").into()
    })
}

/// The HTTP status of a controller pod's `/readyz`, asked from the node as kubelet does.
pub fn controller_readyz(node: &Node, pod: &str) -> Result<u16, Failed> {
    // A pod that has just started may not have its address in its status yet (kubelet reports
    // it a moment later): wait for an answer, whatever it is — 000 from curl is no answer.
    wait(
        Duration::from_secs(15),
        &format!("{pod}'s /readyz to answer"),
        || {
            let ip = kubectl(
                node,
                &[
                    "-n",
                    RELEASE_NAMESPACE,
                    "get",
                    "pod",
                    pod,
                    "-o",
                    "jsonpath={.status.podIP}",
                ],
            )
            .ok()
            .filter(|ip| !ip.is_empty())?;
            let output = node
                .command("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--max-time",
                    "5",
                ])
                .arg(format!("http://{ip}:8080/readyz"))
                .output()
                .ok()?;
            let code: u16 = String::from_utf8_lossy(&output.stdout)
                .trim()
                .parse()
                .ok()?;
            (code != 0).then_some(code)
        },
    )
}

/// The demo provider as a Deployment (restricted: non-root, read-only root, no capabilities)
/// behind a Service.
pub fn provider_objects() -> Value {
    let labels = json!({"app.kubernetes.io/name": "demo-provider"});
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "demo-provider", "namespace": PROVIDER_NAMESPACE},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
          "template": {"metadata": {"labels": labels}, "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "demo-provider", "image": PROVIDER_IMAGE,
              "imagePullPolicy": "Never",
              "env": [{"name": "DEMO_PROVIDER_LISTEN", "value": "0.0.0.0:7810"},
                      {"name": "DEMO_PROVIDER_ALLOWED_HOSTS", "value": PROVIDER_HOST}],
              "ports": [{"name": "mcp", "containerPort": 7810}],
              "readinessProbe": {"tcpSocket": {"port": "mcp"}, "periodSeconds": 2},
              "securityContext": {"allowPrivilegeEscalation": false,
                                  "readOnlyRootFilesystem": true,
                                  "capabilities": {"drop": ["ALL"]}}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "demo-provider", "namespace": PROVIDER_NAMESPACE},
         "spec": {"selector": labels, "ports": [{"name": "mcp", "port": 7810, "targetPort": "mcp"}]}}
    ]})
}

/// The provider's own record of the requests it served (`GET /debug/requests`), fetched
/// through its Service from the node.
pub fn provider_requests(node: &Node) -> Result<Value, Failed> {
    let ip = kubectl(
        node,
        &[
            "-n",
            PROVIDER_NAMESPACE,
            "get",
            "service",
            "demo-provider",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    )?;
    let output = node
        .command("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            &format!("http://{ip}:7810/debug/requests"),
        ])
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "the provider's record is not JSON ({e}): {}",
            capstan_e2e::printed(&output)
        )
        .into()
    })
}

/// `tools/call`s of `tool` the provider recorded.
pub fn provider_calls(node: &Node, tool: &str) -> Result<usize, Failed> {
    let requests = provider_requests(node)?;
    Ok(requests
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .flat_map(|request| request["rpc"].as_array().cloned().unwrap_or_default())
        .filter(|rpc| rpc["tool"] == tool)
        .count())
}

/// The StreamCo binding (examples/streamco) with its endpoint, knowledge and skill on the
/// provider's Service name; each binding gets a server name of its own.
pub fn binding(name: &str) -> Value {
    let base = format!("http://{PROVIDER_HOST}:7810");
    let server = name.replace('-', "_");
    json!({
        "apiVersion": "capabilities.assistant.miloapis.com/v1alpha1",
        "kind": "CapabilityBinding",
        "metadata": {"name": name},
        "spec": {
            "serviceRef": {"name": "streamco"},
            "serviceName": "streaming.streamco.example",
            "serviceAgentRef": {"name": "streamco-agent"},
            "configurationVersion": "v1",
            "reportingProject": PROJECT,
            "knowledge": {"sources": [
                {"type": "LLMDocs", "title": "Overview", "url": format!("{base}/llms-full.txt")}
            ]},
            "tools": {"mcpServers": [{
                "name": if name == BINDING { "streamco".to_owned() } else { server },
                "endpoint": format!("{base}/mcp"),
                "toolSelector": {"include": ["streams_list", "streams_get", "pipeline_diagnose"]}
            }]},
            "skills": [{"name": "lag-triage",
                        "description": "Step-by-step procedure for triaging pipeline consumer lag",
                        "source": format!("{base}/runbooks/lag.md")}]
        }
    })
}

/// Waits until each of `types` is True on the binding; its conditions as text.
pub fn wait_for_conditions(
    node: &Node,
    name: &str,
    types: &[&str],
    timeout: Duration,
) -> Result<String, Failed> {
    let mut last = String::new();
    let found = wait(timeout, "conditions", || {
        let binding = node
            .kubectl_json(&["get", "capabilitybinding", name])
            .ok()?;
        let conditions = binding["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        last = serde_json::to_string(&conditions).unwrap_or_default();
        types
            .iter()
            .all(|t| {
                conditions
                    .iter()
                    .any(|c| c["type"] == *t && c["status"] == "True")
            })
            .then(|| last.clone())
    });
    found.map_err(|e| {
        let why = e.message().unwrap_or_default();
        format!(
            "{name}: {} True: {why}; last conditions {last}",
            types.join(", ")
        )
        .into()
    })
}

/// Who wrote the binding's status, per the audit log: (user, the pod its token was bound to).
pub fn status_writers(node: &Node, name: &str) -> Vec<(String, String)> {
    node.audit_events()
        .into_iter()
        .filter(|event| {
            matches!(event["verb"].as_str(), Some("patch" | "update"))
                && event["stage"] == "ResponseComplete"
                && event["objectRef"]["resource"] == "capabilitybindings"
                && event["objectRef"]["subresource"] == "status"
                && event["objectRef"]["name"] == name
                && event["responseStatus"]["code"]
                    .as_i64()
                    .is_some_and(|c| c < 300)
        })
        .map(|event| {
            let user = &event["user"];
            let pod = user["extra"]["authentication.kubernetes.io/pod-name"][0]
                .as_str()
                .unwrap_or("(no pod)");
            (
                user["username"].as_str().unwrap_or("?").to_owned(),
                pod.to_owned(),
            )
        })
        .collect()
}

/// `examples/assistant` with the edits README "Wire the sidecar" asks for (the images, the
/// allow-lists) and the assistant container as user 1001; the Secret and the callers first.
pub fn deploy_assistant(node: &Node) -> Outcome {
    restricted_namespace(node, "assistants")?;
    kubectl(
        node,
        &[
            "-n",
            "assistants",
            "create",
            "secret",
            "generic",
            "capstan-plan-token",
            "--from-literal=key=node-suite-plan-token-key-0123456789abcdef",
        ],
    )?;
    // The example's documents as JSON, one object after another.
    let text = kubectl(
        node,
        &[
            "create",
            "--dry-run=client",
            "-f",
            "examples/assistant/assistant.yaml",
            "-o",
            "json",
        ],
    )?;
    let mut items = serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("examples/assistant as JSON: {e}"))?;
    for item in &mut items {
        if item["kind"] == "Pod" {
            edit_assistant_pod(item)?;
        }
    }
    apply(
        node,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    )?;
    for person in [PERSON, STRANGER] {
        kubectl(
            node,
            &["-n", "assistants", "create", "serviceaccount", person],
        )?;
    }
    kubectl(
        node,
        &[
            "create",
            "clusterrolebinding",
            "alice-lists-bindings",
            "--clusterrole=capstan-sidecar",
            &format!("--serviceaccount=assistants:{PERSON}"),
        ],
    )?;
    kubectl(
        node,
        &[
            "-n",
            "assistants",
            "wait",
            "--for=condition=Ready",
            "pod/assistant",
            "--timeout=120s",
        ],
    )
    .map(drop)
}

fn edit_assistant_pod(pod: &mut Value) -> Outcome {
    let spec = &mut pod["spec"];
    for sidecar in spec["initContainers"].as_array_mut().into_iter().flatten() {
        sidecar["imagePullPolicy"] = json!("Never");
        for env in sidecar["env"].as_array_mut().into_iter().flatten() {
            if env["name"] == "CAPABILITY_MCP_ENDPOINT_HOSTS"
                || env["name"] == "CAPABILITY_FETCH_HOSTS"
            {
                env["value"] = json!(ALLOWED_HOSTS.join(","));
            }
        }
        let ttl = revocation::CALLER_CHECK_TTL.as_secs().to_string();
        if let Some(env) = sidecar["env"].as_array_mut() {
            env.push(json!({"name": "CAPSTAN_CALLER_CHECK_TTL_SECONDS", "value": ttl}));
            // Its own workload identity, as the template renders it (credentials.rs).
            env.extend(credentials::workload_identity_env());
        }
    }
    spec["volumes"]
        .as_array_mut()
        .ok_or("the assistant pod has no volumes")?
        .push(json!({"name": "first-ask", "emptyDir": {}}));
    let assistant = spec["containers"]
        .as_array_mut()
        .and_then(|c| c.iter_mut().find(|c| c["name"] == "assistant"))
        .ok_or("examples/assistant has no assistant container")?;
    assistant["image"] = json!(ASSISTANT_IMAGE);
    assistant["imagePullPolicy"] = json!("Never");
    // An assistant that asks the sidecar the moment it starts, as a real one does, and keeps
    // what it was answered.
    assistant["command"] = json!(["/bin/busybox", "sh", "-c", FIRST_ASK]);
    assistant["volumeMounts"]
        .as_array_mut()
        .ok_or("the assistant container mounts nothing")?
        .push(json!({"name": "first-ask", "mountPath": "/first-ask"}));

    assistant["securityContext"]["runAsUser"] = json!(ASSISTANT_USER);
    assistant["securityContext"]["readOnlyRootFilesystem"] = json!(true);
    Ok(())
}

pub fn exec_assistant(node: &Node, command: &[&str]) -> Result<String, Failed> {
    let mut args = vec![
        "-n",
        "assistants",
        "exec",
        "assistant",
        "-c",
        "assistant",
        "--",
    ];
    args.extend(command);
    kubectl(node, &args)
}

/// `capstanctl` inside the assistant container, over the socket the example mounts.
pub fn capstanctl(node: &Node, args: &[&str]) -> Result<String, String> {
    let mut command = vec!["/usr/local/bin/capstanctl"];
    command.extend(args);
    exec_assistant(node, &command).map_err(|e| e.message().unwrap_or_default().to_owned())
}

/// A token of the person `name` (a ServiceAccount standing in for one), from the apiserver.
pub fn person_token(node: &Node, name: &str) -> Result<String, Failed> {
    Ok(
        kubectl(node, &["-n", "assistants", "create", "token", name])?
            .trim()
            .to_owned(),
    )
}

fn sidecar_status(node: &Node) -> Result<Value, Failed> {
    let pod = node.kubectl_json(&["-n", "assistants", "get", "pod", "assistant"])?;
    pod["status"]["initContainerStatuses"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "capstan-sidecar").cloned())
        .ok_or_else(|| "the assistant pod reports no capstan-sidecar status".into())
}

pub fn sidecar_restarts(node: &Node) -> Result<i64, Failed> {
    Ok(sidecar_status(node)?["restartCount"]
        .as_i64()
        .unwrap_or_default())
}

pub fn sidecar_started(node: &Node) -> Result<bool, Failed> {
    let status = sidecar_status(node)?;
    Ok(status["started"] == true && status["state"]["running"].is_object())
}

/// An eviction of `pod` (what `kubectl drain` asks for).
pub fn evict(node: &Node, pod: &str) -> Result<(), String> {
    let eviction = json!({
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": RELEASE_NAMESPACE}
    });
    let path = format!("/api/v1/namespaces/{RELEASE_NAMESPACE}/pods/{pod}/eviction");
    node.kubectl(
        &["create", "--raw", &path, "-f", "-"],
        Some(&eviction.to_string()),
    )
    .map(drop)
}

/// Runs `act` while counting the ready controller replicas (every pod listed, terminating
/// ones included) every 200 ms: its result, and the counts seen in order.
pub fn counting_ready_replicas<T>(node: &Node, act: impl FnOnce() -> T) -> (T, Vec<usize>) {
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut seen = Vec::new();
            while !done.load(Ordering::SeqCst) {
                if let Ok(list) = node.kubectl_json(&CONTROLLER_PODS) {
                    seen.push(ready_in(&list));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            seen
        });
        let result = act();
        done.store(true, Ordering::SeqCst);
        (result, watcher.join().unwrap_or_default())
    })
}

fn ready_in(list: &Value) -> usize {
    list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|pod| is_ready(pod))
        .count()
}

/// Whether a pod's Ready condition is True.
fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}
