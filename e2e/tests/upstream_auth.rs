//! Who Capstan is to a provider, on a real apiserver (docs/upstream-auth.md): bindings whose MCP
//! servers ask for a Secret, the sidecar's workload identity or the caller's token exchanged at
//! a real RFC 8693 token service (zitadel/oidc's OP, `e2e/tools/tokenservice`, trusting the
//! apiserver's ServiceAccount issuer), served to Python SDK providers that verify every request
//! as real ones would — a key they hold, a TokenReview against the apiserver for their own
//! audience, a JWT against the token service's keys — and called through the Python SDK's
//! client.
//!
//! The oracles are the providers' own counts and what they verified (`/stats`, `whoami`),
//! never the sidecar's; every refusal path shows the provider untouched.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use capstan_e2e::callers::{PROJECT_MEMBERS, audit_file, audit_lines, offerings, run_with_callers};
use capstan_e2e::controller::{
    NAMESPACE, account_token, account_token_for, bind_cluster_role, probing_controller_with,
    service_account,
};
use capstan_e2e::objects::wait_condition;
use capstan_e2e::sidecar::SidecarProcess;
use capstan_e2e::suite::{Env, Outcome, check, take_kept, trial, with_kept};
use capstan_e2e::{HarnessError, free_address, repo_root};
use capstan_testkit::{PythonServer, TokenService, binding_document};
use serde_json::{Value, json};

const PROJECT: &str = "acme";

/// The callers, each with the token `token-of-<name>` (`capstan_e2e::callers`).
const CALLERS: &[&str] = &["alice"];

/// The namespace the sidecar reads Secrets from (its default).
const CREDENTIALS: &str = "capstan-credentials";

/// The values planted in Secrets: no output of the run may carry one.
const FIRST_KEY: &str = "planted-first-key-5b0d1c";
const ROTATED_KEY: &str = "planted-rotated-key-9e44a7";

/// The sidecar's account (its workload identity).
const SIDECAR_ACCOUNT: &str = "composer";

/// The token service's client secret (in a Secret): no output may carry it.
const CLIENT_SECRET: &str = "planted-client-secret-71c3e8";

/// The audience a caller's token carries for the token service (besides the apiserver's).
const EXCHANGE_AUDIENCE: &str = "token-service";

/// Callers with ServiceAccount tokens (what the token service takes as subject tokens): carol
/// and dave are exchanged (dave's tokens only where their expiry is watched, so that no other
/// trial's call keeps one fresh), mallory is refused by the token service.
const CAROL: &str = "carol";
const DAVE: &str = "dave";
const MALLORY: &str = "mallory";

struct World {
    sidecar: SidecarProcess,
    /// Verifies a key from `keys` in `Authorization: Bearer`.
    keyed: PythonServer,
    keys: PathBuf,
    /// Verifies a workload token with a TokenReview for the audience `127.0.0.1`.
    reviewed: PythonServer,
    /// Where every binding whose credential must not be had points: it must see nothing.
    unreached: PythonServer,
    /// Verifies a JWT the token service issued for the audience `127.0.0.1`.
    exchanged: PythonServer,
    tokens: TokenService,
    /// The callers' ServiceAccount tokens, by name.
    carol: String,
    dave: String,
    mallory: String,
    metrics: String,
    audit: String,
}

static WORLD: Mutex<Option<World>> = Mutex::new(None);

