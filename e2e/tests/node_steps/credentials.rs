//! A sidecar in a real pod authenticating to a provider in another (docs/upstream-auth.md
//! "Workload identity"): the chart's RBAC lets the assistant's account request tokens of
//! itself, the sidecar asks the TokenRequest API for one bound to its pod and the provider's
//! audience, and the apiserver's own TokenReview — what the provider would ask — says who it
//! is, for which audience, from which pod.

use capstan_e2e::kubenode::Node;
use libtest_mimic::Failed;
use serde_json::{Value, json};

use super::{
    PERSON, PROJECT, PROVIDER_HOST, apply, binding, capstanctl, person_token, provider_requests,
    wait_for_conditions,
};

/// The binding whose server authenticates with the sidecar's workload identity.
pub const BINDING: &str = "workload-bound";

/// The environment the sidecar template renders for `credentials: {workloadIdentity: true}`
/// (templates/_sidecar.tpl; the install suite checks the template renders it).
pub fn workload_identity_env() -> Vec<Value> {
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    vec![
        field("CAPSTAN_POD_NAMESPACE", "metadata.namespace"),
        field("CAPSTAN_POD_SERVICE_ACCOUNT", "spec.serviceAccountName"),
        json!({"name": "CAPSTAN_WORKLOAD_SERVICE_ACCOUNT",
               "value": "$(CAPSTAN_POD_NAMESPACE)/$(CAPSTAN_POD_SERVICE_ACCOUNT)"}),
        field("CAPSTAN_POD_NAME", "metadata.name"),
        field("CAPSTAN_POD_UID", "metadata.uid"),
    ]
}

/// The chart's credentials RBAC for the assistant's account, as `helm template` renders it
/// (`credentials.sidecarServiceAccounts`), applied.
fn grant_tokens_of_itself(node: &Node) -> Result<(), Failed> {
    let text = node.helm(&[
        "template",
        "capstan",
        "charts/capstan",
        "--namespace",
        "capstan",
        "--show-only",
        "templates/credentials-rbac.yaml",
        "--set-json",
        r#"credentials={"sidecarServiceAccounts": [{"namespace": "assistants", "name": "assistant"}]}"#,
    ])?;
    if !text.contains("serviceaccounts/token") {
        return Err(format!("the chart rendered no token grant:\n{text}").into());
    }
    node.kubectl(&["apply", "-f", "-"], Some(&text))
        .map(drop)
        .map_err(Failed::from)
}

/// The `Authorization` headers the provider recorded on requests of `binding`'s session.
fn bearer_tokens(node: &Node) -> Result<Vec<String>, Failed> {
    let requests = provider_requests(node)?;
    Ok(requests
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|r| r["headers"]["authorization"].as_str())
        .filter_map(|value| value.strip_prefix("Bearer "))
        .map(str::to_owned)
        .collect())
}

/// Finding: an in-cluster provider could not tell which workload called it. With the chart's
/// RBAC (tokens of itself only), the sidecar in the assistant pod sends a token the apiserver's
/// TokenReview accepts for the provider's audience — and for no other — naming the assistant's
/// account and its pod; the person's own token never reaches the provider.
pub fn sidecar_authenticates_as_its_pod(node: &Node) -> Result<(), Failed> {
    grant_tokens_of_itself(node)?;
    let mut bound = binding(BINDING);
    bound["spec"]["tools"]["mcpServers"][0]["auth"] =
        json!({"workloadIdentity": {"audience": PROVIDER_HOST}});
    apply(node, &bound)?;
    let before = bearer_tokens(node)?.len();
    let token = person_token(node, PERSON)?;
    let tool = format!("{}__streams_list", BINDING.replace('-', "_"));
    let answer = capstanctl(
        node,
        &["call", "--project", PROJECT, "--token", &token, &tool],
    )?;
    if !answer.contains("clickstream") {
        return Err(format!("capstanctl call {tool} printed:\n{answer}").into());
    }
    let tokens = bearer_tokens(node)?;
    let sent = tokens
        .get(before..)
        .and_then(<[String]>::last)
        .ok_or("the provider recorded no bearer token for the bound binding")?;
    if tokens.contains(&token) {
        return Err("the person's own token reached the provider".into());
    }
    let review = |audience: &str| -> Result<Value, Failed> {
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                            "spec": {"token": sent, "audiences": [audience]}});
        let text = node.kubectl(
            &["create", "-f", "-", "-o", "json"],
            Some(&review.to_string()),
        )?;
        serde_json::from_str(&text).map_err(|e| format!("TokenReview: {e}").into())
    };
    let reviewed = review(PROVIDER_HOST)?;
    let status = &reviewed["status"];
    let pod = &status["user"]["extra"]["authentication.kubernetes.io/pod-name"];
    if status["authenticated"] != true
        || status["user"]["username"] != "system:serviceaccount:assistants:assistant"
        || *pod != json!(["assistant"])
    {
        return Err(
            format!("the provider's TokenReview of the sidecar's token: {reviewed}").into(),
        );
    }
    let elsewhere = review("https://kubernetes.default.svc")?;
    if elsewhere["status"]["authenticated"] == true {
        return Err(
            format!("the token also passes as the apiserver's audience: {elsewhere}").into(),
        );
    }
    wait_for_conditions(node, BINDING, &["Accepted"], super::PATIENCE).map(drop)
}
