//! A need to ranked tools. The need's terms become concepts (the term, the other words of its
//! thesaurus groups, or the index's terms it is a prefix of), each scored against every
//! visible document by BM25F, the best alternative kept; a document's score is the sum over
//! concepts, plus a share of its service's score (all its tools as one document), raised when
//! the need holds its name or its phrases, lowered when it does not do the act the need asks
//! for. Whether the best document answers the need at all: it must do that act and cover a
//! floor of the need's information (its concepts' inverse document frequencies). The method
//! and the measurements behind each step: `docs/tool-search.md`.

use std::collections::HashMap;

use crate::index::Index;
use crate::need::{self, NeedTerm};
pub use crate::tuning::Tuning;
use crate::view::View;
use crate::{acts, thesaurus};

/// One ranked document.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// The document's id (its position in the index).
    pub doc: usize,
    /// Its score: higher is better; only the order means anything.
    pub score: f32,
    /// The share of the need's information it matches, 0 to 1.
    pub coverage: f32,
    /// Whether it does the act the need asks for (true when the need names none).
    pub serves: bool,
}

/// The answer to a need.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The best documents, best first (ties broken by name), at most the limit asked.
    pub hits: Vec<Hit>,
    /// Whether the best hit is a good match; when not, the hits are the nearest there are.
    pub matched: bool,
}

/// One concept of a need: its alternatives (term id, weight) and its information.
struct Concept {
    alternatives: Vec<(u32, f32)>,
    idf: f32,
    /// Whether it names an object a tool must be given: a literal's word, or a word of a
    /// modifying phrase no visible tool holds ("anything about invoices"). A word no tool
    /// holds elsewhere is as likely the person's idiom ("lag behind").
    value: bool,
}

/// Per document, its lexical score and the information of the need it covers.
struct Lexical {
    scores: Vec<f32>,
    covered: Vec<f32>,
}

impl Index {
    /// The `limit` documents `visible` admits that best answer `need`, by the default tuning.
    pub fn search(&self, need: &str, limit: usize, visible: impl Fn(usize) -> bool) -> Answer {
        self.search_with(&Tuning::default(), need, limit, visible)
    }

    /// [`Index::search`] with explicit tuning (the evaluation compares tunings).
    pub fn search_with(
        &self,
        tuning: &Tuning,
        need: &str,
        limit: usize,
        visible: impl Fn(usize) -> bool,
    ) -> Answer {
        let view = View::new(self, visible);
        let concepts = concepts(&view, tuning, need);
        let mut lexical = lexical(&view, tuning, &concepts);
        name_bonus(&view, tuning, &concepts, &mut lexical.scores);
        let mut hits = judged(&view, tuning, need, &concepts, &lexical);
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| self.docs[a.doc].name.cmp(&self.docs[b.doc].name))
        });
        hits.truncate(limit);
        let matched = hits
            .first()
            .is_some_and(|h| h.serves && h.coverage >= tuning.min_coverage);
        Answer { hits, matched }
    }
}

/// The concepts of `need`, one per distinct term, in order.
fn concepts(view: &View, tuning: &Tuning, need: &str) -> Vec<Concept> {
    need::analyse(need, tuning)
        .into_iter()
        .map(|term| concept(view, tuning, term))
        .collect()
}

/// One term of a need as a concept: the term, the other words of its thesaurus groups (unless
/// it says a state), the compounds it ends, and — when no visible document holds it — the
/// longer terms it begins, if long enough.
fn concept(view: &View, tuning: &Tuning, need_term: NeedTerm) -> Concept {
    let NeedTerm {
        term,
        weight,
        expand,
        literal,
        modifying,
    } = need_term;
    let index = view.index;
    // Only terms the caller's tools hold: a term, prefix or compound held only by tools it may
    // not call neither scores nor makes the need's word known (the view answers as its tools
    // alone would).
    let seen = |id: &u32| view.document_frequency(*id) > 0;
    let known = |term: &str| index.term_id(term).filter(seen);
    let mut alternatives = Vec::new();
    let own = known(&term);
    if let Some(id) = own {
        alternatives.push((id, weight));
    } else if term.chars().count() >= tuning.min_prefix {
        let prefix = weight * tuning.prefix_weight;
        alternatives.extend(
            index
                .terms_with_prefix(&term)
                .filter(seen)
                .map(|id| (id, prefix)),
        );
    }
    if term.chars().count() >= tuning.min_prefix && tuning.compound_weight > 0.0 {
        // The compounds the term ends ("link" in "deeplink", "call" in "oncall").
        let compound = weight * tuning.compound_weight;
        for id in index.compounds_ending(&term).filter(seen) {
            if !alternatives.iter().any(|&(a, _)| a == id) {
                alternatives.push((id, compound));
            }
        }
    }
    let others = if expand {
        thesaurus::alternatives(&term)
    } else {
        &[]
    };
    for other in others {
        if let Some(id) = known(other)
            && !alternatives.iter().any(|&(a, _)| a == id)
        {
            alternatives.push((id, weight * tuning.synonym_weight));
        }
    }
    let idf = own.map_or(view.idf(0), |id| view.idf(view.document_frequency(id)));
    Concept {
        value: literal || modifying && alternatives.is_empty(),
        alternatives,
        idf: idf * weight,
    }
}

