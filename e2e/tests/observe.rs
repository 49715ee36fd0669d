//! What a platform team observes. Traces in a real Jaeger (`capstan_e2e::jaeger`): a sidecar
//! and a controller export OTLP to it, and the trials read the spans back through Jaeger's
//! query API. The chart's dashboard and alerts against what the binaries export
//! (`observe_steps`). The assistant is the Python `mcp` SDK with a trace context of its own; the provider is a
//! Python SDK server that answers with the trace context it received (`e2e/python`), so the
//! test's oracle — the trace id it chose, the span ids Jaeger holds — is computed by neither
//! Capstan nor the code under test.

mod observe_steps;

use std::process::{Command, ExitCode};
use std::time::Duration;

use capstan_e2e::controller::{
    ControllerProcess, NAMESPACE, account_token, bind_cluster_role, service_account,
    service_account_kubeconfig,
};
use capstan_e2e::jaeger::{Jaeger, Span};
use capstan_e2e::objects::{apply, wait_condition};
use capstan_e2e::sidecar::SidecarProcess;
use capstan_e2e::suite::{Env, Outcome, check, eventually, trial};
use capstan_e2e::{output_with_input, repo_root};
use capstan_testkit::{DemoProvider, PythonServer, binding_document, python};
use libtest_mimic::Failed;
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(60);
const PROJECT: &str = "acme";
const ASSISTANT: &str = "assistant";
/// The binding's MCP server entry: composed tools are `traced__<tool>`.
const SERVER: &str = "traced";

fn main() -> ExitCode {
    capstan_e2e::suite::run(
        "observe",
        true,
        |_| Ok(()),
        vec![
            trial(
                "a_tool_call_should_be_one_trace_from_the_assistant_through_the_sidecar_to_the_provider",
                one_trace_per_call,
            ),
            trial(
                "the_controller_should_trace_its_reconciles_status_writes_and_probes",
                controller_spans,
            ),
            trial(
                "every_metric_the_dashboard_and_alerts_name_should_be_exported",
                observe_steps::dashboards_and_alerts_name_exported_metrics,
            ),
            trial(
                "the_alert_rules_should_pass_promtool_and_fire_on_their_conditions",
                observe_steps::alert_rules_pass_promtool_and_fire_on_their_conditions,
            ),
        ],
    )
}

/// A trace context as an instrumented assistant would send it: ids the test chose, and whether
/// the assistant sampled its span.
struct Parent {
    trace_id: String,
    span_id: String,
    sampled: bool,
}

impl Parent {
    fn new() -> Self {
        let hex = |n: usize| -> String {
            (0..n)
                .map(|_| format!("{:x}", fastrand::u8(0..16)))
                .collect()
        };
        Self {
            trace_id: hex(32),
            span_id: hex(16),
            sampled: true,
        }
    }

    /// A parent the assistant did not sample.
    fn unsampled() -> Self {
        Self {
            sampled: false,
            ..Self::new()
        }
    }

    fn traceparent(&self) -> String {
        let flags = if self.sampled { "01" } else { "00" };
        format!("00-{}-{}-{flags}", self.trace_id, self.span_id)
    }
}

/// The sidecar's environment for exporting to `jaeger` at once (100 ms batches).
fn otel_env(jaeger: &Jaeger, service: &str) -> Vec<(String, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), jaeger.otlp.clone()),
        ("OTEL_SERVICE_NAME".into(), service.into()),
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
    ]
}

