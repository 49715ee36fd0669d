//! `capstanctl compose` and `call` refuse a project that is not a project name before they
//! reach for the sidecar.

use std::process::Command;

#[test]
fn a_project_that_is_not_a_project_name_should_be_refused_before_dialing() {
    for project in ["..", "a/b", "A", "a..b"] {
        for command in [
            &["compose", "--project", project][..],
            &["call", "--project", project, "streamco__streams_list"][..],
        ] {
            // The socket does not exist: refusing after dialing would read "is the sidecar
            // running?" instead of the rule.
            let output = Command::new(env!("CARGO_BIN_EXE_capstanctl"))
                .args(command)
                .args(["--socket", "/nonexistent/capstan/composer.sock"])
                .output()
                .unwrap_or_else(|e| panic!("capstanctl: {e}"));
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{project}: {stderr}");
            assert!(
                stderr.contains("invalid value")
                    && stderr.contains("a project name is a Kubernetes object name"),
                "{project}: {stderr}"
            );
            assert!(!stderr.contains("is the sidecar running"), "{stderr}");
        }
    }
}