fn main() -> ExitCode {
    run_with_callers(
        "upstream_auth",
        CALLERS,
        setup,
        vec![
            trial(
                "a_secret_its_owner_named_should_reach_the_provider_and_a_rotation_the_next_call",
                secret_rotation,
            ),
            trial(
                "a_secret_without_consent_forbidden_or_missing_should_never_leave",
                secret_refusals,
            ),
            trial(
                "a_workload_token_should_pass_the_providers_tokenreview_for_its_audience",
                workload_identity,
            ),
            trial(
                "a_workload_token_for_another_audience_should_never_be_requested_or_be_refused",
                workload_refusals,
            ),
            trial(
                "a_callers_token_exchanged_should_reach_the_provider_as_the_caller_never_itself",
                token_exchange,
            ),
            trial(
                "an_exchanged_token_should_be_exchanged_anew_before_it_expires",
                exchange_refresh,
            ),
            trial(
                "every_exchange_failure_should_be_refused_before_the_provider_saying_what_to_fix",
                exchange_refusals,
            ),
            trial(
                "the_probe_should_authenticate_as_the_controller_and_say_what_needs_a_caller",
                controller_probe,
            ),
            trial(
                "no_output_of_the_run_should_carry_a_credential",
                no_credential_in_outputs,
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
    HarnessError::setup("upstream_auth", message)
}

/// The sidecar may read the Secrets named (and no other) in the credentials namespace, and
/// request tokens of its own account (and no other).
fn sidecar_rbac(secrets: &[&str]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CREDENTIALS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "sidecar-credentials", "namespace": CREDENTIALS},
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": secrets,
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "sidecar-credentials", "namespace": CREDENTIALS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sidecar-credentials"},
         "subjects": [{"kind": "ServiceAccount", "name": SIDECAR_ACCOUNT, "namespace": NAMESPACE}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "sidecar-workload-identity", "namespace": NAMESPACE},
         "rules": [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                    "resourceNames": [SIDECAR_ACCOUNT], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "sidecar-workload-identity", "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sidecar-workload-identity"},
         "subjects": [{"kind": "ServiceAccount", "name": SIDECAR_ACCOUNT, "namespace": NAMESPACE}]}
    ]})
    .to_string()
}

/// A Secret of the credentials namespace holding `token`, consenting to `bindings` and `hosts`.
fn secret(name: &str, token: &str, bindings: &str, hosts: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": CREDENTIALS, "annotations": {
               "capabilities.assistant.miloapis.com/bindings": bindings,
               "capabilities.assistant.miloapis.com/hosts": hosts}},
           "stringData": {"token": token}})
}

/// A binding of one server named like the binding, offering `whoami`, with `auth`.
fn authenticated(name: &str, provider: &PythonServer, auth: Value) -> Value {
    let endpoint = format!("http://{}/mcp", provider.address);
    let mut binding = binding_document(name, name, &endpoint, &["whoami"]);
    binding["apiVersion"] = json!("capabilities.assistant.miloapis.com/v1alpha1");
    binding["kind"] = json!("CapabilityBinding");
    binding["spec"]["tools"]["mcpServers"][0]["auth"] = auth;
    binding
}

fn secret_auth(name: &str) -> Value {
    json!({"secret": {"name": name, "key": "token"}})
}

fn workload_auth(audience: &str) -> Value {
    json!({"workloadIdentity": {"audience": audience}})
}

/// The key provider, its keys file, and the TokenReview provider.
fn providers(env: &Env) -> Result<(PythonServer, PathBuf, PythonServer), HarnessError> {
    let state = env.plane.state_dir();
    let keys = state.join("provider-keys.txt");
    std::fs::write(&keys, format!("{FIRST_KEY}\n")).map_err(|source| HarnessError::Io {
        path: keys.clone(),
        source,
    })?;
    let keyed = PythonServer::start_script_with(
        "e2e/python/authenticated_provider.py",
        &[&json!({"mode": "keys", "keys_file": keys}).to_string()],
    );
    service_account(&env.plane, "provider")?;
    bind_cluster_role(&env.plane, "provider", "system:auth-delegator")?;
    let token = state.join("provider-token");
    let provider_token = account_token(&env.plane, NAMESPACE, "provider")?;
    std::fs::write(&token, provider_token).map_err(|source| HarnessError::Io {
        path: token.clone(),
        source,
    })?;
    let reviewed = PythonServer::start_script_with(
        "e2e/python/authenticated_provider.py",
        &[&json!({
            "mode": "tokenreview",
            "apiserver": apiserver_url(env)?,
            "ca_file": state.join("pki/ca.crt"),
            "token_file": token,
            "audience": "127.0.0.1",
        })
        .to_string()],
    );
    Ok((keyed, keys, reviewed))
}

