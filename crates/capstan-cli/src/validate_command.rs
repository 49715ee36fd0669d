//! `capstanctl validate`: the same checks the controller runs, for a provider team's CI.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `capstanctl validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files to validate; `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

/// Exit status when every object is valid.
const ALL_VALID: u8 = 0;
/// Exit status when at least one object is invalid.
const SOME_INVALID: u8 = 1;
/// Exit status when a file cannot be read or is not JSON/YAML at all.
const UNREADABLE: u8 = 2;

/// Validates every file and prints the report; returns the exit status.
pub fn run(args: &Args) -> ExitCode {
    let Args { files } = args;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let several = files.len() > 1;
    let (mut valid, mut invalid, mut status) = (0usize, 0usize, ALL_VALID);

    for file in files {
        let name = file.display().to_string();
        let text = match read(file) {
            Ok(text) => text,
            Err(error) => {
                eprintln!("capstanctl: {name}: cannot read: {error}");
                status = UNREADABLE;
                continue;
            }
        };
        let parsed = match capstan_api::parse(&text) {
            Ok(parsed) => parsed,
            Err(error) => {
                eprintln!("capstanctl: {name}: {error}");
                status = UNREADABLE;
                continue;
            }
        };
        valid += parsed.objects.len();
        invalid += parsed.invalid.len();
        let prefix = if several {
            format!("{name}: ")
        } else {
            String::new()
        };
        // Warnings never fail validation: a mapping onto a capability this Capstan lacks, or
        // a feature outside a capability's vocabulary, is simply not routed or counted.
        for object in &parsed.objects {
            let spec = match &object.object {
                capstan_api::Object::Document(document) => &document.spec,
                capstan_api::Object::Binding(binding) => &binding.spec,
                capstan_api::Object::Qualifier(_) => continue,
            };
            let label = object
                .object
                .name()
                .map_or_else(|| format!("#{}", object.index), str::to_owned);
            for warning in capstan_route::mapping_warnings(spec, capstan_route::Catalog::embedded())
            {
                if writeln!(out, "{prefix}{label}: warning: {warning}").is_err() {
                    return ExitCode::from(status);
                }
            }
        }
        for line in parsed.invalid.iter().flat_map(|object| object.lines()) {
            // A closed pipe (e.g. `| head`) is not a validation failure; stop writing.
            if writeln!(out, "{prefix}{line}").is_err() {
                return ExitCode::from(status.max(SOME_INVALID));
            }
        }
        if !parsed.invalid.is_empty() && status == ALL_VALID {
            status = SOME_INVALID;
        }
    }
    let _ = writeln!(out, "{valid} valid, {invalid} invalid");
    ExitCode::from(status)
}

fn read(file: &PathBuf) -> std::io::Result<String> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(file)
    }
}
