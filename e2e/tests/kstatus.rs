//! What GitOps tools read from Capstan's status: each binding and qualifier state as
//! `sigs.k8s.io/cli-utils`' kstatus computes it (what Flux's health checks and `kpt live
//! status` use; `e2e/tools/kstatus`, built by `e2e/build-tools`), `kubectl wait
//! --for=condition=Ready`, and the READY printer column. The conditions behind them are
//! `crates/capstan-controller/src/summary.rs`'s.
//!
//! The suite starts with an open CapabilityBinding schema, standing in for bindings an older,
//! looser CRD admitted: runtime validation is what refuses those.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use capstan_e2e::controller::{ControllerProcess, probing_controller};
use capstan_e2e::objects::{apply, condition, delete, sample_binding_spec, wait_condition};
use capstan_e2e::suite::{Env, Outcome, check, trial};
use capstan_e2e::{HarnessError, built_tool, output_with_input};
use capstan_testkit::{DemoProvider, binding_document};
use libtest_mimic::Failed;
use serde_json::json;

const PATIENCE: Duration = Duration::from_secs(60);
const BINDING: &str = "CapabilityBinding";
const QUALIFIER: &str = "RouteQualifier";

fn main() -> ExitCode {
    capstan_e2e::suite::run(
        "kstatus",
        true,
        setup,
        vec![
            trial(
                "a_composed_binding_should_be_current_and_ready_for_kubectl_wait",
                composed_is_current,
            ),
            trial(
                "a_refused_binding_and_conflicting_qualifiers_should_be_failed",
                refused_is_failed,
            ),
            trial(
                "a_binding_that_cannot_compose_should_be_failed_and_never_current",
                cannot_compose_is_failed,
            ),
            trial(
                "a_spec_change_should_be_in_progress_until_its_probe_speaks",
                spec_change_in_progress,
            ),
        ],
    )
}

fn setup(env: &Env) -> Result<(), HarnessError> {
    env.runtime
        .block_on(env.plane.install_open_binding_crd(&env.client))
}

fn controller(
    env: &Env,
    identity: &str,
    hosts: &[String],
    deadline: u64,
) -> Result<ControllerProcess, Failed> {
    probing_controller(&env.plane, identity, hosts, 300, deadline).map_err(|e| e.to_string().into())
}

/// Applies the binding `name` with one MCP server at `endpoint` allowing `include`.
fn apply_binding(env: &Env, name: &str, endpoint: &str, include: &[&str]) -> Outcome {
    let spec = binding_document(name, name, endpoint, include)["spec"].clone();
    env.runtime
        .block_on(apply(&env.client, BINDING, name, spec))
        .map_err(Failed::from)
}

/// kstatus's verdict on the object: (status, message).
fn kstatus(env: &Env, kind: &str, name: &str) -> Result<(String, String), Failed> {
    let object = env
        .plane
        .kubectl_ok(&["get", kind, name, "-o", "json"], None)?;
    let binary = built_tool("kstatus").map_err(|e| e.to_string())?;
    let output = output_with_input(&mut Command::new(binary), Some(&object));
    let line = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    // "<kind>/<name> <status> <message>"
    let mut fields = line.splitn(3, ' ');
    match (fields.next(), fields.next()) {
        (Some(_), Some(status)) if output.status.success() => Ok((
            status.to_owned(),
            fields.next().unwrap_or_default().to_owned(),
        )),
        _ => Err(format!(
            "kstatus on {kind}/{name}: {}",
            capstan_e2e::printed(&output)
        )
        .into()),
    }
}