/// The apiserver's URL, from the admin kubeconfig.
fn apiserver_url(env: &Env) -> Result<String, HarnessError> {
    let text =
        std::fs::read_to_string(env.plane.kubeconfig()).map_err(|source| HarnessError::Io {
            path: env.plane.kubeconfig().to_owned(),
            source,
        })?;
    text.lines()
        .find_map(|line| line.trim().strip_prefix("server: "))
        .map(str::to_owned)
        .ok_or_else(|| harness("no server in the admin kubeconfig".into()))
}

fn setup(env: &Env) -> Result<(), HarnessError> {
    let kubectl = |input: &str| {
        env.plane
            .kubectl_ok(&["apply", "-f", "-"], Some(input))
            .map_err(harness)
    };
    env.plane
        .kubectl_ok(&["apply", "-f", "config/rbac/sidecar.yaml"], None)
        .map_err(harness)?;
    kubectl(PROJECT_MEMBERS)?;
    let composer = service_account(&env.plane, SIDECAR_ACCOUNT)?;
    bind_cluster_role(&env.plane, SIDECAR_ACCOUNT, "capstan-sidecar")?;
    // Readable: the consenting one, two without consent, one that does not exist. Not
    // readable: `forbidden-key`, which consents to everything.
    // The example's Secret, RBAC and binding (its account made the sidecar's): the sidecar may
    // read the example's Secret, which the suite's own then replaces.
    let example = std::fs::read_to_string(repo_root().join("examples/upstream-auth/secret.yaml"))
        .map_err(|e| harness(format!("the example: {e}")))?
        .replace("namespace: assistants", &format!("namespace: {NAMESPACE}"))
        .replace("name: assistant\n", &format!("name: {SIDECAR_ACCOUNT}\n"));
    kubectl(&example)?;
    kubectl(&sidecar_rbac(&[
        "stray-key",
        "elsewhere-key",
        "missing-key",
        "exchange-client",
    ]))?;
    let (keyed, keys, reviewed) = providers(env)?;
    let unreached = PythonServer::start_script_with(
        "e2e/python/authenticated_provider.py",
        &[&json!({"mode": "keys", "keys_file": keys}).to_string()],
    );
    let secrets = json!({"apiVersion": "v1", "kind": "List", "items": [
        secret("streamco-api-key", FIRST_KEY, "keyed", "127.0.0.1"),
        secret("stray-key", FIRST_KEY, "someone-else", "127.0.0.1"),
        secret("elsewhere-key", FIRST_KEY, "elsewhere", "provider.example"),
        secret("forbidden-key", FIRST_KEY, "forbidden,exforbidden", "127.0.0.1"),
        secret("exchange-client", CLIENT_SECRET, "exchanged,exdown,extarget", "127.0.0.1"),
    ]});
    kubectl(&secrets.to_string())?;
    let bindings = json!({"apiVersion": "v1", "kind": "List", "items": [
        authenticated("keyed", &keyed, secret_auth("streamco-api-key")),
        authenticated("stray", &unreached, secret_auth("stray-key")),
        authenticated("elsewhere", &unreached, secret_auth("elsewhere-key")),
        authenticated("forbidden", &unreached, secret_auth("forbidden-key")),
        authenticated("missing", &unreached, secret_auth("missing-key")),
        authenticated("workload", &reviewed, workload_auth("127.0.0.1")),
        authenticated("misaimed", &unreached, workload_auth("provider.example")),
        authenticated("otheraudience", &reviewed, workload_auth("other-audience")),
    ]});
    let exchange = exchange_world(env)?;
    let (tokens, exchanged) = (&exchange.tokens, &exchange.provider);
    let endpoint = tokens.token_endpoint();
    let down = format!("http://{}/oauth/token", free_address()?);
    let offside = endpoint.replace("127.0.0.1", "localhost");
    let exchanges = json!({"apiVersion": "v1", "kind": "List", "items": [
        authenticated("exchanged", exchanged, exchange_auth(&endpoint, "127.0.0.1", "exchange-client")),
        authenticated("exdown", &unreached, exchange_auth(&down, "127.0.0.1", "exchange-client")),
        authenticated("exoffside", &unreached, exchange_auth(&offside, "127.0.0.1", "exchange-client")),
        authenticated("extarget", &unreached, exchange_auth(&endpoint, "other-audience", "exchange-client")),
        authenticated("exforbidden", &unreached, exchange_auth(&endpoint, "127.0.0.1", "forbidden-key")),
    ]});
    kubectl(&exchanges.to_string())?;
    kubectl(&bindings.to_string())?;
    let metrics = free_address()?;
    let audit = audit_file(env.plane.state_dir());
    let account = format!("{NAMESPACE}/{SIDECAR_ACCOUNT}");
    let sidecar = SidecarProcess::start(
        &env.plane,
        &composer,
        "upstream-auth",
        &[
            ("CAPABILITY_MCP_ENDPOINT_HOSTS", "127.0.0.1"),
            ("CAPSTAN_BASE_TOOLS", "off"),
            ("CAPSTAN_METRICS_ADDRESS", &metrics),
            ("CAPSTAN_AUDIT_SINK", &audit),
            ("CAPSTAN_WORKLOAD_SERVICE_ACCOUNT", &account),
            ("CAPSTAN_WORKLOAD_AUDIENCES", "other-audience=127.0.0.1"),
            ("CAPSTAN_TOKEN_ENDPOINT_HOSTS", "127.0.0.1"),
        ],
    )?;
    sidecar.wait_synced(&env.runtime, &metrics)?;
    if let Ok(mut world) = WORLD.lock() {
        *world = Some(World {
            sidecar,
            keyed,
            keys,
            reviewed,
            unreached,
            exchanged: exchange.provider,
            tokens: exchange.tokens,
            carol: exchange.carol,
            dave: exchange.dave,
            mallory: exchange.mallory,
            metrics,
            audit,
        });
    }
    Ok(())
}

