//! Callers of a project, for the suites that tell callers apart (authorization, limits): static
//! tokens the apiserver accepts, all of group `tenants`, which may list the project's bindings
//! (so the caller check admits them), and the Python SDK client that calls as them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use capstan_testkit::sidecar::python_report;
use serde_json::{Value, json};

use crate::sidecar::SidecarProcess;
use crate::suite::{Body, Env, run_with};
use crate::{HarnessError, PlaneOptions};

/// Group `tenants` may list bindings: every caller of [`token_file`] is admitted to the
/// project, and holds nothing else.
pub const PROJECT_MEMBERS: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: project-member}
  rules:
  - {apiGroups: [capabilities.assistant.miloapis.com], resources: [capabilitybindings], verbs: [list]}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: project-members}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: project-member}
  subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: tenants}]
"#;

/// Writes the apiserver's static token file for `users` (`--token-auth-file`): user `u` has
/// token `token-of-u` (what the Python SDK client script `offerings.py` sends for a client
/// named `u`), uid `uid-u`, group `tenants`. The file is named after `suite` and this process.
pub fn token_file(suite: &str, users: &[&str]) -> std::io::Result<PathBuf> {
    let path = std::env::temp_dir().join(format!("capstan-{suite}-{}.csv", std::process::id()));
    let lines: String = users
        .iter()
        .map(|u| format!("token-of-{u},{u},uid-{u},\"tenants\"\n"))
        .collect();
    std::fs::write(&path, lines)?;
    Ok(path)
}

/// Runs the trials of `suite`, one at a time, on a plane whose apiserver accepts the tokens of
/// `callers` ([`token_file`]); `teardown` runs after them (the suite's sidecar stops), then
/// the token file is removed.
pub fn run_with_callers(
    suite: &str,
    callers: &[&str],
    setup: impl FnOnce(&Env) -> Result<(), HarnessError>,
    trials: Vec<(String, Body)>,
    teardown: impl FnOnce(),
) -> ExitCode {
    let tokens = match token_file(suite, callers) {
        Ok(tokens) => tokens,
        Err(error) => {
            eprintln!("{suite}: writing the token file: {error}");
            return ExitCode::FAILURE;
        }
    };
    let options = PlaneOptions {
        token_auth_file: Some(tokens.clone()),
    };
    let code = run_with(suite, &options, true, setup, trials);
    teardown();
    let _ = std::fs::remove_file(&tokens);
    code
}

/// The Python SDK client's report of `ops` against `sidecar` in `project`, at `mode`
/// (`legacy`: a session revision; `2026-07-28`: without sessions); see `offerings.py`.
pub fn offerings(sidecar: &SidecarProcess, project: &str, mode: &str, ops: &Value) -> Vec<Value> {
    let socket = sidecar.socket.to_string_lossy().into_owned();
    let report = python_report("offerings.py", &[&socket, project, mode, &ops.to_string()]);
    report.as_array().cloned().unwrap_or_default()
}

/// A binding whose server `server` offers `docs_search` and maps it onto `cap.web.search` at
/// `quality` (basis points), priced alike.
pub fn search_binding(name: &str, server: &str, endpoint: &str, quality: u16) -> Value {
    let mut binding = capstan_testkit::binding_document(name, server, endpoint, &["docs_search"]);
    binding["spec"]["tools"]["mcpServers"][0]["capabilities"] = json!([{
        "capabilityId": "cap.web.search",
        "tool": "docs_search",
        "costHint": {"baseMicrosUsd": 1000},
        "quality": quality,
        "status": "active"
    }]);
    binding
}

/// Where a suite's sidecar writes its audit trail (`CAPSTAN_AUDIT_SINK`), in the plane's
/// state directory `state`.
pub fn audit_file(state: &Path) -> String {
    state.join("sidecar-audit.jsonl").display().to_string()
}

/// The audit lines written to `file` so far.
pub fn audit_lines(file: &str) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}