fn borrowed(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// One call by the Python SDK through the sidecar's socket: the call's printed result.
fn sdk_call(
    sidecar: &SidecarProcess,
    token: &str,
    tool: &str,
    arguments: &Value,
    mode: &str,
    carrier: &str,
    parent: &Parent,
) -> Result<Value, Failed> {
    let script = repo_root().join("e2e/python/traced_client.py");
    let output = output_with_input(
        Command::new(python())
            .arg(script)
            .arg(&sidecar.socket)
            .args([PROJECT, token, tool, &arguments.to_string(), mode, carrier])
            .arg(parent.traceparent()),
        None,
    );
    if !output.status.success() {
        return Err(format!(
            "the SDK client failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            sidecar.log_text()
        )
        .into());
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("the client's output: {e}").into())
}

/// A span a trial waits for: what it is, in words, and how to pick it.
type Wanted<'a> = (&'a str, &'a dyn Fn(&Span) -> bool);

/// The spans of trace `parent` once every span `wanted` names has arrived. A count is no
/// condition: a sidecar exports in batches, so a request that composed can land its
/// composition's spans in Jaeger before the call's own (CI saw four spans without the
/// `tools/call` the trial then looked for).
fn spans_of(
    env: &Env,
    jaeger: &Jaeger,
    parent: &Parent,
    wanted: &[Wanted],
) -> Result<Vec<Span>, Failed> {
    env.runtime.block_on(eventually(
        PATIENCE,
        || async {
            let spans = jaeger.trace(&parent.trace_id).await.ok()?;
            let arrived = wanted.iter().all(|(_, pick)| spans.iter().any(pick));
            arrived.then_some(spans)
        },
        || {
            let names: Vec<&str> = wanted.iter().map(|(what, _)| *what).collect();
            format!(
                "trace {} never held {} in Jaeger",
                parent.trace_id,
                names.join(", ")
            )
        },
    ))
}

fn one<'a>(
    spans: &'a [Span],
    what: &str,
    pick: impl Fn(&Span) -> bool,
) -> Result<&'a Span, Failed> {
    let found: Vec<&Span> = spans.iter().filter(|s| pick(s)).collect();
    match found.as_slice() {
        [span] => Ok(span),
        _ => Err(format!(
            "{} spans are {what}, not one: {:#?}",
            found.len(),
            spans
                .iter()
                .map(|s| (&s.service, &s.name, &s.kind))
                .collect::<Vec<_>>()
        )
        .into()),
    }
}

/// No span of `spans` carries any of `secrets` in a name or attribute (its resource's too).
fn carries_none(spans: &[Span], secrets: &[&str]) -> Outcome {
    for span in spans {
        for secret in secrets {
            check(!span.values.iter().any(|v| v.contains(secret)), || {
                format!(
                    "span {:?} carries {secret:?}: {:?}",
                    span.name, span.attributes
                )
            })?;
        }
    }
    Ok(())
}

/// The spans under `parent` as an indented tree: name, kind, service.
fn tree(spans: &[Span], parent: &str, depth: usize) -> String {
    let mut children: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == parent)
        .collect();
    children.sort_by(|a, b| a.name.cmp(&b.name));
    children
        .iter()
        .map(|span| {
            let kind = span.kind.trim_start_matches("SPAN_KIND_").to_lowercase();
            format!(
                "{}{} [{kind}, {}, span {}]\n{}",
                "  ".repeat(depth),
                span.name,
                span.service,
                span.span_id,
                tree(spans, &span.span_id, depth + 1)
            )
        })
        .collect()
}

/// The trace context the provider said it received (header and `_meta`), from its answer.
fn received(answer: &Value) -> Result<(String, String), Failed> {
    let text = answer["text"][0]
        .as_str()
        .ok_or_else(|| format!("no text in the answer: {answer}"))?;
    let echoed: Value = serde_json::from_str(text).map_err(|e| format!("{e}: {text}"))?;
    let field = |k: &str| echoed[k].as_str().unwrap_or_default().to_owned();
    Ok((field("header"), field("meta")))
}