/// The token service, its provider and its callers.
struct ExchangeWorld {
    tokens: TokenService,
    provider: PythonServer,
    carol: String,
    dave: String,
    mallory: String,
}

/// The token service (trusting the apiserver's ServiceAccount issuer; client `capstan` with
/// [`CLIENT_SECRET`]; tokens for `127.0.0.1` only, six seconds each; mallory refused), the
/// provider that verifies what it issues, and the callers' tokens — each a ServiceAccount
/// token for the apiserver and the token service, admitted to the project.
fn exchange_world(env: &Env) -> Result<ExchangeWorld, HarnessError> {
    let state = env.plane.state_dir();
    let sa_key = state.join("pki/sa.pub").display().to_string();
    let client = format!("capstan:{CLIENT_SECRET}");
    let refused = format!("system:serviceaccount:{NAMESPACE}:{MALLORY}");
    let tokens = TokenService::start(&[
        "--subject-key-file",
        &sa_key,
        "--subject-audience",
        EXCHANGE_AUDIENCE,
        "--actor-audience",
        "127.0.0.1",
        "--audience",
        "127.0.0.1",
        "--client",
        &client,
        "--refuse-subject",
        &refused,
        "--token-ttl",
        "6s",
    ]);
    let provider = PythonServer::start_script_with(
        "e2e/python/authenticated_provider.py",
        &[
            &json!({"mode": "jwt", "jwks_url": tokens.jwks(), "issuer": tokens.issuer(),
                  "audience": "127.0.0.1"})
            .to_string(),
        ],
    );
    let member = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "project-members-accounts"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "project-member"},
        "subjects": [{"kind": "ServiceAccount", "name": CAROL, "namespace": NAMESPACE},
                     {"kind": "ServiceAccount", "name": DAVE, "namespace": NAMESPACE},
                     {"kind": "ServiceAccount", "name": MALLORY, "namespace": NAMESPACE}]});
    env.plane
        .kubectl_ok(&["apply", "-f", "-"], Some(&member.to_string()))
        .map_err(harness)?;
    let token = |name: &str| -> Result<String, HarnessError> {
        service_account(&env.plane, name)?;
        account_token_for(&env.plane, NAMESPACE, name, &[EXCHANGE_AUDIENCE])
    };
    Ok(ExchangeWorld {
        carol: token(CAROL)?,
        dave: token(DAVE)?,
        mallory: token(MALLORY)?,
        tokens,
        provider,
    })
}

