//! The workspace's root and its binaries, as the tests' own build made them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("no workspace root above {}", env!("CARGO_MANIFEST_DIR")))
}

/// Set by `make test` and `make bench` once their one build has made every workspace binary:
/// the testkit then uses them as they are.
pub const PREBUILT: &str = "CAPSTAN_BINARIES_PREBUILT";

/// The workspace binary `bin`, as the tests' own build made it.
///
/// `cargo test --workspace` builds every binary with the same feature set as the tests
/// (packages with integration tests get their binaries built; the demo provider has one for
/// that reason), so under `make test` nothing is built here. Run some other way (`cargo test
/// -p …`), the binaries are built once per process with the command `make test` uses, so no
/// second feature set is compiled: `cargo test --workspace --no-run` (debug), or `cargo build
/// --profile bench --workspace --bins --benches` under `cargo bench`.
pub fn binary(bin: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        if std::env::var_os(PREBUILT).is_none() {
            build_workspace_binaries();
        }
    });
    // Test and bench executables run from <target>/<profile>/deps; binaries sit in
    // <target>/<profile>.
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current exe: {e}"));
    let path = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} has no target dir", exe.display()))
        .join(bin);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `make test` (or `cargo test --workspace`)",
        path.display()
    );
    path
}

fn build_workspace_binaries() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let args: &[&str] = if cfg!(debug_assertions) {
        &["test", "--workspace", "--no-run", "-q"]
    } else {
        &[
            "build",
            "--profile",
            "bench",
            "--workspace",
            "--bins",
            "--benches",
            "-q",
        ]
    };
    let status = Command::new(cargo)
        .args(args)
        .current_dir(repo_root())
        .status()
        .unwrap_or_else(|e| panic!("running cargo: {e}"));
    assert!(status.success(), "cargo {} failed", args.join(" "));
}