fn one_trace_per_call(env: &Env) -> Outcome {
    let jaeger = Jaeger::start(&env.plane.state_dir().join("jaeger-calls"))?;
    let upstream = PythonServer::start_script("e2e/python/traced_upstream.py");
    let knowledge = DemoProvider::start(&[]);
    let mut spec = binding_document(
        SERVER,
        SERVER,
        &format!("http://{}/mcp", upstream.address),
        &["echo"],
    )["spec"]
        .clone();
    spec["knowledge"] = json!({ "sources": [
        { "type": "Markdown", "title": "StreamCo", "url": knowledge.url("/llms-full.txt") }
    ]});
    env.runtime
        .block_on(apply(&env.client, "CapabilityBinding", SERVER, spec))?;
    service_account(&env.plane, ASSISTANT)?;
    // `view` is aggregated by kube-controller-manager, which this plane does not run.
    env.plane.kubectl_ok(
        &[
            "create",
            "clusterrole",
            "configmap-reader",
            "--verb=get,list",
            "--resource=configmaps",
        ],
        None,
    )?;
    bind_cluster_role(&env.plane, ASSISTANT, "configmap-reader")?;
    let token = account_token(&env.plane, NAMESPACE, ASSISTANT)?;
    let hosts = format!("127.0.0.1,{}", knowledge.host());
    let mut sidecar_env = otel_env(&jaeger, "capstan-sidecar");
    sidecar_env.extend([
        ("CAPABILITY_MCP_ENDPOINT_HOSTS".into(), hosts.clone()),
        ("CAPABILITY_FETCH_HOSTS".into(), hosts),
        ("CAPSTAN_CALLER_CHECK".into(), "none".into()),
    ]);
    let sidecar = SidecarProcess::start(
        &env.plane,
        env.plane.kubeconfig(),
        "traced",
        &borrowed(&sidecar_env),
    )?;
    let secret = format!("argument-secret-{}", fastrand::u64(..));
    let knowledge_text = env.runtime.block_on(async {
        capstan_testkit::client()
            .get(knowledge.url("/llms-full.txt"))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .text()
            .await
            .map_err(|e| e.to_string())
    })?;
    let knowledge_lines: Vec<&str> = knowledge_text
        .lines()
        .map(str::trim)
        .filter(|l| l.len() > 24)
        .collect();
    check(!knowledge_lines.is_empty(), || {
        "the knowledge has lines to look for".into()
    })?;
    let mut secrets = vec![token.as_str(), secret.as_str()];
    secrets.extend(knowledge_lines.iter().copied());

    // A session revision (answered by the fast path) with the context in `_meta`, and
    // 2026-07-28 (answered through rmcp's handler) with it in the HTTP header.
    for (mode, carrier) in [("legacy", "meta"), ("auto", "header")] {
        let parent = Parent::new();
        let answer = sdk_call(
            &sidecar,
            &token,
            "traced__echo",
            &json!({ "text": secret }),
            mode,
            carrier,
            &parent,
        )?;
        check(answer["isError"] == false, || {
            format!("the call failed: {answer}")
        })?;
        // The assistant's request, the upstream call, the composition with its connect and
        // knowledge fetch (composed by this first request of a session or of the caller's task).
        let is_server = |s: &Span| {
            s.kind == "SPAN_KIND_SERVER" && s.attribute("mcp.method.name") == Some("tools/call")
        };
        let is_client = |s: &Span| s.kind == "SPAN_KIND_CLIENT" && s.name == "tools/call echo";
        let spans = spans_of(
            env,
            &jaeger,
            &parent,
            &[
                ("the sidecar's tools/call", &is_server),
                ("the upstream tools/call", &is_client),
            ],
        )?;
        let server = one(&spans, "the sidecar's tools/call", is_server)?;
        check(
            server.name == "tools/call traced__echo"
                && server.service == "capstan-sidecar"
                && server.parent_span_id == parent.span_id
                && server.attribute("gen_ai.tool.name") == Some("traced__echo")
                && server.attribute("gen_ai.operation.name") == Some("execute_tool")
                && server.attribute("capstan.provider") == Some(&format!("{SERVER}.example"))
                && server
                    .attribute("mcp.protocol.version")
                    .is_some_and(|v| !v.is_empty())
                && server.attribute("error.type").is_none(),
            || format!("{mode}: the server span: {server:#?}"),
        )?;
        let client = one(&spans, "the upstream tools/call", is_client)?;
        check(
            client.parent_span_id == server.span_id
                && client.attribute("server.address") == Some("127.0.0.1")
                && client.attribute("gen_ai.tool.name") == Some("echo"),
            || format!("{mode}: the client span: {client:#?}"),
        )?;
        // The provider joined the trace under Capstan's client span, in both carriers.
        let expected = format!("00-{}-{}-01", parent.trace_id, client.span_id);
        let (header, meta) = received(&answer)?;
        check(header == expected && meta == expected, || {
            format!(
                "{mode}: the provider received header {header:?} and _meta {meta:?}, not {expected:?}"
            )
        })?;
        if mode == "legacy" {
            let session = server.attribute("mcp.session.id").unwrap_or_default();
            check(
                session.len() == 16 && session.bytes().all(|b| b.is_ascii_hexdigit()),
                || format!("a session's id is hashed: {session:?}"),
            )?;
        }
        carries_none(&spans, &secrets)?;
        eprintln!(
            "observe: the span tree of one call ({mode}, context in the {carrier}), as Jaeger returned it:\n{}",
            tree(&spans, &parent.span_id, 1)
        );
    }

    unsampled_parents(env, &jaeger, &sidecar, &token)?;

    // The composition's spans: each in a trace of the request that composed.
    let all = env.runtime.block_on(eventually(
        PATIENCE,
        || async {
            let spans = jaeger.traces_of("capstan-sidecar").await.ok()?;
            let fetched = spans.iter().any(|s| s.name == "fetch knowledge");
            let connected = spans.iter().any(|s| s.name == format!("connect {SERVER}"));
            (fetched && connected).then_some(spans)
        },
        || "no knowledge fetch and connect spans in Jaeger".into(),
    ))?;
    let connect = all
        .iter()
        .find(|s| s.name == format!("connect {SERVER}"))
        .ok_or("no connect span")?;
    check(
        connect.attribute("server.address") == Some("127.0.0.1")
            && connect.attribute("capstan.binding") == Some(SERVER),
        || format!("the connect span: {connect:#?}"),
    )?;
    carries_none(&all, &secrets)?;

    // A base tool acts as the caller on the control plane: its span, and kube's request in it.
    let parent = Parent::new();
    let listed = sdk_call(
        &sidecar,
        &token,
        "resources_list",
        &json!({ "group": "", "version": "v1", "kind": "ConfigMap", "namespace": NAMESPACE }),
        "legacy",
        "meta",
        &parent,
    )?;
    check(listed["isError"] == false, || {
        format!("resources_list: {listed}")
    })?;
    let is_base = |s: &Span| s.name == "base tool resources_list";
    let is_list = |s: &Span| s.name == "list";
    let spans = spans_of(
        env,
        &jaeger,
        &parent,
        &[("the base tool", &is_base), ("kube's list", &is_list)],
    )?;
    let base = one(&spans, "the base tool", is_base)?;
    // kube's LIST (a discovery request for the kind may come before it).
    let http = one(&spans, "kube's list", |s| {
        s.parent_span_id == base.span_id && is_list(s)
    })?;
    check(
        http.attribute("http.status_code") == Some("200")
            && http
                .attribute("http.url")
                .is_some_and(|u| u.contains("/configmaps")),
        || format!("kube's request span: {http:#?}"),
    )?;
    carries_none(&spans, &secrets)
}

