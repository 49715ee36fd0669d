//! `capstanctl`: lint capability documents and Capstan resources before publishing them.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod validate;

/// Capstan's command-line tool.
#[derive(Debug, Parser)]
#[command(name = "capstanctl", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate capability documents, CapabilityBindings and RouteQualifiers.
    ///
    /// Reads JSON or YAML: a single object, a bare array, a `{"items": [...]}` List, or
    /// multi-document YAML. Prints one line per error, `<object name or #index>: <path>:
    /// <message>` (prefixed with the file name when several files are given), then
    /// `N valid, M invalid`. Exit status: 0 all valid, 1 some invalid, 2 a file could not be
    /// read or is not JSON/YAML.
    Validate(validate::Args),
}

fn main() -> ExitCode {
    let Cli { command } = Cli::parse();
    match command {
        Command::Validate(args) => validate::run(&args),
    }
}
