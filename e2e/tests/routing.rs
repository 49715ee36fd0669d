//! Routed capabilities on a real apiserver: two demo providers serve `cap.web.search` at
//! different cost and quality through CapabilityBindings, a real sidecar (crd source) lists
//! `cap__web_search`, and RouteQualifiers applied with kubectl constrain which provider serves.
//! The providers' own request logs are the oracle for who was called; the expected winner is
//! computed here from the formula docs/routing.md documents, not by the code under test.
//!
//! Trials run one at a time against one sidecar; each starts from no qualifiers.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use capstan_e2e::controller::{bind_cluster_role, service_account};
use capstan_e2e::sidecar::{PROJECT_HEADER, Session, SidecarProcess};
use capstan_e2e::suite::{Env, Outcome, check, eventually, trial};
use capstan_e2e::{HarnessError, free_address, metric, printed};
use capstan_testkit::DemoProvider;
use serde_json::{Value, json};

const PROJECT: &str = "acme";
/// How long a change applied with kubectl may take to reach the sidecar's watch (a bound on
/// waiting, not a wait: the event usually arrives within milliseconds).
const SETTLE: Duration = Duration::from_secs(30);

struct World {
    cheap: DemoProvider,
    premium: DemoProvider,
    sidecar: SidecarProcess,
    /// The sidecar's /metrics address.
    metrics: String,
}

static WORLD: Mutex<Option<World>> = Mutex::new(None);

fn main() -> ExitCode {
    let code = capstan_e2e::suite::run(
        "routing",
        true,
        setup,
        vec![
            trial(
                "a_plain_call_should_go_to_the_best_score_and_be_recorded",
                best_score,
            ),
            trial(
                "a_pin_applied_with_kubectl_should_move_calls_of_new_sessions",
                pinned,
            ),
            trial(
                "an_only_that_excludes_everyone_should_say_no_eligible_provider_with_reasons",
                nobody,
            ),
            trial(
                "conflicting_qualifiers_should_refuse_the_call_naming_both",
                conflict,
            ),
            trial("a_call_may_only_narrow_the_qualifiers", narrowing),
            trial(
                "a_quarantined_binding_should_be_excluded_and_not_callable_by_name",
                quarantined,
            ),
            trial(
                "a_capability_without_candidates_should_read_like_an_unknown_tool",
                invisible,
            ),
            trial(
                "decision_filters_should_refuse_what_they_cannot_honour",
                filters,
            ),
            trial(
                "capstanctl_routes_should_show_the_decision_without_calling",
                capstanctl_routes,
            ),
            trial(
                "qualifiers_that_cannot_be_read_should_refuse_routed_calls_only",
                unreadable_qualifiers,
            ),
        ],
    );
    if let Ok(mut world) = WORLD.lock() {
        world.take();
    }
    code
}

fn kubectl(env: &Env, args: &[&str], input: Option<&str>) -> Result<String, String> {
    let output = env.plane.kubectl_with_input(args, input);
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!("kubectl {}: {}", args.join(" "), printed(&output)))
    }
}

/// A binding whose server `server` maps `docs_search` onto `cap.web.search`.
fn binding(
    name: &str,
    server: &str,
    endpoint: &str,
    cost: i64,
    quality: u16,
    status: &str,
) -> Value {
    json!({
        "apiVersion": "capabilities.assistant.miloapis.com/v1alpha1",
        "kind": "CapabilityBinding",
        "metadata": {"name": name},
        "spec": {
            "serviceRef": {"name": name},
            "serviceName": format!("{server}.example"),
            "serviceAgentRef": {"name": "agent"},
            "configurationVersion": "v1",
            "tools": {"mcpServers": [{
                "name": server,
                "endpoint": endpoint,
                "toolSelector": {"include": ["docs_search", "streams_list"]},
                "capabilities": [{
                    "capabilityId": "cap.web.search",
                    "tool": "docs_search",
                    "costHint": {"baseMicrosUsd": cost},
                    "quality": quality,
                    "status": status
                }]
            }]}
        }
    })
}

