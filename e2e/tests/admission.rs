//! Admission on a real kube-apiserver: what `kubectl apply` and a `kube::Client` are told when
//! they create CapabilityBindings and RouteQualifiers.
//!
//! The refusal cases are the invalid corpus of `capstan-api` (its golden files name the field
//! runtime validation reports); each is applied as a CR and must be refused naming that field,
//! so admission and runtime validation are checked against one list.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use capstan_api::{API_VERSION, CapabilityBinding, CapabilityBindingStatus, RouteQualifier};
use capstan_e2e::suite::{Env, Outcome, check, trial};
use capstan_e2e::{FIELD_MANAGER, printed, repo_root};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::{Value, json};

type Suite = Env;

fn main() -> ExitCode {
    let mut trials = vec![
        trial(
            "kubectl_should_accept_the_streamco_examples_and_print_columns",
            kubectl_accepts_examples,
        ),
        trial(
            "kubectl_explain_should_show_field_descriptions",
            kubectl_explain_describes_fields,
        ),
        trial(
            "client_should_accept_the_streamco_examples",
            client_accepts_examples,
        ),
        trial(
            "spec_change_should_bump_generation_and_status_patch_should_not",
            generation_follows_spec,
        ),
    ];
    for case in refusal_cases() {
        let case = Arc::new(case);
        let by_kubectl = case.clone();
        trials.push(trial(
            format!("kubectl_should_refuse::{}", case.name),
            move |env| refused_by_kubectl(env, &by_kubectl),
        ));
        let by_client = case.clone();
        trials.push(trial(
            format!("client_should_refuse::{}", case.name),
            move |env| refused_by_client(env, &by_client),
        ));
    }
    capstan_e2e::suite::run("admission", false, |_| Ok(()), trials)
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Accepted objects

fn kubectl_accepts_examples(suite: &Suite) -> Outcome {
    let plane = &suite.plane;
    for file in [
        "examples/streamco/capability-bindings.yaml",
        "examples/streamco/route-qualifiers.yaml",
    ] {
        let output = plane.kubectl(&["apply", "-f", file]);
        check(output.status.success(), || {
            format!("kubectl apply -f {file}\n{}", printed(&output))
        })?;
    }

    let output = plane.kubectl(&["get", "capabilitybindings"]);
    let header: Vec<String> = stdout(&output)
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    check(
        header == ["NAME", "ACCEPTED", "COMPOSED", "TOOLS", "AGE"],
        || printed(&output),
    )?;
    check(stdout(&output).contains("streamco-binding"), || {
        printed(&output)
    })?;

    let output = plane.kubectl(&["get", "routequalifiers"]);
    let table = stdout(&output);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    check(
        header == ["NAME", "CAPABILITY", "CONSTRAINT", "ACCEPTED", "AGE"],
        || printed(&output),
    )?;
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("search-eu-only"))
        .unwrap_or("")
        .split_whitespace()
        .collect();
    check(
        row.get(1..3) == Some(&["cap.web.search", "only"][..]),
        || printed(&output),
    )?;

    // The short names and the `capstan` category.
    for (args, expected) in [
        (
            vec!["get", "capb", "-o", "name"],
            vec!["capabilitybinding.capabilities.assistant.miloapis.com/streamco-binding"],
        ),
        (
            vec!["get", "rq", "-o", "name"],
            vec!["routequalifier.capabilities.assistant.miloapis.com/search-eu-only"],
        ),
        (
            vec!["get", "capstan", "-o", "name"],
            vec![
                "capabilitybinding.capabilities.assistant.miloapis.com/streamco-binding",
                "routequalifier.capabilities.assistant.miloapis.com/quality-floor",
                "routequalifier.capabilities.assistant.miloapis.com/search-eu-only",
            ],
        ),
    ] {
        let output = plane.kubectl(&args);
        let listed = stdout(&output);
        for name in expected {
            check(listed.lines().any(|l| l == name), || {
                format!(
                    "kubectl {}: no {name}\n{}",
                    args.join(" "),
                    printed(&output)
                )
            })?;
        }
    }
    Ok(())
}

/// How long a new CRD's schema may take to reach the apiserver's published OpenAPI document,
/// which `kubectl explain` reads: the apiserver rebuilds it asynchronously after the CRD is
/// established.
const OPENAPI_PUBLISH_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

