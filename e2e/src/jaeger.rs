//! A real Jaeger (`cmd/jaeger` of `github.com/jaegertracing/jaeger`, built by
//! `e2e/build-tools jaeger`) as the trace backend: OTLP over HTTP in, memory storage, its query
//! API (`/api/v3`) out, every port on loopback. The trace trials read back what Capstan
//! exported through the same API a person's Jaeger UI uses.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use crate::{HarnessError, built_tool, spawn_logged};

/// A running Jaeger; stopped when dropped.
pub struct Jaeger {
    child: Child,
    /// Where OTLP/HTTP goes (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub otlp: String,
    /// The query API's base URL.
    pub query: String,
    log: std::path::PathBuf,
}

/// One span as Jaeger returned it.
#[derive(Clone, Debug)]
pub struct Span {
    /// The service that exported it (its resource's `service.name`).
    pub service: String,
    /// Hex, 32 digits.
    pub trace_id: String,
    /// Hex, 16 digits.
    pub span_id: String,
    /// Hex, 16 digits; empty for a root.
    pub parent_span_id: String,
    /// Its name.
    pub name: String,
    /// `SPAN_KIND_SERVER`, `SPAN_KIND_CLIENT`, ….
    pub kind: String,
    /// Its attributes, each value as text.
    pub attributes: BTreeMap<String, String>,
    /// Every attribute value of the span and of its resource, as text (what a leak check reads).
    pub values: Vec<String>,
}

impl Span {
    /// The attribute `key`, if the span has it.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn free_port() -> Result<u16, HarnessError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| HarnessError::Io {
            path: "a free port".into(),
            source,
        })
}

