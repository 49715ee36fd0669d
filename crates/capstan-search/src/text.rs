//! Words to terms: the one analysis a tool's text and a caller's need both go through, so
//! that they meet on the same terms.
//!
//! A word is a run of letters and digits, split again where an identifier joins words
//! (`camelCase`, `HTTPServer`, `snake_case`, `kebab-case`); it is lower-cased, dropped if it
//! is a function word (the stop list below), a single character or a bare number, and
//! reduced to its Snowball English stem.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};

/// Function words and the conversational words of a request ("please show me …"): they say
/// nothing about which tool is meant. Operation words ("get", "show", "new", "open", "run",
/// "find", "all") are not here: they are what a need is made of.
#[rustfmt::skip]
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "am",
    "an",
    "and",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "done",
    "during",
    "each",
    "either",
    "else",
    "etc",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "him",
    "his",
    "how",
    "however",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "let",
    "like",
    "may",
    "me",
    "might",
    "more",
    "most",
    "must",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "ought",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "please",
    "same",
    "shall",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "upon",
    "us",
    "very",
    "via",
    "want",
    "was",
    "we",
    "were",
    "what",
    "whatever",
    "when",
    "where",
    "whether",
    "which",
    "while",
    "who",
    "whom",
    "whose",
    "why",
    "will",
    "with",
    "within",
    "without",
    "would",
    "yet",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "e",
    "g",
    "eg",
    "ie",
    "use",
    "used",
    "using",
    "tool",
    "anything",
    "anyone",
    "anybody",
    "everything",
    "everyone",
    "everybody",
    "something",
    "someone",
    "somebody",
    "nothing",
    "nobody",
    "thing",
    "things",
];

fn stemmer() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// Whether `word` (lower-case) is on the stop list.
pub fn is_stop_word(word: &str) -> bool {
    static SET: OnceLock<HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| STOP_WORDS.iter().copied().collect())
        .contains(word)
}

/// The stem of one lower-case word. Stems are remembered per thread: a tool set repeats the
/// same few thousand words, and stemming is most of what building an index costs.
pub fn stem(word: &str) -> String {
    thread_local! {
        static STEMS: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
    }
    /// Past this many remembered words the memory is cleared rather than grown.
    const REMEMBERED: usize = 50_000;
    STEMS.with_borrow_mut(|stems| {
        if let Some(stem) = stems.get(word) {
            return stem.clone();
        }
        if stems.len() >= REMEMBERED {
            stems.clear();
        }
        let stem = stemmer().stem(word).into_owned();
        stems.insert(word.to_owned(), stem.clone());
        stem
    })
}

/// The lower-case words of `text`, identifiers split into their parts, nothing dropped. A
/// run split at a change of case is also kept whole: a brand written in camel case
/// ("GitHub", "MongoDB", "DevOps") is one word to its users and the name of its service.
pub fn words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    for run in text.split(|c: char| !c.is_alphanumeric()) {
        let before = words.len();
        split_identifier(run, &mut words);
        if words.len() > before + 1 && run.chars().all(char::is_alphabetic) {
            words.push(run.to_lowercase());
        }
    }
    words
}

/// Splits one alphanumeric run where its case or its kind (letter, digit) changes the way an
/// identifier joins words: `getFileInfo` → get, file, info; `HTTPServer` → http, server.
fn split_identifier(run: &str, out: &mut Vec<String>) {
    let mut chars = run.char_indices().peekable();
    let mut start = 0;
    let mut before: Option<char> = None;
    while let Some((i, here)) = chars.next() {
        if let Some(before) = before {
            let next_is_lower = chars.peek().is_some_and(|&(_, c)| c.is_lowercase());
            let boundary = (before.is_lowercase() && here.is_uppercase())
                || (before.is_uppercase() && here.is_uppercase() && next_is_lower)
                || (before.is_alphabetic() != here.is_alphabetic());
            if boundary {
                out.push(run[start..i].to_lowercase());
                start = i;
            }
        }
        before = Some(here);
    }
    if start < run.len() {
        out.push(run[start..].to_lowercase());
    }
}

/// Whether a lower-case word carries meaning for search: not a stop word, not a single
/// character, not a bare number (an id in a request names an object, not a tool).
pub fn is_meaningful(word: &str) -> bool {
    word.chars().count() > 1 && !word.chars().all(|c| c.is_ascii_digit()) && !is_stop_word(word)
}

/// The terms of `text`: its meaningful words, stemmed.
pub fn terms(text: &str) -> Vec<String> {
    words(text)
        .into_iter()
        .filter(|w| is_meaningful(w))
        .map(|w| stem(&w))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_should_split_into_their_words() {
        assert_eq!(words("getFileInfo"), ["get", "file", "info", "getfileinfo"]);
        assert_eq!(words("GitHub"), ["git", "hub", "github"]);
        assert_eq!(words("jira_add_comment"), ["jira", "add", "comment"]);
        assert_eq!(words("API-retrieve-page"), ["api", "retrieve", "page"]);
        assert_eq!(words("o200k_base"), ["o", "200", "k", "base"]);
    }

    #[test]
    fn a_need_and_a_description_should_meet_on_stems() {
        assert_eq!(terms("Repositories"), terms("repository"));
        assert_eq!(terms("modified"), terms("modify"));
        assert_eq!(terms("Show me the PR 311"), ["show", "pr"]);
    }
}
