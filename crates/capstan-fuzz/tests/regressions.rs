//! Replays every checked-in fuzz input — the seeds each target starts from (`fuzz/seeds/`) and
//! every input that once crashed (`fuzz/regressions/`) — through the target bodies, so a crash
//! fixed stays fixed (docs/reliability.md).

#![allow(clippy::expect_used)]

use std::path::PathBuf;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

#[test]
fn every_seed_and_regression_input_should_pass_its_target() {
    let mut replayed = 0;
    for (target, body) in capstan_fuzz::TARGETS {
        let mut seeds = 0;
        for kind in ["seeds", "regressions"] {
            let dir = fuzz_dir().join(kind).join(target);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let data = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
                let outcome = std::panic::catch_unwind(|| body(&data));
                assert!(outcome.is_ok(), "{target}: {} fails", path.display());
                replayed += 1;
                if kind == "seeds" {
                    seeds += 1;
                }
            }
        }
        assert!(
            seeds > 0,
            "target {target} has no seed inputs in fuzz/seeds/{target}"
        );
    }
    assert!(replayed >= capstan_fuzz::TARGETS.len());
}

/// The forged plan-token seed carries the target key's id, its ledger, an unexpired expiry and
/// a correct binding tag, so fuzzing starts from an input that reaches the MAC comparison —
/// not one refused at the key lookup, as a seed with another key id would be.
#[test]
fn the_forged_plan_token_seed_should_reach_the_mac_check() {
    let path = fuzz_dir().join("seeds/plan_token/forged");
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert_eq!(
        capstan_fuzz::plan_token_refusal(&data),
        Some(capstan_platform::PlanRefused::Mismatch),
        "{}",
        String::from_utf8_lossy(&data)
    );
}

#[test]
fn every_target_should_be_built_and_run_by_make_fuzz() {
    let root = fuzz_dir().join("..");
    let makefile = std::fs::read_to_string(root.join("Makefile")).expect("the Makefile");
    let listed: Vec<&str> = makefile
        .lines()
        .find_map(|l| l.strip_prefix("FUZZ_TARGETS := "))
        .expect("FUZZ_TARGETS in the Makefile")
        .split_whitespace()
        .collect();
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for (target, _) in capstan_fuzz::TARGETS {
        assert!(
            listed.contains(&target),
            "make fuzz does not run {target}: {listed:?}"
        );
        assert!(
            manifest.contains(&format!("path = \"fuzz_targets/{target}.rs\"")),
            "fuzz/Cargo.toml builds no {target}"
        );
        assert!(
            fuzz_dir()
                .join(format!("fuzz_targets/{target}.rs"))
                .exists()
        );
    }
    assert_eq!(listed.len(), capstan_fuzz::TARGETS.len(), "{listed:?}");
}
