#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use serde_json::json;

use crate::{Index, ToolDoc};

fn tool(service: &str, name: &str, description: &str, arguments: &[&str]) -> ToolDoc {
    let properties: serde_json::Map<String, serde_json::Value> = arguments
        .iter()
        .map(|a| ((*a).to_owned(), json!({"type": "string"})))
        .collect();
    ToolDoc {
        name: format!("{service}__{name}"),
        tool: name.into(),
        service: service.into(),
        description: description.into(),
        input_schema: json!({"type": "object", "properties": properties}),
        ..ToolDoc::default()
    }
}

/// A small composition: three services with tools of overlapping words.
fn tools() -> Vec<ToolDoc> {
    vec![
        tool(
            "wiki",
            "get_page",
            "Get a wiki page by its id.",
            &["page_id"],
        ),
        tool("wiki", "delete_page", "Delete a wiki page.", &["page_id"]),
        tool(
            "wiki",
            "search_pages",
            "Search wiki pages by text.",
            &["query"],
        ),
        tool(
            "wiki",
            "add_comment",
            "Add a comment to a wiki page.",
            &["page_id", "body"],
        ),
        tool(
            "chat",
            "post_message",
            "Post a message to a chat channel.",
            &["channel", "text"],
        ),
        tool("chat", "list_channels", "List the chat channels.", &[]),
        tool(
            "chat",
            "add_reaction",
            "Add an emoji reaction to a message.",
            &["channel", "emoji"],
        ),
        tool(
            "tracker",
            "create_issue",
            "Create an issue in a tracker project.",
            &["title", "body"],
        ),
        tool(
            "tracker",
            "search_issues",
            "Search issues by text.",
            &["query"],
        ),
        tool(
            "tracker",
            "add_issue_comment",
            "Add a comment to an issue.",
            &["issue", "body"],
        ),
        tool("tracker", "close_issue", "Close an issue.", &["issue"]),
        tool(
            "tracker",
            "list_projects",
            "List the tracker's projects.",
            &[],
        ),
    ]
}

fn names(index: &Index, need: &str, visible: impl Fn(usize) -> bool) -> Vec<String> {
    let answer = index.search(need, 5, visible);
    answer
        .hits
        .iter()
        .map(|h| index.docs()[h.doc].name.clone())
        .collect()
}

#[test]
fn a_need_should_find_the_tool_that_does_its_act() {
    let index = Index::build(tools());
    let answer = index.search("Remove the wiki page 'Old plans'", 3, |_| true);
    assert!(answer.matched);
    assert_eq!(index.docs()[answer.hits[0].doc].name, "wiki__delete_page");
    assert_eq!(
        names(&index, "look up issues about timeouts", |_| true)[0],
        "tracker__search_issues"
    );
    assert_eq!(
        names(&index, "which chat channels are there?", |_| true)[0],
        "chat__list_channels"
    );
    // A question about how to do an act asks for the act, not for reading.
    let answer = index.search("How do I delete the wiki page about onboarding?", 3, |_| {
        true
    });
    assert!(answer.matched, "{answer:?}");
    assert_eq!(index.docs()[answer.hits[0].doc].name, "wiki__delete_page");
}

#[test]
fn a_need_no_tool_does_should_be_no_good_match_with_the_nearest_named() {
    let index = Index::build(tools());
    // The chat service exists, but nothing of it deletes: the nearest are still listed.
    let answer = index.search("Delete the chat message I posted", 5, |_| true);
    assert!(!answer.matched, "{answer:?}");
    assert!(!answer.hits.is_empty());
    let answer = index.search("Book me a flight to Berlin on Friday", 5, |_| true);
    assert!(!answer.matched, "{answer:?}");
}

#[test]
fn a_tool_the_caller_may_not_see_should_never_be_found() {
    let index = Index::build(tools());
    let delete = index
        .docs()
        .iter()
        .position(|d| d.tool == "delete_page")
        .unwrap();
    let found = names(&index, "delete the wiki page", |doc| doc != delete);
    assert!(
        !found.contains(&"wiki__delete_page".to_owned()),
        "{found:?}"
    );
    assert!(!found.is_empty());
}

#[test]
fn the_same_need_should_get_the_same_answer() {
    let index = Index::build(tools());
    let first = index.search("add a comment", 20, |_| true);
    for _ in 0..5 {
        assert_eq!(index.search("add a comment", 20, |_| true), first);
    }
    // Equal scores are ordered by name.
    let rebuilt = Index::build(tools().into_iter().rev().collect());
    let order = |index: &Index| names(index, "add a comment", |_| true);
    assert_eq!(order(&index), order(&rebuilt));
}

proptest! {
    /// A caller's answer is the answer of an index of the caller's tools alone: what it may
    /// not see neither appears nor moves the order of what it may (no statistic leaks it).
    #[test]
    fn a_view_should_answer_as_an_index_of_its_tools_alone(
        mask in proptest::collection::vec(any::<bool>(), 12),
        need in prop::sample::select(vec![
            "add a comment to the issue",
            "delete the wiki page",
            "search for pages about onboarding",
            "post a message in the chat",
            "what projects does the tracker have?",
            "Book me a flight",
            // "track" is known only through "tracker", a prefix some views hide.
            "list what the track holds",
        ]),
    ) {
        let all = tools();
        let index = Index::build(all.clone());
        let seen: Vec<ToolDoc> = all.iter().zip(&mask).filter(|(_, v)| **v).map(|(d, _)| d.clone()).collect();
        let alone = Index::build(seen);
        let viewed = index.search(need, 20, |doc| mask[doc]);
        let own = alone.search(need, 20, |_| true);
        let named = |index: &Index, answer: &crate::Answer| -> Vec<(String, u32)> {
            answer.hits.iter().map(|h| (index.docs()[h.doc].name.clone(), h.score.to_bits())).collect()
        };
        prop_assert_eq!(named(&index, &viewed), named(&alone, &own));
        prop_assert_eq!(viewed.matched, own.matched);
    }
}

#[test]
fn a_word_should_find_the_compound_it_ends() {
    let index = Index::build(vec![
        tool(
            "dash",
            "generate_deeplink",
            "Generate a deeplink to a dashboard panel.",
            &["panel"],
        ),
        tool(
            "dash",
            "get_panel_image",
            "Render a dashboard panel as an image.",
            &["panel"],
        ),
    ]);
    let found = names(&index, "a shareable link to the latency panel", |_| true);
    assert_eq!(found[0], "dash__generate_deeplink", "{found:?}");
}

#[test]
fn a_tool_without_arguments_should_yield_when_the_need_names_an_object() {
    // Two tools alike but for their arguments; by name, the one without comes first, and
    // stays first when the need names nothing a tool must be told.
    let index = Index::build(vec![
        tool("notes", "notes_dump", "The notebook's notes.", &[]),
        tool("notes", "notes_query", "The notebook's notes.", &["of"]),
    ]);
    // Nor does a word no tool holds outside a modifying phrase: as likely the person's idiom.
    for need in [
        "the notebook's notes",
        "the notebook's notes lagging behind",
    ] {
        assert_eq!(
            names(&index, need, |_| true)[0],
            "notes__notes_dump",
            "{need}"
        );
    }
    // "invoices" is a word no tool holds: something to look for, which only a tool with
    // arguments can be told; so is a literal.
    for need in [
        "the notebook's notes about invoices",
        "the notebook's notes in 'Q3 plan'",
    ] {
        assert_eq!(
            names(&index, need, |_| true)[0],
            "notes__notes_query",
            "{need}"
        );
    }
}
