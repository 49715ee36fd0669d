//! A caller's need as terms with weights. A need mixes what is wanted ("read", "config") with
//! the names of the objects it is wanted for — a path, a URL, an issue key, an owner/repo, a
//! quoted title. Those literals say little about which tool is meant (`~/projects/app` is not
//! about projects) but their shape does: a path asks for a file, a URL for a page. So a
//! literal's own words count little, and its shape adds the word for its kind.
//!
//! A need also says where, whose and about what, in phrases a preposition opens ("from the
//! main branch of our repository", "for the payments schedule", "about invoices"): those words
//! qualify the object the act is for rather than name it, so they count less than the act and
//! its object ("Read src/app.ts", "Check who is on call").
//!
//! A need that opens with a light verb ("Take an accessibility snapshot", "Give me a link")
//! has its meaning in the noun that follows: the verb names no act (`acts.rs`) and is no term
//! either, so it cannot match a tool that happens to name it (`browser_take_screenshot`).

use crate::tuning::Tuning;
use crate::{acts, text};

/// A term of a need and what a match on it counts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NeedTerm {
    pub term: String,
    pub weight: f32,
    /// Whether the term also matches the other words of its thesaurus groups: not when an act
    /// word says a state after "is" / "are" ("threads that are open" are not created or read).
    pub expand: bool,
    /// Whether the term is a literal's (a name of an object: a value a tool must be given).
    pub literal: bool,
    /// Whether every occurrence is in a modifying phrase ("about invoices"): where an object
    /// the act is for is named.
    pub modifying: bool,
}

/// What a literal's own words count, against a word of the need's own.
pub(crate) const LITERAL_WEIGHT: f32 = 0.3;

/// The words that open a modifying phrase. "to" is one only after the need's first word of
/// its own: before it, it opens the act ("how to merge", "I want to close").
const PREPOSITIONS: &[&str] = &[
    "about", "across", "at", "by", "for", "from", "in", "inside", "into", "of", "on", "onto",
    "over", "to", "under", "with", "within",
];

/// Words and marks that end a modifying phrase: a new clause or step begins.
const CLAUSE_ENDS: &[&str] = &["and", "then", "-", "–", "—"];

/// The forms of "be": an act word after one says a state ("are open", "is merged").
const COPULAS: &[&str] = &[
    "is", "are", "was", "were", "be", "been", "being", "isn't", "aren't", "wasn't", "weren't",
];

/// The adjacent pairs of the need's own words (literals and function words apart), in order:
/// "pull request", "secret scanning".
pub(crate) fn pairs(need: &str) -> Vec<(String, String)> {
    let mut own = Vec::new();
    for (chunk, quoted) in chunks(need) {
        if quoted || literal_shape(chunk).is_some() {
            own.push(None);
            continue;
        }
        for word in text::words(chunk) {
            own.push(text::is_meaningful(&word).then(|| text::stem(&word)));
        }
    }
    let mut pairs: Vec<(String, String)> = own
        .windows(2)
        .filter_map(|w| Some((w[0].clone()?, w[1].clone()?)))
        .filter(|(a, b)| a != b)
        .collect();
    pairs.dedup();
    pairs
}