/// A token exchange at `endpoint` for `audience`, the client's secret in Secret `client`, the
/// sidecar's workload token sent as the actor.
fn exchange_auth(endpoint: &str, audience: &str, client: &str) -> Value {
    json!({"tokenExchange": {
        "tokenEndpoint": endpoint,
        "audience": audience,
        "subjectTokenType": "JWT",
        "actor": {"audience": "127.0.0.1"},
        "client": {"id": "capstan", "secret": {"name": client, "key": "token"}},
    }})
}

fn with_world<T>(
    body: impl FnOnce(&World) -> Result<T, libtest_mimic::Failed>,
) -> Result<T, libtest_mimic::Failed> {
    with_kept(&WORLD, body)
}

/// What a provider counted (`/stats`): accepted, refused, calls, reasons.
fn stats(provider: &PythonServer) -> Value {
    let output = std::process::Command::new("curl")
        .args(["-s", &format!("http://{}/stats", provider.address)])
        .output();
    output
        .ok()
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or(Value::Null)
}

fn count(stats: &Value, what: &str) -> u64 {
    stats[what].as_u64().unwrap_or(u64::MAX)
}

/// The Python SDK client's report of `ops` against the sidecar, as alice, on a session.
fn report(world: &World, ops: &Value) -> Vec<Value> {
    offerings(&world.sidecar, PROJECT, "legacy", ops)
}

fn call(tool: &str) -> Value {
    json!({"op": "call", "client": "alice", "name": tool})
}

/// The tool error of a call op's result, if it is one.
fn tool_error(entry: &Value) -> Option<&Value> {
    (entry["ok"]["isError"] == true).then_some(&entry["ok"]["structuredContent"]["error"])
}

/// `whoami`'s answer in a call op's result (its text, JSON).
fn whoami(entry: &Value) -> Value {
    entry["ok"]["content"][0]["text"]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or(Value::Null)
}

/// What `provider` has seen at all: every request, accepted or refused.
fn seen(provider: &PythonServer) -> u64 {
    let stats = stats(provider);
    count(&stats, "accepted").saturating_add(count(&stats, "refused"))
}

/// Finding: a provider that wants an API key could not be fronted. The Secret its owner
/// annotated for binding `keyed` and host 127.0.0.1 reaches the provider as
/// `Authorization: Bearer`, and once it is rotated (and the provider has retired the old key),
/// a call on the same session carries the new one: no restart, no new session.
fn secret_rotation(env: &Env) -> Outcome {
    with_world(|world| {
        let before = stats(&world.keyed);
        let rotated_keys = format!("retired\n{ROTATED_KEY}\n");
        let rotated = secret("streamco-api-key", ROTATED_KEY, "keyed", "127.0.0.1").to_string();
        let kubeconfig = env.plane.kubeconfig().display().to_string();
        let ops = json!([
            call("keyed__whoami"),
            {"op": "write", "client": "alice", "path": world.keys, "text": rotated_keys},
            {"op": "run", "client": "alice", "input": rotated,
             "argv": ["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-"]},
            {"op": "call", "client": "alice", "name": "keyed__whoami",
             "until": {"contains": "key-1"}, "seconds": 10},
        ]);
        let report = report(world, &ops);
        check(whoami(&report[0])["subject"] == "key-0", || {
            format!("the first call did not carry the first key: {report:?}")
        })?;
        check(report[2]["ok"]["status"] == 0, || {
            format!("rotating: {report:?}")
        })?;
        check(whoami(&report[3])["subject"] == "key-1", || {
            format!("no call carried the rotated key: {report:?}")
        })?;
        let after = stats(&world.keyed);
        check(
            count(&after, "calls") >= count(&before, "calls") + 2,
            || format!("the provider did not serve both calls: {before} -> {after}"),
        )
    })
}