/// Each visible document's BM25F score for the concepts (the best alternative of each), plus
/// its service's share; and the information of the need it covers.
fn lexical(view: &View, tuning: &Tuning, concepts: &[Concept]) -> Lexical {
    let n = view.len();
    let mut scores = vec![0f32; n];
    let mut covered = vec![0f32; n];
    let mut best = vec![(0f32, 0f32); n];
    let mut services = vec![0f32; view.index.services.len()];
    for concept in concepts {
        best.iter_mut().for_each(|b| *b = (0.0, 0.0));
        for &(term, weight) in &concept.alternatives {
            let idf = view.idf(view.document_frequency(term));
            for posting in &view.index.postings[term as usize] {
                let doc = posting.doc as usize;
                if !view.sees(doc) {
                    continue;
                }
                let score = weight * view.term_score(tuning, idf, doc, &posting.counts);
                if score > best[doc].0 {
                    best[doc] = (score, weight);
                }
            }
        }
        for (doc, &(score, weight)) in best.iter().enumerate() {
            scores[doc] += score;
            covered[doc] += concept.idf * weight;
        }
        view.service_scores(tuning, &concept.alternatives, &mut services);
    }
    for (doc, score) in scores.iter_mut().enumerate() {
        if *score > 0.0 {
            *score += tuning.service_weight * services[view.index.doc_service[doc] as usize];
        }
    }
    Lexical { scores, covered }
}

/// Raises each document's score by the share of its name the need holds.
fn name_bonus(view: &View, tuning: &Tuning, concepts: &[Concept], scores: &mut [f32]) {
    if tuning.name_bonus <= 0.0 {
        return;
    }
    let mut wanted: HashMap<u32, f32> = HashMap::new();
    for &(term, weight) in concepts.iter().flat_map(|c| &c.alternatives) {
        let slot = wanted.entry(term).or_default();
        *slot = slot.max(weight);
    }
    for (doc, score) in scores.iter_mut().enumerate() {
        if *score <= 0.0 {
            continue;
        }
        let (mut matched, mut total) = (0.0, 0.0);
        for &term in &view.index.name_terms[doc] {
            let idf = view.idf(view.document_frequency(term));
            total += idf;
            matched += idf * wanted.get(&term).copied().unwrap_or(0.0);
        }
        if total > 0.0 {
            *score *= 1.0 + tuning.name_bonus * matched / total;
        }
    }
}

/// The scored documents as hits: whether each does the act the need asks for (its score
/// lowered when not), raised by the share of the need's phrases it holds.
fn judged(
    view: &View,
    tuning: &Tuning,
    need: &str,
    concepts: &[Concept],
    lexical: &Lexical,
) -> Vec<Hit> {
    let index = view.index;
    let information: f32 = concepts.iter().map(|c| c.idf).sum();
    let pairs: Vec<(u32, u32)> = need::pairs(need)
        .iter()
        .filter_map(|(a, b)| Some((index.term_id(a)?, index.term_id(b)?)))
        .collect();
    let requested = acts::requested(need);
    let names_a_value = concepts.iter().any(|c| c.value);
    (0..view.len())
        .filter(|&doc| lexical.scores[doc] > 0.0 && view.sees(doc))
        .map(|doc| {
            let leading = &index.leading[doc];
            let holds = |t: &str| {
                index
                    .term_id(t)
                    .is_some_and(|id| leading.binary_search(&id).is_ok())
            };
            let serves = requested
                .as_deref()
                .is_none_or(|act| acts::serves(act, &index.acts[doc], &holds));
            let phrases = if pairs.is_empty() {
                0.0
            } else {
                let held = pairs
                    .iter()
                    .filter(|p| index.pairs[doc].binary_search(p).is_ok());
                held.count() as f32 / pairs.len() as f32
            };
            let act = if serves { 1.0 } else { tuning.other_act };
            let input = if names_a_value && !index.takes_input[doc] {
                tuning.no_input
            } else {
                1.0
            };
            Hit {
                doc,
                score: lexical.scores[doc] * act * input * (1.0 + tuning.phrase_bonus * phrases),
                coverage: if information > 0.0 {
                    lexical.covered[doc] / information
                } else {
                    0.0
                },
                serves,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;

impl Index {
    /// What `need` is searched as: each concept's terms with their weights, and its
    /// information — for explaining an answer, and for working on the method.
    pub fn explain(&self, need: &str) -> Vec<(Vec<(String, f32)>, f32)> {
        let view = View::new(self, |_| true);
        let names: HashMap<u32, &str> =
            self.terms.iter().map(|(t, &id)| (id, t.as_str())).collect();
        concepts(&view, &Tuning::default(), need)
            .into_iter()
            .map(|c| {
                let terms = c
                    .alternatives
                    .iter()
                    .map(|&(id, w)| (names[&id].to_owned(), w))
                    .collect();
                (terms, c.idf)
            })
            .collect()
    }
}
