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