/// Calls whose parent the assistant did not sample, in both carriers: the sidecar's sampler
/// (parent-based, the default) follows the parent, so Jaeger holds no span of those traces once
/// a later sampled call's spans have arrived (a sidecar exports in order), and the provider is
/// handed the assistant's trace, not sampled, under a span id that is neither the assistant's
/// nor any span's Jaeger holds.
fn unsampled_parents(env: &Env, jaeger: &Jaeger, sidecar: &SidecarProcess, token: &str) -> Outcome {
    let mut unsampled = Vec::new();
    for (mode, carrier) in [("legacy", "meta"), ("auto", "header")] {
        let parent = Parent::unsampled();
        let answer = sdk_call(
            sidecar,
            token,
            "traced__echo",
            &json!({ "text": "unsampled" }),
            mode,
            carrier,
            &parent,
        )?;
        check(answer["isError"] == false, || {
            format!("the unsampled call failed: {answer}")
        })?;
        let (header, meta) = received(&answer)?;
        let parts: Vec<&str> = header.split('-').collect();
        check(
            header == meta
                && parts.len() == 4
                && parts[1] == parent.trace_id
                && parts[2] != parent.span_id
                && parts[3] == "00",
            || {
                format!(
                    "{mode}: the provider received header {header:?} and _meta {meta:?} for the \
                     unsampled parent {}",
                    parent.traceparent()
                )
            },
        )?;
        unsampled.push(parent);
    }
    let marker = Parent::new();
    sdk_call(
        sidecar,
        token,
        "traced__echo",
        &json!({ "text": "marker" }),
        "legacy",
        "meta",
        &marker,
    )?;
    let is_server = |s: &Span| s.kind == "SPAN_KIND_SERVER" && s.service == "capstan-sidecar";
    spans_of(
        env,
        jaeger,
        &marker,
        &[("the marker call's span", &is_server)],
    )?;
    for parent in &unsampled {
        let spans = env.runtime.block_on(jaeger.trace(&parent.trace_id))?;
        check(spans.is_empty(), || {
            format!(
                "the unsampled trace {} holds {:?}",
                parent.trace_id,
                spans
                    .iter()
                    .map(|s| (&s.service, &s.name))
                    .collect::<Vec<_>>()
            )
        })?;
    }
    Ok(())
}

