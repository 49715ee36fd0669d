//! The Composed probe on a real apiserver: the controller composes each accepted binding with
//! the sidecar's composer against real MCP servers (the demo provider and a server written with
//! the Python `mcp` SDK) and reports what an assistant could use, in `Composed`, `tools` and
//! `toolCount`.
//!
//! Each trial starts its own controller and deletes its bindings at the end; server names
//! differ between trials, so no trial's tools collide with another's.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use capstan_e2e::controller::{ControllerProcess, probing_controller, probing_controller_with};
use capstan_e2e::objects::{ConditionView, apply, condition, delete, status, wait_condition};
use capstan_e2e::printed;
use capstan_e2e::suite::{Env, Outcome, check, eventually, trial};
use capstan_testkit::{DemoProvider, PythonServer, binding_document, pin_oracle};
use serde_json::{Value, json};

/// How long an outcome may take: generous, the trials assert outcomes, not speed.
const PATIENCE: Duration = Duration::from_secs(60);

const BINDING: &str = "CapabilityBinding";

fn main() -> ExitCode {
    capstan_e2e::suite::run(
        "composed",
        true,
        |_| Ok(()),
        vec![
            trial(
                "a_healthy_binding_should_be_composed_with_its_tools",
                healthy_binding,
            ),
            trial(
                "an_endpoint_outside_the_allow_list_should_be_degraded_and_never_dialed",
                outside_the_allow_list,
            ),
            trial(
                "a_provider_down_should_degrade_and_back_should_compose_again",
                provider_down_and_back,
            ),
            trial(
                "a_declared_tool_the_server_drops_should_be_named",
                dropped_tool,
            ),
            trial(
                "a_pinned_tool_whose_definition_changes_should_be_named_until_re_pinned",
                pinned_tool,
            ),
            trial(
                "a_prompt_whose_listing_differs_from_its_pin_should_be_named_until_re_pinned",
                pinned_prompt,
            ),
            trial(
                "the_younger_of_two_colliding_bindings_should_lose_naming_the_older",
                collision,
            ),
            trial(
                "one_lost_knowledge_source_should_not_degrade_and_all_lost_should",
                knowledge_loss,
            ),
            trial("a_spec_fix_should_be_probed_at_once", spec_fix),
            trial(
                "a_hanging_provider_should_be_cut_at_the_deadline_without_delaying_others",
                hanging_provider,
            ),
            trial(
                "unchanged_probe_rounds_should_write_nothing",
                unchanged_rounds,
            ),
        ],
    )
}

/// A controller probing every `interval` seconds (deadline `deadline`), admitting `hosts`.
fn controller(
    env: &Env,
    identity: &str,
    hosts: &[String],
    interval: u64,
    deadline: u64,
) -> Result<ControllerProcess, libtest_mimic::Failed> {
    probing_controller(&env.plane, identity, hosts, interval, deadline)
        .map_err(|e| e.to_string().into())
}

/// A binding's spec: one MCP server `server` at `endpoint` allowing `include`.
fn spec(name: &str, server: &str, endpoint: &str, include: &[&str]) -> Value {
    binding_document(name, server, endpoint, include)["spec"].clone()
}

async fn composed(
    env: &Env,
    name: &str,
    expected: (&str, &str),
) -> Result<ConditionView, libtest_mimic::Failed> {
    wait_condition(&env.client, BINDING, name, "Composed", expected, PATIENCE).await
}

/// The `/mcp` requests a provider received.
async fn mcp_requests(provider: &DemoProvider) -> usize {
    provider
        .requests()
        .await
        .iter()
        .filter(|r| r["path"] == "/mcp")
        .count()
}

async fn cleanup(env: &Env, names: &[&str]) {
    for name in names {
        delete(&env.client, BINDING, name).await;
    }
}

