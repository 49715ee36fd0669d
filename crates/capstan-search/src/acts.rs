//! What a need asks to be done, and whether a tool does it. A request in the imperative names
//! its act first ("Delete the Slack message…", "Merge GitLab merge request !42"); the tool that
//! answers it must do that act, not merely mention its words — `create_merge_request` speaks
//! of merging but creates, `list_oncall_schedules` speaks of schedules but lists. A tool's
//! act is read from its name, where providers put it (`create_…`, `jira_add_…`, `pods_run`,
//! `…_create_or_update`); a tool whose name holds no act (a multi-method tool) is read from
//! its titles, first sentence and methods.
//!
//! Acts come in families: every act that only reads (get, list, search, describe, diff…)
//! answers a need to read, whichever of them the need's verb names; the acts that change
//! something are told apart.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::text;

/// The families of acts, by the words that name them. A word may name acts of two families
/// ("open" a pull request creates it; "open" a URL navigates).
#[rustfmt::skip]
const FAMILIES: &[&[&str]] = &[
    &[
        "get", "read", "fetch", "retrieve", "view", "show", "display", "see", "inspect", "check",
        "list", "enumerate", "browse", "search", "find", "lookup", "look", "query", "locate",
        "discover", "describe", "explain", "compare", "diff", "count", "summarize", "aggregate",
        "total", "analyze", "download", "export", "explore", "examine", "review",
    ],
    &[
        "create", "add", "new", "make", "insert", "register", "declare", "open", "save", "store",
        "remember", "record", "write", "generate", "build", "draft", "log", "upload", "post",
    ],
    &[
        "update", "edit", "modify", "change", "alter", "patch", "set", "rename", "replace", "move",
        "transition", "mark", "write", "apply", "bump", "upgrade", "put",
    ],
    &[
        "delete", "remove", "drop", "erase", "destroy", "purge", "discard", "forget", "clear",
        "uninstall",
    ],
    &[
        "run", "execute", "invoke", "trigger", "launch", "start", "spin", "rerun", "evaluate",
        "restart",
    ],
    &["stop", "halt", "kill", "terminate", "cancel", "abort"],
    &[
        "send", "post", "message", "notify", "ping", "publish", "reply", "comment", "announce",
    ],
    &["merge", "squash", "rebase"],
    &["assign", "delegate", "allocate", "unassign"],
    &["approve", "accept", "reject"],
    &["install", "deploy"],
    &["link", "relate", "connect", "associate", "attach"],
    &["subscribe", "watch", "follow", "unsubscribe", "mute", "unwatch"],
    &["navigate", "visit", "go", "open", "browse"],
    &["click", "press", "tap", "hover", "drag"],
    &["type", "fill", "enter", "press"],
    &["select", "pick", "choose"],
    &["screenshot", "capture", "snapshot"],
    &["schedule", "plan", "book", "reserve"],
    &["commit", "push"],
    &[
        "transfer", "pay", "refund", "charge", "buy", "purchase", "order",
    ],
];

/// Verbs that open a request without naming its act ("give me…", "tell me…").
const LIGHT_VERBS: &[&str] = &[
    "give", "take", "tell", "help", "try", "need", "have", "bring", "keep",
];

/// Whether `term` (a stem) is a verb that opens a request without naming its act.
pub(crate) fn is_light_verb(term: &str) -> bool {
    static STEMS: OnceLock<Vec<String>> = OnceLock::new();
    STEMS
        .get_or_init(|| LIGHT_VERBS.iter().map(|verb| text::stem(verb)).collect())
        .iter()
        .any(|stem| stem == term)
}

/// The families (indexes into `FAMILIES`) of the act `term` (a stem) names.
pub(crate) fn families(term: &str) -> &'static [u8] {
    static TABLE: OnceLock<HashMap<String, Vec<u8>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table: HashMap<String, Vec<u8>> = HashMap::new();
        for (family, words) in FAMILIES.iter().enumerate() {
            for word in *words {
                let entry = table.entry(text::stem(word)).or_default();
                if !entry.contains(&(family as u8)) {
                    entry.push(family as u8);
                }
            }
        }
        table
    });
    table.get(term).map(Vec::as_slice).unwrap_or(&[])
}

