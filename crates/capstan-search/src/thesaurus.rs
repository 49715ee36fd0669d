//! The words that name one operation or one kind of object across APIs: a caller asks to
//! "remove" what a tool calls "delete", to "look up" what it calls "search", for the "repo"
//! its schema calls `repository`. A need's term also matches a tool through the other words
//! of its group, at a discount ([`crate::Tuning::synonym_weight`]).
//!
//! Hand-written on purpose: the alternatives (word embeddings, a learned expansion) are model
//! weights, which an air-gapped cluster cannot fetch and this project does not ship. The
//! groups are general English for operations on software resources, not the vocabulary of
//! any one provider; a group joins words a person would use for the same act, never a word
//! and its opposite.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::text;

/// The groups, each a set of words (analysed like any text) with one meaning.
#[rustfmt::skip]
const GROUPS: &[&[&str]] = &[
    // Acts.
    &[
        "create", "add", "new", "make", "insert", "register", "declare", "open",
    ],
    &[
        "delete", "remove", "drop", "erase", "destroy", "purge", "discard", "forget", "clear",
    ],
    &[
        "update", "edit", "modify", "change", "alter", "patch", "set", "rename", "replace",
    ],
    &[
        "get", "read", "fetch", "retrieve", "view", "show", "display", "see", "open", "inspect",
        "check",
    ],
    &["list", "enumerate", "show", "browse", "all"],
    &[
        "search", "find", "lookup", "look", "query", "locate", "discover",
    ],
    &[
        "run", "execute", "invoke", "trigger", "launch", "start", "spin", "rerun", "evaluate",
    ],
    &["stop", "halt", "kill", "terminate", "cancel", "abort"],
    &["send", "post", "message", "notify", "ping", "publish"],
    &["save", "store", "persist", "write", "record"],
    &["remember", "memorize", "memory", "recall"],
    &["comment", "reply", "respond", "remark", "annotate"],
    &["compare", "diff", "difference", "changed", "change"],
    &["summarize", "aggregate", "total", "sum", "count", "group", "tally"],
    &["describe", "detail", "info", "information", "metadata", "explain", "inspect"],
    &["assign", "delegate", "allocate"],
    &["move", "transition", "rename", "relocate"],
    &["upload", "push", "commit"],
    &["download", "export"],
    &["subscribe", "watch", "follow", "unsubscribe", "mute", "ignore"],
    &["approve", "accept", "review"],
    &["schedule", "plan"],
    &["navigate", "visit", "go", "browse", "open"],
    &["click", "press", "tap"],
    &["type", "fill", "enter", "input"],
    &["select", "pick", "choose"],
    &["screenshot", "capture", "snapshot"],
    &["install", "deploy", "apply"],
    &["link", "relate", "connect", "associate"],
    // Objects.
    &["repository", "repo"],
    &["pr", "pull"],
    &["issue", "ticket", "bug", "task", "story", "item"],
    &["directory", "folder", "dir"],
    &["file", "document", "doc"],
    &["user", "person", "people", "member", "owner"],
    &["team", "group"],
    &["log", "logs", "event"],
    &["error", "failure", "fail", "exception", "broken"],
    &["alert", "warning", "alarm", "notification"],
    &["image", "picture", "photo", "illustration"],
    &["url", "link", "address", "page"],
    &["schema", "field", "structure", "column", "shape"],
    &["config", "configuration", "setting", "settings"],
    &["container", "pod"],
    &["sprint", "iteration"],
    &["wiki", "page"],
    &["message", "chat", "channel"],
    &["size", "big", "large"],
    &["location", "coordinate", "latitude", "longitude", "geocode", "place"],
    &["key", "secret", "password", "credential", "token"],
    &["vulnerable", "vulnerability", "security", "advisory", "cve"],
];

/// The other terms of every group `term` is in, each once, in a fixed order.
pub fn alternatives(term: &str) -> &'static [String] {
    static TABLE: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table: HashMap<String, Vec<String>> = HashMap::new();
        for group in GROUPS {
            let stems: Vec<String> = group
                .iter()
                .map(|w| text::stem(&w.to_lowercase()))
                .collect();
            for stem in &stems {
                let entry = table.entry(stem.clone()).or_default();
                for other in &stems {
                    if other != stem && !entry.contains(other) {
                        entry.push(other.clone());
                    }
                }
            }
        }
        table
    });
    table.get(term).map(Vec::as_slice).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_should_reach_the_other_words_of_its_groups_by_stem() {
        let remove = text::stem("remove");
        assert!(alternatives(&remove).contains(&text::stem("deleting")));
        assert!(!alternatives(&remove).contains(&remove));
        assert!(alternatives("unheardof").is_empty());
    }
}