fn controller_spans(env: &Env) -> Outcome {
    let jaeger = Jaeger::start(&env.plane.state_dir().join("jaeger-controller"))?;
    let upstream = PythonServer::start_script("e2e/python/traced_upstream.py");
    let identity = "traced-controller";
    let kubeconfig = service_account_kubeconfig(&env.plane, identity)?;
    let lease = format!("capstan-e2e-{identity}");
    let _controller = ControllerProcess::start_with_env(
        &env.plane,
        &kubeconfig,
        identity,
        &[
            "--lease-name",
            &lease,
            "--mcp-endpoint-hosts",
            "127.0.0.1",
            "--fetch-hosts",
            "127.0.0.1",
        ],
        &borrowed(&otel_env(&jaeger, "capstan-controller")),
    )?;
    let name = "traced-by-controller";
    let spec = binding_document(
        name,
        SERVER,
        &format!("http://{}/mcp", upstream.address),
        &["echo"],
    )["spec"]
        .clone();
    env.runtime.block_on(async {
        apply(&env.client, "CapabilityBinding", name, spec).await?;
        wait_condition(
            &env.client,
            "CapabilityBinding",
            name,
            "Composed",
            ("True", "Composed"),
            PATIENCE,
        )
        .await
    })?;
    // Waited for as a whole: the exporter sends in batches, so a reconcile's span can be in
    // Jaeger before the status write's PATCH or the probe's compose under it.
    let missing = std::cell::RefCell::new(String::from("no trace of the controller yet"));
    env.runtime.block_on(eventually(
        PATIENCE,
        || async {
            let spans = jaeger.traces_of("capstan-controller").await.ok()?;
            let told = controller_story(&spans, name);
            if let Err(gap) = &told {
                missing.replace(gap.clone());
            }
            told.ok()
        },
        || format!("the controller's spans: {}", missing.borrow()),
    ))
}

/// The spans a reconcile of binding `name` leaves: the reconcile; a status write holding
/// kube's PATCH answered 200; a probe that composed, with compose and the connect to the
/// binding's server as its children. `Err` names the first one missing.
fn controller_story(spans: &[Span], name: &str) -> Result<(), String> {
    let of_binding = |s: &&Span| s.attribute("capstan.object.name") == Some(name);
    spans
        .iter()
        .filter(of_binding)
        .find(|s| s.name == "reconcile CapabilityBinding")
        .ok_or("no reconcile span")?;
    spans
        .iter()
        .filter(of_binding)
        .filter(|s| s.name.starts_with("write status"))
        .find(|write| {
            spans.iter().any(|h| {
                h.parent_span_id == write.span_id
                    && h.attribute("http.method") == Some("PATCH")
                    && h.attribute("http.status_code") == Some("200")
            })
        })
        .ok_or("no status write span holding kube's PATCH answered 200")?;
    let probes: Vec<&Span> = spans
        .iter()
        .filter(of_binding)
        .filter(|s| s.name == "probe CapabilityBinding")
        .collect();
    let probe = probes
        .iter()
        .find(|s| s.attribute("capstan.probe.outcome") == Some("composed"))
        .ok_or_else(|| {
            let outcomes: Vec<_> = probes
                .iter()
                .map(|s| s.attribute("capstan.probe.outcome"))
                .collect();
            format!("no probe span that composed; the probes' outcomes: {outcomes:?}")
        })?;
    let compose = spans
        .iter()
        .find(|s| s.name == "compose" && s.parent_span_id == probe.span_id)
        .ok_or("no compose span under the probe")?;
    spans
        .iter()
        .find(|s| s.name == format!("connect {SERVER}") && s.parent_span_id == compose.span_id)
        .ok_or("no connect span under the compose span")?;
    Ok(())
}
