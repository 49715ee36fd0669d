//! How a command prints what it read: aligned tables with headers for a person (the default),
//! or one JSON document for a machine (`-o json`) — the same option on every command that
//! reads something.

use serde_json::Value;

/// Who reads a command's output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables with headers, for a person.
    #[default]
    Table,
    /// One JSON document, for a machine.
    Json,
}

/// A command's formats, one of them JSON: [`Format`] for most, YAML and JSON for `pins`.
pub trait Formats: clap::ValueEnum + Clone + PartialEq + Send + Sync + 'static {
    /// The format a machine reads.
    const JSON: Self;
}

impl Formats for Format {
    const JSON: Self = Format::Json;
}

/// `-o/--output` in the formats `F`, flattened into each command's arguments.
#[derive(Debug, clap::Args)]
pub struct Output<F: Formats = Format> {
    // No `default_value_t`: clap's derive keeps a default's text in one static shared by
    // every `F`, so `pins` would default to `table`. Not given is the person's format.
    /// The format: for a person when not given (the first of the possible values), `json`
    /// for a machine.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    format: Option<F>,
    /// The same as `-o json`, for scripts written before `-o` existed.
    #[arg(long, hide = true)]
    json: bool,
}

impl<F: Formats> Output<F> {
    /// Whether a machine reads the output.
    pub fn is_json(&self) -> bool {
        self.json || self.format == Some(F::JSON)
    }
}

/// Prints `value` as one pretty JSON document.
pub fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// A column as wide as its header and its widest cell (in characters).
pub fn column_width(header: &str, cells: impl Iterator<Item = String>) -> usize {
    cells
        .map(|cell| cell.chars().count())
        .chain([header.len()])
        .max()
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        output: Output,
    }

    fn parse(args: &[&str]) -> Result<bool, clap::Error> {
        Command::try_parse_from([&["capstanctl"], args].concat()).map(|c| c.output.is_json())
    }

    #[test]
    fn json_should_be_asked_for_with_o_json_or_the_older_flag_and_tables_by_default() {
        assert_eq!(parse(&[]).ok(), Some(false));
        assert_eq!(parse(&["-o", "table"]).ok(), Some(false));
        assert_eq!(parse(&["-o", "json"]).ok(), Some(true));
        assert_eq!(parse(&["--output=json"]).ok(), Some(true));
        assert_eq!(parse(&["--json"]).ok(), Some(true));
        let refused = parse(&["-o", "yaml"]).expect_err("yaml is pins' format only");
        assert!(
            refused
                .to_string()
                .contains("[possible values: table, json]"),
            "{refused}"
        );
    }
}