fn setup(env: &Env) -> Result<(), HarnessError> {
    let failed = |stderr: String| HarnessError::Command {
        command: "kubectl".into(),
        status: "failed".into(),
        stderr,
    };
    kubectl(env, &["apply", "-f", "config/rbac/sidecar.yaml"], None).map_err(failed)?;
    let composer = service_account(&env.plane, "composer")?;
    bind_cluster_role(&env.plane, "composer", "capstan-sidecar")?;
    let cheap = DemoProvider::start(&[]);
    let premium = DemoProvider::start(&[]);
    let bindings = json!({"apiVersion": "v1", "kind": "List", "items": [
        binding("search-cheap", "cheap", &cheap.url("/mcp"), 1000, 6000, "active"),
        binding("search-premium", "premium", &premium.url("/mcp"), 2000, 9500, "active"),
    ]});
    kubectl(env, &["apply", "-f", "-"], Some(&bindings.to_string())).map_err(failed)?;
    let metrics = free_address()?;
    let sidecar = SidecarProcess::start(
        &env.plane,
        &composer,
        "routing",
        &[
            ("CAPABILITY_MCP_ENDPOINT_HOSTS", "127.0.0.1"),
            ("CAPSTAN_CALLER_CHECK", "none"),
            ("CAPSTAN_METRICS_ADDRESS", &metrics),
        ],
    )?;
    if let Ok(mut world) = WORLD.lock() {
        *world = Some(World {
            cheap,
            premium,
            sidecar,
            metrics,
        });
    }
    Ok(())
}

/// Runs `body` with the world, after removing every qualifier and waiting for the watch to
/// see it.
fn with_world(env: &Env, body: impl FnOnce(&World) -> Outcome) -> Outcome {
    let guard = WORLD.lock().map_err(|_| "the world is poisoned")?;
    let world = guard.as_ref().ok_or("no world")?;
    change(env, world, &["delete", "routequalifiers", "--all"], None)?;
    body(world)
}

/// Objects the sidecar's watches have received so far (lists and events).
fn received(world: &World) -> u64 {
    metric(
        &world.metrics,
        "capstan_sidecar_crd_objects_received_total ",
    ) as u64
}

/// Runs kubectl `args` and waits until the sidecar's watch has received as many events as
/// kubectl says it created, changed or deleted objects: the watch's store holds an event
/// before it is counted, so the next session composes with the change.
fn change(env: &Env, world: &World, args: &[&str], input: Option<&str>) -> Outcome {
    let before = received(world);
    let printed = kubectl(env, args, input)?;
    let changed = printed
        .lines()
        .filter(|l| {
            [" created", " configured", " deleted"]
                .iter()
                .any(|s| l.ends_with(s))
        })
        .count() as u64;
    env.runtime.block_on(eventually(
        SETTLE,
        || async { (received(world) >= before + changed).then_some(()) },
        || {
            format!(
                "the sidecar's watch received {} of {changed} events of `kubectl {}` ({printed:?})",
                received(world).saturating_sub(before),
                args.join(" ")
            )
        },
    ))
}

fn qualifiers(env: &Env, world: &World, items: Value) -> Outcome {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    change(env, world, &["apply", "-f", "-"], Some(&list.to_string()))
}

fn qualifier(name: &str, constraint: Value) -> Value {
    json!({
        "apiVersion": "capabilities.assistant.miloapis.com/v1alpha1",
        "kind": "RouteQualifier",
        "metadata": {"name": name},
        "spec": {"capabilityId": "cap.web.search", "constraint": constraint}
    })
}

/// `docs_search` calls each provider has received so far.
fn searches(env: &Env, world: &World) -> (usize, usize) {
    let count = |provider: &DemoProvider| {
        env.runtime
            .block_on(provider.tool_calls())
            .iter()
            .filter(|t| *t == "docs_search")
            .count()
    };
    (count(&world.cheap), count(&world.premium))
}

fn session(world: &World) -> Result<Session<'_>, String> {
    world.sidecar.session(PROJECT, None)
}

/// The newest recorded decision of the project.
fn last_decision(world: &World) -> Result<Value, String> {
    let (status, _, body) = world.sidecar.request(
        "GET",
        "/v1/route-decisions?limit=1",
        &[(PROJECT_HEADER, PROJECT)],
        None,
    );
    let answer: Value = serde_json::from_str(&body).map_err(|e| format!("{status} {body}: {e}"))?;
    Ok(answer["decisions"][0].clone())
}

/// The score docs/routing.md documents, for a priced candidate without features (fitness 0).
fn score(price_term: f64, quality: f64) -> f64 {
    let quality = quality / 10_000.0;
    0.35 * price_term + 0.40 * quality * quality
}