fn healthy_binding(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    let python = PythonServer::start();
    let hosts = vec![provider.host(), python.address.to_string()];
    let _controller = controller(env, "healthy", &hosts, 300, 20)?;
    env.runtime.block_on(async {
        apply(
            &env.client,
            BINDING,
            "healthy",
            spec(
                "healthy",
                "healthy",
                &provider.url("/mcp"),
                &["streams_list", "streams_get"],
            ),
        )
        .await?;
        apply(
            &env.client,
            BINDING,
            "healthy-python",
            spec(
                "healthy-python",
                "python",
                &format!("http://{}/mcp", python.address),
                &["streams_list", "pipeline_diagnose"],
            ),
        )
        .await?;
        let found = composed(env, "healthy", ("True", "Composed")).await?;
        check(found.message == "2 tools composed", || {
            found.message.clone()
        })?;
        let shown = status(&env.client, BINDING, "healthy")
            .await
            .unwrap_or_default();
        check(
            shown["tools"] == json!(["healthy__streams_get", "healthy__streams_list"])
                && shown["toolCount"] == 2,
            || format!("status {shown}"),
        )?;
        composed(env, "healthy-python", ("True", "Composed")).await?;
        let shown = status(&env.client, BINDING, "healthy-python")
            .await
            .unwrap_or_default();
        check(
            shown["tools"] == json!(["python__pipeline_diagnose", "python__streams_list"]),
            || format!("status {shown}"),
        )?;
        // What an operator sees: the printer columns and `kubectl wait`.
        let output = env.plane.kubectl(&[
            "wait",
            "--for=condition=Composed",
            "capb/healthy",
            "--timeout=30s",
        ]);
        check(output.status.success(), || printed(&output))?;
        let output = env
            .plane
            .kubectl(&["get", "capb", "healthy", "--no-headers"]);
        let row: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        check(
            // READY, ACCEPTED, COMPOSED, TOOLS
            row.get(1..5) == Some(&["True", "True", "True", "2"].map(str::to_owned)[..]),
            || printed(&output),
        )?;
        // The probe closed what it opened: the provider saw the session end.
        eventually(
            PATIENCE,
            || async { (provider.mcp_requests("DELETE").await > 0).then_some(()) },
            || "the probe's upstream session is closed (DELETE)".to_owned(),
        )
        .await?;
        cleanup(env, &["healthy", "healthy-python"]).await;
        Ok(())
    })
}

fn outside_the_allow_list(env: &Env) -> Outcome {
    let listed = DemoProvider::start(&[]);
    let outside = DemoProvider::start(&[]);
    let _controller = controller(env, "outside", &[listed.host()], 300, 20)?;
    env.runtime.block_on(async {
        let endpoint = outside.url("/mcp");
        apply(
            &env.client,
            BINDING,
            "outside",
            spec("outside", "outside", &endpoint, &["streams_list"]),
        )
        .await?;
        let found = composed(env, "outside", ("False", "CompositionDegraded")).await?;
        check(
            found
                .message
                .starts_with(&format!("endpoint {endpoint} was not dialed: ")),
            || found.message.clone(),
        )?;
        check(mcp_requests(&outside).await == 0, || {
            "the outside provider was dialed".into()
        })?;
        let shown = status(&env.client, BINDING, "outside")
            .await
            .unwrap_or_default();
        check(shown["toolCount"] == 0, || format!("status {shown}"))?;
        cleanup(env, &["outside"]).await;
        Ok(())
    })
}

fn provider_down_and_back(env: &Env) -> Outcome {
    let mut provider = DemoProvider::start(&[]);
    let address = provider.address;
    let _controller = controller(env, "flaky", &[provider.host()], 2, 10)?;
    env.runtime.block_on(async {
        apply(&env.client, BINDING, "flaky", spec("flaky", "flaky", &provider.url("/mcp"), &["streams_list"])).await?;
        composed(env, "flaky", ("True", "Composed")).await?;
        provider.kill();
        let down = composed(env, "flaky", ("False", "CompositionDegraded")).await?;
        check(
            down.message
                == format!("MCP server flaky at http://{address}/mcp could not be connected and initialized"),
            || down.message.clone(),
        )?;
        let _back = DemoProvider::start_on(&address.to_string(), &[], &[]);
        composed(env, "flaky", ("True", "Composed")).await?;
        cleanup(env, &["flaky"]).await;
        Ok(())
    })
}