fn kubectl_explain_describes_fields(suite: &Suite) -> Outcome {
    let started = std::time::Instant::now();
    let output = loop {
        let output = suite
            .plane
            .kubectl(&["explain", "capabilitybinding.spec.tools.mcpServers"]);
        if output.status.success() || started.elapsed() > OPENAPI_PUBLISH_WAIT {
            break output;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let text = stdout(&output);
    for expected in [
        "MCP servers (Streamable HTTP), each behind its own tool allow-list",
        "endpoint",
        "toolSelector",
        "allow-list",
        "mutating",
    ] {
        check(text.contains(expected), || {
            format!("explain lacks {expected:?}\n{}", printed(&output))
        })?;
    }
    let output = suite
        .plane
        .kubectl(&["explain", "routequalifier.spec.constraint"]);
    check(
        stdout(&output).contains("none | only | ignore | pin"),
        || printed(&output),
    )
}

fn client_accepts_examples(suite: &Suite) -> Outcome {
    suite.runtime.block_on(async {
        let params = PatchParams::apply(FIELD_MANAGER).validation_strict();
        for file in [
            "examples/streamco/capability-bindings.yaml",
            "examples/streamco/route-qualifiers.yaml",
        ] {
            for mut object in read_objects(&repo_root().join(file)) {
                let name = format!(
                    "{}-client",
                    object["metadata"]["name"].as_str().unwrap_or("x")
                );
                object["metadata"]["name"] = json!(name);
                let api = dynamic_api(&suite.client, &object);
                api.patch(&name, &params, &Patch::Apply(&object))
                    .await
                    .map_err(|e| format!("{file}: {name}: {e}"))?;
            }
        }
        let bindings: Api<CapabilityBinding> = Api::all(suite.client.clone());
        let binding = bindings
            .get("streamco-binding-client")
            .await
            .map_err(|e| e.to_string())?;
        check(
            binding.spec.skills.first().map(|s| s.name.as_str()) == Some("lag-triage"),
            || format!("{binding:?}"),
        )
    })
}

fn generation_follows_spec(suite: &Suite) -> Outcome {
    suite.runtime.block_on(async {
        let api: Api<CapabilityBinding> = Api::all(suite.client.clone());
        let name = "generation-probe";
        let mut binding = example_binding(name);
        let created = api.create(&PostParams::default(), &binding).await.map_err(|e| e.to_string())?;
        check(created.metadata.generation == Some(1), || format!("created: {:?}", created.metadata))?;

        let status = json!({ "status": CapabilityBindingStatus { observed_generation: Some(1), tool_count: Some(3), ..Default::default() } });
        let patched = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| e.to_string())?;
        check(patched.metadata.generation == Some(1), || format!("after status patch: {:?}", patched.metadata))?;
        check(patched.status.as_ref().and_then(|s| s.tool_count) == Some(3), || format!("{:?}", patched.status))?;

        binding.spec.configuration_version = "v2".into();
        let spec = json!({ "spec": binding.spec });
        let changed = api.patch(name, &PatchParams::default(), &Patch::Merge(&spec)).await.map_err(|e| e.to_string())?;
        check(changed.metadata.generation == Some(2), || format!("after spec patch: {:?}", changed.metadata))?;
        // The status subresource ignores spec, and the main resource ignores status.
        check(changed.status.as_ref().and_then(|s| s.tool_count) == Some(3), || format!("{:?}", changed.status))
    })
}

fn example_binding(name: &str) -> CapabilityBinding {
    let path = repo_root().join("examples/streamco/capability-bindings.yaml");
    let object = read_objects(&path).pop().unwrap_or_default();
    let mut binding: CapabilityBinding =
        serde_json::from_value(object).unwrap_or_else(|e| panic!("{e}"));
    binding.metadata = kube::api::ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    };
    binding
}

// ---------------------------------------------------------------------------------------------
// Refused objects, from the invalid corpus

struct Case {
    name: String,
    object: Value,
    /// The field paths runtime validation names, with its messages; admission must name each
    /// (or an enclosing field, for rules the apiserver reports on the list or object holding
    /// the field).
    errors: Vec<(String, String)>,
}

impl Case {
    fn keeps_name(&self) -> bool {
        self.errors.iter().any(|(path, _)| path == "metadata.name")
    }
}

/// Runtime messages whose admission counterpart is a CEL rule. The apiserver skips CEL rules
/// while an object has schema errors ("some validation rules were not checked").
fn is_cel_rule(message: &str) -> bool {
    [
        "is not in",
        "is reserved",
        "must not contain \"__\"",
        "when kind is",
    ]
    .iter()
    .any(|marker| message.contains(marker))
}

fn corpus_dir() -> PathBuf {
    repo_root().join("crates/capstan-api/tests/corpus/invalid")
}

