//! What search costs: building the index, answering a need, the index's memory, and the
//! tokens of an answer against those of the full `tools/list` (o200k_base, the corpus
//! README's encoding).

use std::time::{Duration, Instant};

use capstan_search::{Index, ToolDoc};
use serde_json::{Value, json};

use crate::metrics::Query;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// Set in the environment of a child run of this benchmark that builds one index and prints
/// how much its resident set grew: measured in a fresh process, where no freed memory of an
/// earlier build is reused.
pub const CHILD: &str = "CAPSTAN_TOOLSEARCH_MEMORY_CHILD";

/// This process's resident set, in KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The child's part: the resident set's growth over building an index of `copies` corpora
/// (the tools themselves were resident before, so this is the index's own memory).
pub fn child(docs: &[ToolDoc], copies: usize) {
    let docs = scaled(docs, copies);
    let before = resident_kib();
    let index = Index::build(docs);
    let after = resident_kib();
    std::hint::black_box(&index);
    println!("{}", after.saturating_sub(before));
}

/// The index's own memory for `copies` corpora, measured in a child process.
fn index_kib(copies: usize) -> Option<u64> {
    let output = std::process::Command::new(std::env::current_exe().ok()?)
        .env(CHILD, copies.to_string())
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout).trim().parse().ok()
}

/// `copies` of the corpus, each server renamed per copy, so the index holds `copies` times
/// its tools.
fn scaled(docs: &[ToolDoc], copies: usize) -> Vec<ToolDoc> {
    (0..copies)
        .flat_map(|copy| {
            docs.iter().map(move |doc| {
                let mut doc = doc.clone();
                if copy > 0 {
                    doc.service = format!("{}-{copy}", doc.service);
                    doc.name = format!("{}__{}", doc.service, doc.tool);
                }
                doc
            })
        })
        .collect()
}

pub fn print(docs: &[ToolDoc], tools: &[(String, String, Value)], queries: &[Query]) {
    println!("#### Cost\n");
    println!(
        "| tools | index build (median of 5) | index memory (resident growth) | search p50, limit 5 | search p99 |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for copies in [1, 2, 4] {
        let docs = scaled(docs, copies);
        let count = docs.len();
        let builds: Vec<Duration> = (0..5)
            .map(|_| {
                let started = Instant::now();
                let index = Index::build(docs.clone());
                let took = started.elapsed();
                drop(index);
                took
            })
            .collect();
        let index = Index::build(docs);
        let memory = index_kib(copies).map_or("unknown".into(), |kib| {
            format!("{:.2} MiB", kib as f64 / 1024.0)
        });
        for query in queries {
            std::hint::black_box(index.search(&query.query, 5, |_| true));
        }
        let mut times = Vec::new();
        for _ in 0..5 {
            for query in queries {
                let started = Instant::now();
                let answer = index.search(&query.query, 5, |_| true);
                times.push(started.elapsed());
                std::hint::black_box(answer);
            }
        }
        times.sort_unstable();
        let p99 = times[times.len() * 99 / 100];
        println!(
            "| {count} | {:.1?} | {memory} | {:.0?} | {:.0?} |",
            median(builds),
            median(times.clone()),
            p99
        );
    }
    tokens(tools, docs, queries);
}

/// A tool as an aggregator lists it: `<server>__<tool>`, title, description, input schema,
/// annotations.
fn listed(server: &str, tool: &Value) -> Value {
    let mut entry = serde_json::Map::new();
    entry.insert(
        "name".into(),
        json!(format!("{server}__{}", tool["name"].as_str().unwrap_or(""))),
    );
    for key in ["title", "description", "inputSchema", "annotations"] {
        if let Some(value) = tool.get(key) {
            entry.insert(key.into(), value.clone());
        }
    }
    Value::Object(entry)
}

fn tokens(tools: &[(String, String, Value)], docs: &[ToolDoc], queries: &[Query]) {
    let encoding = tiktoken_rs::o200k_base().expect("the o200k_base encoding");
    let count = |value: &Value| {
        let text = serde_json::to_string(value).expect("JSON");
        (text.len(), encoding.encode_ordinary(&text).len())
    };
    let all: Vec<Value> = tools.iter().map(|(_, s, t)| listed(s, t)).collect();
    let (full_bytes, full_tokens) = count(&json!({ "tools": all }));
    let index = Index::build(docs.to_vec());
    let (mut bytes, mut tokens) = (0, 0);
    for query in queries {
        let answer = index.search(&query.query, 5, |_| true);
        let found: Vec<Value> = answer.hits.iter().map(|h| all[h.doc].clone()).collect();
        let (b, t) = count(&json!({ "tools": found }));
        bytes += b;
        tokens += t;
    }
    let n = queries.len().max(1);
    println!(
        "\nTokens (o200k_base), compact JSON: the full `tools/list` of {} tools {full_bytes} bytes, \
         {full_tokens} tokens; a top-5 answer, mean over the queries, {} bytes, {} tokens \
         ({:.1} % of the full list).\n",
        tools.len(),
        bytes / n,
        tokens / n,
        100.0 * (tokens / n) as f64 / full_tokens as f64
    );
}
