//! capstan-search: tool search over a composition. A composed tool becomes a document of
//! weighted fields (its name, titles, description, arguments, the service and what the
//! binding knows of it); a caller's need is ranked against them by BM25F with a thesaurus of
//! operation words, and the answer says whether its best tool matches the need at all.
//! Deterministic for one set of tools; no model weights. The method and its measurements are
//! in `docs/tool-search.md`.

// The layers, lowest first: each uses only the layers listed before it (scripts/check-layout).

/// Words to terms.
pub mod text;

/// Words that mean one act or one kind of object.
pub mod thesaurus;

/// What a need asks to be done, and whether a tool does it.
mod acts;

/// A tool as fields of terms.
pub mod document;

/// The inverted index.
pub mod index;

/// The knobs of ranking.
pub mod tuning;

/// A need as weighted terms.
mod need;

/// One caller's view of the index and its statistics.
mod view;

/// Ranking and abstaining.
pub mod search;

pub use document::{Field, ToolDoc};
pub use index::Index;
pub use search::{Answer, Hit};
pub use tuning::Tuning;
