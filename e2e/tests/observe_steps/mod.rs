//! The chart's dashboard and alerts (`dashboards.enabled`, `prometheusRule.enabled`) against
//! what the two binaries export: every metric a panel or a rule names is one a running sidecar
//! or controller serves on `/metrics`, with the labels it selects; the rules pass `promtool
//! check rules` and fire as `e2e/observe/alerts-test.yaml` says (`promtool test rules`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use capstan_e2e::controller::probing_controller;
use capstan_e2e::objects::apply;
use capstan_e2e::sidecar::SidecarProcess;
use capstan_e2e::suite::{Env, Outcome, check, eventually};
use capstan_e2e::{built_tool, free_address, output_with_input, repo_root};
use capstan_testkit::{DemoProvider, PythonServer, binding_document};
use libtest_mimic::Failed;
use serde_json::{Value, json};

/// Labels Prometheus adds from the scrape target, not the binaries.
const TARGET_LABELS: [&str; 7] = [
    "namespace",
    "pod",
    "job",
    "instance",
    "service",
    "container",
    "endpoint",
];

/// What the issue asks the dashboard to show, by the metric that shows it.
const COVERED: [&str; 12] = [
    "capstan_sidecar_tool_calls_total",
    "capstan_sidecar_tool_call_duration_seconds_bucket",
    "capstan_sidecar_sessions_active",
    "capstan_sidecar_compose_duration_seconds_count",
    "capstan_sidecar_route_decisions_total",
    "capstan_sidecar_crd_synced",
    "capstan_sidecar_crd_watch_failures_total",
    "capstan_controller_status_queue_depth",
    "capstan_controller_status_queue_total",
    "capstan_controller_probes_total",
    "capstan_controller_bindings_not_composed",
    "capstan_sidecar_requests_refused_total",
];

/// The series names and, for those with samples, the label names a `/metrics` page exposes.
#[derive(Default)]
struct Exposed {
    series: BTreeMap<String, BTreeSet<String>>,
}

impl Exposed {
    /// Reads an exposition: each family's series names by its type, and each sample's labels.
    fn read(&mut self, text: &str) {
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split_whitespace();
                let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                    continue;
                };
                let suffixes: &[&str] = match kind {
                    "counter" => &["_total"],
                    "histogram" => &["_bucket", "_sum", "_count"],
                    "info" => &["_info"],
                    _ => &[""],
                };
                for suffix in suffixes {
                    self.series.entry(format!("{name}{suffix}")).or_default();
                }
            } else if !line.starts_with('#') && !line.is_empty() {
                let (name, labels) = match line.split_once('{') {
                    Some((name, rest)) => (name, rest.split_once('}').map_or("", |(l, _)| l)),
                    None => (line.split_whitespace().next().unwrap_or_default(), ""),
                };
                let names = labels
                    .split(',')
                    .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.trim().to_owned()))
                    .filter(|k| !k.is_empty());
                self.series
                    .entry(name.to_owned())
                    .or_default()
                    .extend(names);
            }
        }
    }

    /// What is wrong with the Capstan metrics `expr` names: series nobody exports, and labels
    /// a selector or a `by` names that neither the series nor the scrape target has.
    fn problems(&self, expr: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let selectors = selectors(expr);
        let mut labels_seen: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
        for (name, _) in &selectors {
            if let Some(labels) = self.series.get(name) {
                labels_seen.extend(labels.iter().map(String::as_str));
                labels_seen.insert("le");
            }
        }
        for (name, labels) in &selectors {
            let Some(exposed) = self.series.get(name) else {
                problems.push(format!("{name} is exported by neither binary"));
                continue;
            };
            for label in labels {
                let known = TARGET_LABELS.contains(&label.as_str())
                    || exposed.contains(label)
                    || (label == "le" && name.ends_with("_bucket"));
                if !known {
                    problems.push(format!("{name} has no label {label}"));
                }
            }
        }
        for label in grouping_labels(expr) {
            if !labels_seen.contains(label.as_str()) {
                problems.push(format!(
                    "`by ({label})`: no series of the expression has it"
                ));
            }
        }
        problems
    }
}

/// Every `capstan_…` series an expression selects, with the label names its matchers use.
fn selectors(expr: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
        if word(bytes[i]) && (i == 0 || !word(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            let name = &expr[start..i];
            if !name.starts_with("capstan_") {
                continue;
            }
            let mut labels = Vec::new();
            if expr[i..].starts_with('{')
                && let Some(end) = expr[i..].find('}')
            {
                for matcher in expr[i + 1..i + end].split(',') {
                    let label: String = matcher
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !label.is_empty() {
                        labels.push(label);
                    }
                }
                i += end;
            }
            found.push((name.to_owned(), labels));
        }
        i += 1;
    }
    found
}

