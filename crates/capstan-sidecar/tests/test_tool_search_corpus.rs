//! Tool search on real tools, through independent clients (docs/tool-search.md): the corpus's
//! 27 public MCP servers (`e2e/fixtures/toolsearch`) served by the Python SDK behind one binding
//! each, the Azure DevOps tools composed by `providerProjectArgument`, one GitHub tool left off
//! its allow-list; the Python, TypeScript and Go SDK clients on a session revision and on
//! 2026-07-28 see the short list and the search instructions, find a tool, call it by its name
//! without listing it (the oracle: the corpus server's own answer names the tool it ran), never
//! find the tool the allow-list leaves out, and see a composition change at the next search.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use capstan_testkit::sidecar::*;
use capstan_testkit::{PythonServer, mcpload};
use serde_json::{Value, json};

const CORPUS: &str = "e2e/fixtures/toolsearch/corpus.json";

/// The GitHub tool its binding's allow-list leaves out.
const LEFT_OUT: &str = "merge_pull_request";

fn corpus() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo_root().join(CORPUS)).unwrap()).unwrap()
}

/// One binding per corpus server, on the corpus server at `address`; `skip` servers left out.
fn documents(address: &str, skip: &[&str]) -> Value {
    let corpus = corpus();
    let items: Vec<Value> = corpus["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !skip.contains(&s["name"].as_str().unwrap()))
        .map(|server| {
            let name = server["name"].as_str().unwrap();
            let tools: Vec<&str> = server["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap())
                .filter(|t| !(name == "github" && *t == LEFT_OUT))
                .collect();
            let endpoint = format!("http://{address}/{name}/mcp");
            let mut document = binding_document(&format!("corpus-{name}"), name, &endpoint, &tools);
            if name == "azure-devops" {
                // Its `project` argument is Azure DevOps' own (docs/tool-search.md).
                document["spec"]["tools"]["mcpServers"][0]["providerProjectArgument"] = json!({});
            }
            document
        })
        .collect();
    json!({ "items": items })
}

/// One client's run of `ops`, normalized: the instructions, and per op either the names
/// listed or the call's (isError, structuredContent, text).
struct Run {
    instructions: String,
    results: Vec<Value>,
}

fn python(sidecar: &Sidecar, mode: &str, ops: &Value) -> Run {
    let socket = sidecar.socket.to_str().unwrap();
    let report = python_report(
        "offerings.py",
        &[socket, "demo-project", mode, &ops.to_string()],
    );
    let entries = report.as_array().unwrap();
    let results = ops
        .as_array()
        .unwrap()
        .iter()
        .zip(entries)
        .map(|(op, entry)| {
            let ok = &entry["ok"];
            if op["op"] == "tools" {
                let names: Vec<Value> = ok["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["name"].clone())
                    .collect();
                return json!({ "tools": names });
            }
            if ok.is_null() {
                return json!({ "error": entry["error"] });
            }
            let text = ok["content"][0]["text"].as_str().unwrap_or_default();
            json!({"isError": ok["isError"].as_bool().unwrap_or(false),
                   "structuredContent": ok["structuredContent"], "text": text})
        })
        .collect();
    Run {
        instructions: String::new(),
        results,
    }
}

fn typescript(sidecar: &Sidecar, mode: &str, ops: &Value) -> Run {
    let output = typescript_sdk_script(
        sidecar,
        "search.mjs",
        &["demo-project", mode, &ops.to_string()],
    );
    reported(&output)
}

fn go(sidecar: &Sidecar, mode: &str, ops: &Value) -> Run {
    go_as(sidecar, mode, None, ops)
}

/// The Go SDK client (`mcpload script`) in `mode`, with `token` as its bearer token if any.
fn go_as(sidecar: &Sidecar, mode: &str, token: Option<&str>, ops: &Value) -> Run {
    let protocol = if mode == "legacy" {
        "2025-11-25"
    } else {
        "2026-07-28"
    };
    let target = format!("sidecar,unix:{},-,{protocol}", sidecar.socket.display());
    let mut command = Command::new(mcpload());
    command.args([
        "script",
        "--target",
        &target,
        "--header",
        "X-Capstan-Project: demo-project",
    ]);
    if let Some(token) = token {
        command.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    reported(&command.arg(ops.to_string()).output().unwrap())
}

/// The report a TypeScript or Go client printed: its instructions and results.
fn reported(output: &std::process::Output) -> Run {
    assert!(output.status.success(), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    Run {
        instructions: report["instructions"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        results: report["results"].as_array().unwrap().clone(),
    }
}

type Client = fn(&Sidecar, &str, &Value) -> Run;

const CLIENTS: [(&str, Client); 3] = [("python", python), ("typescript", typescript), ("go", go)];

/// The names of the tools a search answered.
fn found(result: &Value) -> Vec<String> {
    result["structuredContent"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no answer: {result}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn independent_clients_should_find_and_call_real_tools_on_both_revisions() {
    let server = PythonServer::start_script_with(
        "crates/capstan-sidecar/tests/python/corpus_server.py",
        &[repo_root().join(CORPUS).to_str().unwrap()],
    );
    let address = server.address.to_string();
    let env = [("CAPSTAN_REFRESH_SECONDS", "1")];
    let sidecar = Sidecar::start(
        &documents(&address, &[]),
        std::slice::from_ref(&address),
        &env,
    );
    let ops = json!([
        {"op": "tools"},
        {"op": "call", "name": "find_tools", "arguments": {"need": "Find popular Rust repositories about terminal UIs on GitHub"}},
        {"op": "call", "name": "github__search_repositories", "arguments": {"query": "terminal ui language:rust"}},
        {"op": "call", "name": "find_tools", "arguments": {"need": "List the work items in the current Azure DevOps sprint", "limit": 10}},
        {"op": "call", "name": "find_tools", "arguments": {"need": "merge pull request 42 of octo/widgets with a squash merge", "limit": 20}},
        {"op": "call", "name": "find_tools", "arguments": {"need": "Book me a flight from Lisbon to Berlin"}},
    ]);
    for (client, run) in CLIENTS {
        for mode in ["legacy", "2026-07-28"] {
            let what = format!("{client} {mode}");
            let Run {
                instructions,
                results,
            } = run(&sidecar, mode, &ops);
            // 500 tools are over the threshold: the built-ins and find_tools are listed only.
            let listed: Vec<&str> = results[0]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            assert!(listed.contains(&"find_tools"), "{what}: {listed:?}");
            assert!(
                listed.iter().all(|n| !n.contains("__")),
                "{what}: {listed:?}"
            );
            if client != "python" {
                assert!(
                    instructions.contains("## Finding tools"),
                    "{what}: {instructions}"
                );
            }
            // Found, then called by its name without being listed: the corpus server ran it.
            assert_eq!(
                results[1]["structuredContent"]["match"], "good",
                "{what}: {}",
                results[1]
            );
            assert_eq!(
                found(&results[1])[0],
                "github__search_repositories",
                "{what}"
            );
            let ran: Value = serde_json::from_str(results[2]["text"].as_str().unwrap()).unwrap();
            assert_eq!(
                (&ran["server"], &ran["tool"]),
                (&json!("github"), &json!("search_repositories")),
                "{what}"
            );
            // The Azure DevOps tools compose (their own `project` argument).
            let ado = found(&results[3]);
            assert!(
                ado.iter().any(|n| n.starts_with("azure-devops__")),
                "{what}: {ado:?}"
            );
            // The tool its allow-list leaves out is never found, asked for in its own words.
            let merge = found(&results[4]);
            assert!(
                !merge.iter().any(|n| n.contains(LEFT_OUT)),
                "{what}: {merge:?}"
            );
            assert_eq!(
                results[5]["structuredContent"]["match"], "none",
                "{what}: {}",
                results[5]
            );
        }
    }

    // A composition change reaches the next search: the Atlassian binding removed, its tools
    // are no longer found.
    let need = json!([{"op": "call", "name": "find_tools", "arguments": {"need": "Delete the Confluence page 'Old Roadmap'"}}]);
    let before = found(&go(&sidecar, "2026-07-28", &need).results[0]);
    assert_eq!(before[0], "atlassian__confluence_delete_page", "{before:?}");
    sidecar.write_fixture(&documents(&address, &["atlassian"]));
    let mut after = Vec::new();
    for _ in 0..100 {
        after = found(&go(&sidecar, "2026-07-28", &need).results[0]);
        if !after.iter().any(|n| n.starts_with("atlassian__")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        !after.iter().any(|n| n.starts_with("atlassian__")),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn independent_clients_should_be_held_to_the_search_rate_and_gap_reports_to_theirs() {
    let server = PythonServer::start_script_with(
        "crates/capstan-sidecar/tests/python/corpus_server.py",
        &[repo_root().join(CORPUS).to_str().unwrap()],
    );
    let address = server.address.to_string();
    let mut documents = documents(&address, &[]);
    for item in documents["items"].as_array_mut().unwrap() {
        if item["metadata"]["name"] == "corpus-slack" {
            item["spec"]["reportingProject"] = json!("slack-platform");
        }
    }
    let dir = temp_dir("corpus-gaps");
    let sink = dir.join("gaps.jsonl");
    let env = [
        ("CAPSTAN_GAP_SINK", sink.to_str().unwrap()),
        ("CAPSTAN_GAP_REPORTS_PER_HOUR", "1"),
        ("CAPSTAN_TOOL_SEARCH_CALLS_PER_MINUTE", "2"),
    ];
    let sidecar = Sidecar::start(&documents, std::slice::from_ref(&address), &env);
    let lines = || {
        std::fs::read_to_string(&sink)
            .unwrap_or_default()
            .lines()
            .count()
    };

    // The Go SDK on 2026-07-28: a gap near the Slack tools reaches the Slack team once; the
    // same need again is not written; another is over the caller's hour.
    let report = |need: &str| {
        let ops =
            json!([{"op": "call", "name": "report_capability_gap", "arguments": {"need": need}}]);
        go_as(&sidecar, "2026-07-28", Some("reporter"), &ops).results[0].clone()
    };
    let first = report("Delete the Slack message I just posted by mistake");
    assert_eq!(
        first["structuredContent"]["services"],
        json!(["corpus-slack.example"]),
        "{first}"
    );
    assert_eq!(lines(), 1);
    let again = report("delete the slack message I just  posted by mistake");
    assert_eq!(again["structuredContent"]["reported"], true, "{again}");
    assert_eq!(lines(), 1);
    let over = report("Schedule a Slack message for tomorrow morning");
    assert_eq!(over["isError"], true, "{over}");
    assert_eq!(
        over["structuredContent"]["error"]["kind"], "rate_limited",
        "{over}"
    );
    assert_eq!(lines(), 1);

    // The Python SDK in a session: two searches a minute, then rate_limited with the wait; a
    // second caller keeps its own allowance.
    let search = |client: &str| {
        json!({"op": "call", "client": client, "name": "find_tools",
               "arguments": {"need": "Which Redis keys start with session:?"}})
    };
    let run = python(
        &sidecar,
        "legacy",
        &json!([search("one"), search("one"), search("one"), search("two")]),
    );
    let kinds: Vec<Value> = run
        .results
        .iter()
        .map(|r| r["structuredContent"]["error"]["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [Value::Null, Value::Null, json!("rate_limited"), Value::Null],
        "{:?}",
        run.results
    );
    assert!(
        run.results[2]["structuredContent"]["error"]["retryAfterMs"]
            .as_u64()
            .unwrap()
            > 0
    );
}
