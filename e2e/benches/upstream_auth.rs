//! What an upstream credential costs per call (`make bench`, docs/upstream-auth.md): one
//! sidecar on a real apiserver composing four bindings of one demo provider — without `auth`,
//! with a Secret, with the sidecar's workload identity, with the caller's token exchanged at the
//! token service (`e2e/tools/tokenservice`) — and one caller (a ServiceAccount token the token
//! service accepts) calling each binding's `streams_list` in turn on one session.
//!
//! The sidecar's CPU per forwarded call is read from the scheduler's nanosecond accounting of
//! the one process, chunk by chunk, the bindings taking turns every `CHUNK` calls (the order
//! rotated), so a drift of the machine's load falls on every kind alike; every credential is
//! cached after the first call (a Secret's value from its watch, a workload token for an hour,
//! an exchanged token for five minutes), which is the cost every later call pays. Medians of
//! `ROUNDS` rounds. Nothing here is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use capstan_e2e::ControlPlane;
use capstan_e2e::bench::{alternating_cpu, kubectl, median};
use capstan_e2e::controller::{NAMESPACE, account_token_for, bind_cluster_role, service_account};
use capstan_e2e::sidecar::{PROJECT_HEADER, SidecarProcess};
use capstan_e2e::suite::with_plane;
use capstan_e2e::{free_address, metric};
use capstan_testkit::{DemoProvider, TokenService, binding_document};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};
use serde_json::{Value, json};

const ROUNDS: usize = 5;
const CHUNKS: usize = 10;
const CHUNK: usize = 200;

/// The bindings, by the kind of credential each sends.
const KINDS: [(&str, &str); 4] = [
    ("none", "plain"),
    ("secret", "keyed"),
    ("workloadIdentity", "workload"),
    ("tokenExchange", "exchanged"),
];

const SETUP: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: capstan-credentials}}
- apiVersion: v1
  kind: Secret
  metadata:
    name: api-key
    namespace: capstan-credentials
    annotations:
      capabilities.assistant.miloapis.com/bindings: keyed
      capabilities.assistant.miloapis.com/hosts: 127.0.0.1
  stringData: {token: bench-key, client: bench-client-secret}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata: {name: sidecar-credentials, namespace: capstan-credentials}
  rules:
  - {apiGroups: [""], resources: [secrets], resourceNames: [api-key, client-key], verbs: [get, list, watch]}
- apiVersion: v1
  kind: Secret
  metadata:
    name: client-key
    namespace: capstan-credentials
    annotations:
      capabilities.assistant.miloapis.com/bindings: exchanged
      capabilities.assistant.miloapis.com/hosts: 127.0.0.1
  stringData: {token: bench-client-secret}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: sidecar-credentials, namespace: capstan-credentials}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sidecar-credentials}
  subjects: [{kind: ServiceAccount, name: composer, namespace: capstan-system}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata: {name: sidecar-workload-identity, namespace: capstan-system}
  rules:
  - {apiGroups: [""], resources: [serviceaccounts/token], resourceNames: [composer], verbs: [create]}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: sidecar-workload-identity, namespace: capstan-system}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sidecar-workload-identity}
  subjects: [{kind: ServiceAccount, name: composer, namespace: capstan-system}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: binding-lister}
  rules:
  - {apiGroups: [capabilities.assistant.miloapis.com], resources: [capabilitybindings], verbs: [list]}
"#;

fn main() {
    let report = with_plane("bench-upstream-auth", |plane, runtime| {
        runtime.block_on(bench(plane))
    });
    println!(
        "<!-- bench:upstream_auth -->\n### Upstream credentials (`e2e/benches/upstream_auth.rs`)\n\n```text"
    );
    println!("{}", report.trim());
    println!("```\n<!-- /bench:upstream_auth -->");
}