/// The labels every `by (…)` of an expression groups by.
fn grouping_labels(expr: &str) -> Vec<String> {
    expr.match_indices("by (")
        .filter_map(|(at, _)| expr[at + 4..].split_once(')'))
        .flat_map(|(inside, _)| inside.split(',').map(|l| l.trim().to_owned()))
        .filter(|l| !l.is_empty())
        .collect()
}

/// The chart rendered with the dashboard and the rules on.
fn rendered_chart() -> Result<Vec<Value>, Failed> {
    let helm = built_tool("helm")?;
    let output = output_with_input(
        Command::new(helm)
            .current_dir(repo_root())
            .args([
                "template",
                "capstan",
                "charts/capstan",
                "--namespace",
                "capstan",
            ])
            .args([
                "--set",
                "dashboards.enabled=true",
                "--set",
                "prometheusRule.enabled=true",
            ]),
        None,
    );
    check(output.status.success(), || {
        format!("helm template: {}", String::from_utf8_lossy(&output.stderr))
    })?;
    serde_saphyr::from_multiple::<Value>(&String::from_utf8_lossy(&output.stdout))
        .map_err(|e| format!("the rendered chart: {e}").into())
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Result<&'a Value, Failed> {
    documents
        .iter()
        .find(|d| d["kind"] == kind)
        .ok_or_else(|| format!("no {kind} in the rendered chart").into())
}

/// Every `expr` in a JSON value (a dashboard's targets, a rule group's rules).
fn exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    _ => exprs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// `/metrics` of a sidecar that served a call and of a controller that probed a binding.
fn scraped(env: &Env) -> Result<Exposed, Failed> {
    let upstream = PythonServer::start_script("e2e/python/traced_upstream.py");
    let endpoint = format!("http://{}/mcp", upstream.address);
    let spec = binding_document("metrics", "metrics", &endpoint, &["echo"])["spec"].clone();
    // Two providers of cap.web.search, one quarantined: a routed call decides and excludes.
    let provider = DemoProvider::start(&[]);
    let routed = |name: &str, status: &str| {
        let mut spec =
            binding_document(name, name, &provider.url("/mcp"), &["docs_search"])["spec"].clone();
        spec["tools"]["mcpServers"][0]["capabilities"] = json!([{
            "capabilityId": "cap.web.search", "tool": "docs_search", "status": status
        }]);
        spec
    };
    env.runtime.block_on(async {
        apply(&env.client, "CapabilityBinding", "metrics", spec).await?;
        apply(
            &env.client,
            "CapabilityBinding",
            "search-a",
            routed("search-a", "active"),
        )
        .await?;
        let quarantined = routed("search-b", "quarantined");
        apply(&env.client, "CapabilityBinding", "search-b", quarantined).await
    })?;
    let controller = probing_controller(
        &env.plane,
        "metrics-controller",
        &["127.0.0.1".into()],
        300,
        20,
    )?;
    let address = free_address()?;
    let hosts = format!("127.0.0.1,{}", provider.host());
    let sidecar = SidecarProcess::start(
        &env.plane,
        env.plane.kubeconfig(),
        "metrics",
        &[
            ("CAPSTAN_METRICS_ADDRESS", address.as_str()),
            ("CAPABILITY_MCP_ENDPOINT_HOSTS", hosts.as_str()),
            ("CAPSTAN_CALLER_CHECK", "none"),
        ],
    )?;
    // A routed call is refused until the sidecar has read the project's RouteQualifiers
    // (fail closed); its readiness says when both kinds are read.
    env.runtime.block_on(eventually(
        std::time::Duration::from_secs(30),
        || async {
            let url = format!("http://{address}/readyz");
            let response = capstan_testkit::client().get(&url).send().await.ok()?;
            response.status().is_success().then_some(())
        },
        || "the sidecar never became ready".into(),
    ))?;
    let session = sidecar.session("acme", Some("any-token"))?;
    // One run in 24 once found no `metrics__echo` in its session, cause unknown: say what the
    // sidecar logged when it happens again.
    let tools = session.tools()?;
    if !tools.iter().any(|tool| tool["name"] == "metrics__echo") {
        return Err(format!(
            "the session lists no metrics__echo: {tools:?}\nthe sidecar logged:\n{}",
            sidecar.log_text()
        )
        .into());
    }
    session.call("metrics__echo", json!({ "text": "hi" }))?;
    session.call("cap__web_search", json!({ "query": "metrics" }))?;
    let get = |url: String| async move {
        let response = capstan_testkit::client().get(&url).send().await.ok()?;
        response.text().await.ok()
    };
    let (sidecar_text, controller_text) = env.runtime.block_on(async {
        let sidecar_text = eventually(
            std::time::Duration::from_secs(30),
            || get(format!("http://{address}/metrics")),
            || "the sidecar's /metrics never answered".into(),
        )
        .await?;
        let controller_text = eventually(
            std::time::Duration::from_secs(60),
            || async {
                let text = get(format!("http://{}/metrics", controller.address)).await?;
                // Counted from zero: the line is there before the first probe.
                let probed = text.contains("capstan_controller_probes_total{outcome=\"composed\"}")
                    && !text.contains("capstan_controller_probes_total{outcome=\"composed\"} 0\n");
                probed.then_some(text)
            },
            || "the controller never probed the binding".into(),
        )
        .await?;
        Ok::<_, Failed>((sidecar_text, controller_text))
    })?;
    let mut exposed = Exposed::default();
    exposed.read(&sidecar_text);
    exposed.read(&controller_text);
    Ok(exposed)
}