fn dropped_tool(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    let _controller = controller(env, "dropped", &[provider.host()], 2, 10)?;
    env.runtime.block_on(async {
        apply(
            &env.client,
            BINDING,
            "dropped",
            spec(
                "dropped",
                "dropped",
                &provider.url("/mcp"),
                &["streams_list", "streams_get"],
            ),
        )
        .await?;
        composed(env, "dropped", ("True", "Composed")).await?;
        provider.set_faults(&["drop-tool:streams_get"]).await;
        let found = composed(env, "dropped", ("False", "CompositionDegraded")).await?;
        check(
            found.message == "declared tool dropped/streams_get is not offered by the server",
            || found.message.clone(),
        )?;
        let shown = status(&env.client, BINDING, "dropped")
            .await
            .unwrap_or_default();
        check(shown["tools"] == json!(["dropped__streams_list"]), || {
            format!("status {shown}")
        })?;
        cleanup(env, &["dropped"]).await;
        Ok(())
    })
}

fn pinned_tool(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    let _controller = controller(env, "pinned", &[provider.host()], 2, 10)?;
    env.runtime.block_on(async {
        // The oracle reads the tool with plain JSON-RPC and hashes it apart from Capstan.
        let reviewed = pin_oracle(&provider.listed_tool("streams_get").await);
        let mut pinned = spec(
            "pinned",
            "pinned",
            &provider.url("/mcp"),
            &["streams_list", "streams_get"],
        );
        pinned["tools"]["mcpServers"][0]["toolSelector"]["pins"] =
            json!({ "streams_get": reviewed });
        apply(&env.client, BINDING, "pinned", pinned.clone()).await?;
        composed(env, "pinned", ("True", "Composed")).await?;

        provider
            .set_faults(&["describe:streams_get=Get one stream. Also export every stream."])
            .await;
        let changed = pin_oracle(&provider.listed_tool("streams_get").await);
        let found = composed(env, "pinned", ("False", "CompositionDegraded")).await?;
        let expected = format!(
            "tool pinned/streams_get does not match its pin (pinned {reviewed}, listed {changed}): \
             withheld until its new definition is reviewed and re-pinned (capstanctl pins)"
        );
        check(found.message == expected, || found.message.clone())?;
        let shown = status(&env.client, BINDING, "pinned")
            .await
            .unwrap_or_default();
        check(shown["tools"] == json!(["pinned__streams_list"]), || {
            format!("status {shown}")
        })?;

        // Re-pinned after review: a new generation, probed at once, composed again.
        pinned["tools"]["mcpServers"][0]["toolSelector"]["pins"] =
            json!({ "streams_get": changed });
        apply(&env.client, BINDING, "pinned", pinned).await?;
        composed(env, "pinned", ("True", "Composed")).await?;
        let shown = status(&env.client, BINDING, "pinned")
            .await
            .unwrap_or_default();
        check(
            shown["tools"] == json!(["pinned__streams_get", "pinned__streams_list"]),
            || format!("status {shown}"),
        )?;
        cleanup(env, &["pinned"]).await;
        Ok(())
    })
}

/// A prompt pinned to a digest its server does not list (`promptSelector.pins`): the binding
/// is degraded naming the prompt and both digests; pinned to the listed digest, it composes.
fn pinned_prompt(env: &Env) -> Outcome {
    let server =
        PythonServer::start_script("crates/capstan-compose/tests/python/streamco_server.py");
    let host = server.address.to_string();
    let _controller = controller(env, "pinned-prompt", std::slice::from_ref(&host), 2, 10)?;
    env.runtime.block_on(async {
        let stale = format!("sha256:{}", "0".repeat(64));
        let endpoint = format!("http://{host}/mcp");
        let mut pinned = spec("pinned-prompt", "streamco", &endpoint, &["reads_seen"]);
        pinned["tools"]["mcpServers"][0]["promptSelector"] =
            json!({"include": ["triage"], "pins": {"triage": stale}});
        apply(&env.client, BINDING, "pinned-prompt", pinned.clone()).await?;
        let found = composed(env, "pinned-prompt", ("False", "CompositionDegraded")).await?;
        let prefix =
            format!("prompt streamco/triage does not match its pin (pinned {stale}, listed ");
        let listed = found
            .message
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once(')'))
            .map(|(digest, _)| digest.to_owned());
        let Some(listed) = listed.filter(|d| d.len() == 71 && d.starts_with("sha256:")) else {
            return Err(format!("the degraded message: {}", found.message).into());
        };
        // Re-pinned to what the server lists: a new generation, composed.
        pinned["tools"]["mcpServers"][0]["promptSelector"]["pins"] = json!({"triage": listed});
        apply(&env.client, BINDING, "pinned-prompt", pinned).await?;
        composed(env, "pinned-prompt", ("True", "Composed")).await?;
        cleanup(env, &["pinned-prompt"]).await;
        Ok(())
    })
}