/// Samples kstatus every 100 ms until it reads `want`; every status seen, in order.
fn kstatus_until(env: &Env, kind: &str, name: &str, want: &str) -> Result<Vec<String>, Failed> {
    let started = Instant::now();
    let mut seen: Vec<String> = Vec::new();
    loop {
        let (status, _) = kstatus(env, kind, name)?;
        if seen.last() != Some(&status) {
            seen.push(status.clone());
        }
        if status == want {
            return Ok(seen);
        }
        if started.elapsed() > PATIENCE {
            return Err(format!("{kind}/{name}: kstatus never read {want}; seen {seen:?}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn composed_is_current(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    let _controller = controller(env, "gitops-ok", &[provider.host()], 20)?;
    let name = "gitops-ok";
    apply_binding(env, name, &provider.url("/mcp"), &["streams_list"])?;
    env.plane.kubectl_ok(
        &[
            "wait",
            "--for=condition=Ready",
            &format!("capb/{name}"),
            "--timeout=60s",
        ],
        None,
    )?;
    let (status, message) = kstatus(env, BINDING, name)?;
    check(status == "Current", || {
        format!("kstatus read {status}: {message}")
    })?;
    let table = env.plane.kubectl_ok(&["get", "capb", name], None)?;
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let ready = header
        .iter()
        .position(|h| *h == "READY")
        .and_then(|i| row.get(i));
    check(ready == Some(&"True"), || {
        format!("kubectl get capb:\n{table}")
    })?;
    env.runtime.block_on(delete(&env.client, BINDING, name));
    Ok(())
}

fn refused_is_failed(env: &Env) -> Outcome {
    let _controller = controller(env, "gitops-refused", &[], 20)?;
    env.runtime.block_on(async {
        apply(&env.client, BINDING, "gitops-refused", sample_binding_spec(1, "v1", false)).await?;
        wait_condition(&env.client, BINDING, "gitops-refused", "Accepted", ("False", "ValidationFailed"), PATIENCE).await?;
        let conflict = |targets: &[&str]| json!({"capabilityId": "cap.gitops.check", "constraint": {"kind": "only", "targets": targets}});
        apply(&env.client, QUALIFIER, "gitops-only-a", conflict(&["a"])).await?;
        apply(&env.client, QUALIFIER, "gitops-only-b", conflict(&["b"])).await?;
        for name in ["gitops-only-a", "gitops-only-b"] {
            wait_condition(&env.client, QUALIFIER, name, "Accepted", ("False", "Conflict"), PATIENCE).await?;
        }
        Ok::<_, Failed>(())
    })?;
    for (kind, name, reason) in [
        (BINDING, "gitops-refused", "ValidationFailed"),
        (QUALIFIER, "gitops-only-a", "Conflict"),
        (QUALIFIER, "gitops-only-b", "Conflict"),
    ] {
        let (status, message) = kstatus(env, kind, name)?;
        let stalled = env
            .runtime
            .block_on(condition(&env.client, kind, name, "Stalled"));
        check(
            status == "Failed" && stalled.as_ref().is_some_and(|s| s.reason == reason),
            || format!("{kind}/{name}: kstatus read {status}: {message}; Stalled {stalled:?}"),
        )?;
    }
    env.runtime.block_on(async {
        delete(&env.client, BINDING, "gitops-refused").await;
        delete(&env.client, QUALIFIER, "gitops-only-a").await;
        delete(&env.client, QUALIFIER, "gitops-only-b").await;
    });
    Ok(())
}

/// From the moment each is applied, kstatus never reads Current: an endpoint outside the
/// allow-list and a provider that is down are Failed once probed, InProgress before.
fn cannot_compose_is_failed(env: &Env) -> Outcome {
    let listed = DemoProvider::start(&[]);
    let outside = DemoProvider::start(&[]);
    let mut down = DemoProvider::start(&[]);
    let down_url = down.url("/mcp");
    let hosts = vec![listed.host(), down.host()];
    down.kill();
    let _controller = controller(env, "gitops-degraded", &hosts, 5)?;
    for (name, endpoint) in [
        ("gitops-outside", outside.url("/mcp")),
        ("gitops-down", down_url),
    ] {
        apply_binding(env, name, &endpoint, &["streams_list"])?;
        let seen = kstatus_until(env, BINDING, name, "Failed")?;
        check(!seen.iter().any(|s| s == "Current"), || {
            format!("{name}: kstatus read {seen:?}")
        })?;
        env.runtime.block_on(delete(&env.client, BINDING, name));
    }
    Ok(())
}

/// A spec change is InProgress while the new generation's probe is pending (a provider that
/// hangs keeps it pending for the probe deadline), then Failed when the probe is cut; never
/// Current in between.
fn spec_change_in_progress(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    let _controller = controller(env, "gitops-change", &[provider.host()], 5)?;
    let name = "gitops-change";
    let endpoint = provider.url("/mcp");
    apply_binding(env, name, &endpoint, &["streams_list"])?;
    kstatus_until(env, BINDING, name, "Current")?;
    env.runtime.block_on(provider.set_faults(&["hang"]));
    apply_binding(env, name, &endpoint, &["streams_list", "streams_get"])?;
    let seen = kstatus_until(env, BINDING, name, "Failed")?;
    check(
        seen.first().map(String::as_str) == Some("InProgress")
            && !seen.iter().any(|s| s == "Current"),
        || format!("after the spec change kstatus read {seen:?}"),
    )?;
    env.runtime.block_on(delete(&env.client, BINDING, name));
    Ok(())
}
