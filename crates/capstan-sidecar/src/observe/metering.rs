//! Metering: one JSON line per provider tool call, named by the binding's `serviceName`.
//! Built-ins (`load_skill`) emit none: no provider did the work.

use std::io;

use k8s_openapi::jiff::Timestamp;
use serde::{Serialize, Serializer};

use super::sink::LineSink;

/// One tool-invocation event.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInvocation<'a> {
    /// When the call finished (RFC 3339).
    #[serde(serialize_with = "rfc3339")]
    pub time: Timestamp,
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

/// `time` written straight into the line (no `String` made per event first).
pub(crate) fn rfc3339<S: Serializer>(time: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(time)
}

/// Where events go.
pub struct Meter {
    sink: LineSink,
}

impl Meter {
    /// A sink from its configured name: `off`, `stdout`, `stderr`, or a file path (appended).
    pub fn open(sink: &str) -> io::Result<Self> {
        Ok(Self {
            sink: LineSink::open(sink, "metering event")?,
        })
    }

    /// Writes one event as one line. A failing sink is logged, never fails the call.
    pub fn record(&self, event: &ToolInvocation<'_>) {
        self.sink.write(event);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_event_should_be_one_json_line_with_its_time_in_rfc_3339() {
        let path = std::env::temp_dir().join(format!("capstan-meter-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let meter = Meter::open(path.to_str().unwrap()).unwrap();
        let time: Timestamp = "2026-12-04T11:20:33.123456789Z".parse().unwrap();
        let event = |outcome| ToolInvocation {
            time,
            project: "demo-project",
            service: "streamco \"svc\"",
            binding: "b",
            tool: "streamco__streams_get",
            capability: None,
            outcome,
            duration_ms: 1.5,
        };
        meter.record(&event("ok"));
        meter.record(&event("tool_error"));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(text.ends_with('\n'));
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["time"], "2026-12-04T11:20:33.123456789Z");
        assert_eq!(lines[0]["service"], "streamco \"svc\"");
        assert_eq!(lines[0]["durationMs"], 1.5);
        assert_eq!(lines[1]["outcome"], "tool_error");
        assert_eq!(lines[1].get("capability"), None);
    }
}
