//! The configuration reference of a binary, rendered from its clap definitions, so
//! `docs/configuration.md` cannot drift from the flags (each binary's tests compare the two).

use std::fmt::Write as _;

/// One markdown table of `command`'s settings: flag, environment variable, default, meaning.
pub fn reference_table(command: &clap::Command) -> String {
    let mut table = String::from("| flag | environment | default | meaning |\n|---|---|---|---|\n");
    for argument in command.get_arguments() {
        let Some(long) = argument.get_long() else {
            continue;
        };
        if matches!(long, "help" | "version") {
            continue;
        }
        let env = argument
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let defaults: Vec<String> = argument
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = match defaults.as_slice() {
            [] => String::new(),
            [only] if only.is_empty() => "(empty)".to_owned(),
            values => format!("`{}`", values.join(",")),
        };
        let mut meaning = argument
            .get_long_help()
            .or(argument.get_help())
            .map(|h| {
                h.to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        // clap drops the period ending a one-line doc comment.
        if !meaning.is_empty() && !meaning.ends_with('.') {
            meaning.push('.');
        }
        let choices: Vec<String> = argument
            .get_possible_values()
            .iter()
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if !choices.is_empty() {
            let _ = write!(meaning, " One of {}.", choices.join(", "));
        }
        let _ = writeln!(
            table,
            "| `--{long}` | {env} | {default} | {} |",
            meaning.replace('|', "\\|")
        );
    }
    table
}

/// `document` with the text between `<!-- begin NAME -->` and `<!-- end NAME -->` replaced by
/// `section`; `None` when the markers are missing.
pub fn replace_section(document: &str, name: &str, section: &str) -> Option<String> {
    let begin = format!("<!-- begin {name} -->\n");
    let end = format!("<!-- end {name} -->");
    let start = document.find(&begin)? + begin.len();
    let stop = start + document[start..].find(&end)?;
    Some(format!(
        "{}{section}{}",
        &document[..start],
        &document[stop..]
    ))
}

/// Why a binary's section of its reference document is not what its flags say.
#[derive(Debug, thiserror::Error)]
pub enum StaleReference {
    /// The document cannot be read or written.
    #[error("{path}: {source}")]
    File {
        /// The document.
        path: std::path::PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The document has no section for the binary.
    #[error("{path} has no `<!-- begin {name} -->` … `<!-- end {name} -->` markers")]
    NoSection {
        /// The document.
        path: std::path::PathBuf,
        /// The binary.
        name: String,
    },
    /// The section differs from the flags.
    #[error("{path} is stale for {name}: run `make generate`")]
    Stale {
        /// The document.
        path: std::path::PathBuf,
        /// The binary.
        name: String,
    },
}

/// Compares `name`'s section of the reference document at `path` with `command`'s flags, or
/// rewrites the section when `CAPSTAN_UPDATE_DOCS` is set (`make generate`). Each binary's tests
/// call it; the error says what is stale and how to fix it.
pub fn check_reference(
    path: &std::path::Path,
    name: &str,
    command: &clap::Command,
) -> Result<(), StaleReference> {
    let file = |source| StaleReference::File {
        path: path.to_owned(),
        source,
    };
    let document = std::fs::read_to_string(path).map_err(file)?;
    let expected =
        replace_section(&document, name, &reference_table(command)).ok_or_else(|| {
            StaleReference::NoSection {
                path: path.to_owned(),
                name: name.to_owned(),
            }
        })?;
    if std::env::var_os("CAPSTAN_UPDATE_DOCS").is_some() {
        return std::fs::write(path, &expected).map_err(file);
    }
    if document == expected {
        Ok(())
    } else {
        Err(StaleReference::Stale {
            path: path.to_owned(),
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Example {
        /// Seconds to wait.
        #[arg(long, env = "EXAMPLE_WAIT", default_value_t = 5)]
        wait: u64,
        /// Where to go | or not.
        #[arg(long, value_enum, default_value = "left")]
        side: Side,
    }

    #[derive(Clone, Copy, Debug, clap::ValueEnum)]
    enum Side {
        Left,
        Right,
    }

    #[test]
    fn a_table_should_list_each_flag_with_its_env_default_and_choices() {
        use clap::CommandFactory as _;
        let table = reference_table(&Example::command());
        assert!(
            table.contains("| `--wait` | `EXAMPLE_WAIT` | `5` | Seconds to wait. |"),
            "{table}"
        );
        assert!(
            table.contains(
                "| `--side` |  | `left` | Where to go \\| or not. One of `left`, `right`. |"
            ),
            "{table}"
        );
        assert!(!table.contains("--help"));
    }

    #[test]
    fn a_section_should_be_replaced_between_its_markers() {
        let document = "a\n<!-- begin x -->\nold\n<!-- end x -->\nb";
        assert_eq!(
            replace_section(document, "x", "new\n").unwrap(),
            "a\n<!-- begin x -->\nnew\n<!-- end x -->\nb"
        );
        assert!(replace_section(document, "y", "new").is_none());
    }
}
