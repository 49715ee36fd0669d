//! `capstanctl`: lint capability documents and Capstan resources before publishing them, and
//! inspect or call what a capstan-sidecar composes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod call_command;
mod compose_command;
mod gaps_command;
mod output;
mod pins_command;
mod routes_command;
mod sidecar_client;
mod validate_command;

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
    Validate(validate_command::Args),

    /// Show what a capstan-sidecar composes for a project: tools (and which can change
    /// something), skills, and each binding's state with the reasons it is degraded.
    /// Exit status: 0 shown, 1 the sidecar could not be asked or refused.
    Compose(compose_command::Args),

    /// Call one composed tool through a capstan-sidecar (one session: initialize, call, end)
    /// and print its result. Exit status: 0 success, 1 the tool reported an error or the call
    /// failed.
    Call(call_command::Args),

    /// Show what a call to a routed capability (`cap.*`) would meet in a project: its
    /// candidates, the qualifiers that apply, the exclusions with their reasons and the
    /// provider chosen — without calling anything. Exit status: 0 shown, 1 the sidecar could
    /// not be asked or refused.
    Routes(routes_command::Args),

    /// Print the live definition digests of each binding's allowed tools, as YAML to paste
    /// into `toolSelector.pins` after review (docs/pins.md): from a sidecar's composition
    /// (`--socket`, `--project`), or by dialing the endpoints of a binding file (`--file`).
    /// A pinned tool whose definition changed is marked, with its new definition to review.
    /// Exit status: 0 shown, 1 the sidecar could not be asked or a server could not be listed,
    /// 2 the file cannot be read.
    Pins(pins_command::Args),

    /// Summarize the capability-gap reports a sidecar wrote (CAPSTAN_GAP_SINK) per reporting
    /// project and service: reports, projects, first and last, the needs reported most.
    /// Exit status: 0 shown, 2 the file cannot be read.
    Gaps(gaps_command::Args),
}

fn main() -> ExitCode {
    let Cli { command } = Cli::parse();
    match command {
        Command::Validate(args) => validate_command::run(&args),
        Command::Compose(args) => compose_command::run(&args),
        Command::Call(args) => call_command::run(&args),
        Command::Routes(args) => routes_command::run(&args),
        Command::Pins(args) => pins_command::run(&args),
        Command::Gaps(args) => gaps_command::run(&args),
    }
}