/// Finding: a binding author could aim a Secret they cannot read at any binding or host. A
/// Secret that does not name the binding, one that names another host, one the sidecar may
/// not read and one that does not exist: each call is refused as `credential_unavailable`,
/// naming the binding, the server and what to fix, and the provider sees nothing.
fn secret_refusals(_env: &Env) -> Outcome {
    with_world(|world| {
        let cases = [
            ("stray", "does not name binding stray"),
            ("elsewhere", "does not name the host of"),
            ("forbidden", "may not read it: grant its ServiceAccount"),
            ("missing", "does not exist: create it"),
        ];
        let ops: Vec<Value> = cases
            .iter()
            .map(|(binding, _)| call(&format!("{binding}__whoami")))
            .collect();
        let report = report(world, &Value::Array(ops));
        for (i, (binding, expected)) in cases.iter().enumerate() {
            let error = tool_error(&report[i]);
            let message = error.map(|e| e["message"].as_str().unwrap_or_default());
            check(
                error.is_some_and(|e| e["kind"] == "credential_unavailable")
                    && message.is_some_and(|m| {
                        m.contains(expected)
                            && m.contains(&format!("MCP server {binding} of binding {binding}"))
                    }),
                || format!("{binding}: {}", report[i]),
            )?;
        }
        check(seen(&world.unreached) == 0, || {
            format!("the provider was reached: {}", stats(&world.unreached))
        })
    })
}

/// Finding: an in-cluster provider could not tell which workload called it. The sidecar's
/// token, asked of the TokenRequest API for the audience the binding names (the endpoint's
/// host), passes the provider's own TokenReview: it sees the sidecar's ServiceAccount, and
/// only its own audience.
fn workload_identity(_env: &Env) -> Outcome {
    with_world(|world| {
        let report = report(world, &json!([call("workload__whoami")]));
        let who = whoami(&report[0]);
        check(
            who["subject"] == format!("system:serviceaccount:{NAMESPACE}:{SIDECAR_ACCOUNT}")
                && who["audiences"] == json!(["127.0.0.1"]),
            || format!("the provider verified {report:?}"),
        )
    })
}

/// Finding: a binding could have the sidecar mint a token for any audience and send it to
/// its own endpoint. An audience that is not the endpoint's host is never requested (the call
/// is `credential_unavailable` and the provider sees nothing); one the platform allows for the
/// host but the provider does not accept is refused by the provider's TokenReview, no call
/// reaches it, and the binding's tools never appear.
fn workload_refusals(_env: &Env) -> Outcome {
    with_world(|world| {
        let before = stats(&world.reviewed);
        let report = report(
            world,
            &json!([call("misaimed__whoami"), call("otheraudience__whoami")]),
        );
        let misaimed = tool_error(&report[0]);
        check(
            misaimed.is_some_and(|e| {
                e["kind"] == "credential_unavailable"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("may not be sent to 127.0.0.1"))
            }),
            || format!("misaimed: {}", report[0]),
        )?;
        check(report[1]["error"].is_object(), || {
            format!("a token the provider refuses served a call: {}", report[1])
        })?;
        let after = stats(&world.reviewed);
        let reasons = after["reasons"].to_string();
        check(
            seen(&world.unreached) == 0
                && count(&after, "calls") == count(&before, "calls")
                && count(&after, "refused") > count(&before, "refused")
                && reasons.contains("other-audience"),
            || format!("the provider: {before} -> {after}"),
        )
    })
}

/// A call op of `tool` as the ServiceAccount caller `name` with `token`.
fn call_as(name: &str, token: &str, tool: &str) -> Value {
    json!({"op": "call", "client": name, "token": token, "name": tool})
}

fn exchanges(world: &World, what: &str) -> u64 {
    count(&world.tokens.stats(), what)
}

/// Finding: a provider acting for a person could not learn who the person was without being
/// handed their platform token. carol's calls reach the provider with a token the token
/// service issued: its subject carol, its audience the provider, the sidecar as actor — one
/// exchange for the session's connect and both calls — and carol's own token never reaches it.
fn token_exchange(_env: &Env) -> Outcome {
    with_world(|world| {
        let before = exchanges(world, "exchanges");
        let provider_before = stats(&world.exchanged);
        let tool = "exchanged__whoami";
        let ops = json!([
            call_as(CAROL, &world.carol, tool),
            call_as(CAROL, &world.carol, tool)
        ]);
        let report = report(world, &ops);
        let who = whoami(&report[0]);
        let audiences = who["audiences"].to_string();
        check(
            who["subject"] == format!("system:serviceaccount:{NAMESPACE}:{CAROL}")
                && who["act"]["sub"]
                    == format!("system:serviceaccount:{NAMESPACE}:{SIDECAR_ACCOUNT}")
                && audiences.contains("127.0.0.1")
                && !audiences.contains(EXCHANGE_AUDIENCE),
            || format!("the provider verified {report:?}"),
        )?;
        check(whoami(&report[1]) == who, || format!("{report:?}"))?;
        let after = exchanges(world, "exchanges");
        check(after == before + 1, || {
            format!(
                "{} exchanges for one session (one expected)",
                after - before
            )
        })?;
        let provider_after = stats(&world.exchanged);
        check(
            count(&provider_after, "refused") == count(&provider_before, "refused")
                && !provider_after["tokens"].to_string().contains(&world.carol),
            || format!("the provider saw the caller's own token: {provider_after}"),
        )
    })
}