/// The terms of `need`, each distinct term once, at the highest weight it occurs with, in
/// order of first occurrence: a word of a modifying phrase at the tuning's
/// `modifier_weight`, the kind a literal's shape implies at its `shape_weight` of the place
/// the literal stands in.
pub(crate) fn analyse(need: &str, tuning: &Tuning) -> Vec<NeedTerm> {
    let mut terms: Vec<NeedTerm> = Vec::new();
    let mut add = |new: NeedTerm| match terms.iter_mut().find(|t| t.term == new.term) {
        Some(known) => {
            known.weight = known.weight.max(new.weight);
            known.expand |= new.expand;
            known.literal &= new.literal;
            known.modifying &= new.modifying;
        }
        None => terms.push(new),
    };
    let mut modifying = false;
    let mut begun = false;
    // At the need's start or a new step's ("… and tell me what it returns").
    let mut opening = true;
    let mut copula = false;
    let chunks: Vec<Chunk> = chunks(need).into_iter().map(Chunk::new).collect();
    for (at, here) in chunks.iter().enumerate() {
        let (chunk, quoted) = (here.text, here.quoted);
        let literal = quoted || here.shape.is_some();
        let word = chunk
            .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
            .to_lowercase();
        if !quoted {
            if CLAUSE_ENDS.contains(&word.as_str()) || CLAUSE_ENDS.contains(&chunk) {
                modifying = false;
                opening = true;
            } else if begun && PREPOSITIONS.contains(&word.as_str()) {
                modifying = true;
            }
        }
        let own = if modifying {
            tuning.modifier_weight
        } else {
            1.0
        };
        let state = copula && !literal;
        for term in &here.terms {
            if opening && !literal && acts::is_light_verb(term) {
                begun = true;
                opening = false;
                continue;
            }
            begun |= !literal;
            opening = false;
            add(NeedTerm {
                term: term.clone(),
                weight: if literal { LITERAL_WEIGHT } else { own },
                expand: !state || acts::families(term).is_empty(),
                literal,
                modifying,
            });
        }
        // After a form of "be", the first word of meaning says a state.
        copula = !quoted && COPULAS.contains(&word.as_str()) || copula && here.terms.is_empty();
        if !quoted && ends_clause(chunk) {
            modifying = false;
        }
        if let Some(Shape::Kind(kind)) = here.shape
            && !names_a_head(here, chunks.get(at + 1))
        {
            add(NeedTerm {
                term: text::stem(kind),
                weight: own * tuning.shape_weight,
                expand: true,
                literal: false,
                modifying,
            });
        }
    }
    terms
}

/// One whitespace-separated chunk of a need, analysed once.
struct Chunk<'a> {
    text: &'a str,
    quoted: bool,
    /// Its shape when it is an unquoted literal.
    shape: Option<Shape>,
    terms: Vec<String>,
}