pub fn dashboards_and_alerts_name_exported_metrics(env: &Env) -> Outcome {
    let exposed = scraped(env)?;
    // The check itself tells a wrong name, a wrong suffix and a wrong label.
    let wrong = exposed.problems(
        r#"capstan_sidecar_tool_calls{outcome="ok"} + capstan_controller_leader_total + capstan_sidecar_tool_calls_total{kind="x"}"#,
    );
    check(wrong.len() == 3, || {
        format!("the check missed a wrong name: {wrong:?}")
    })?;

    let documents = rendered_chart()?;
    let dashboard_text = of_kind(&documents, "ConfigMap").map(|c| {
        c["data"]["capstan.json"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    })?;
    let dashboard: Value =
        serde_json::from_str(&dashboard_text).map_err(|e| format!("the dashboard JSON: {e}"))?;
    let rule = of_kind(&documents, "PrometheusRule")?;
    let mut named = Vec::new();
    exprs(&dashboard, &mut named);
    let panels = named.len();
    exprs(&rule["spec"], &mut named);
    check(panels > 20 && named.len() > panels + 5, || {
        format!(
            "{panels} dashboard and {} rule expressions",
            named.len() - panels
        )
    })?;
    let problems: Vec<String> = named
        .iter()
        .flat_map(|expr| {
            exposed
                .problems(expr)
                .into_iter()
                .map(move |p| format!("{p}: {expr}"))
        })
        .collect();
    check(problems.is_empty(), || problems.join("\n"))?;
    let missing: Vec<&str> = COVERED
        .into_iter()
        .filter(|metric| !named.iter().any(|expr| expr.contains(metric)))
        .collect();
    check(missing.is_empty(), || {
        format!("the dashboard and rules never show {missing:?}")
    })
}

pub fn alert_rules_pass_promtool_and_fire_on_their_conditions(env: &Env) -> Outcome {
    let documents = rendered_chart()?;
    let rule = of_kind(&documents, "PrometheusRule")?;
    let dir = env.plane.state_dir().join("alerts");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // JSON is YAML: the rule file promtool reads is the rendered spec as it is.
    let rules = serde_json::json!({ "groups": rule["spec"]["groups"] });
    std::fs::write(dir.join("rules.yaml"), rules.to_string()).map_err(|e| e.to_string())?;
    let tests = std::fs::read_to_string(repo_root().join("e2e/observe/alerts-test.yaml"))
        .map_err(|e| e.to_string())?;
    std::fs::write(dir.join("alerts-test.yaml"), &tests).map_err(|e| e.to_string())?;

    // Every alert the chart ships has a test that makes it fire.
    let mut alerts = Vec::new();
    for group in rule["spec"]["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            alerts.extend(rule["alert"].as_str().map(str::to_owned));
        }
    }
    let untested: Vec<&String> = alerts
        .iter()
        .filter(|alert| !tests.contains(&format!("alertname: {alert}\n    exp_alerts:\n    - ")))
        .collect();
    check(alerts.len() >= 8 && untested.is_empty(), || {
        format!("{} alerts; never shown firing: {untested:?}", alerts.len())
    })?;

    let promtool = built_tool("promtool")?;
    for args in [
        ["check", "rules", "rules.yaml"],
        ["test", "rules", "alerts-test.yaml"],
    ] {
        let output = output_with_input(Command::new(&promtool).current_dir(&dir).args(args), None);
        check(output.status.success(), || {
            format!(
                "promtool {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    }
    Ok(())
}