/// Finding: a cached exchanged token could outlive itself. The service issues tokens for six
/// seconds (five by `expires_in`): dave's session exchanges once at its connect and its first
/// call reuses that token; a call four seconds later is made with a token exchanged anew, and
/// the provider never refuses one as expired.
fn exchange_refresh(_env: &Env) -> Outcome {
    with_world(|world| {
        let before = exchanges(world, "exchanges");
        let refused = count(&stats(&world.exchanged), "refused");
        let tool = "exchanged__whoami";
        let ops = json!([
            call_as(DAVE, &world.dave, tool),
            {"op": "run", "client": DAVE, "argv": ["sleep", "4"]},
            call_as(DAVE, &world.dave, tool),
        ]);
        let report = report(world, &ops);
        check(
            whoami(&report[0])["subject"] == whoami(&report[2])["subject"]
                && whoami(&report[2])["subject"].is_string(),
            || format!("{report:?}"),
        )?;
        let after = exchanges(world, "exchanges");
        check(after == before + 2, || {
            format!(
                "{} exchanges across the token's expiry (two expected)",
                after - before
            )
        })?;
        check(
            count(&stats(&world.exchanged), "refused") == refused,
            || "the provider refused a token".into(),
        )
    })
}

/// Finding: an exchange that failed could look like the provider's fault, or be sent on
/// without a token. The token service refusing mallory, a token endpoint down, one off the
/// allow-list, an audience the service does not issue and a client secret the sidecar may not
/// read: each call is `credential_unavailable` naming what failed (retryable only while the
/// service is down), and no provider sees a request.
fn exchange_refusals(_env: &Env) -> Outcome {
    with_world(|world| {
        let exchanged_before = stats(&world.exchanged);
        let refused_before = exchanges(world, "refused");
        let cases = [
            (
                MALLORY,
                &world.mallory,
                "exchanged",
                "refused the exchange: invalid_grant",
                false,
            ),
            (CAROL, &world.carol, "exdown", "could not be reached", true),
            (CAROL, &world.carol, "exoffside", "is not dialed", false),
            (
                CAROL,
                &world.carol,
                "extarget",
                "refused the exchange: invalid_target",
                false,
            ),
            (CAROL, &world.carol, "exforbidden", "may not read it", false),
        ];
        let ops: Vec<Value> = cases
            .iter()
            .map(|(name, token, binding, ..)| call_as(name, token, &format!("{binding}__whoami")))
            .collect();
        let report = report(world, &Value::Array(ops));
        for (i, (_, _, binding, expected, retryable)) in cases.iter().enumerate() {
            let error = tool_error(&report[i]);
            check(
                error.is_some_and(|e| {
                    e["kind"] == "credential_unavailable"
                        && e["retryable"] == *retryable
                        && e["message"].as_str().is_some_and(|m| {
                            m.contains(expected) && m.contains(&format!("of binding {binding}"))
                        })
                }),
                || format!("{binding}: {}", report[i]),
            )?;
        }
        let exchanged_after = stats(&world.exchanged);
        check(
            count(&exchanged_after, "refused") == count(&exchanged_before, "refused")
                && seen(&world.unreached) == 0
                && exchanges(world, "refused") > refused_before,
            || {
                format!(
                    "{exchanged_before} -> {exchanged_after}, {}",
                    world.tokens.stats()
                )
            },
        )
    })
}