fn best_score(env: &Env) -> Outcome {
    // cheap: the cheapest (price term 1), quality 6000 → 0.35 + 0.144 = 0.494;
    // premium: 2× the price → ln 2 / ln 4 = half → 0.175, quality 9500 → 0.361: 0.536.
    let (cheap, premium) = (score(1.0, 6000.0), score(0.5, 9500.0));
    check(premium > cheap, || format!("oracle: {premium} vs {cheap}"))?;
    with_world(env, |world| {
        let session = session(world)?;
        let tools = session.tools()?;
        let search = tools
            .iter()
            .find(|t| t["name"] == "cap__web_search")
            .cloned()
            .ok_or_else(|| format!("cap__web_search not listed: {tools:?}"))?;
        let properties = &search["inputSchema"]["properties"];
        check(
            properties.get("query").is_some()
                && properties.get("intent").is_some()
                && properties.get("route").is_none()
                && properties.get("requirements").is_none()
                && search["annotations"]["readOnlyHint"] == true,
            || format!("the routed tool as listed: {search}"),
        )?;
        let before = searches(env, world);
        let answer = session.ok(
            "cap__web_search",
            json!({"query": "consumer lag", "intent": "find the lag runbook"}),
        )?;
        let after = searches(env, world);
        check(
            after == (before.0, before.1 + 1)
                && answer["results"].as_array().is_some_and(|r| !r.is_empty()),
            || format!("calls before {before:?}, after {after:?}; answer {answer}"),
        )?;
        let decision = last_decision(world)?;
        check(
            decision["selected"]["tool"] == "premium__docs_search"
                && decision["selected"]["binding"] == "search-premium"
                && decision["routeReason"] == "best_score"
                && decision["eligible"] == 2
                && decision["algorithm"] == "capstan-route/1"
                && decision["capability"] == "cap.web.search"
                && decision["intentDigest"]
                    .as_str()
                    .is_some_and(|d| d.len() == 16)
                && !decision.to_string().contains("lag runbook"),
            || format!("decision {decision}"),
        )?;
        session.end();
        Ok(())
    })
}

fn pinned(env: &Env) -> Outcome {
    with_world(env, |world| {
        // Before the pin: premium serves (best score).
        let before_pin = session(world)?;
        before_pin.ok("cap__web_search", json!({"query": "a"}))?;
        qualifiers(
            env,
            world,
            json!([qualifier(
                "pin-cheap",
                json!({"kind": "pin", "target": "cheap"})
            )]),
        )?;
        let before = searches(env, world);
        let session = session(world)?;
        session.ok("cap__web_search", json!({"query": "b"}))?;
        let after = searches(env, world);
        let decision = last_decision(world)?;
        check(
            after == (before.0 + 1, before.1)
                && decision["routeReason"] == "pinned_by_policy"
                && decision["qualifiers"] == json!(["pin-cheap"])
                && decision["exclusions"]
                    == json!([{"binding": "search-premium", "tool": "premium__docs_search", "reason": "qualifier_pin"}]),
            || format!("calls {before:?} → {after:?}; decision {decision}"),
        )?;
        session.end();
        before_pin.end();
        Ok(())
    })
}

fn nobody(env: &Env) -> Outcome {
    with_world(env, |world| {
        qualifiers(
            env,
            world,
            json!([qualifier(
                "only-elsewhere",
                json!({"kind": "only", "targets": ["elsewhere"]})
            )]),
        )?;
        let session = session(world)?;
        let before = searches(env, world);
        let error = session.error("cap__web_search", json!({"query": "x"}))?;
        let after = searches(env, world);
        let message = error["message"].as_str().unwrap_or_default();
        check(
            after == before
                && error["kind"] == "rejected"
                && error["code"] == "no_eligible_provider"
                && message.contains(
                    "no eligible provider for cap.web.search under qualifiers only-elsewhere",
                )
                && message.contains("cheap__docs_search (search-cheap): qualifier_only")
                && message.contains("premium__docs_search (search-premium): qualifier_only"),
            || format!("calls {before:?} → {after:?}; error {error}"),
        )?;
        let decision = last_decision(world)?;
        check(
            decision["selected"].is_null()
                && decision["eligible"] == 0
                && decision["exclusions"].as_array().map(Vec::len) == Some(2),
            || format!("decision {decision}"),
        )?;
        session.end();
        Ok(())
    })
}

