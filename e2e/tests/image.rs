//! The OCI images `make image` builds (`scripts/build-image`), built here from the test build's
//! own binaries so `make test` compiles nothing extra: each binary's `--version` runs inside
//! each image (the script's smoke test, `buildah run --isolation chroot`), and the archives hold
//! what this test expects, read back with `tar`: the image config (non-root user, entrypoint per
//! binary) and a root filesystem of the binaries, the libraries `ldd` names, CA certificates
//! and the account files — nothing else.
//!
//! buildah is needed (`.ci/run` installs it and sets `CAPSTAN_REQUIRE_BUILDAH=1`, so CI never
//! skips); on a machine without it the test says so and passes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use capstan_e2e::printed;

const BINARIES: [&str; 2] = ["capstan-controller", "capstan-sidecar"];

#[test]
fn images_should_run_both_binaries_as_non_root_and_hold_only_their_runtime() {
    if Command::new("buildah").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CAPSTAN_REQUIRE_BUILDAH").is_none(),
            "CAPSTAN_REQUIRE_BUILDAH is set but buildah is not installed (apt-get install buildah)"
        );
        eprintln!("image test skipped: buildah is not installed (apt-get install buildah)");
        return;
    }
    let scratch = Scratch::new();
    let binaries = capstan_testkit::binary(BINARIES[0])
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let out = scratch.0.join("out");
    let built = Command::new(capstan_e2e::repo_root().join("scripts/build-image"))
        .arg("--binaries")
        .arg(&binaries)
        .arg("--out")
        .arg(&out)
        .arg("--smoke")
        .env("CAPSTAN_BUILDAH_ROOT", scratch.0.join("buildah"))
        .output()
        .expect("scripts/build-image runs");
    assert!(built.status.success(), "build-image: {}", printed(&built));
    let log = String::from_utf8_lossy(&built.stderr);
    for bin in BINARIES {
        assert!(
            log.contains(&format!("localhost/{bin}:{}: entrypoint", version())),
            "the smoke test did not report {bin}'s image:\n{log}"
        );
    }

    // What the root filesystem must hold, from the binaries themselves.
    let mut expected: BTreeSet<String> = BTreeSet::new();
    for bin in BINARIES {
        expected.insert(format!("usr/local/bin/{bin}"));
        let ldd = Command::new("ldd")
            .arg(binaries.join(bin))
            .output()
            .expect("ldd runs");
        for path in String::from_utf8_lossy(&ldd.stdout)
            .split_whitespace()
            .filter(|word| word.starts_with('/'))
        {
            expected.insert(path.trim_start_matches('/').to_owned());
        }
    }
    for file in [
        "etc/ssl/certs/ca-certificates.crt",
        "etc/passwd",
        "etc/group",
        "etc/nsswitch.conf",
    ] {
        expected.insert(file.to_owned());
    }

    for bin in BINARIES {
        let archive = out.join(format!("{bin}-{}.tar", version()));
        let image = scratch.0.join(bin);
        std::fs::create_dir_all(&image).expect("unpack dir");
        untar(&archive, &image);
        let index = json(&image.join("index.json"));
        let manifest = json(&blob(&image, &index["manifests"][0]["digest"]));
        let config = json(&blob(&image, &manifest["config"]["digest"]));
        assert_eq!(
            config["config"]["User"], "65532:65532",
            "{bin}: the image's user"
        );
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!([format!("/usr/local/bin/{bin}")]),
            "{bin}: the image's entrypoint"
        );
        let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
        assert_eq!(layers.len(), 1, "{bin}: one layer, from scratch");
        let files = list_files(&blob(&image, &layers[0]["digest"]));
        let missing: Vec<_> = expected.difference(&files).collect();
        let extra: Vec<_> = files.difference(&expected).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{bin}: the image's files differ from the binaries' runtime\nmissing: {missing:?}\nextra: {extra:?}"
        );
    }
}

/// The workspace version, which both binaries print.
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// A temporary directory removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("capstan-image-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // buildah's vfs store holds read-only directories; chmod first so removal succeeds.
        let _ = Command::new("chmod")
            .args(["-R", "u+w"])
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn untar(archive: &Path, into: &Path) {
    let output = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .output()
        .expect("tar runs");
    assert!(output.status.success(), "tar: {}", printed(&output));
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn blob(image: &Path, digest: &serde_json::Value) -> PathBuf {
    let digest = digest.as_str().expect("a digest");
    let (algorithm, hex) = digest.split_once(':').expect("algorithm:hex");
    image.join("blobs").join(algorithm).join(hex)
}

/// The regular files and symlinks in a layer (directories left out), as relative paths.
fn list_files(layer: &Path) -> BTreeSet<String> {
    let output = Command::new("tar")
        .arg("-tvf")
        .arg(layer)
        .output()
        .expect("tar runs");
    assert!(output.status.success(), "tar: {}", printed(&output));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| !line.starts_with('d'))
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(|path| path.trim_start_matches("./").to_owned())
        .collect()
}
