//! Metering: one JSON line per provider tool call, named by the binding's `serviceName`.
//! Built-ins (`load_skill`) emit none: no provider did the work.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;

/// One tool-invocation event.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInvocation<'a> {
    /// When the call finished (RFC 3339).
    pub time: String,
    /// The caller's project.
    pub project: &'a str,
    /// The provider service that did the work (the binding's `serviceName`).
    pub service: &'a str,
    /// The binding that contributed the tool.
    pub binding: &'a str,
    /// The composed tool name.
    pub tool: &'a str,
    /// The routed capability the call served (`cap.web.search`), when it came through one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability: Option<&'a str>,
    /// `ok`, `tool_error` or an error kind.
    pub outcome: &'a str,
    /// How long the call took, in milliseconds.
    pub duration_ms: f64,
}

/// Where events go.
pub struct Meter {
    sink: Option<Mutex<Box<dyn Write + Send>>>,
}

impl Meter {
    /// A sink from its configured name: `off`, `stdout`, `stderr`, or a file path (appended).
    pub fn open(sink: &str) -> io::Result<Self> {
        let writer: Option<Box<dyn Write + Send>> = match sink {
            "off" | "" => None,
            "stdout" => Some(Box::new(io::stdout())),
            "stderr" => Some(Box::new(io::stderr())),
            path => Some(Box::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(Path::new(path))?,
            )),
        };
        Ok(Self {
            sink: writer.map(Mutex::new),
        })
    }

    /// Writes one event as one line. A failing sink is logged, never fails the call.
    pub fn record(&self, event: &ToolInvocation<'_>) {
        let Some(sink) = &self.sink else { return };
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        let written = sink
            .lock()
            .map_err(|_| io::Error::other("metering sink poisoned"))
            .and_then(|mut w| w.write_all(&line).and_then(|()| w.flush()));
        if let Err(error) = written {
            tracing::warn!(%error, "writing a metering event");
        }
    }
}