/// Finding: the Composed condition reported a provider down whenever it wanted a credential.
/// The controller's probe authenticates as the controller — the Secrets it may read (when they
/// consent to the binding), its own workload token — so those bindings are Composed; one
/// whose Secret does not consent, or whose audience is not its host, is `CredentialUnavailable`
/// saying what to fix; and a token exchange, which only a caller could make, is Composed with
/// the condition saying it was not probed.
fn controller_probe(env: &Env) -> Outcome {
    let hosts = ["127.0.0.1".to_owned()];
    let prober = "prober";
    let account = format!("{NAMESPACE}/{prober}");
    // The controller may read the two Secrets and request tokens of its own account.
    let grants = sidecar_rbac(&["streamco-api-key", "stray-key"])
        .replace(SIDECAR_ACCOUNT, prober)
        .replace("sidecar-", "prober-");
    env.plane
        .kubectl_ok(&["apply", "-f", "-"], Some(&grants))
        .map_err(|e| format!("granting the prober: {e}"))?;
    let mut controller = probing_controller_with(
        &env.plane,
        prober,
        &hosts,
        (60, 30),
        &["--workload-service-account", &account],
    )?;
    let expect = [
        ("keyed", "True", "Composed", "1 tools composed"),
        ("workload", "True", "Composed", "1 tools composed"),
        (
            "exchanged",
            "True",
            "Composed",
            "not probed without a caller",
        ),
        (
            "stray",
            "False",
            "CredentialUnavailable",
            "does not name binding stray",
        ),
        (
            "misaimed",
            "False",
            "CredentialUnavailable",
            "may not be sent to 127.0.0.1",
        ),
    ];
    let outcome = env.runtime.block_on(async {
        for (binding, status, reason, said) in expect {
            let condition = wait_condition(
                &env.client,
                "CapabilityBinding",
                binding,
                "Composed",
                (status, reason),
                Duration::from_secs(60),
            )
            .await?;
            check(condition.message.contains(said), || {
                format!("{binding}: {}", condition.message)
            })?;
        }
        Ok(())
    });
    controller.stop();
    outcome
}

/// Finding: a credential could leak into what operators read. After every trial, neither
/// planted key appears in the sidecar's log, metering events, audit lines, metrics or its
/// composition as inspected.
fn no_credential_in_outputs(_env: &Env) -> Outcome {
    with_world(|world| {
        let (_, _, inspected) = world.sidecar.request(
            "GET",
            "/v1/composition",
            &[
                ("X-Capstan-Project", PROJECT),
                ("authorization", "Bearer token-of-alice"),
            ],
            None,
        );
        let metrics = std::process::Command::new("curl")
            .args(["-s", &format!("http://{}/metrics", world.metrics)])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let outputs = [
            ("log", world.sidecar.log_text()),
            (
                "metering",
                std::fs::read_to_string(&world.sidecar.metering).unwrap_or_default(),
            ),
            ("audit", format!("{:?}", audit_lines(&world.audit))),
            ("metrics", metrics),
            ("inspect", inspected.clone()),
        ];
        check(inspected.contains("keyed"), || {
            format!("the inspection answered nothing: {inspected}")
        })?;
        let tokens = stats(&world.reviewed)["tokens"].clone();
        let workload: Vec<&str> = tokens
            .as_array()
            .map(|t| t.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        check(!workload.is_empty(), || {
            "the TokenReview provider accepted no token to look for".into()
        })?;
        let exchanged = stats(&world.exchanged)["tokens"].clone();
        let exchanged: Vec<&str> = exchanged
            .as_array()
            .map(|t| t.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        check(!exchanged.is_empty(), || {
            "the JWT provider accepted no token to look for".into()
        })?;
        let planted = [
            FIRST_KEY,
            ROTATED_KEY,
            CLIENT_SECRET,
            world.carol.as_str(),
            world.dave.as_str(),
            world.mallory.as_str(),
        ]
        .into_iter()
        .chain(workload)
        .chain(exchanged);
        for (i, value) in planted.enumerate() {
            for (name, text) in &outputs {
                check(!text.contains(value), || {
                    format!("the {name} carries credential #{i}")
                })?;
            }
        }
        Ok(())
    })
}
