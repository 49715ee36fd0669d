//! The inverted index: for each term, the documents whose fields hold it and how often, and
//! the statistics BM25F scores with.

use std::collections::HashMap;

use crate::acts;
use crate::document::{FIELDS, Field, ToolDoc, field_terms};

/// One document's counts of one term, per field.
#[derive(Clone, Debug)]
pub(crate) struct Posting {
    pub doc: u32,
    pub counts: [u16; FIELDS],
}

/// An index over a fixed set of documents.
#[derive(Debug, Default)]
pub struct Index {
    pub(crate) docs: Vec<ToolDoc>,
    pub(crate) terms: HashMap<String, u32>,
    /// Sorted terms, for the prefix match of a need's word the index does not hold.
    pub(crate) sorted_terms: Vec<(String, u32)>,
    /// The terms spelled backwards, sorted: the compounds a need's word ends.
    pub(crate) reversed_terms: Vec<(String, u32)>,
    pub(crate) postings: Vec<Vec<Posting>>,
    pub(crate) lengths: Vec<[u32; FIELDS]>,
    /// Per document, the acts its name says it does (see `acts.rs`).
    pub(crate) acts: Vec<Vec<String>>,
    /// Per document, the terms of its leading text (name, titles, first sentence, arguments),
    /// sorted.
    pub(crate) leading: Vec<Vec<u32>>,
    /// Per document, the distinct terms of its name, in the name's order.
    pub(crate) name_terms: Vec<Vec<u32>>,
    /// Per document, the adjacent term pairs of its name, titles and first sentence, sorted.
    pub(crate) pairs: Vec<Vec<(u32, u32)>>,
    /// Per document, whether it takes input: a tool without arguments cannot be told which
    /// object a need names.
    pub(crate) takes_input: Vec<bool>,
    /// Per document, its service's id.
    pub(crate) doc_service: Vec<u32>,
    /// The services, by id.
    pub(crate) services: Vec<String>,
}

/// The fields a service's document is made of: those that say what a tool is (not the
/// description's body nor the arguments' descriptions).
pub(crate) const SERVICE_FIELDS: [Field; 6] = [
    Field::Name,
    Field::Title,
    Field::Lead,
    Field::Arguments,
    Field::Service,
    Field::Context,
];

/// Whether a tool with `schema` takes arguments: any property, or a schema that leaves them
/// open (`additionalProperties` allowed, or no object schema at all).
fn takes_input(schema: &serde_json::Value) -> bool {
    let Some(schema) = schema.as_object() else {
        return true;
    };
    let declared = schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .is_some_and(|p| !p.is_empty());
    let open = schema
        .get("additionalProperties")
        .is_some_and(|a| a != &serde_json::Value::Bool(false));
    declared || open
}

impl Index {
    /// Indexes `docs`; a document's position is its id in answers.
    pub fn build(docs: Vec<ToolDoc>) -> Self {
        let mut index = Index {
            lengths: Vec::with_capacity(docs.len()),
            ..Index::default()
        };
        for (id, doc) in docs.iter().enumerate() {
            let fields = field_terms(doc);
            index.add(id as u32, &fields);
            let ids = |field: Field| -> Vec<u32> {
                fields[field as usize]
                    .iter()
                    .map(|t| index.terms[t])
                    .collect()
            };
            let (name, titles, lead) = (ids(Field::Name), ids(Field::Title), ids(Field::Lead));
            let mut pairs: Vec<(u32, u32)> = [&name, &titles, &lead]
                .iter()
                .flat_map(|terms| terms.windows(2).map(|w| (w[0], w[1])))
                .filter(|(a, b)| a != b)
                .collect();
            pairs.sort_unstable();
            pairs.dedup();
            index.pairs.push(pairs);
            let mut leading: Vec<u32> =
                [name.as_slice(), &titles, &lead, &ids(Field::Arguments)].concat();
            leading.sort_unstable();
            leading.dedup();
            index.leading.push(leading);
            // In the name's own order, not by id: the name bonus sums over these in floating
            // point, and ids depend on which other tools an index holds, so an order by id
            // would let a caller's view round apart from an index of its tools alone.
            let mut distinct: Vec<u32> = Vec::with_capacity(name.len());
            for term in name {
                if !distinct.contains(&term) {
                    distinct.push(term);
                }
            }
            index.name_terms.push(distinct);
            let service = match index.services.iter().position(|s| *s == doc.service) {
                Some(known) => known,
                None => {
                    index.services.push(doc.service.clone());
                    index.services.len() - 1
                }
            };
            index.doc_service.push(service as u32);
            index.acts.push(acts::name_acts(&doc.tool));
            index.takes_input.push(takes_input(&doc.input_schema));
        }
        index.sorted_terms = index.terms.iter().map(|(t, &id)| (t.clone(), id)).collect();
        index.sorted_terms.sort_unstable();
        index.reversed_terms = index
            .terms
            .iter()
            .map(|(t, &id)| (t.chars().rev().collect(), id))
            .collect();
        index.reversed_terms.sort_unstable();
        index.docs = docs;
        index
    }

    fn add(&mut self, doc: u32, fields: &[Vec<String>; FIELDS]) {
        let mut counts: HashMap<u32, [u16; FIELDS]> = HashMap::new();
        let mut lengths = [0u32; FIELDS];
        for (field, terms) in fields.iter().enumerate() {
            lengths[field] = terms.len() as u32;
            for term in terms {
                let next = self.terms.len() as u32;
                let id = *self.terms.entry(term.clone()).or_insert(next);
                if id == next {
                    self.postings.push(Vec::new());
                }
                let count = &mut counts.entry(id).or_default()[field];
                *count = count.saturating_add(1);
            }
        }
        let mut counts: Vec<_> = counts.into_iter().collect();
        counts.sort_unstable_by_key(|&(id, _)| id);
        for (id, counts) in counts {
            self.postings[id as usize].push(Posting { doc, counts });
        }
        self.lengths.push(lengths);
    }

    /// The documents, by id.
    pub fn docs(&self) -> &[ToolDoc] {
        &self.docs
    }

    /// The ids of the longer terms that end with `word` and at least two more characters
    /// before it ("deeplink" for "link").
    pub(crate) fn compounds_ending(&self, word: &str) -> impl Iterator<Item = u32> + '_ {
        let reversed: String = word.chars().rev().collect();
        let start = self
            .reversed_terms
            .partition_point(|(t, _)| t.as_str() < reversed.as_str());
        let length = reversed.len();
        self.reversed_terms[start..]
            .iter()
            .take_while(move |(t, _)| t.starts_with(reversed.as_str()))
            .filter(move |(t, _)| t.len() >= length + 2)
            .map(|&(_, id)| id)
    }

    /// The id of `term`, if a document holds it.
    pub(crate) fn term_id(&self, term: &str) -> Option<u32> {
        self.terms.get(term).copied()
    }

    /// The ids of the terms `prefix` begins (at least `min` characters long itself).
    pub(crate) fn terms_with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = u32> + 'a {
        let start = self
            .sorted_terms
            .partition_point(|(t, _)| t.as_str() < prefix);
        self.sorted_terms[start..]
            .iter()
            .take_while(move |(t, _)| t.starts_with(prefix))
            .map(|&(_, id)| id)
    }
}