fn refusal_cases() -> Vec<Case> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    let mut cases = Vec::new();
    for file in files {
        if !matches!(
            file.extension().and_then(|e| e.to_str()),
            Some("json" | "yaml")
        ) {
            continue;
        }
        let mut objects = read_objects(&file);
        if objects.len() != 1 {
            continue; // Lists are about the parser, not admission.
        }
        let golden = std::fs::read_to_string(file.with_extension("golden")).unwrap_or_default();
        // Spec errors and the qualifier name bound; a missing or mistyped name or apiVersion is
        // refused by the client before any request is made.
        let errors: Vec<(String, String)> = golden
            .lines()
            .filter_map(|line| {
                line.split_once(": ")
                    .and_then(|(_, rest)| rest.split_once(": "))
            })
            .map(|(path, message)| (path.to_owned(), message.to_owned()))
            .filter(|(path, message)| {
                path == "spec"
                    || path.starts_with("spec.")
                    || (path == "metadata.name" && message.starts_with("must be at most"))
            })
            .collect();
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("case")
            .to_owned();
        let mut object = objects.remove(0);
        let is_list = object["kind"]
            .as_str()
            .is_some_and(|kind| kind.ends_with("List"));
        if errors.is_empty() || !object.is_object() || is_list {
            continue;
        }
        let is_qualifier = object["kind"] == "RouteQualifier";
        if !is_qualifier {
            // A capability document becomes the CapabilityBinding carrying the same spec.
            object["apiVersion"] = json!(API_VERSION);
            object["kind"] = json!("CapabilityBinding");
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        let case = Case {
            name: stem.clone(),
            object: Value::Null,
            errors,
        };
        if !case.keeps_name() {
            object["metadata"] = json!({ "name": stem.to_lowercase() });
        }
        cases.push(Case { object, ..case });
    }
    cases
}

fn read_objects(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if path.extension().and_then(|e| e.to_str()) == Some("json") {
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(items)) => items,
            Ok(value) => vec![value],
            Err(e) => panic!("{}: {e}", path.display()),
        }
    } else {
        serde_saphyr::from_multiple::<Value>(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

/// Whether `error` names `path` or a field enclosing it below the top-level spec field
/// (`spec.tools.mcpServers[0].mutating[1]` → `spec.tools.mcpServers[0].mutating`, …).
fn names_field(error: &str, path: &str) -> bool {
    let mut candidate = path;
    loop {
        if error.contains(candidate) {
            return true;
        }
        match candidate.rfind(['.', '[']) {
            Some(at) if candidate[..at].matches(['.', '[']).count() >= 2 => {
                candidate = &candidate[..at]
            }
            _ => return false,
        }
    }
}

/// Checks a refusal against the case: every field runtime validation names must be named,
/// except CEL-backed ones when the apiserver says it skipped its rules.
fn check_refusal(case: &Case, error: &str) -> Outcome {
    let rules_skipped = error.contains("some validation rules were not checked");
    for (path, message) in &case.errors {
        if rules_skipped && is_cel_rule(message) {
            continue;
        }
        check(names_field(error, path), || {
            format!("refusal does not name {path} ({message}):\n{error}")
        })?;
    }
    Ok(())
}

fn with_suffix(case: &Case, suffix: &str) -> Value {
    let mut object = case.object.clone();
    if !case.keeps_name() {
        object["metadata"]["name"] = json!(format!("{}-{suffix}", case.name.to_lowercase()));
    }
    object
}

fn refused_by_kubectl(suite: &Suite, case: &Case) -> Outcome {
    let object = with_suffix(case, "k");
    let output = suite
        .plane
        .kubectl_with_input(&["apply", "-f", "-"], Some(&object.to_string()));
    check(!output.status.success(), || {
        format!("admitted:\n{}", printed(&output))
    })?;
    check_refusal(case, &String::from_utf8_lossy(&output.stderr))
}

/// A create as a catalog controller issues it, with strict field validation (what kubectl asks
/// for by default; the apiserver's own default only warns about unknown fields).
fn refused_by_client(suite: &Suite, case: &Case) -> Outcome {
    let object = with_suffix(case, "c");
    suite.runtime.block_on(async {
        let api = dynamic_api(&suite.client, &object);
        let body = serde_json::to_vec(&object).map_err(|e| e.to_string())?;
        let mut request = kube::core::Request::new(api.resource_url())
            .create(&PostParams::default(), body)
            .map_err(|e| e.to_string())?;
        let uri = format!("{}?fieldValidation=Strict", request.uri().path());
        *request.uri_mut() = uri.parse().map_err(|e| format!("{uri}: {e}"))?;
        match suite.client.request::<Value>(request).await {
            Ok(_) => Err(format!("admitted: {object}").into()),
            Err(kube::Error::Api(status)) => {
                check_refusal(case, &format!("{} {:?}", status.message, status.details))
            }
            Err(other) => Err(format!("not an API refusal: {other}").into()),
        }
    })
}

fn dynamic_api(client: &Client, object: &Value) -> Api<DynamicObject> {
    let resource = if object["kind"] == "RouteQualifier" {
        ApiResource::erase::<RouteQualifier>(&())
    } else {
        ApiResource::erase::<CapabilityBinding>(&())
    };
    debug_assert_eq!(CapabilityBinding::api_version(&()), API_VERSION);
    Api::all_with(client.clone(), &resource)
}
