//! `capstanctl validate`: the same checks the controller runs, for a provider team's CI.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use capstan_api::{Object, Parsed};
use serde_json::{Value, json};

use crate::output::{Output, print_json};

/// Arguments of `capstanctl validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files to validate; `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    output: Output,
}

/// Exit status when every object is valid.
const ALL_VALID: u8 = 0;
/// Exit status when at least one object is invalid.
const SOME_INVALID: u8 = 1;
/// Exit status when a file cannot be read or is not JSON/YAML at all.
const UNREADABLE: u8 = 2;

/// What one file held.
enum FileReport {
    /// It could not be read, or is not JSON/YAML at all.
    Unreadable { name: String, error: String },
    /// Its objects, valid and invalid, and the warnings of the valid ones.
    Read {
        name: String,
        parsed: Parsed,
        warnings: Vec<Warning>,
    },
}

/// A warning on a valid object: it never fails validation (a mapping onto a capability this
/// Capstan lacks, or a feature outside a capability's vocabulary, is simply not routed).
struct Warning {
    index: usize,
    label: String,
    message: String,
}

impl FileReport {
    fn status(&self) -> u8 {
        match self {
            Self::Unreadable { .. } => UNREADABLE,
            Self::Read { parsed, .. } if !parsed.invalid.is_empty() => SOME_INVALID,
            Self::Read { .. } => ALL_VALID,
        }
    }
}

/// Validates every file and prints the report; returns the exit status.
pub fn run(args: &Args) -> ExitCode {
    let Args { files, output } = args;
    let reports: Vec<FileReport> = files.iter().map(report).collect();
    let status = reports
        .iter()
        .map(FileReport::status)
        .max()
        .unwrap_or(ALL_VALID);
    if output.is_json() {
        print_json(&as_json(&reports));
    } else {
        print_lines(&reports, files.len() > 1);
    }
    ExitCode::from(status)
}

fn report(file: &PathBuf) -> FileReport {
    let name = file.display().to_string();
    let text = match read(file) {
        Ok(text) => text,
        Err(error) => {
            return FileReport::Unreadable {
                name,
                error: format!("cannot read: {error}"),
            };
        }
    };
    let parsed = match capstan_api::parse(&text) {
        Ok(parsed) => parsed,
        Err(error) => {
            return FileReport::Unreadable {
                name,
                error: error.to_string(),
            };
        }
    };
    let warnings = parsed.objects.iter().flat_map(warnings).collect();
    FileReport::Read {
        name,
        parsed,
        warnings,
    }
}

fn warnings(object: &capstan_api::ParsedObject) -> Vec<Warning> {
    let spec = match &object.object {
        Object::Document(document) => &document.spec,
        Object::Binding(binding) => &binding.spec,
        Object::Qualifier(_) => return Vec::new(),
    };
    let label = label(object);
    capstan_route::mapping_warnings(spec, capstan_route::Catalog::embedded())
        .into_iter()
        .map(|warning| Warning {
            index: object.index,
            label: label.clone(),
            message: warning.to_string(),
        })
        .collect()
}

/// `metadata.name`, or `#<index>` when the object has none.
fn label(object: &capstan_api::ParsedObject) -> String {
    object
        .object
        .name()
        .map_or_else(|| format!("#{}", object.index), str::to_owned)
}

/// The report for a person: one line per warning and error, `<object>: <path>: <message>`
/// (prefixed with the file name when several files are given), then `N valid, M invalid`.
fn print_lines(reports: &[FileReport], several: bool) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let (mut valid, mut invalid) = (0usize, 0usize);
    for report in reports {
        let (name, parsed, warnings) = match report {
            FileReport::Unreadable { name, error } => {
                eprintln!("capstanctl: {name}: {error}");
                continue;
            }
            FileReport::Read {
                name,
                parsed,
                warnings,
            } => (name, parsed, warnings),
        };
        valid += parsed.objects.len();
        invalid += parsed.invalid.len();
        let prefix = if several {
            format!("{name}: ")
        } else {
            String::new()
        };
        let lines = warnings
            .iter()
            .map(|w| format!("{}: warning: {}", w.label, w.message))
            .chain(parsed.invalid.iter().flat_map(|object| object.lines()));
        for line in lines {
            // A closed pipe (e.g. `| head`) is not a validation failure; stop writing.
            if writeln!(out, "{prefix}{line}").is_err() {
                return;
            }
        }
    }
    let _ = writeln!(out, "{valid} valid, {invalid} invalid");
}

/// The report for a machine: every file, every object in input order with its errors or
/// warnings, and the counts.
fn as_json(reports: &[FileReport]) -> Value {
    let (mut valid, mut invalid) = (0usize, 0usize);
    let files: Vec<Value> = reports
        .iter()
        .map(|report| match report {
            FileReport::Unreadable { name, error } => json!({"file": name, "error": error}),
            FileReport::Read {
                name,
                parsed,
                warnings,
            } => {
                valid += parsed.objects.len();
                invalid += parsed.invalid.len();
                json!({"file": name, "objects": objects_json(parsed, warnings)})
            }
        })
        .collect();
    json!({"files": files, "valid": valid, "invalid": invalid})
}

fn objects_json(parsed: &Parsed, warnings: &[Warning]) -> Vec<Value> {
    let mut objects: Vec<(usize, Value)> = parsed
        .objects
        .iter()
        .map(|object| {
            let warnings: Vec<&str> = warnings
                .iter()
                .filter(|w| w.index == object.index)
                .map(|w| w.message.as_str())
                .collect();
            let value = json!({"index": object.index, "name": label(object), "valid": true,
                               "warnings": warnings});
            (object.index, value)
        })
        .chain(parsed.invalid.iter().map(|object| {
            let errors: Vec<Value> = object
                .errors
                .iter()
                .map(|e| json!({"path": e.path, "message": e.message}))
                .collect();
            let value = json!({"index": object.index, "name": object.label, "valid": false,
                               "errors": errors});
            (object.index, value)
        }))
        .collect();
    objects.sort_by_key(|(index, _)| *index);
    objects.into_iter().map(|(_, value)| value).collect()
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
