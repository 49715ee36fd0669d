//! The invalid corpus: every file under `corpus/invalid` yields exactly the lines of its golden
//! file; every file under `corpus/valid` and `examples/streamco` yields no error.
//!
//! Set `CAPSTAN_BLESS=1` to rewrite the golden files from the current output (then review the
//! diff: a golden file is a statement of what users read).

use std::fs;
use std::path::{Path, PathBuf};

fn corpus(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(dir);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("json" | "yaml")
            )
        })
        .collect();
    files.sort();
    files
}

/// What `capstanctl validate` prints for one file.
fn report(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let parsed = capstan_api::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines: Vec<String> = parsed.invalid.iter().flat_map(|o| o.lines()).collect();
    lines.push(format!(
        "{} valid, {} invalid",
        parsed.objects.len(),
        parsed.invalid.len()
    ));
    lines.join("\n") + "\n"
}

#[test]
fn invalid_corpus_should_match_golden_lines() {
    let files = corpus("invalid");
    assert!(
        files.len() >= 40,
        "the invalid corpus shrank to {} files",
        files.len()
    );
    let bless = std::env::var_os("CAPSTAN_BLESS").is_some();
    let mut mismatches = Vec::new();
    for file in files {
        let golden = file.with_extension("golden");
        let actual = report(&file);
        assert!(
            !actual.ends_with(" 0 invalid\n"),
            "{}: expected at least one invalid object",
            file.display()
        );
        if bless {
            fs::write(&golden, &actual).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
            continue;
        }
        let expected = fs::read_to_string(&golden).unwrap_or_default();
        if expected != actual {
            mismatches.push(format!(
                "{}:\n--- expected\n{expected}--- actual\n{actual}",
                file.display()
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn valid_corpus_and_examples_should_have_no_errors() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/streamco");
    let mut files = corpus("valid");
    files.extend(
        [
            "capability-documents.json",
            "capability-bindings.yaml",
            "route-qualifiers.yaml",
        ]
        .map(|name| examples.join(name)),
    );
    for file in files {
        let actual = report(&file);
        assert!(
            actual.ends_with(" 0 invalid\n") && !actual.starts_with("0 valid"),
            "{}:\n{actual}",
            file.display()
        );
    }
}
