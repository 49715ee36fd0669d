//! The workspace's root and its binaries, as the tests' own build made them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root: above the package cargo runs the test or bench of (its
/// `CARGO_MANIFEST_DIR` at run time), else above this crate as it was built. At run time
/// first: two checkouts sharing one build directory reuse each other's compiled testkit,
/// and the path built into it may be the other checkout's.
pub fn repo_root() -> PathBuf {
    let running = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    running
        .iter()
        .map(PathBuf::as_path)
        .chain([Path::new(env!("CARGO_MANIFEST_DIR"))])
        .find_map(|package| {
            package
                .ancestors()
                .find(|dir| dir.join("Cargo.lock").is_file())
        })
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
