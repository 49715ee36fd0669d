//! Base-tools benchmark (`make bench`): `resources_list` of 100 ConfigMaps through a real sidecar
//! (crd source, caller check `sar`), as a non-admin caller with a TokenRequest token, against
//! the same LIST as that caller (1) with kubectl's raw GET (`kubectl get --raw`, a process per
//! call, as a person would) and (2) from an in-process HTTP client on a kept-alive connection
//! (the floor: one apiserver round trip). One persistent MCP session (rmcp client over the
//! socket); modes alternated round by round; medians. Nothing here is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::Instant;

use capstan_e2e::ControlPlane;
use capstan_e2e::bench::{kubectl, median};
use capstan_e2e::controller::{NAMESPACE, account_kubeconfig, bind_cluster_role, service_account};
use capstan_e2e::sidecar::{PROJECT_HEADER, SidecarProcess};
use capstan_e2e::suite::with_plane;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};
use serde_json::{Value, json};

const CONFIGMAPS: usize = 100;
const ROUNDS: usize = 5;
const CALLS: usize = 60;
const KUBECTL_CALLS: usize = 8;
const LIST_PATH: &str = "/api/v1/namespaces/bench/configmaps";

const RBAC: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: bench}}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata: {name: reader, namespace: bench}
  rules:
  - {apiGroups: [""], resources: [configmaps], verbs: [get, list]}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: alice-reader, namespace: bench}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
  subjects: [{kind: ServiceAccount, name: alice, namespace: capstan-system}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: binding-lister}
  rules:
  - {apiGroups: [capabilities.assistant.miloapis.com], resources: [capabilitybindings], verbs: [list]}
"#;

fn main() {
    let report = with_plane("bench-base-tools", |plane, runtime| {
        runtime.block_on(bench(plane))
    });
    println!(
        "<!-- bench:base_tools -->\n### Base platform tools (`e2e/benches/base_tools.rs`)\n\n```text"
    );
    println!("{}", report.trim());
    println!("```\n<!-- /bench:base_tools -->");
}

async fn bench(plane: &ControlPlane) -> String {
    let admin = plane.client().await.unwrap();
    plane.install_crds(&admin).await.unwrap();
    kubectl(plane, &["apply", "-f", "config/rbac/sidecar.yaml"], None);
    kubectl(plane, &["apply", "-f", "-"], Some(RBAC));
    let composer = service_account(plane, "composer").unwrap();
    bind_cluster_role(plane, "composer", "capstan-sidecar").unwrap();
    service_account(plane, "alice").unwrap();
    bind_cluster_role(plane, "alice", "binding-lister").unwrap();
    let alice = account_kubeconfig(plane, NAMESPACE, "alice").unwrap();
    let items: Vec<Value> = (0..CONFIGMAPS)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("settings-{i:03}"), "namespace": "bench",
                                "labels": {"app.kubernetes.io/name": "shop"}},
                   "data": {"mode": "fast", "region": "eu-west", "replicas": format!("{i}")}})
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    kubectl(plane, &["apply", "-f", "-"], Some(&list));
    let token = kubectl(
        plane,
        &[
            "create",
            "token",
            "alice",
            "-n",
            NAMESPACE,
            "--duration",
            "2h",
        ],
        None,
    )
    .trim()
    .to_owned();

    let sidecar = SidecarProcess::start(plane, &composer, "bench", &[]).unwrap();
    let url = "http://localhost/mcp";
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(HashMap::from([(
            http::HeaderName::from_bytes(PROJECT_HEADER.to_ascii_lowercase().as_bytes()).unwrap(),
            http::HeaderValue::from_static("acme"),
        )]))
        .auth_header(token);
    let session = ClientConfig::default()
        .serve(StreamableHttpClientTransport::with_client(
            UnixSocketHttpClient::new(sidecar.socket.to_str().unwrap(), url),
            config,
        ))
        .await
        .expect("initializing a session as alice");
    let mut params = CallToolRequestParams::new("resources_list");
    params.arguments =
        json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "bench"})
            .as_object()
            .cloned();
    let through = || async {
        let result = session.call_tool(params.clone()).await.unwrap();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let listed = result
            .structured_content
            .as_ref()
            .and_then(|v| v["items"].as_array().map(Vec::len));
        assert_eq!(listed, Some(CONFIGMAPS), "{result:?}");
    };

    let direct_client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&alice).unwrap(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    let direct = || async {
        let text = direct_client
            .request_text(http::Request::get(LIST_PATH).body(Vec::new()).unwrap())
            .await
            .unwrap();
        let listed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(listed["items"].as_array().map(Vec::len), Some(CONFIGMAPS));
    };
    let raw = || {
        let output = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&alice)
            .args(["get", "--raw", LIST_PATH])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", capstan_e2e::printed(&output));
        let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(listed["items"].as_array().map(Vec::len), Some(CONFIGMAPS));
    };

    // Warm-up: discovery (cached per session), connections, the kubectl binary in the page cache.
    for _ in 0..5 {
        through().await;
        direct().await;
    }
    raw();
    let (mut sidecar_times, mut direct_times, mut kubectl_times) =
        (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for _ in 0..CALLS {
            let t = Instant::now();
            through().await;
            sidecar_times.push(t.elapsed());
        }
        for _ in 0..CALLS {
            let t = Instant::now();
            direct().await;
            direct_times.push(t.elapsed());
        }
        for _ in 0..KUBECTL_CALLS {
            let t = Instant::now();
            raw();
            kubectl_times.push(t.elapsed());
        }
    }
    let _ = session.cancel().await;
    let bytes = direct_client
        .request_text(http::Request::get(LIST_PATH).body(Vec::new()).unwrap())
        .await
        .unwrap()
        .len();
    let (s, d, k) = (
        median(sidecar_times),
        median(direct_times),
        median(kubectl_times),
    );
    format!(
        "\nresources_list: {CONFIGMAPS} ConfigMaps ({bytes} bytes as listed), one caller, medians of \
         {ROUNDS} alternated rounds\n\
         {:<44} {:>10}\n\
         {:<44} {:>10.2?}\n\
         {:<44} {:>10.2?}\n\
         {:<44} {:>10.2?}\n\
         sidecar / in-process GET: {:.2}x   sidecar / kubectl get --raw: {:.2}x\n",
        "path",
        "p50",
        "resources_list through the sidecar (MCP)",
        s,
        "same LIST, in-process client, kept-alive",
        d,
        "same LIST, kubectl get --raw (a process)",
        k,
        s.as_secs_f64() / d.as_secs_f64(),
        s.as_secs_f64() / k.as_secs_f64(),
    )
}