/// The act a need asks for. A request in the imperative opens with it ("Delete the …"),
/// perhaps after a polite opening ("please", "can you", "I want to"); a question ("What …",
/// "Which …", "Has anyone …", or any need ending in "?") asks to read. `None` when the need
/// opens otherwise ("My PR is behind main …", a literal, a light verb).
pub(crate) fn requested(need: &str) -> Option<String> {
    let words: Vec<&str> = need.split_whitespace().collect();
    let mut rest = &words[..];
    while let Some(skip) = polite_opening(rest) {
        rest = &rest[skip..];
    }
    let first = *rest.first()?;
    let word = text::words(first).into_iter().next()?;
    if QUESTION_WORDS.contains(&word.as_str())
        || (rest.len() == words.len() && need.trim_end().ends_with('?'))
    {
        return Some(text::stem("read"));
    }
    if first.contains(|c: char| !c.is_alphabetic() && c != '\'' && c != ',') {
        return None;
    }
    if text::is_stop_word(&word)
        || LIGHT_VERBS.contains(&word.as_str())
        || !text::is_meaningful(&word)
    {
        return None;
    }
    Some(text::stem(&word))
}

/// Words that open a question: it asks to be told, so to read.
const QUESTION_WORDS: &[&str] = &[
    "what", "which", "when", "where", "who", "whom", "whose", "why", "how", "is", "are", "was",
    "were", "do", "does", "did", "has", "have", "had",
];

/// How many words a polite opening of `words` takes ("please", "can you", "could you",
/// "would you", "will you", "i want to", "i need to", "i'd like to", "let's"), if it has one.
fn polite_opening(words: &[&str]) -> Option<usize> {
    let lower: Vec<String> = words.iter().take(5).map(|w| w.to_lowercase()).collect();
    let is = |i: usize, options: &[&str]| {
        lower
            .get(i)
            .is_some_and(|w| options.contains(&w.trim_matches(',')))
    };
    if is(0, &["please", "pls", "kindly", "let's", "lets"]) {
        return Some(1);
    }
    if is(0, &["can", "could", "would", "will"]) && is(1, &["you"]) {
        return Some(if is(2, &["please"]) { 3 } else { 2 });
    }
    if is(0, &["i"]) && is(1, &["want", "need", "would"]) {
        let like = usize::from(is(2, &["like", "love"]));
        return is(2 + like, &["to"]).then_some(3 + like);
    }
    if is(0, &["i'd"]) && is(1, &["like", "love"]) && is(2, &["to"]) {
        return Some(3);
    }
    // A question about how to do an act asks for the act: "how do I delete", "how to merge",
    // "can I close", "is it possible to …", "is there a way to …".
    if is(0, &["how"]) && is(1, &["do", "can", "should", "would"]) && is(2, &["i", "we"]) {
        return Some(3);
    }
    if is(0, &["how"]) && is(1, &["to"]) {
        return Some(2);
    }
    if is(0, &["can", "could", "may"]) && is(1, &["i", "we"]) {
        return Some(2);
    }
    if is(0, &["is"]) && is(1, &["it"]) && is(2, &["possible"]) && is(3, &["to"]) {
        return Some(4);
    }
    if is(0, &["is"]) && is(1, &["there"]) && is(2, &["a"]) && is(3, &["way"]) && is(4, &["to"]) {
        return Some(5);
    }
    None
}