impl Jaeger {
    /// Starts Jaeger with its files in `dir`, and waits until its query API answers. The ports
    /// are found free and then bound by Jaeger; another process may take one in between, so a
    /// start that lost one is tried again.
    pub fn start(dir: &Path) -> Result<Self, HarnessError> {
        let mut attempt = 0;
        loop {
            match Self::start_once(dir) {
                Err(HarnessError::Command { stderr, .. })
                    if attempt < 3 && stderr.contains("address already in use") =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn start_once(dir: &Path) -> Result<Self, HarnessError> {
        let binary = built_tool("jaeger")?;
        let (otlp, query, grpc) = (free_port()?, free_port()?, free_port()?);
        std::fs::create_dir_all(dir).map_err(|source| HarnessError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let config = dir.join("jaeger.yaml");
        std::fs::write(&config, config_text(otlp, query, grpc)).map_err(|source| {
            HarnessError::Io {
                path: config.clone(),
                source,
            }
        })?;
        let log = dir.join("jaeger.log");
        let child = spawn_logged(Command::new(&binary).arg("--config").arg(&config), &log)?;
        let mut jaeger = Self {
            child,
            otlp: format!("http://127.0.0.1:{otlp}"),
            query: format!("http://127.0.0.1:{query}"),
            log,
        };
        let started = Instant::now();
        loop {
            let up = std::net::TcpStream::connect(("127.0.0.1", query)).is_ok()
                && std::net::TcpStream::connect(("127.0.0.1", otlp)).is_ok();
            if up {
                return Ok(jaeger);
            }
            let exited = matches!(jaeger.child.try_wait(), Ok(Some(_)));
            if exited || started.elapsed() > Duration::from_secs(60) {
                return Err(HarnessError::Command {
                    command: "jaeger".into(),
                    status: "did not start serving".into(),
                    stderr: jaeger.log_text(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Jaeger's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The spans of trace `trace_id` (hex) stored so far; empty while it is unknown.
    pub async fn trace(&self, trace_id: &str) -> Result<Vec<Span>, String> {
        spans_at(&format!("{}/api/v3/traces/{trace_id}", self.query)).await
    }

    /// The spans of every trace of `service` stored so far (the last hour).
    pub async fn traces_of(&self, service: &str) -> Result<Vec<Span>, String> {
        let now = Timestamp::now();
        let hour = SignedDuration::from_hours(1);
        let url = format!(
            "{}/api/v3/traces?query.service_name={service}&query.start_time_min={}&query.start_time_max={}&query.num_traces=1000",
            self.query,
            now - hour,
            now + hour,
        );
        spans_at(&url).await
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The spans the query API answers at `url`; none when it knows no trace (404).
async fn spans_at(url: &str) -> Result<Vec<Span>, String> {
    let (status, body) = get(url).await?;
    match status {
        404 => Ok(Vec::new()),
        200 => spans_of(&body),
        _ => Err(format!("GET {url}: HTTP {status}: {body}")),
    }
}

async fn get(url: &str) -> Result<(u16, String), String> {
    let response = capstan_testkit::client()
        .get(url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .text()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    Ok((status, body))
}

/// The configuration: OTLP/HTTP in, memory storage, the query API out, on loopback only; no
/// other receiver, no sampling extension, no metrics endpoint of its own.
fn config_text(otlp: u16, query: u16, grpc: u16) -> String {
    format!(
        r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"#
    )
}

/// The spans of an OTLP/JSON answer (`{"result": {"resourceSpans": [...]}}`).
fn spans_of(body: &str) -> Result<Vec<Span>, String> {
    let answer: Value =
        serde_json::from_str(body).map_err(|e| format!("the query API's answer: {e}: {body}"))?;
    let mut spans = Vec::new();
    let resources = answer["result"]["resourceSpans"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for resource in resources {
        let resource_attributes = attributes(&resource["resource"]["attributes"]);
        let service = resource_attributes
            .get("service.name")
            .cloned()
            .unwrap_or_default();
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for span in scope["spans"].as_array().into_iter().flatten() {
                let attributes = attributes(&span["attributes"]);
                let values = attributes
                    .values()
                    .chain(resource_attributes.values())
                    .cloned()
                    .chain(span["name"].as_str().map(str::to_owned))
                    .collect();
                spans.push(Span {
                    service: service.clone(),
                    trace_id: id(&span["traceId"]),
                    span_id: id(&span["spanId"]),
                    parent_span_id: id(&span["parentSpanId"]),
                    name: span["name"].as_str().unwrap_or_default().to_owned(),
                    kind: kind(&span["kind"]),
                    attributes,
                    values,
                });
            }
        }
    }
    Ok(spans)
}

/// An id as hex, whether the answer gave it as hex (OTLP/JSON) or base64 (protobuf JSON).
fn id(value: &Value) -> String {
    let text = value.as_str().unwrap_or_default();
    let is_hex = !text.is_empty()
        && (text.len() == 16 || text.len() == 32)
        && text.bytes().all(|b| b.is_ascii_hexdigit());
    if is_hex || text.is_empty() {
        return text.to_ascii_lowercase();
    }
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(|bytes| bytes.iter().map(|b| format!("{b:02x}")).collect())
        .unwrap_or_else(|_| text.to_owned())
}

/// A span kind by its OTLP name, whether given as the name or its number.
fn kind(value: &Value) -> String {
    const KINDS: [&str; 6] = [
        "SPAN_KIND_UNSPECIFIED",
        "SPAN_KIND_INTERNAL",
        "SPAN_KIND_SERVER",
        "SPAN_KIND_CLIENT",
        "SPAN_KIND_PRODUCER",
        "SPAN_KIND_CONSUMER",
    ];
    match value {
        Value::String(name) => name.clone(),
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| KINDS.get(n as usize))
            .map_or_else(|| n.to_string(), |k| (*k).to_owned()),
        // OTLP/JSON leaves a zero enum out.
        _ => KINDS[0].to_owned(),
    }
}

/// OTLP key/value attributes as text.
fn attributes(list: &Value) -> BTreeMap<String, String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|kv| {
            let key = kv["key"].as_str()?.to_owned();
            let value = &kv["value"];
            let text = ["stringValue", "intValue", "boolValue", "doubleValue"]
                .iter()
                .find_map(|k| value.get(*k))
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .unwrap_or_else(|| value.to_string());
            Some((key, text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_should_read_as_hex_either_way() {
        assert_eq!(id(&Value::from("0AF7651916CD43DD")), "0af7651916cd43dd");
        assert_eq!(id(&Value::from("CvdlGRbNQ90=")), "0af7651916cd43dd");
    }
}
