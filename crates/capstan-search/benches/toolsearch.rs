//! Tool search measured on real tools: the corpus of public MCP servers' tool definitions in
//! `e2e/fixtures/toolsearch` (its README defines the metrics), the project's search beside the
//! corpus's plain BM25 baseline, over the same tools and queries, in one run.
//!
//! `CAPSTAN_TOOLSEARCH_QUERIES` names further query files (`:`-separated, the corpus's JSONL
//! shape) to score beside the development queries — the held-out set, when it is at hand.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "toolsearch/baseline.rs"]
mod baseline;
#[path = "toolsearch/cost.rs"]
mod cost;
#[path = "toolsearch/metrics.rs"]
mod metrics;
#[path = "toolsearch/sweep.rs"]
mod sweep;

use std::path::{Path, PathBuf};

use capstan_search::{Index, ToolDoc};
use serde_json::Value;

use metrics::{Query, Ranked, Report};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/fixtures/toolsearch")
}

/// The corpus's tools: (global id `<server>/<tool>`, server, definition).
fn corpus() -> Vec<(String, String, Value)> {
    let text = std::fs::read_to_string(fixture().join("corpus.json")).expect("the corpus");
    let corpus: Value = serde_json::from_str(&text).expect("the corpus is JSON");
    let mut tools = Vec::new();
    for server in corpus["servers"].as_array().expect("servers") {
        let name = server["name"].as_str().expect("a server name");
        for tool in server["tools"].as_array().expect("tools") {
            let id = format!("{name}/{}", tool["name"].as_str().expect("a tool name"));
            tools.push((id, name.to_owned(), tool.clone()));
        }
    }
    tools
}

/// A corpus tool as a composition would hand it to the index: named as an aggregator lists it
/// (`<server>__<tool>`), the server its service; the corpus has no bindings, so no aliases,
/// knowledge concepts or capabilities.
fn tool_doc(server: &str, tool: &Value) -> ToolDoc {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let name = text(tool.get("name")).unwrap_or_default();
    let titles = [tool.get("title"), tool.pointer("/annotations/title")]
        .into_iter()
        .filter_map(text)
        .collect();
    ToolDoc {
        name: format!("{server}__{name}"),
        tool: name,
        service: server.to_owned(),
        service_aliases: Vec::new(),
        titles,
        description: text(tool.get("description")).unwrap_or_default(),
        input_schema: tool.get("inputSchema").cloned().unwrap_or(Value::Null),
        annotations: tool.get("annotations").cloned(),
        context: Vec::new(),
    }
}

fn query_files() -> Vec<PathBuf> {
    let mut files = vec![fixture().join("queries-dev.jsonl")];
    if let Ok(more) = std::env::var("CAPSTAN_TOOLSEARCH_QUERIES") {
        files.extend(more.split(':').filter(|p| !p.is_empty()).map(PathBuf::from));
    }
    files
}

fn main() {
    if let Ok(need) = std::env::var("CAPSTAN_TOOLSEARCH_EXPLAIN") {
        let tools = corpus();
        let index = Index::build(tools.iter().map(|(_, s, t)| tool_doc(s, t)).collect());
        for (terms, idf) in index.explain(&need) {
            eprintln!("{idf:.2} {terms:?}");
        }
        let answer = index.search(&need, 5, |_| true);
        for hit in answer.hits {
            eprintln!(
                "{} {:.2} {:.2} {}",
                tools[hit.doc].0, hit.score, hit.coverage, hit.serves
            );
        }
        return;
    }
    if let Ok(copies) = std::env::var(cost::CHILD) {
        let tools = corpus();
        let docs: Vec<ToolDoc> = tools.iter().map(|(_, s, t)| tool_doc(s, t)).collect();
        cost::child(&docs, copies.parse().expect("a count of copies"));
        return;
    }
    let tools = corpus();
    let ids: Vec<String> = tools.iter().map(|(id, _, _)| id.clone()).collect();
    let bm25 = baseline::Bm25::new(
        tools
            .iter()
            .map(|(_, s, t)| baseline::document(s, t))
            .collect(),
    );
    let docs: Vec<ToolDoc> = tools.iter().map(|(_, s, t)| tool_doc(s, t)).collect();
    let index = Index::build(docs.clone());
    println!("<!-- bench:toolsearch -->");
    println!("### Tool search\n");
    println!(
        "{} tools of {} servers (`e2e/fixtures/toolsearch`), every tool ranked for every \
         query. Recall and MRR over the answerable queries (the README's metrics); \
         \"recall@5, matched\" also requires the answer to call its best a match, as a caller \
         reads it. The held-out queries are scored when `CAPSTAN_TOOLSEARCH_QUERIES` names \
         their file.\n",
        tools.len(),
        tools
            .iter()
            .map(|(_, s, _)| s)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    let files = query_files();
    for file in &files {
        let queries = metrics::load(file);
        let baseline: Vec<Ranked> = queries
            .iter()
            .map(|q| Ranked::from_scores(&ids, &bm25.scores(&q.query), true))
            .collect();
        let ours: Vec<Ranked> = queries.iter().map(|q| search(&index, &ids, q)).collect();
        let name = file
            .file_name()
            .map_or("queries".into(), |f| f.to_string_lossy().into_owned());
        println!("#### {name} ({} queries)\n", queries.len());
        Report::new(&queries, &baseline).print("BM25 baseline");
        Report::new(&queries, &ours).print("capstan-search");
        println!();
        if std::env::var_os("CAPSTAN_TOOLSEARCH_SLOW").is_some() {
            let mut t: Vec<(std::time::Duration, &str)> = queries
                .iter()
                .map(|q| {
                    let s = std::time::Instant::now();
                    for _ in 0..20 {
                        std::hint::black_box(index.search(&q.query, 5, |_| true));
                    }
                    (s.elapsed() / 20, q.query.as_str())
                })
                .collect();
            t.sort();
            for x in t.iter().rev().take(5) {
                eprintln!("{:?} {}", x.0, x.1);
            }
        }
        if std::env::var_os("CAPSTAN_TOOLSEARCH_SWEEP").is_some() {
            sweep::run(&index, &ids, &queries);
        }
        if std::env::var_os("CAPSTAN_TOOLSEARCH_DIAGNOSE").is_some() {
            for q in &queries {
                let a = index.search(&q.query, 3, |_| true);
                let h: Vec<String> = a
                    .hits
                    .iter()
                    .map(|h| format!("{}:{:.2}/{:.2}", ids[h.doc], h.score, h.coverage))
                    .collect();
                let hit = a
                    .hits
                    .first()
                    .is_some_and(|h| q.expected.contains(&ids[h.doc]));
                eprintln!(
                    "{:10} {} {} {:?}",
                    q.kind,
                    if hit { "HIT " } else { "miss" },
                    h.join(" "),
                    q.query
                );
            }
        }
        // `CAPSTAN_TOOLSEARCH_MISSES=N`: the queries whose first expected tool ranks below N.
        if let Ok(beyond) = std::env::var("CAPSTAN_TOOLSEARCH_MISSES") {
            let beyond = beyond.parse().unwrap_or(5);
            metrics::print_misses(&queries, &ours, beyond);
        }
    }
    cost::print(&docs, &tools, &metrics::load(&files[0]));
    println!("<!-- /bench:toolsearch -->");
}

/// The project's ranking of every tool for `query`.
fn search(index: &Index, ids: &[String], query: &Query) -> Ranked {
    let answer = index.search(&query.query, usize::MAX, |_| true);
    Ranked {
        ids: answer.hits.iter().map(|h| ids[h.doc].clone()).collect(),
        matched: answer.matched,
    }
}