/// The acts a tool's name says it does: the first word of the name that names an act, and
/// any act after an "or" (`resources_create_or_update`). Empty when the name names none.
pub(crate) fn name_acts(tool: &str) -> Vec<String> {
    let words = text::words(tool);
    let mut acts: Vec<String> = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let stem = text::stem(word);
        if families(&stem).is_empty() {
            continue;
        }
        let after_or = i > 0 && words[i - 1] == "or";
        // A name made from an HTTP route (`API-post-search`, `API-get-user`) opens with the
        // method; the route's own act, when it has one, follows it.
        let after_method = acts.len() == 1 && HTTP_METHODS.iter().any(|m| text::stem(m) == acts[0]);
        if acts.is_empty() || after_or || after_method {
            acts.push(stem);
        }
    }
    acts
}

/// The HTTP methods, as the first word of a name generated from a route.
const HTTP_METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

/// Whether the act `requested` is done by a tool whose name's acts are `acts`, or, when its
/// name names none, whose leading text (`strong`: titles, first sentence, methods) holds
/// `requested` or a word of its families.
pub(crate) fn serves(requested: &str, acts: &[String], strong: &dyn Fn(&str) -> bool) -> bool {
    let wanted = families(requested);
    if !acts.is_empty() && !wanted.is_empty() {
        return acts
            .iter()
            .any(|act| families(act).iter().any(|f| wanted.contains(f)));
    }
    if strong(requested) {
        return true;
    }
    wanted.iter().any(|&family| {
        FAMILIES[family as usize]
            .iter()
            .any(|w| strong(&text::stem(w)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_should_open_with_its_act_and_a_question_should_not() {
        assert_eq!(
            requested("Delete the Slack message"),
            Some(text::stem("delete"))
        );
        assert_eq!(
            requested("Which Redis keys start with session:?"),
            Some("read".into())
        );
        assert_eq!(
            requested("Redis keys starting with session:?"),
            Some("read".into())
        );
        assert_eq!(
            requested("Could you please delete it"),
            Some(text::stem("delete"))
        );
        assert_eq!(requested("I'd like to merge it"), Some(text::stem("merge")));
        assert_eq!(requested("I want to merge it"), Some(text::stem("merge")));
        assert_eq!(
            requested("How do I delete a branch?"),
            Some(text::stem("delete"))
        );
        assert_eq!(requested("how to merge a PR?"), Some(text::stem("merge")));
        assert_eq!(requested("Can I close issue 4?"), Some(text::stem("close")));
        assert_eq!(
            requested("Is it possible to rename a stream?"),
            Some(text::stem("rename"))
        );
        assert_eq!(
            requested("Is there a way to pause it?"),
            Some(text::stem("pause"))
        );
        // A question that asks how something is, not how to do it, still asks to read.
        assert_eq!(requested("How is the cluster doing?"), Some("read".into()));
        assert_eq!(requested("My PR is behind main"), None);
        assert_eq!(requested("Give me a shareable link"), None);
        assert_eq!(requested("acme/noisy keeps spamming me"), None);
    }

    #[test]
    fn a_names_act_should_be_its_first_and_any_after_or() {
        assert_eq!(name_acts("create_merge_request"), [text::stem("create")]);
        assert_eq!(name_acts("list_oncall_schedules"), ["list"]);
        assert_eq!(
            name_acts("resources_create_or_update"),
            [text::stem("create"), text::stem("update")]
        );
        assert_eq!(name_acts("API-post-search"), ["post", "search"]);
        assert_eq!(name_acts("repo_pull_request"), Vec::<String>::new());
    }

    #[test]
    fn a_tool_should_serve_an_act_of_its_family_only() {
        let none = |_: &str| false;
        let merge = text::stem("merge");
        assert!(!serves(&merge, &name_acts("create_merge_request"), &none));
        assert!(serves(&merge, &name_acts("merge_pull_request"), &none));
        assert!(serves(
            &text::stem("find"),
            &name_acts("search_nodes"),
            &none
        ));
        assert!(!serves(
            &text::stem("schedule"),
            &name_acts("list_oncall_schedules"),
            &none
        ));
        let methods = |t: &str| t == "get";
        assert!(serves(
            &text::stem("show"),
            &name_acts("repo_pull_request"),
            &methods
        ));
    }
}
