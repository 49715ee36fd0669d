//! The official MCP conformance suite against its reference server, directly and through this
//! sidecar, for both revisions (`e2e/conformance/`, `make conformance`). The suite is the
//! oracle: a scenario that passes against the server directly must pass through the sidecar,
//! or be listed in `e2e/conformance/expected-failures.txt` with its reason — and a listed
//! scenario that passes fails this test too, so the list only shrinks as the MCP surface is
//! carried through (docs/plans/mcp-surface.md).

use std::process::Command;

use capstan_testkit::{binary, repo_root};

#[test]
fn every_scenario_passing_directly_should_pass_through_the_sidecar_or_be_listed() {
    let run = repo_root().join("e2e/conformance/run");
    let output = Command::new(&run)
        .arg(binary("capstan-sidecar"))
        .arg("--check")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", run.display()));
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