fn conflict(env: &Env) -> Outcome {
    with_world(env, |world| {
        qualifiers(
            env,
            world,
            json!([
                qualifier("pin-a", json!({"kind": "pin", "target": "cheap"})),
                qualifier("pin-b", json!({"kind": "pin", "target": "premium"}))
            ]),
        )?;
        let session = session(world)?;
        let before = searches(env, world);
        let error = session.error("cap__web_search", json!({"query": "x"}))?;
        let after = searches(env, world);
        let message = error["message"].as_str().unwrap_or_default();
        check(
            after == before
                && error["kind"] == "rejected"
                && error["code"] == "route_refused"
                && message.contains("qualifiers pin-a, pin-b contradict on cap.web.search"),
            || format!("calls {before:?} → {after:?}; error {error}"),
        )?;
        let decision = last_decision(world)?;
        check(decision["refused"].is_string(), || {
            format!("decision {decision}")
        })?;
        session.end();
        Ok(())
    })
}

fn narrowing(env: &Env) -> Outcome {
    with_world(env, |world| {
        qualifiers(
            env,
            world,
            json!([qualifier(
                "only-premium",
                json!({"kind": "only", "targets": ["premium"]})
            )]),
        )?;
        let session = session(world)?;
        let before = searches(env, world);
        // Asking for cheap cannot widen `only premium`: refused, nothing called.
        let error = session.error(
            "cap__web_search",
            json!({"query": "x", "route": {"only": ["cheap"]}}),
        )?;
        let widened = error["code"] == "route_refused"
            && error["message"]
                .as_str()
                .is_some_and(|m| m.contains("shares no target"));
        // A malformed route is refused by path, never ignored.
        let malformed = session.error(
            "cap__web_search",
            json!({"query": "x", "route": {"pinned": "cheap"}}),
        )?;
        // Arguments are checked against the capability's schema once routing is taken out.
        let invalid = session.error("cap__web_search", json!({"route": {}, "limit": 3}))?;
        let after = searches(env, world);
        check(
            widened
                && malformed["kind"] == "invalid_input"
                && malformed["field"] == "route"
                && invalid["kind"] == "invalid_input"
                && invalid["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("query"))
                && after == before,
            || {
                format!(
                    "widened {error}; malformed {malformed}; invalid {invalid}; calls {before:?} → {after:?}"
                )
            },
        )?;
        session.end();
        Ok(())
    })
}

/// Applies the premium binding again with its cap.web.search mapping in `status`.
fn premium_status(env: &Env, world: &World, status: &str) -> Outcome {
    let premium = binding(
        "search-premium",
        "premium",
        &world.premium.url("/mcp"),
        2000,
        9500,
        status,
    );
    change(
        env,
        world,
        &["apply", "-f", "-"],
        Some(&premium.to_string()),
    )
}

fn quarantined(env: &Env) -> Outcome {
    let result = with_world(env, |world| {
        premium_status(env, world, "quarantined")?;
        let session = session(world)?;
        let names: Vec<String> = session
            .tools()?
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        let before = searches(env, world);
        session.ok("cap__web_search", json!({"query": "x"}))?;
        // By its namespaced name the quarantined tool is unknown: quarantine is not bypassed.
        let direct = session.call("premium__docs_search", json!({"query": "x"}));
        let after = searches(env, world);
        let decision = last_decision(world)?;
        check(
            !names.iter().any(|n| n == "premium__docs_search")
                && names.iter().any(|n| n == "premium__streams_list")
                && after == (before.0 + 1, before.1)
                && decision["routeReason"] == "only_candidate"
                && decision["exclusions"]
                    == json!([{"binding": "search-premium", "tool": "premium__docs_search", "reason": "quarantined"}])
                && direct.as_ref().is_err_and(|e| e.contains("no tool named")),
            || {
                format!(
                    "tools {names:?}; calls {before:?} → {after:?}; decision {decision}; direct {direct:?}"
                )
            },
        )?;
        session.end();
        Ok(())
    });
    // Whatever happened, put the binding back for the trials after this one.
    let restore = with_world(env, |world| premium_status(env, world, "active"));
    result.and(restore)
}

fn invisible(env: &Env) -> Outcome {
    with_world(env, |world| {
        let session = session(world)?;
        // No binding maps a tool onto cap.web.scrape: it is not listed, and calling it reads
        // exactly like a name nobody ever offered.
        let listed = session
            .tools()?
            .iter()
            .any(|t| t["name"] == "cap__web_scrape");
        let scrape = session.call("cap__web_scrape", json!({"url": "https://example.com"}));
        let invented = session.call("cap__web_teleport", json!({"url": "https://example.com"}));
        let same = match (&scrape, &invented) {
            (Err(a), Err(b)) => {
                a.replace("cap__web_scrape", "X") == b.replace("cap__web_teleport", "X")
            }
            _ => false,
        };
        check(!listed && same, || {
            format!("listed {listed}; scrape {scrape:?}; invented {invented:?}")
        })?;
        session.end();
        Ok(())
    })
}

fn filters(env: &Env) -> Outcome {
    with_world(env, |world| {
        let get = |path: &str| {
            world
                .sidecar
                .request("GET", path, &[(PROJECT_HEADER, PROJECT)], None)
        };
        let (unknown, _, body) = get("/v1/route-decisions?capability=cap.web.teleport");
        check(
            unknown == 400 && body.contains("not a capability this Capstan knows"),
            || format!("{unknown} {body}"),
        )?;
        let (zero, _, body) = get("/v1/route-decisions?limit=0");
        check(zero == 400, || format!("{zero} {body}"))?;
        let (known, _, body) = get("/v1/route-decisions?capability=cap.web.search&limit=2");
        let answer: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        check(
            known == 200
                && answer["decisions"].as_array().is_some_and(|d| d.len() <= 2)
                && answer["decisions"]
                    .as_array()
                    .is_some_and(|d| d.iter().all(|r| r["project"] == PROJECT)),
            || format!("{known} {body}"),
        )?;
        // Another project sees none of acme's decisions.
        let (other, _, body) = world.sidecar.request(
            "GET",
            "/v1/route-decisions",
            &[(PROJECT_HEADER, "globex")],
            None,
        );
        check(other == 200 && body.contains("\"decisions\":[]"), || {
            format!("{other} {body}")
        })
    })
}

fn capstanctl_routes(env: &Env) -> Outcome {
    with_world(env, |world| {
        let before = searches(env, world);
        let binary = capstan_testkit::binary("capstanctl");
        let output = std::process::Command::new(binary)
            .args(["routes", "--socket"])
            .arg(&world.sidecar.socket)
            .args(["--project", PROJECT, "--capability", "cap.web.search"])
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let after = searches(env, world);
        check(
            output.status.success()
                && text.contains(
                    "a call would go to premium__docs_search (search-premium): best_score",
                )
                && text.contains("search-cheap")
                && after == before,
            || format!("{}; calls {before:?} → {after:?}", printed(&output)),
        )
    })
}

fn unreadable_qualifiers(env: &Env) -> Outcome {
    // An account that may list bindings but not RouteQualifiers: the qualifier LIST fails.
    let role = json!({"apiVersion": "v1", "kind": "List", "items": [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "bindings-only"},
        "rules": [{"apiGroups": ["capabilities.assistant.miloapis.com"],
                   "resources": ["capabilitybindings"], "verbs": ["list"]}]
    }]});
    kubectl(env, &["apply", "-f", "-"], Some(&role.to_string()))?;
    let narrow = service_account(&env.plane, "narrow").map_err(|e| e.to_string())?;
    bind_cluster_role(&env.plane, "narrow", "bindings-only").map_err(|e| e.to_string())?;
    with_world(env, |world| {
        let sidecar = SidecarProcess::start(
            &env.plane,
            &narrow,
            "narrow",
            &[
                ("CAPABILITY_MCP_ENDPOINT_HOSTS", "127.0.0.1"),
                ("CAPSTAN_CALLER_CHECK", "none"),
            ],
        )
        .map_err(|e| e.to_string())?;
        // Its watch of the qualifiers never syncs, so wait for the bindings by what it lists.
        let session = sidecar.session_listing(PROJECT, None, "cheap__streams_list")?;
        let before = searches(env, world);
        let error = session.error("cap__web_search", json!({"query": "x"}))?;
        let after = searches(env, world);
        // The providers' own tools still work: only routing depends on the qualifiers.
        let streams = session.ok("cheap__streams_list", json!({}));
        check(
            error["kind"] == "rejected"
                && error["code"] == "route_refused"
                && error["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("route qualifiers could not be read"))
                && after == before
                && streams.is_ok(),
            || format!("error {error}; calls {before:?} → {after:?}; streams {streams:?}"),
        )?;
        session.end();
        Ok(())
    })
}