impl<'a> Chunk<'a> {
    fn new((text, quoted): (&'a str, bool)) -> Self {
        Chunk {
            text,
            quoted,
            shape: if quoted { None } else { literal_shape(text) },
            terms: text::terms(text),
        }
    }
}

/// Whether `chunk` ends a clause: a mark after it ("config.yaml," "it.").
fn ends_clause(chunk: &str) -> bool {
    chunk.ends_with([',', ';', ':', '.', '?', '!'])
}

/// Whether the literal `chunk` modifies the noun that follows it ("the next.js repo", "the
/// app.db database"): the need then says the object's kind itself, and the literal's shape
/// does not.
fn names_a_head(chunk: &Chunk, next: Option<&Chunk>) -> bool {
    next.is_some_and(|next| {
        !next.quoted && next.shape.is_none() && !next.terms.is_empty() && !ends_clause(chunk.text)
    })
}

/// The whitespace-separated chunks of `need`, a quoted span ('…', "…", `…`) as one chunk
/// marked quoted. An apostrophe inside a word ("what's") opens no quote.
fn chunks(need: &str) -> Vec<(&str, bool)> {
    let mut chunks = Vec::new();
    let mut rest = need;
    while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
        rest = &rest[start..];
        let first = rest.chars().next().unwrap_or(' ');
        if matches!(first, '\'' | '"' | '`' | '“' | '‘') {
            let close = match first {
                '“' => '”',
                '‘' => '’',
                other => other,
            };
            let body = &rest[first.len_utf8()..];
            if let Some(end) = closing_quote(body, close) {
                chunks.push((&body[..end], true));
                rest = &body[end + close.len_utf8()..];
                continue;
            }
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        chunks.push((&rest[..end], false));
        rest = &rest[end..];
    }
    chunks
}

/// Where the quote `close` closes in `body`: a quote not followed by a letter or digit.
fn closing_quote(body: &str, close: char) -> Option<usize> {
    body.char_indices()
        .find(|&(i, c)| {
            c == close
                && !body[i + c.len_utf8()..]
                    .chars()
                    .next()
                    .is_some_and(char::is_alphanumeric)
        })
        .map(|(i, _)| i)
}

/// The shape of a literal chunk.
#[derive(Debug, PartialEq)]
enum Shape {
    /// A literal whose shape names a kind of object.
    Kind(&'static str),
    /// A literal of no telling shape (an id, a key, owner/name).
    Name,
}

/// Whether `chunk` is a literal (a name of an object, not words of the need), and its shape.
fn literal_shape(chunk: &str) -> Option<Shape> {
    let chunk = chunk.trim_matches(|c: char| matches!(c, ',' | ';' | ':' | '?' | '!' | '(' | ')'));
    let chunk = chunk.strip_suffix('.').unwrap_or(chunk);
    if chunk.contains("://") || chunk.starts_with("www.") {
        return Some(Shape::Kind("url"));
    }
    if chunk.starts_with('/')
        || chunk.starts_with('~')
        || chunk.starts_with("./")
        || has_extension(chunk)
    {
        return Some(Shape::Kind("file"));
    }
    let has_digit = chunk.chars().any(|c| c.is_ascii_digit());
    let has_letter = chunk.chars().any(char::is_alphabetic);
    let marked = chunk.contains(['/', '\\', '#', '@', '.', '_', '='])
        || (has_digit && has_letter)
        || chunk.chars().filter(|c| c.is_uppercase()).count() > 1 && chunk.contains('-');
    marked.then_some(Shape::Name)
}

/// The file extensions a path is told by. A dot alone does not make a file: `document.title`
/// is an expression, `example.com` a host, `next.js` a project's name; so the extension is one
/// of the common kinds of file people name, general knowledge like the stop list.
#[rustfmt::skip]
const EXTENSIONS: &[&str] = &[
    // text, data and configuration
    "txt", "md", "rst", "adoc", "csv", "tsv", "json", "jsonl", "ndjson", "yaml", "yml", "toml",
    "ini", "cfg", "conf", "env", "xml", "properties", "lock", "log", "sql", "db", "sqlite",
    "parquet", "avro", "proto",
    // code
    "rs", "go", "py", "ipynb", "rb", "java", "kt", "scala", "c", "h", "cc", "cpp", "hpp", "cs",
    "swift", "m", "php", "pl", "lua", "r", "js", "mjs", "cjs", "jsx", "ts", "tsx", "vue",
    "svelte", "sh", "bash", "zsh", "ps1", "bat", "tf", "hcl", "gradle", "dockerfile",
    // web and documents
    "html", "htm", "css", "scss", "svg", "pdf", "doc", "docx", "xls", "xlsx", "ppt", "pptx",
    // images, media and archives
    "png", "jpg", "jpeg", "gif", "webp", "ico", "mp3", "mp4", "wav", "zip", "tar", "gz", "tgz",
    "bz2", "xz", "jar", "whl",
];

/// Whether `chunk` ends in a file extension: a dot after a name, then one of
/// [`EXTENSIONS`], in any case.
fn has_extension(chunk: &str) -> bool {
    let Some((name, extension)) = chunk.rsplit_once('.') else {
        return false;
    };
    !name.is_empty()
        && !name.ends_with('.')
        && !name.contains("://")
        && EXTENSIONS.contains(&extension.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(need: &str) -> Vec<(String, f32)> {
        analyse(need, &Tuning::default())
            .into_iter()
            .map(|t| (t.term, t.weight))
            .collect()
    }

    fn stemmed(pairs: &[(&str, f32)]) -> Vec<(String, f32)> {
        pairs.iter().map(|&(w, x)| (text::stem(w), x)).collect()
    }

    #[test]
    fn a_path_should_count_little_and_ask_for_a_file() {
        assert_eq!(
            weights("Read ~/projects/app/config.yaml"),
            stemmed(&[
                ("read", 1.0),
                ("projects", 0.3),
                ("app", 0.3),
                ("config", 0.3),
                ("yaml", 0.3),
                ("file", 0.7)
            ])
        );
    }

    #[test]
    fn a_url_a_key_and_a_quoted_title_should_count_little() {
        assert_eq!(
            weights("Open https://example.com/news in the browser"),
            stemmed(&[
                ("open", 1.0),
                ("https", 0.3),
                ("example", 0.3),
                ("com", 0.3),
                ("news", 0.3),
                ("url", 0.7),
                ("browser", 0.7)
            ])
        );
        assert_eq!(
            weights("Move PROJ-123 to review"),
            stemmed(&[("move", 1.0), ("proj", 0.3), ("review", 0.7)])
        );
        assert_eq!(
            weights("Delete the page 'Old Roadmap', what's left"),
            stemmed(&[
                ("delete", 1.0),
                ("page", 1.0),
                ("old", 0.3),
                ("roadmap", 0.3),
                ("left", 1.0)
            ])
        );
    }

    #[test]
    fn a_modifying_phrase_should_count_less_until_its_clause_ends() {
        assert_eq!(
            weights("Read src/app.ts from the main branch of our repo, and diff it"),
            stemmed(&[
                ("read", 1.0),
                ("src", 0.3),
                ("app", 0.3),
                ("ts", 0.3),
                ("file", 0.7),
                ("main", 0.7),
                ("branch", 0.7),
                ("repo", 0.7),
                ("diff", 1.0)
            ])
        );
        // Before the need's own first word, "to" opens the act, not a phrase.
        assert_eq!(
            weights("How to merge the branch into main"),
            stemmed(&[("merge", 1.0), ("branch", 1.0), ("main", 0.7)])
        );
        // A new step ends the phrase: its act and object count fully.
        assert_eq!(
            weights("Find the issue about timeouts then assign it"),
            stemmed(&[
                ("find", 1.0),
                ("issue", 1.0),
                ("timeout", 0.7),
                ("assign", 1.0)
            ])
        );
    }

    #[test]
    fn an_opening_light_verb_should_be_no_term() {
        assert_eq!(
            weights("Take an accessibility snapshot"),
            stemmed(&[("accessibility", 1.0), ("snapshot", 1.0)])
        );
        assert_eq!(
            weights("Could you give me a link"),
            stemmed(&[("link", 1.0)])
        );
        // Later in the need it is a word like any other.
        assert_eq!(
            weights("Snapshot the page, take a screenshot"),
            stemmed(&[
                ("snapshot", 1.0),
                ("page", 1.0),
                ("take", 1.0),
                ("screenshot", 1.0)
            ])
        );
    }

    #[test]
    fn a_literal_should_ask_for_its_kind_only_where_the_need_does_not_name_it() {
        // A modifying phrase's literal asks for its kind as its own words there would.
        assert_eq!(
            weights("Diff it with ./notes.txt"),
            stemmed(&[
                ("diff", 1.0),
                ("notes", 0.3),
                ("txt", 0.3),
                ("file", 0.7 * 0.7)
            ])
        );
        // The noun after a literal is its kind ("the next.js repo", not a file).
        assert_eq!(
            weights("Open issues in the vercel/next.js repo"),
            stemmed(&[
                ("open", 1.0),
                ("issues", 1.0),
                ("vercel", 0.3),
                ("next", 0.3),
                ("js", 0.3),
                ("repo", 0.7)
            ])
        );
        // A dot alone makes no file: an expression, a host.
        assert_eq!(
            weights("Evaluate document.title on example.com"),
            stemmed(&[
                ("evaluate", 1.0),
                ("document", 0.3),
                ("title", 0.3),
                ("example", 0.3),
                ("com", 0.3)
            ])
        );
    }

    #[test]
    fn an_act_word_after_be_should_say_a_state_and_match_only_itself() {
        let expand = |need: &str, word: &str| {
            analyse(need, &Tuning::default())
                .into_iter()
                .find(|t| t.term == text::stem(word))
                .map(|t| t.expand)
        };
        assert_eq!(expand("Which threads are open?", "open"), Some(false));
        assert_eq!(expand("Which threads are not open?", "open"), Some(false));
        assert_eq!(expand("Open the thread", "open"), Some(true));
        // Only an act word says a state: other words keep their groups.
        assert_eq!(expand("Which pods are failing?", "failing"), Some(true));
    }

    #[test]
    fn a_light_verb_opening_a_later_step_should_be_no_term_either() {
        assert_eq!(
            weights("Run the script and tell me what it returns"),
            stemmed(&[("run", 1.0), ("script", 1.0), ("returns", 1.0)])
        );
    }

    #[test]
    fn a_term_should_keep_its_highest_weight() {
        assert_eq!(
            weights("list repos of acme/repos"),
            stemmed(&[("list", 1.0), ("repos", 1.0), ("acme", 0.3)])
        );
    }
}
