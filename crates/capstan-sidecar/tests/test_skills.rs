//! Skills through the MCP skills extension (SEP-2640; docs/mcp-surface.md "Skills"): the
//! official TypeScript SDK's SkillsClient lists, gets and reads the bindings' skills and checks
//! each file against its entry itself (size, digest, frontmatter), in both revisions; a skill
//! whose body cannot be fetched is listed as `dynamic` and its read fails naming it; a name the
//! extension does not admit stays with `load_skill`; a composition without a skill does not
//! declare the extension; a provider serving another body on every request is seen once per
//! session, the same through the extension and `load_skill`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_testkit::sidecar::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn skills_should_be_listed_and_read_through_the_extension_and_verified_by_the_client() {
    let provider = DemoProvider::start(&[]);
    let mut documents = streamco(&provider);
    let skills = documents["items"][0]["spec"]["skills"]
        .as_array_mut()
        .unwrap();
    let host = provider.host();
    // Served by no one: the provider answers 404.
    skills.push(
        json!({"name": "gone-runbook", "description": "A runbook that moved",
                       "source": format!("http://{host}/runbooks/moved.md")}),
    );
    // Capstan admits this name; the extension does not (upper case, `_`).
    skills.push(
        json!({"name": "Lag_Triage", "description": "The same, by another name",
                       "source": format!("http://{host}/runbooks/lag.md")}),
    );
    let sidecar = Sidecar::start(&documents, &[provider.host()], &[]);

    for mode in ["legacy", "auto"] {
        let output = typescript_sdk_script(&sidecar, "skills.mjs", &["demo-project", mode]);
        assert!(output.status.success(), "{output:?}");
        let report: Value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {output:?}"));
        assert_eq!(report["supported"], true, "{mode}: {report}");
        let uris: Vec<&str> = report["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["uri"].as_str().unwrap())
            .collect();
        assert_eq!(
            uris,
            [
                "capstan://_skills/lag-triage/SKILL.md",
                "capstan://_skills/gone-runbook/SKILL.md"
            ],
            "{mode}: {report}"
        );
        // The fetched skill: one file, with the digest and size the client checked.
        let entry = &report["entries"][0];
        assert_eq!(entry["resources"][0]["uri"], entry["uri"], "{report}");
        assert!(entry["resources"][0]["size"].as_u64().unwrap() > 0);
        let read = &report["reads"][0];
        assert_eq!(read["verified"], true, "{mode}: {read}");
        assert_eq!(read["got"], entry["uri"], "{read}");
        assert_eq!(
            read["frontmatter"],
            json!({"name": "lag-triage",
                   "description": "Step-by-step procedure for triaging pipeline consumer lag"})
        );
        // The provider's own words, framed with their provenance as load_skill frames them.
        let body = read["body"].as_str().unwrap();
        assert!(body.contains("Triage consumer lag"), "{body}");
        assert!(
            body.contains("This procedure comes from the provider"),
            "{body}"
        );
        // The skill whose body could not be fetched: dynamic, and its read names why.
        assert_eq!(report["entries"][1]["resources"], "dynamic", "{report}");
        let failed = &report["reads"][1];
        assert!(
            failed["error"].as_str().unwrap().contains("gone-runbook"),
            "{mode}: {failed}"
        );
        // An unknown skill: -32602.
        assert_eq!(report["unknown"]["code"], -32602, "{mode}: {report}");
        if mode == "auto" {
            assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
            assert_eq!(report["cacheScope"], "private", "{report}");
        }
    }

    // The name the extension does not admit is still a skill for load_skill.
    let session = sidecar.session("demo-project", None).await;
    let loaded = session
        .call_tool(call("load_skill", json!({"name": "Lag_Triage"})))
        .await
        .unwrap();
    let text = serde_json::to_string(&loaded.content).unwrap();
    assert!(text.contains("Triage consumer lag"), "{text}");
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn load_skill_and_the_extension_should_serve_one_body_when_the_provider_swaps_it() {
    // Each request for the runbook is answered with another body ("Served as response <n>.").
    let provider = DemoProvider::start(&["runbook-per-request"]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    for mode in ["legacy", "auto"] {
        // Listed, read and got through the SkillsClient, then loaded, in one session.
        let output = typescript_sdk_script(
            &sidecar,
            "skills.mjs",
            &["demo-project", mode, "lag-triage"],
        );
        assert!(output.status.success(), "{output:?}");
        let report: Value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {output:?}"));
        let entry = &report["entries"][0];
        let read = &report["reads"][0];
        assert_eq!(read["verified"], true, "{mode}: {read}");
        // The digest the client computed of the bytes it read is the one it was listed.
        assert_eq!(read["sha256"], entry["resources"][0]["digest"], "{report}");
        let named = &report["named"][0];
        assert_eq!(named["get"]["uri"], entry["uri"], "{named}");
        assert_eq!(named["load"]["isError"], false, "{named}");
        // load_skill returns the body the file carries after its frontmatter, byte for byte.
        let loaded = named["load"]["text"].as_str().unwrap();
        let body = read["body"].as_str().unwrap();
        assert_eq!(body.trim_start_matches('\n'), loaded, "{mode}");
        assert!(loaded.contains("Served as response "), "{loaded}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_extension_should_be_declared_only_to_a_caller_whose_composition_has_a_skill() {
    let provider = DemoProvider::start(&[]);
    let mut documents = streamco(&provider);
    let spec = documents["items"][0]["spec"].as_object_mut().unwrap();
    assert!(spec.remove("skills").is_some(), "the fixture has skills");
    let sidecar = Sidecar::start(&documents, &[provider.host()], &[]);
    for mode in ["legacy", "auto"] {
        let output = typescript_sdk_script(&sidecar, "skills.mjs", &["demo-project", mode]);
        assert!(output.status.success(), "{output:?}");
        let report: Value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {output:?}"));
        // The SDK's own reading of what the sidecar declared (initialize or server/discover).
        assert_eq!(report["supported"], false, "{mode}: {report}");
        if mode == "auto" {
            assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
        }
    }
}