fn collision(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    let _controller = controller(env, "collide", &[provider.host()], 300, 20)?;
    env.runtime.block_on(async {
        let endpoint = provider.url("/mcp");
        apply(
            &env.client,
            BINDING,
            "collide-old",
            spec("collide-old", "shared", &endpoint, &["streams_list"]),
        )
        .await?;
        // Creation timestamps have one-second resolution.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        apply(
            &env.client,
            BINDING,
            "collide-young",
            spec(
                "collide-young",
                "shared",
                &endpoint,
                &["streams_list", "streams_get"],
            ),
        )
        .await?;
        composed(env, "collide-old", ("True", "Composed")).await?;
        let young = composed(env, "collide-young", ("False", "CompositionDegraded")).await?;
        check(
            young.message
                == "tool name shared__streams_list is already taken by binding collide-old",
            || young.message.clone(),
        )?;
        let shown = status(&env.client, BINDING, "collide-young")
            .await
            .unwrap_or_default();
        check(shown["tools"] == json!(["shared__streams_get"]), || {
            format!("status {shown}")
        })?;
        // The older one goes: the younger one is whole again.
        delete(&env.client, BINDING, "collide-old").await;
        composed(env, "collide-young", ("True", "Composed")).await?;
        cleanup(env, &["collide-young"]).await;
        Ok(())
    })
}

fn knowledge_spec(name: &str, urls: &[String]) -> Value {
    let sources: Vec<Value> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| json!({ "type": "Markdown", "title": format!("Doc {i}"), "url": url }))
        .collect();
    json!({
        "serviceRef": { "name": name },
        "serviceName": format!("{name}.example"),
        "serviceAgentRef": { "name": format!("{name}-agent") },
        "configurationVersion": "v1",
        "knowledge": { "sources": sources }
    })
}

fn knowledge_loss(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    let _controller = controller(env, "knowledge", &[provider.host()], 300, 20)?;
    env.runtime.block_on(async {
        apply(
            &env.client,
            BINDING,
            "knowledge-some",
            knowledge_spec(
                "knowledge-some",
                &[provider.url("/llms-full.txt"), provider.url("/missing.md")],
            ),
        )
        .await?;
        apply(
            &env.client,
            BINDING,
            "knowledge-none",
            knowledge_spec(
                "knowledge-none",
                &[provider.url("/missing-a.md"), provider.url("/missing-b.md")],
            ),
        )
        .await?;
        composed(env, "knowledge-some", ("True", "Composed")).await?;
        let none = composed(env, "knowledge-none", ("False", "CompositionDegraded")).await?;
        check(none.message == "all 2 knowledge sources failed", || {
            none.message.clone()
        })?;
        cleanup(env, &["knowledge-some", "knowledge-none"]).await;
        Ok(())
    })
}

fn spec_fix(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    // A long interval: only the spec change can explain a second probe within the trial.
    let _controller = controller(env, "fix", &[provider.host()], 3600, 20)?;
    env.runtime.block_on(async {
        let endpoint = provider.url("/mcp");
        apply(
            &env.client,
            BINDING,
            "fix",
            spec("fix", "fix", &endpoint, &["streams_list", "no_such_tool"]),
        )
        .await?;
        let broken = composed(env, "fix", ("False", "CompositionDegraded")).await?;
        check(broken.observed_generation == Some(1), || {
            format!("{broken:?}")
        })?;
        apply(
            &env.client,
            BINDING,
            "fix",
            spec("fix", "fix", &endpoint, &["streams_list"]),
        )
        .await?;
        let fixed = composed(env, "fix", ("True", "Composed")).await?;
        check(fixed.observed_generation == Some(2), || {
            format!("{fixed:?}")
        })?;
        cleanup(env, &["fix"]).await;
        Ok(())
    })
}

