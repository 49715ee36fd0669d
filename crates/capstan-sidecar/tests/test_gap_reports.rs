//! Capability-gap reports through a real sidecar (docs/tool-search.md): offered where a
//! binding names a `reportingProject` and the sink is on; a report lands in the sink once per
//! need and window, for the teams of the nearest tools' providers (or the services named);
//! a caller over its rate is refused with nothing written; the model never learns where a
//! report went; `capstanctl gaps` summarizes the file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_testkit::sidecar::*;
use serde_json::{Value, json};

fn lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gap_should_be_reported_once_to_the_providers_team_and_a_caller_held_to_its_rate() {
    let provider = DemoProvider::start(&[]);
    let dir = temp_dir("gaps");
    let sink = dir.join("gaps.jsonl");
    let env = [
        ("CAPSTAN_GAP_SINK", sink.to_str().unwrap()),
        ("CAPSTAN_GAP_REPORTS_PER_HOUR", "2"),
    ];
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &env);
    let session = sidecar.session("demo-project", None).await;
    assert!(
        tool_names(&session)
            .await
            .contains(&"report_capability_gap".to_owned())
    );
    let report = |arguments: Value| session.call_tool(call("report_capability_gap", arguments));

    // The nearest tools are StreamCo's: its team gets the report.
    let result = report(json!({"need": "Export every stream's configuration as CSV"}))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let answer = result.structured_content.clone().unwrap();
    assert_eq!(answer["reported"], true, "{answer}");
    assert_eq!(
        answer["services"],
        json!(["streaming.streamco.example"]),
        "{answer}"
    );
    // Where it went is the platform's, not the model's.
    assert!(
        !format!("{result:?}").contains("streamco-platform"),
        "{result:?}"
    );
    let written = lines(&sink);
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(
        (
            &written[0]["project"],
            &written[0]["reportingProject"],
            &written[0]["service"],
            &written[0]["need"]
        ),
        (
            &json!("demo-project"),
            &json!("streamco-platform"),
            &json!("streaming.streamco.example"),
            &json!("Export every stream's configuration as CSV")
        ),
    );

    // The same need again, worded with other case and spacing: not written again, not counted.
    let again = report(json!({"need": "export every  stream's configuration as csv"}))
        .await
        .unwrap();
    assert_eq!(again.structured_content.unwrap()["reported"], true);
    assert_eq!(lines(&sink).len(), 1);

    // A service no binding here is: nothing is sent.
    let nowhere = report(json!({"need": "Pause a stream", "services": ["maps.example"]}))
        .await
        .unwrap();
    assert_eq!(nowhere.structured_content.unwrap()["reported"], false);
    assert_eq!(lines(&sink).len(), 1);

    // A second need, named for the service; then the caller's hour is spent.
    let second = report(
        json!({"need": "Pause a stream", "services": ["streaming.streamco.example"],
                               "search": "pause stream"}),
    )
    .await
    .unwrap();
    assert_ne!(second.is_error, Some(true), "{second:?}");
    assert_eq!(lines(&sink).len(), 2);
    assert_eq!(lines(&sink)[1]["search"], "pause stream");
    let over = report(json!({"need": "Delete a stream"})).await.unwrap();
    assert_eq!(over.is_error, Some(true));
    assert_eq!(
        over.structured_content.unwrap()["error"]["kind"],
        "rate_limited"
    );
    assert_eq!(lines(&sink).len(), 2);

    // Bad arguments name the field.
    let bad = report(json!({"need": "x", "services": "streaming"}))
        .await
        .unwrap();
    assert_eq!(
        bad.structured_content.unwrap()["error"]["field"],
        "services"
    );
    session.cancel().await.unwrap();

    // capstanctl gaps: per reporting project and service.
    let output = std::process::Command::new(binary("capstanctl"))
        .args(["gaps", sink.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let table = String::from_utf8_lossy(&output.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("streamco-platform"))
        .expect("a row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..4],
        ["streamco-platform", "streaming.streamco.example", "2", "1"],
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_sink_the_report_tool_should_not_be_offered() {
    let provider = DemoProvider::start(&[]);
    // The test sidecar's sink is off unless a test sets it.
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let session = sidecar.session("demo-project", None).await;
    assert_not_offered(
        &session,
        "report_capability_gap",
        json!({"need": "Pause a stream"}),
    )
    .await;
    session.cancel().await.unwrap();
}
