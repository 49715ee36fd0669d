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
        trial(
            "kubectl_should_admit_an_unprefixed_server_and_keep_its_naming",
            unprefixed_admitted,
        ),
    ];
    trials.push(trial(
        "kubectl_should_refuse_a_list_with_an_invalid_item_whole_naming_its_fields",
        list_by_kubectl,
    ));
    trials.push(trial(
        "client_should_admit_the_valid_items_of_a_list_and_refuse_the_invalid_one",
        list_by_client,
    ));
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

/// The conformance suite's binding names its server's tools unprefixed (`toolNames:
/// Unprefixed`): admission runs its CEL rule over every allowed name and admits them, and the
/// stored object keeps the field.
fn unprefixed_admitted(suite: &Suite) -> Outcome {
    let plane = &suite.plane;
    let file = "e2e/conformance/binding.yaml";
    let output = plane.kubectl(&["apply", "-f", file]);
    check(output.status.success(), || {
        format!("kubectl apply -f {file}\n{}", printed(&output))
    })?;
    let output = plane.kubectl(&[
        "get",
        "capabilitybinding",
        "conformance-binding",
        "-o",
        "jsonpath={.spec.tools.mcpServers[0].toolNames}",
    ]);
    check(stdout(&output) == "Unprefixed", || printed(&output))
}

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
        header == ["NAME", "READY", "ACCEPTED", "COMPOSED", "TOOLS", "AGE"],
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
        header
            == [
                "NAME",
                "CAPABILITY",
                "CONSTRAINT",
                "READY",
                "ACCEPTED",
                "AGE",
            ],
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

/// Files in the invalid corpus. Every one becomes a case here (one object each, or the list
/// trial for `mixed-list`); a file added, removed or left unread fails the suite instead of
/// shrinking it.
const CORPUS_FILES: usize = 92;

/// The one corpus file that is a List: applied as a List, its valid items must be admitted.
const LIST_CASE: &str = "mixed-list";

struct Case {
    name: String,
    object: Value,
    expect: Expect,
}

/// What admission must say about a case.
enum Expect {
    /// The field paths runtime validation names (from the golden file), with its messages;
    /// admission must name each path exactly (see [`ADMISSION_PATHS`] for the few it cannot).
    Fields(Vec<(String, String)>),
    /// The object's envelope (apiVersion, name) is wrong: kubectl and the apiserver's decoder
    /// refuse it before any schema applies, each in its own words, which must say this.
    Envelope {
        kubectl: &'static str,
        client: &'static str,
    },
}

/// Envelope cases: kubectl checks apiVersion and the name before sending, and the
/// apiserver decodes the envelope before the CRD's schema sees the object.
const ENVELOPE: &[(&str, &str, &str)] = &[
    (
        "cr-missing-apiVersion",
        "apiVersion not set",
        "the API version in the data () does not match the expected API version",
    ),
    (
        "cr-wrong-apiVersion",
        "no matches for kind \"CapabilityBinding\" in version \"capabilities.assistant.miloapis.com/v1\"",
        "CapabilityBinding in version \"v1\" cannot be handled as a CapabilityBinding",
    ),
    (
        "cr-missing-name",
        "resource name may not be empty",
        "metadata.name: Required value",
    ),
    (
        "rq-missing-name",
        "resource name may not be empty",
        "metadata.name: Required value",
    ),
    (
        "doc-metadata-name-number",
        "cannot unmarshal number into Go struct field ObjectMeta.metadata.name of type string",
        "cannot unmarshal number into Go struct field ObjectMeta.name of type string",
    ),
    (
        "doc-metadata-name-empty",
        "resource name may not be empty",
        "metadata.name: Required value",
    ),
    (
        "doc-metadata-namespace-number",
        "cannot unmarshal number into Go struct field ObjectMeta.metadata.namespace of type string",
        "cannot unmarshal number into Go struct field ObjectMeta.namespace of type string",
    ),
];

