//! Call limits on a real apiserver (docs/limits.md): bindings declare `limits` on their MCP
//! servers, the platform holds them under a ceiling, and the sidecar refuses a call over a
//! limit as `rate_limited` before the provider sees it — on the session revisions and on
//! 2026-07-28, through the Python SDK's client, with the demo provider behind it.
//!
//! The sidecar runs with `CAPSTAN_MAX_CALLS_PER_MINUTE_PER_CALLER=5`: no server takes more
//! than five calls a minute from one caller, whatever its binding says.
//!
//! The oracles are the providers' own call counts, never the sidecar's.

use std::process::ExitCode;
use std::sync::Mutex;

use capstan_e2e::callers::{
    PROJECT_MEMBERS, audit_file, audit_lines, offerings, run_with_callers, search_binding,
};
use capstan_e2e::controller::{bind_cluster_role, service_account};
use capstan_e2e::sidecar::SidecarProcess;
use capstan_e2e::suite::{Env, Outcome, check, take_kept, trial, with_kept};
use capstan_e2e::{HarnessError, free_address, metric};
use capstan_testkit::{DemoProvider, binding_document};
use serde_json::{Value, json};

const PROJECT: &str = "acme";

/// The platform's ceiling of calls a minute per caller (the sidecar's flag).
const CEILING: usize = 5;

/// The callers, each with the token `token-of-<name>` (`capstan_e2e::callers`).
const CALLERS: &[&str] = &["alice", "bob", "carol", "dave", "erin", "frank", "gina"];

/// What the suite keeps between setup and trials.
struct World {
    sidecar: SidecarProcess,
    /// `limits: {callsPerMinutePerCaller: 3}`.
    perminute: DemoProvider,
    /// Slow calls, `limits: {concurrentCallsPerCaller: 2}`.
    slow: DemoProvider,
    /// `limits: {callsPerMinute: 2}`, every caller together.
    shared: DemoProvider,
    /// Declares 1000 a minute per caller; the ceiling holds it to five.
    generous: DemoProvider,
    /// The better-ranked `cap.web.search` provider, `callsPerMinutePerCaller: 1`.
    premium: DemoProvider,
    /// The other `cap.web.search` provider, no limit of its own.
    cheap: DemoProvider,
    metrics: String,
}

static WORLD: Mutex<Option<World>> = Mutex::new(None);

