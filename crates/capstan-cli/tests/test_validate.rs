//! `capstanctl validate` as a provider team's CI runs it: output lines and exit status.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn capstanctl(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstanctl"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("capstanctl: {e}"));
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    child.wait_with_output().unwrap_or_else(|e| panic!("{e}"))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The document `-o json` printed.
fn json_report(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

#[test]
fn examples_should_validate_with_exit_zero() {
    let output = capstanctl(
        &[
            "validate",
            "examples/streamco/capability-documents.json",
            "examples/streamco/capability-bindings.yaml",
            "examples/streamco/route-qualifiers.yaml",
        ],
        None,
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert_eq!(stdout(&output), "4 valid, 0 invalid\n");
}

#[test]
fn invalid_objects_should_print_one_line_per_error_and_exit_one() {
    let output = capstanctl(
        &[
            "validate",
            "crates/capstan-api/tests/corpus/invalid/mixed-list.yaml",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stdout(&output),
        "broken: spec.serviceName: required\nbroken: spec.skills[0].source: required\n\
         2 valid, 1 invalid\n"
    );
}

#[test]
fn several_files_should_prefix_lines_with_the_file() {
    let output = capstanctl(
        &[
            "validate",
            "examples/streamco/route-qualifiers.yaml",
            "crates/capstan-api/tests/corpus/invalid/rq-pin-without-target.yaml",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stdout(&output),
        "crates/capstan-api/tests/corpus/invalid/rq-pin-without-target.yaml: search-eu-only: \
         spec.constraint.target: required when kind is pin\n2 valid, 1 invalid\n"
    );
}

#[test]
fn standard_input_should_be_read_for_a_dash() {
    let output = capstanctl(&["validate", "-"], Some(r#"[{"spec": {}}]"#));
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).starts_with("#0: spec.configurationVersion: required\n"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn missing_file_should_exit_two_naming_it_and_still_check_the_others() {
    let output = capstanctl(
        &[
            "validate",
            "no/such/file.yaml",
            "examples/streamco/route-qualifiers.yaml",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no/such/file.yaml: cannot read"),
        "{}",
        stderr(&output)
    );
    assert_eq!(stdout(&output), "2 valid, 0 invalid\n");
}

#[test]
fn text_that_is_not_json_should_exit_two_naming_file_and_position() {
    let output = capstanctl(
        &["validate", "-"],
        Some("{\n  \"items\": [\n    {\"spec\": }\n  ]\n}\n"),
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("-: not valid JSON at line 3, column"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn text_that_is_not_yaml_should_exit_two_naming_the_position() {
    let output = capstanctl(
        &["validate", "-"],
        Some("kind: List\nitems:\n  - a: [1, 2\n"),
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("not valid YAML at line"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn unknown_capabilities_and_features_should_warn_without_failing() {
    let document = r#"{
        "metadata": {"name": "search"},
        "spec": {
            "serviceRef": {"name": "search"}, "serviceName": "search.example",
            "serviceAgentRef": {"name": "agent"}, "configurationVersion": "v1",
            "tools": {"mcpServers": [{
                "name": "web", "endpoint": "https://search.example/mcp",
                "toolSelector": {"include": ["search", "dream"]},
                "capabilities": [
                    {"capabilityId": "cap.web.search", "tool": "search", "features": ["search.telepathy"]},
                    {"capabilityId": "cap.dream.weave", "tool": "dream"}
                ]
            }]}
        }
    }"#;
    let output = capstanctl(&["validate", "-"], Some(document));
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "search: warning: spec.tools.mcpServers[0].capabilities[0].features[0]: search.telepathy is not in cap.web.search's feature vocabulary"
        ),
        "{text}"
    );
    assert!(
        text.contains("search: warning: spec.tools.mcpServers[0].capabilities[1].capabilityId: no capability spec cap.dream.weave"),
        "{text}"
    );
    assert!(text.ends_with("1 valid, 0 invalid\n"), "{text}");
}

#[test]
fn json_output_should_carry_every_object_its_errors_and_the_same_exit_status() {
    let output = capstanctl(
        &[
            "validate",
            "-o",
            "json",
            "crates/capstan-api/tests/corpus/invalid/mixed-list.yaml",
            "no/such/file.yaml",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let report = json_report(&output);
    assert_eq!(report["valid"], 2);
    assert_eq!(report["invalid"], 1);
    let files = report["files"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(files.len(), 2, "{report}");
    assert!(
        files[1]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("cannot read")),
        "{report}"
    );
    // Every object in input order, the invalid one with each path-qualified error.
    let objects = files[0]["objects"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"));
    let verdicts: Vec<(u64, bool)> = objects
        .iter()
        .map(|o| (o["index"].as_u64().unwrap_or(99), o["valid"] == true))
        .collect();
    assert_eq!(verdicts.len(), 3, "{report}");
    assert_eq!(verdicts.iter().filter(|(_, valid)| !valid).count(), 1);
    assert!(verdicts.windows(2).all(|w| w[0].0 < w[1].0), "{report}");
    let broken = objects
        .iter()
        .find(|o| o["name"] == "broken")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(
        broken["errors"],
        serde_json::json!([
            {"path": "spec.serviceName", "message": "required"},
            {"path": "spec.skills[0].source", "message": "required"}
        ])
    );
}

#[test]
fn the_older_json_flag_should_still_mean_json_output() {
    let output = capstanctl(
        &[
            "validate",
            "--json",
            "examples/streamco/route-qualifiers.yaml",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = json_report(&output);
    assert_eq!(
        (report["valid"].clone(), report["invalid"].clone()),
        (2.into(), 0.into())
    );
}