/// Golden paths the apiserver names differently, by case, with the path it names. Each is a limit of
/// admission, not a looser check: everything else must be named exactly.
const ADMISSION_PATHS: &[(&str, &str, &str)] = &[
    // A CEL rule on a server (or its allow-list) sees the list or map it checks, not the
    // entry that broke it (`fieldPath` is static, so it cannot carry the entry's index or key).
    (
        "doc-capability-tool-not-included",
        "spec.tools.mcpServers[0].capabilities[0].tool",
        "spec.tools.mcpServers[0].capabilities",
    ),
    (
        "cr-provider-project-argument",
        "spec.tools.mcpServers[0].providerProjectArgument.tools[1]",
        "spec.tools.mcpServers[0].providerProjectArgument.tools",
    ),
    (
        "doc-mutating-not-included",
        "spec.tools.mcpServers[0].mutating[0]",
        "spec.tools.mcpServers[0].mutating",
    ),
    (
        "doc-pin-not-included",
        "spec.tools.mcpServers[0].toolSelector.pins.streams_delete",
        "spec.tools.mcpServers[0].toolSelector.pins",
    ),
    (
        "doc-resource-pin-not-included",
        "spec.tools.mcpServers[0].resourceSelector.pins.file:///secret/keys",
        "spec.tools.mcpServers[0].resourceSelector.pins",
    ),
    (
        "doc-unprefixed-built-in",
        "spec.tools.mcpServers[0].toolSelector.include[1]",
        "spec.tools.mcpServers[0].toolSelector.include",
    ),
    (
        "doc-unprefixed-built-in",
        "spec.tools.mcpServers[0].toolSelector.include[2]",
        "spec.tools.mcpServers[0].toolSelector.include",
    ),
    (
        "doc-unprefixed-built-in",
        "spec.tools.mcpServers[0].toolSelector.include[3]",
        "spec.tools.mcpServers[0].toolSelector.include",
    ),
    (
        "doc-resource-capstan-uri",
        "spec.tools.mcpServers[0].resourceSelector.include[1]",
        "spec.tools.mcpServers[0].resourceSelector.include",
    ),
    (
        "doc-resource-capstan-uri",
        "spec.tools.mcpServers[0].resourceSelector.include[2]",
        "spec.tools.mcpServers[0].resourceSelector.include",
    ),
    // A duplicate list-map key is reported on the entry, not on its key field.
    (
        "doc-duplicate-server-names",
        "spec.tools.mcpServers[1].name",
        "spec.tools.mcpServers[1]",
    ),
    (
        "doc-duplicate-skill-names",
        "spec.skills[1].name",
        "spec.skills[1]",
    ),
    // Strict decoding reads an object where a list belongs as unknown fields inside it.
    (
        "doc-type-concepts-object",
        "spec.knowledge.concepts",
        "spec.knowledge.concepts.gvk",
    ),
];

impl Case {
    fn keeps_name(&self) -> bool {
        match &self.expect {
            Expect::Envelope { .. } => true,
            Expect::Fields(errors) => errors.iter().any(|(path, _)| path == "metadata.name"),
        }
    }
}

/// Runtime messages whose admission counterpart is a CEL rule. The apiserver skips CEL rules
/// while an object has schema errors ("some validation rules were not checked").
fn is_cel_rule(message: &str) -> bool {
    [
        "is not in",
        "is reserved",
        "cannot be exposed unprefixed",
        "takes the capstan: scheme",
        "must not contain \"__\"",
        "when kind is",
    ]
    .iter()
    .any(|marker| message.contains(marker))
}

fn corpus_dir() -> PathBuf {
    repo_root().join("crates/capstan-api/tests/corpus/invalid")
}

/// The corpus files (JSON and YAML) by name.
fn corpus_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap_or_else(|e| panic!("{}: {e}", corpus_dir().display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("json" | "yaml")
            )
        })
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        CORPUS_FILES,
        "the invalid corpus changed: update CORPUS_FILES with the cases"
    );
    files
}

fn stem(file: &Path) -> String {
    file.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_else(|| panic!("{}: no name", file.display()))
        .to_owned()
}

/// The golden lines of a corpus file as (path, message); every corpus file has them.
fn golden(file: &Path) -> Vec<(String, String)> {
    let path = file.with_extension("golden");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let errors: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| {
            line.split_once(": ")
                .and_then(|(_, rest)| rest.split_once(": "))
        })
        .map(|(path, message)| (path.to_owned(), message.to_owned()))
        .collect();
    assert!(!errors.is_empty(), "{}: no error lines", path.display());
    errors
}

fn refusal_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for file in corpus_files() {
        let stem = stem(&file);
        if stem == LIST_CASE {
            continue;
        }
        let mut objects = read_objects(&file);
        assert_eq!(objects.len(), 1, "{}: one object per case", file.display());
        let mut object = objects.remove(0);
        let envelope = ENVELOPE.iter().find(|(name, _, _)| *name == stem);
        let expect = match envelope {
            Some((_, kubectl, client)) => Expect::Envelope { kubectl, client },
            None => Expect::Fields(golden(&file)),
        };
        let is_document = !matches!(
            object["kind"].as_str(),
            Some("CapabilityBinding" | "RouteQualifier")
        );
        if is_document {
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
            expect,
        };
        if !case.keeps_name() {
            object["metadata"] = json!({ "name": stem.to_lowercase() });
        }
        cases.push(Case { object, ..case });
    }
    assert_eq!(cases.len(), CORPUS_FILES - 1, "a corpus file made no case");
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

/// Whether `error` names `path` itself: the path followed by something that cannot continue
/// it (so `spec.skills` is not named by `spec.skills[0].source`, nor
/// `spec.tools.mcpServers[0].mutating[1]` by `spec.tools.mcpServers[0].mutating`).
fn names_field(error: &str, path: &str) -> bool {
    error.match_indices(path).any(|(at, _)| {
        !error[at + path.len()..]
            .chars()
            .next()
            .is_some_and(|c| c == '.' || c == '[' || c.is_alphanumeric() || c == '_')
    })
}