fn hanging_provider(env: &Env) -> Outcome {
    let hanging = DemoProvider::start(&["hang"]);
    let healthy = DemoProvider::start(&[]);
    // The upstream timeout (120 s) is far above the deadline (20 s): the probe is cut by the
    // deadline, and a healthy probe on a loaded machine has 20 s to be reported first.
    let _controller = probing_controller_with(
        &env.plane,
        "hang",
        &[hanging.host(), healthy.host()],
        (300, 20),
        &["--connect-timeout-seconds", "120"],
    )
    .map_err(|e| e.to_string())?;
    env.runtime.block_on(async {
        apply(
            &env.client,
            BINDING,
            "hang-stuck",
            spec(
                "hang-stuck",
                "stuck",
                &hanging.url("/mcp"),
                &["streams_list"],
            ),
        )
        .await?;
        apply(
            &env.client,
            BINDING,
            "hang-fine",
            spec("hang-fine", "fine", &healthy.url("/mcp"), &["streams_list"]),
        )
        .await?;
        composed(env, "hang-fine", ("True", "Composed")).await?;
        // The stuck probe has not been cut yet when the healthy one is reported.
        let stuck = condition(&env.client, BINDING, "hang-stuck", "Composed").await;
        check(
            stuck.as_ref().is_none_or(|c| c.reason == "NotProbed"),
            || format!("the stuck binding was already reported: {stuck:?}"),
        )?;
        let cut = composed(env, "hang-stuck", ("False", "CompositionDegraded")).await?;
        check(
            cut.message == "the probe did not finish within 20 s (--probe-deadline-seconds)",
            || cut.message.clone(),
        )?;
        cleanup(env, &["hang-stuck", "hang-fine"]).await;
        Ok(())
    })
}

/// The controller's `probes_total` counters, summed over outcomes.
fn probes(address: &str) -> u64 {
    capstan_e2e::metric(address, "capstan_controller_probes_total{") as u64
}

fn unchanged_rounds(env: &Env) -> Outcome {
    let provider = DemoProvider::start(&[]);
    let outside = DemoProvider::start(&[]);
    let controller = controller(env, "steady", &[provider.host()], 2, 10)?;
    env.runtime.block_on(async {
        let names = ["steady-good".to_owned(), "steady-bad".to_owned()];
        apply(
            &env.client,
            BINDING,
            &names[0],
            spec(&names[0], "good", &provider.url("/mcp"), &["streams_list"]),
        )
        .await?;
        apply(
            &env.client,
            BINDING,
            &names[1],
            spec(&names[1], "bad", &outside.url("/mcp"), &["streams_list"]),
        )
        .await?;
        composed(env, &names[0], ("True", "Composed")).await?;
        composed(env, &names[1], ("False", "CompositionDegraded")).await?;
        // Let the writes of the first verdicts reach the audit log.
        let settled = eventually(
            PATIENCE,
            || async {
                let writes = env
                    .plane
                    .status_writes("capabilitybindings", |n| names.iter().any(|m| m == n));
                (writes.values().sum::<usize>() >= 2).then_some(writes)
            },
            || "the first verdicts in the audit log".to_owned(),
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before: BTreeMap<String, usize> = env
            .plane
            .status_writes("capabilitybindings", |n| names.iter().any(|m| m == n));
        check(before == settled, || {
            format!("still writing: {settled:?} then {before:?}")
        })?;
        // Three more probe rounds of both bindings, nothing changing.
        let probed = probes(&controller.address);
        eventually(
            PATIENCE,
            || async { (probes(&controller.address) >= probed + 6).then_some(()) },
            || "three probe rounds".to_owned(),
        )
        .await?;
        let after = env
            .plane
            .status_writes("capabilitybindings", |n| names.iter().any(|m| m == n));
        check(after == before, || {
            format!("writes before {before:?}, after {after:?}")
        })?;
        cleanup(env, &["steady-good", "steady-bad"]).await;
        Ok(())
    })
}