fn main() -> ExitCode {
    run_with_callers(
        "limits",
        CALLERS,
        setup,
        vec![
            trial(
                "the_call_over_a_callers_minute_should_be_refused_with_its_retry_after_while_the_provider_counts_exactly_n",
                per_caller_minute,
            ),
            trial(
                "a_concurrency_cap_should_hold_under_parallel_calls",
                concurrency_cap,
            ),
            trial("a_servers_total_should_hold_across_callers", server_total),
            trial(
                "the_platform_ceiling_should_hold_a_binding_that_declares_more",
                platform_ceiling,
            ),
            trial(
                "a_routed_call_should_pass_to_the_next_provider_when_the_best_is_limited",
                routed_past_a_limit,
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
    HarnessError::setup("limits", message)
}

/// A binding of one server offering `streams_list`, with `limits`.
fn limited_binding(name: &str, provider: &DemoProvider, limits: Value) -> Value {
    let mut binding = binding_document(name, name, &provider.url("/mcp"), &["streams_list"]);
    binding["spec"]["tools"]["mcpServers"][0]["limits"] = limits;
    binding
}

/// A `cap.web.search` provider's binding (`capstan_e2e::callers`), with `limits` when given.
fn limited_search(name: &str, provider: &DemoProvider, quality: u16, limits: Value) -> Value {
    let mut binding = search_binding(name, name, &provider.url("/mcp"), quality);
    if !limits.is_null() {
        binding["spec"]["tools"]["mcpServers"][0]["limits"] = limits;
    }
    binding
}

fn setup(env: &Env) -> Result<(), HarnessError> {
    env.plane
        .kubectl_ok(&["apply", "-f", "config/rbac/sidecar.yaml"], None)
        .map_err(harness)?;
    env.plane
        .kubectl_ok(&["apply", "-f", "-"], Some(PROJECT_MEMBERS))
        .map_err(harness)?;
    let composer = service_account(&env.plane, "composer")?;
    bind_cluster_role(&env.plane, "composer", "capstan-sidecar")?;
    let perminute = DemoProvider::start(&[]);
    let slow = DemoProvider::start(&["slow-calls:1500"]);
    let shared = DemoProvider::start(&[]);
    let generous = DemoProvider::start(&[]);
    let premium = DemoProvider::start(&[]);
    let cheap = DemoProvider::start(&[]);
    let mut items = vec![
        limited_binding(
            "perminute",
            &perminute,
            json!({"callsPerMinutePerCaller": 3}),
        ),
        limited_binding("slow", &slow, json!({"concurrentCallsPerCaller": 2})),
        limited_binding("shared", &shared, json!({"callsPerMinute": 2})),
        limited_binding(
            "generous",
            &generous,
            json!({"callsPerMinutePerCaller": 1000}),
        ),
        limited_search(
            "premium",
            &premium,
            9500,
            json!({"callsPerMinutePerCaller": 1}),
        ),
        limited_search("cheap", &cheap, 6000, Value::Null),
    ];
    for item in &mut items {
        item["apiVersion"] = json!("capabilities.assistant.miloapis.com/v1alpha1");
        item["kind"] = json!("CapabilityBinding");
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    env.plane
        .kubectl_ok(&["apply", "-f", "-"], Some(&list))
        .map_err(harness)?;
    let metrics = free_address()?;
    let ceiling = CEILING.to_string();
    let sidecar = SidecarProcess::start(
        &env.plane,
        &composer,
        "limits",
        &[
            ("CAPABILITY_MCP_ENDPOINT_HOSTS", "127.0.0.1"),
            ("CAPSTAN_BASE_TOOLS", "off"),
            ("CAPSTAN_MAX_CALLS_PER_MINUTE_PER_CALLER", &ceiling),
            ("CAPSTAN_METRICS_ADDRESS", &metrics),
            ("CAPSTAN_AUDIT_SINK", &audit_path(env)),
        ],
    )?;
    sidecar.wait_synced(&env.runtime, &metrics)?;
    if let Ok(mut world) = WORLD.lock() {
        *world = Some(World {
            sidecar,
            perminute,
            slow,
            shared,
            generous,
            premium,
            cheap,
            metrics,
        });
    }
    Ok(())
}

/// Runs `body` with the world.
fn with_world<T>(
    body: impl FnOnce(&World) -> Result<T, libtest_mimic::Failed>,
) -> Result<T, libtest_mimic::Failed> {
    with_kept(&WORLD, body)
}

/// The Python SDK client's report of `ops` against the sidecar, at `mode`.
fn report(world: &World, mode: &str, ops: &Value) -> Vec<Value> {
    offerings(&world.sidecar, PROJECT, mode, ops)
}

/// A call op of `client` to `tool`.
fn call(client: &str, tool: &str) -> Value {
    json!({"op": "call", "client": client, "name": tool})
}

/// The tool error a call result carries, if it is one.
fn tool_error(result: &Value) -> Option<&Value> {
    (result["isError"] == true).then_some(&result["structuredContent"]["error"])
}

/// Whether `result` (a call op's `ok`) was served.
fn served(result: &Value) -> bool {
    result.is_object() && result["isError"] != true && result["content"].is_array()
}

/// Whether `result` was refused by `limit`, with the retry-after a rate limit carries (within
/// `(0, most]` ms) or none for a concurrency cap.
fn refused_by(result: &Value, limit: &str, most_ms: Option<u64>) -> bool {
    let Some(error) = tool_error(result) else {
        return false;
    };
    let wait = error["retryAfterMs"].as_u64();
    error["kind"] == "rate_limited"
        && error["code"] == limit
        && error["retryable"] == true
        && match most_ms {
            Some(most) => wait.is_some_and(|w| w > 0 && w <= most),
            None => wait.is_none(),
        }
}

/// How many tool calls `provider` has seen.
fn calls(env: &Env, provider: &DemoProvider) -> usize {
    env.runtime.block_on(provider.tool_calls()).len()
}

/// Finding: a provider could not protect its server from one runaway assistant. With
/// `callsPerMinutePerCaller: 3`, a caller's fourth call in the minute is refused with how long
/// to wait (at most 20 s: one call comes back every 60/3 s) and never reaches the provider,
/// which counts exactly three; another caller still has its own three.
fn per_caller_minute(env: &Env) -> Outcome {
    with_world(|world| {
        for (mode, runaway, other) in [("legacy", "alice", "bob"), ("2026-07-28", "carol", "dave")]
        {
            let before = calls(env, &world.perminute);
            let tool = "perminute__streams_list";
            let ops = json!([
                call(runaway, tool),
                call(runaway, tool),
                call(runaway, tool),
                call(runaway, tool),
                call(other, tool),
            ]);
            let report = report(world, mode, &ops);
            check(report.len() == 6, || format!("{mode}: {report:?}"))?;
            for (i, entry) in report[..3].iter().enumerate() {
                check(served(&entry["ok"]), || {
                    format!("{mode}: {runaway}'s call {}: {entry}", i + 1)
                })?;
            }
            check(
                refused_by(
                    &report[3]["ok"],
                    "calls_per_minute_per_caller",
                    Some(20_000),
                ),
                || format!("{mode}: {runaway}'s fourth call: {}", report[3]),
            )?;
            let message = tool_error(&report[3]["ok"])
                .and_then(|e| e["message"].as_str())
                .unwrap_or_default();
            check(
                message.contains("perminute") && message.contains("3 calls a minute"),
                || format!("{mode}: the refusal names the server and its limit: {message}"),
            )?;
            check(served(&report[4]["ok"]), || {
                format!("{mode}: {other}'s call: {}", report[4])
            })?;
            let after = calls(env, &world.perminute);
            check(after - before == 4, || {
                format!(
                    "{mode}: the provider counted {} calls, not 3 + 1",
                    after - before
                )
            })?;
        }
        let metered = world
            .sidecar
            .meter_events()
            .iter()
            .filter(|e| e["tool"] == "perminute__streams_list" && e["outcome"] == "rate_limited")
            .count();
        check(metered == 2, || {
            format!("the refused calls are metered as refused: {metered} events")
        })?;
        check(
            metric(
                &world.metrics,
                "capstan_sidecar_limit_refusals_total{binding=\"perminute\",tool=\"perminute__streams_list\",limit=\"calls_per_minute_per_caller\"} ",
            ) == 2.0,
            || "the refusals are counted by binding, tool and limit".to_owned(),
        )?;
        // The audit trail records both decisions of each of alice's calls, under her name.
        let alice: Vec<(String, String)> = audit_lines(&audit_path(env))
            .into_iter()
            .filter(|l| l["user"] == "alice" && l["tool"] == "perminute__streams_list")
            .map(|l| {
                (
                    l["limit"].as_str().unwrap_or_default().to_owned(),
                    l["outcome"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let passed = ("passed".to_owned(), "ok".to_owned());
        let refused = (
            "calls_per_minute_per_caller".to_owned(),
            "rate_limited".to_owned(),
        );
        check(
            alice == [passed.clone(), passed.clone(), passed, refused],
            || format!("alice's audit lines (limit, outcome): {alice:?}"),
        )
    })
}

/// Where the sidecar writes its audit trail.
fn audit_path(env: &Env) -> String {
    audit_file(env.plane.state_dir())
}

/// Finding: nothing held how many calls one caller ran at once. With
/// `concurrentCallsPerCaller: 2` and calls that take 1.5 s, four calls sent at once are two
/// served and two refused with no retry-after (none is known: a place frees when a call ends);
/// the provider counts two; once they end, the next call is served.
fn concurrency_cap(env: &Env) -> Outcome {
    with_world(|world| {
        for (mode, caller) in [("legacy", "erin"), ("2026-07-28", "frank")] {
            let before = calls(env, &world.slow);
            let tool = "slow__streams_list";
            let ops = json!([
                {"op": "parallel", "client": caller, "calls": [
                    {"name": tool}, {"name": tool}, {"name": tool}, {"name": tool}
                ]},
                call(caller, tool),
            ]);
            let report = report(world, mode, &ops);
            let results = report[0]["ok"]["results"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let served_now = results.iter().filter(|r| served(r)).count();
            let capped = results
                .iter()
                .filter(|r| refused_by(r, "concurrent_calls_per_caller", None))
                .count();
            check(results.len() == 4 && served_now == 2 && capped == 2, || {
                format!("{mode}: four calls at once: {results:?}")
            })?;
            check(served(&report[1]["ok"]), || {
                format!("{mode}: the call after they ended: {}", report[1])
            })?;
            let after = calls(env, &world.slow);
            check(after - before == 3, || {
                format!(
                    "{mode}: the provider counted {} calls, not 2 + 1",
                    after - before
                )
            })?;
        }
        Ok(())
    })
}

/// Finding: a server had no total across callers. With `callsPerMinute: 2`, two callers'
/// calls spend it and a third caller is refused by the total, naming it; the provider counts
/// two.
fn server_total(env: &Env) -> Outcome {
    with_world(|world| {
        let before = calls(env, &world.shared);
        let tool = "shared__streams_list";
        let ops = json!([call("alice", tool), call("bob", tool), call("gina", tool)]);
        let report = report(world, "2026-07-28", &ops);
        check(served(&report[0]["ok"]) && served(&report[1]["ok"]), || {
            format!("the first two callers: {report:?}")
        })?;
        check(
            refused_by(&report[2]["ok"], "calls_per_minute", Some(30_000)),
            || format!("the third caller: {}", report[2]),
        )?;
        let after = calls(env, &world.shared);
        check(after - before == 2, || {
            format!("the provider counted {} calls, not 2", after - before)
        })
    })
}

/// Finding: nothing let a platform team bound what a binding declares. The binding declares
/// a thousand calls a minute per caller; the platform's ceiling is five: the sixth call is
/// refused naming five, the provider counts five, and the sidecar says it clamped the
/// binding's value.
fn platform_ceiling(env: &Env) -> Outcome {
    with_world(|world| {
        let before = calls(env, &world.generous);
        let tool = "generous__streams_list";
        let ops: Vec<Value> = (0..=CEILING).map(|_| call("gina", tool)).collect();
        let report = report(world, "legacy", &Value::Array(ops));
        let served_now = report[..CEILING]
            .iter()
            .filter(|e| served(&e["ok"]))
            .count();
        check(served_now == CEILING, || {
            format!("the first {CEILING} calls: {report:?}")
        })?;
        check(
            refused_by(
                &report[CEILING]["ok"],
                "calls_per_minute_per_caller",
                Some(12_000),
            ),
            || format!("the call past the ceiling: {}", report[CEILING]),
        )?;
        let message = tool_error(&report[CEILING]["ok"])
            .and_then(|e| e["message"].as_str())
            .unwrap_or_default();
        check(message.contains("5 calls a minute"), || {
            format!("the refusal names the limit in force: {message}")
        })?;
        let after = calls(env, &world.generous);
        check(after - before == CEILING, || {
            format!(
                "the provider counted {} calls, not {CEILING}",
                after - before
            )
        })?;
        let log = world.sidecar.log_text();
        check(
            log.contains("above the platform's ceiling") && log.contains("generous"),
            || "the sidecar logs the clamped limit".to_owned(),
        )
    })
}

/// Finding: a routed call counted against nobody. premium ranks first for `cap.web.search`
/// and takes one call a minute per caller: a caller's first search goes to premium, the
/// second passes to cheap (premium excluded as `rate_limited`); pinned to premium, the call is
/// refused as `rate_limited` with its wait, and premium still counts one.
fn routed_past_a_limit(env: &Env) -> Outcome {
    with_world(|world| {
        let search = |client: &str, route: Option<Value>| {
            let mut arguments = json!({"query": "consumer lag"});
            if let Some(route) = route {
                arguments["route"] = route;
            }
            json!({"op": "call", "client": client, "name": "cap__web_search", "arguments": arguments})
        };
        let (premium, cheap) = (calls(env, &world.premium), calls(env, &world.cheap));
        let ops = json!([
            search("erin", None),
            search("erin", None),
            search("erin", Some(json!({"pin": "premium"}))),
        ]);
        let report = report(world, "legacy", &ops);
        check(served(&report[0]["ok"]) && served(&report[1]["ok"]), || {
            format!("the two searches: {report:?}")
        })?;
        check(
            refused_by(
                &report[2]["ok"],
                "calls_per_minute_per_caller",
                Some(60_000),
            ),
            || format!("the search pinned to premium: {}", report[2]),
        )?;
        let (premium, cheap) = (
            calls(env, &world.premium) - premium,
            calls(env, &world.cheap) - cheap,
        );
        check(premium == 1 && cheap == 1, || {
            format!("premium counted {premium}, cheap {cheap}: not one each")
        })?;
        check(
            metric(
                &world.metrics,
                "capstan_sidecar_route_exclusions_total{reason=\"rate_limited\"} ",
            ) >= 2.0,
            || "the decisions record premium's exclusion".to_owned(),
        )
    })
}