/// Checks a refusal against the case. `kubectl` tells which client's words an envelope case
/// expects.
fn check_refusal(case: &Case, error: &str, kubectl: bool) -> Outcome {
    match &case.expect {
        Expect::Envelope {
            kubectl: by_kubectl,
            client,
        } => {
            let expected = if kubectl { by_kubectl } else { client };
            check(error.contains(expected), || {
                format!("refusal does not say {expected:?}:\n{error}")
            })
        }
        Expect::Fields(errors) => {
            let rules_skipped = error.contains("some validation rules were not checked");
            for (path, message) in errors {
                if rules_skipped && is_cel_rule(message) {
                    continue;
                }
                let named = ADMISSION_PATHS
                    .iter()
                    .find(|(name, golden, _)| *name == case.name && golden == path)
                    .map_or(path.as_str(), |(_, _, admission)| admission);
                check(names_field(error, named), || {
                    format!("refusal does not name {named} ({message}):\n{error}")
                })?;
            }
            Ok(())
        }
    }
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
    check_refusal(case, &String::from_utf8_lossy(&output.stderr), true)
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
            Err(kube::Error::Api(status)) => check_refusal(
                case,
                &format!("{} {:?}", status.message, status.details),
                false,
            ),
            Err(other) => Err(format!("not an API refusal: {other}").into()),
        }
    })
}

/// The list case: its items renamed with `suffix`, and the golden errors of each item by its
/// original name.
fn list_case(suffix: &str) -> (Vec<Value>, Vec<(String, String, String)>) {
    let file = corpus_dir().join(format!("{LIST_CASE}.yaml"));
    let list = read_objects(&file).pop().unwrap_or_default();
    let items: Vec<Value> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut item| {
            let name = item["metadata"]["name"]
                .as_str()
                .unwrap_or("item")
                .to_owned();
            item["metadata"]["name"] = json!(format!("list-{name}-{suffix}"));
            item
        })
        .collect();
    let text = std::fs::read_to_string(file.with_extension("golden")).unwrap_or_default();
    let errors = text
        .lines()
        .filter_map(|line| {
            let (object, rest) = line.split_once(": ")?;
            let (path, message) = rest.split_once(": ")?;
            Some((object.to_owned(), path.to_owned(), message.to_owned()))
        })
        .collect();
    (items, errors)
}

/// Checks that the items of the list case named in `errors` were refused (naming each path
/// in `refusal`) and the others exist: one invalid item loses none of its siblings.
fn check_list_outcome(
    suite: &Suite,
    items: &[Value],
    errors: &[(String, String, String)],
    refusal: &str,
    suffix: &str,
) -> Outcome {
    check(errors.len() == 2, || format!("golden errors {errors:?}"))?;
    for (object, path, message) in errors {
        check(names_field(refusal, path), || {
            format!(
                "refusal does not name {path} of {object} ({message}):
{refusal}"
            )
        })?;
    }
    suite.runtime.block_on(async {
        let api: Api<CapabilityBinding> = Api::all(suite.client.clone());
        for item in items {
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            let invalid = errors
                .iter()
                .any(|(object, _, _)| name == format!("list-{object}-{suffix}"));
            let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
            check(found.is_some() != invalid, || {
                format!("{name}: exists {}, invalid {invalid}", found.is_some())
            })?;
        }
        Ok(())
    })
}

/// kubectl validates a whole file against the published schema before sending any of it: a
/// List with one invalid item is refused whole, naming the item's fields in kubectl's own
/// notation, and nothing is created.
fn list_by_kubectl(suite: &Suite) -> Outcome {
    let (items, errors) = list_case("k");
    check(errors.len() == 2, || format!("golden errors {errors:?}"))?;
    // A List is core v1; the corpus file leaves that out because the parser does not need it.
    let list = json!({ "apiVersion": "v1", "kind": "List", "items": items });
    let output = suite
        .plane
        .kubectl_with_input(&["apply", "-f", "-"], Some(&list.to_string()));
    check(!output.status.success(), || {
        format!("admitted:\n{}", printed(&output))
    })?;
    let refusal = String::from_utf8_lossy(&output.stderr).into_owned();
    for expected in [
        "ValidationError(CapabilityBinding.spec): missing required field \"serviceName\"",
        "ValidationError(CapabilityBinding.spec.skills[0]): missing required field \"source\"",
    ] {
        check(refusal.contains(expected), || {
            format!("refusal does not say {expected:?}:\n{refusal}")
        })?;
    }
    suite.runtime.block_on(async {
        let api: Api<CapabilityBinding> = Api::all(suite.client.clone());
        for item in &items {
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
            check(found.is_none(), || format!("{name} was created"))?;
        }
        Ok(())
    })
}

fn list_by_client(suite: &Suite) -> Outcome {
    let (items, errors) = list_case("c");
    let mut refusals = String::new();
    suite.runtime.block_on(async {
        for item in &items {
            let api = dynamic_api(&suite.client, item);
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            let params = PatchParams::apply(FIELD_MANAGER).validation_strict();
            if let Err(error) = api.patch(name, &params, &Patch::Apply(item)).await {
                refusals.push_str(&format!("{name}: {error}\n"));
            }
        }
    });
    check_list_outcome(suite, &items, &errors, &refusals, "c")
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
