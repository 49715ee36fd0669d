//! Parse-and-validate throughput and peak memory for large inputs (`make bench`).
//!
//! Each workload runs in a child process of its own so its peak RSS (`VmHWM`) is its own. Every
//! workload is timed side by side with a bare `serde` decode of the same text into the same
//! types (no validation), so the ratio is the cost of validation. Reports medians.

use std::process::Command;
use std::time::{Duration, Instant};

use capstan_api::CapabilityDocument;
use serde_json::{Value, json};

/// Rounds per workload; the median is reported. Odd so the median is a measurement.
const ROUNDS: usize = 7;

struct Workload {
    name: &'static str,
    format: Format,
    target: Target,
}

#[derive(Clone, Copy)]
enum Format {
    Json,
    Yaml,
}

#[derive(Clone, Copy)]
enum Target {
    Documents(usize),
    Bytes(usize),
}

const WORKLOADS: [Workload; 4] = [
    Workload {
        name: "json-1000-docs",
        format: Format::Json,
        target: Target::Documents(1000),
    },
    Workload {
        name: "yaml-1000-docs",
        format: Format::Yaml,
        target: Target::Documents(1000),
    },
    Workload {
        name: "json-10MB",
        format: Format::Json,
        target: Target::Bytes(10 << 20),
    },
    Workload {
        name: "yaml-10MB",
        format: Format::Yaml,
        target: Target::Bytes(10 << 20),
    },
];

fn document(i: usize) -> Value {
    json!({
        "apiVersion": "services.miloapis.com/v1alpha1",
        "kind": "AgentBinding",
        "metadata": { "name": format!("binding-{i}"), "namespace": "demo-project" },
        "spec": {
            "serviceRef": { "name": format!("service-{i}") },
            "serviceName": format!("service-{i}.example"),
            "serviceAgentRef": { "name": format!("agent-{i}") },
            "configurationVersion": "v1",
            "knowledge": {
                "sources": [
                    { "type": "LLMDocs", "title": "Overview", "url": format!("https://docs-{i}.example/llms-full.txt") },
                    { "type": "Runbook", "title": "Lag", "url": format!("https://docs-{i}.example/runbooks/lag.md") }
                ],
                "concepts": [{ "gvk": { "group": "streaming.example", "kind": "Stream" }, "summary": "A live stream" }]
            },
            "tools": { "mcpServers": [{
                "name": format!("server{i}"),
                "endpoint": format!("https://gateway.example/mcp/{i}"),
                "toolSelector": { "include": ["streams_list", "streams_get", "pipeline_diagnose", "pipeline_restart"] },
                "mutating": ["pipeline_restart"],
                "capabilities": [{ "capabilityId": "cap.stream.diagnose", "tool": "pipeline_diagnose", "quality": 8000 }]
            }]},
            "skills": [{ "name": "lag-triage", "description": "Triage consumer lag", "source": format!("https://docs-{i}.example/runbooks/lag.md") }],
            "authority": { "reads": [{ "gvk": { "group": "streaming.example", "kind": "*" } }], "maxTaskDurationSeconds": 60 }
        }
    })
}

fn input(workload: &Workload) -> (String, usize) {
    let mut items = Vec::new();
    let mut bytes = 0;
    loop {
        let done = match workload.target {
            Target::Documents(n) => items.len() >= n,
            Target::Bytes(n) => bytes >= n,
        };
        if done {
            break;
        }
        let doc = document(items.len());
        bytes += doc.to_string().len();
        items.push(doc);
    }
    let count = items.len();
    let list = json!({ "kind": "List", "items": items });
    let text = match workload.format {
        Format::Json => list.to_string(),
        Format::Yaml => serde_saphyr::to_string(&list).unwrap_or_else(|e| panic!("yaml: {e}")),
    };
    (text, count)
}

/// Peak resident set size of this process so far, in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmHWM:")?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

#[derive(serde::Deserialize)]
struct BareList {
    items: Vec<CapabilityDocument>,
}

fn bare_decode(text: &str, format: Format) -> usize {
    match format {
        Format::Json => serde_json::from_str::<BareList>(text).map(|l| l.items.len()),
        Format::Yaml => serde_saphyr::from_str_with_options::<BareList>(
            text,
            capstan_api::parse::yaml_options(text.len()),
        )
        .map_err(|e| serde_json::Error::io(std::io::Error::other(e.to_string())))
        .map(|l| l.items.len()),
    }
    .unwrap_or_else(|e| panic!("bare decode: {e}"))
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn child(name: &str, path: &str, count: usize) {
    let Some(workload) = WORKLOADS.iter().find(|w| w.name == name) else {
        panic!("unknown workload {name}");
    };
    // The input is generated by the parent: this process holds only the text, so the peak
    // above the baseline is what parsing costs.
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let baseline_kib = peak_rss_kib();
    // One parse alone first, so the peak reflects parse-and-validate, not the timing loop.
    let parsed = capstan_api::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((parsed.objects.len(), parsed.invalid.len()), (count, 0));
    drop(parsed);
    let peak_kib = peak_rss_kib();

    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        // Alternate the two so drift on a shared machine hits both alike.
        let start = Instant::now();
        let parsed = capstan_api::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        ours.push(start.elapsed());
        assert_eq!(parsed.objects.len(), count);
        drop(parsed);
        let start = Instant::now();
        assert_eq!(bare_decode(&text, workload.format), count);
        bare.push(start.elapsed());
    }
    let (ours, bare) = (median(ours), median(bare));
    let mib = text.len() as f64 / f64::from(1 << 20);
    println!(
        "{:<15} {:>5} docs {:>6.2} MiB | parse+validate {:>7.1} ms ({:>5.1} MiB/s) | bare decode {:>7.1} ms | ratio {:>4.2}x | peak RSS {:>6.1} MiB (+{:.1} MiB over the text held)",
        workload.name,
        count,
        mib,
        ours.as_secs_f64() * 1e3,
        mib / ours.as_secs_f64(),
        bare.as_secs_f64() * 1e3,
        ours.as_secs_f64() / bare.as_secs_f64(),
        peak_kib as f64 / 1024.0,
        (peak_kib.saturating_sub(baseline_kib)) as f64 / 1024.0,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, name, path, count] = args.as_slice()
        && flag == "--child"
    {
        child(
            name,
            path,
            count.parse().unwrap_or_else(|e| panic!("{count}: {e}")),
        );
        return;
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("capstan-parse-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    println!(
        "<!-- bench:parse -->\n### Parsing and validation (`crates/capstan-api/benches/parse.rs`)\n\n```text"
    );
    println!(
        "capstan-api parse benchmark: medians of {ROUNDS} rounds, each workload in its own process"
    );
    for workload in &WORKLOADS {
        let (text, count) = input(workload);
        let path = dir.join(workload.name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let status = Command::new(&exe)
            .args([
                "--child",
                workload.name,
                &path.to_string_lossy(),
                &count.to_string(),
            ])
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "workload {} failed",
            workload.name
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("```\n<!-- /bench:parse -->");
}