/// The four bindings on `provider`, the exchange at `tokens`.
fn bindings(provider: &DemoProvider, tokens: &TokenService) -> String {
    let endpoint = provider.url("/mcp");
    let items: Vec<Value> = KINDS
        .iter()
        .map(|(kind, name)| {
            let mut binding = binding_document(name, name, &endpoint, &["streams_list"]);
            binding["apiVersion"] = json!("capabilities.assistant.miloapis.com/v1alpha1");
            binding["kind"] = json!("CapabilityBinding");
            let auth = match *kind {
                "secret" => json!({"secret": {"name": "api-key", "key": "token"}}),
                "workloadIdentity" => json!({"workloadIdentity": {"audience": "127.0.0.1"}}),
                "tokenExchange" => json!({"tokenExchange": {
                    "tokenEndpoint": tokens.token_endpoint(),
                    "audience": "127.0.0.1",
                    "subjectTokenType": "JWT",
                    "client": {"id": "capstan", "secret": {"name": "client-key", "key": "token"}},
                }}),
                _ => Value::Null,
            };
            if !auth.is_null() {
                binding["spec"]["tools"]["mcpServers"][0]["auth"] = auth;
            }
            binding
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

async fn bench(plane: &ControlPlane) -> String {
    let admin = plane.client().await.unwrap();
    plane.install_crds(&admin).await.unwrap();
    kubectl(plane, &["apply", "-f", "config/rbac/sidecar.yaml"], None);
    let composer = service_account(plane, "composer").unwrap();
    bind_cluster_role(plane, "composer", "capstan-sidecar").unwrap();
    kubectl(plane, &["apply", "-f", "-"], Some(SETUP));
    service_account(plane, "caller").unwrap();
    bind_cluster_role(plane, "caller", "binding-lister").unwrap();
    let sa_key = plane.state_dir().join("pki/sa.pub").display().to_string();
    let tokens = TokenService::start(&[
        "--subject-key-file",
        &sa_key,
        "--subject-audience",
        "token-service",
        "--audience",
        "127.0.0.1",
        "--client",
        "capstan:bench-client-secret",
    ]);
    let provider = DemoProvider::start(&[]);
    kubectl(
        plane,
        &["apply", "-f", "-"],
        Some(&bindings(&provider, &tokens)),
    );
    let metrics = free_address().unwrap();
    let account = format!("{NAMESPACE}/composer");
    let sidecar = SidecarProcess::start(
        plane,
        &composer,
        "bench-upstream-auth",
        &[
            ("CAPABILITY_MCP_ENDPOINT_HOSTS", "127.0.0.1"),
            ("CAPSTAN_BASE_TOOLS", "off"),
            ("CAPSTAN_METRICS_ADDRESS", &metrics),
            ("CAPSTAN_WORKLOAD_SERVICE_ACCOUNT", &account),
            ("CAPSTAN_TOKEN_ENDPOINT_HOSTS", "127.0.0.1"),
            ("CAPSTAN_METERING_SINK", "off"),
        ],
    )
    .unwrap();
    let started = Instant::now();
    while metric(&metrics, "capstan_sidecar_crd_synced ") != 1.0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the sidecar did not sync"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let caller = account_token_for(plane, NAMESPACE, "caller", &["token-service"]).unwrap();
    let session = session(&sidecar, &caller).await;
    let tools = session.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), KINDS.len(), "{tools:?}");
    let exchanges = tokens.stats()["exchanges"].clone();
    let report = call_cpu(&sidecar, &session).await;
    let after = tokens.stats()["exchanges"].clone();
    format!(
        "{report}\nExchanges at the token service: {exchanges} at the session's connect, {after} after \
         every call (one per caller until shortly before the token expires)\n"
    )
}

/// A session of the caller holding `token` (initialized: the project is composed).
async fn session(
    sidecar: &SidecarProcess,
    token: &str,
) -> RunningService<RoleClient, ClientConfig> {
    let url = "http://localhost/mcp";
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(HashMap::from([(
            http::HeaderName::from_bytes(PROJECT_HEADER.to_ascii_lowercase().as_bytes()).unwrap(),
            http::HeaderValue::from_static("acme"),
        )]))
        .auth_header(token.to_owned());
    ClientConfig::default()
        .serve(StreamableHttpClientTransport::with_client(
            UnixSocketHttpClient::new(sidecar.socket.to_str().unwrap(), url),
            config,
        ))
        .await
        .expect("initializing a session")
}

async fn call(session: &RunningService<RoleClient, ClientConfig>, tool: &str) {
    let result = session
        .call_tool(CallToolRequestParams::new(tool.to_owned()))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
}

/// The sidecar's CPU per forwarded call of each kind, the kinds taking turns every `CHUNK`
/// calls on one session.
async fn call_cpu(
    sidecar: &SidecarProcess,
    session: &RunningService<RoleClient, ClientConfig>,
) -> String {
    let tools: Vec<String> = KINDS
        .iter()
        .map(|(_, name)| format!("{name}__streams_list"))
        .collect();
    for tool in &tools {
        for _ in 0..50 {
            call(session, tool).await;
        }
    }
    let pid = sidecar.pid();
    let cpu = alternating_cpu(
        KINDS.len(),
        |_| pid,
        (ROUNDS, CHUNKS, CHUNK),
        |i| call(session, &tools[i]),
    )
    .await;
    let medians: Vec<f64> = cpu.iter().map(|runs| median(runs.clone())).collect();
    let mut out = format!(
        "The sidecar's CPU per forwarded call by the credential its binding sends, cached (one \
         session; the kinds take turns every {CHUNK} calls, {} calls per kind a round; medians \
         of {ROUNDS} rounds)\n{:<20} {:>12} {:>12}  rounds\n",
        CHUNK * CHUNKS,
        "auth",
        "µs per call",
        "+µs vs none"
    );
    for (i, (kind, _)) in KINDS.iter().enumerate() {
        out += &format!(
            "{:<20} {:>12.1} {:>12.1}  {:?}\n",
            kind,
            medians[i],
            medians[i] - medians[0],
            cpu[i]
                .iter()
                .map(|v| (v * 10.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
    }
    out
}
