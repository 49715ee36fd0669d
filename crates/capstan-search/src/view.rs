//! The documents one caller may see, and the statistics BM25F takes from them. Every
//! statistic — a term's document frequency, the fields' average lengths, a service's length —
//! is taken over the visible documents only, so a search answers exactly as an index built
//! from the caller's tools alone would: a tool the caller may not call neither appears in an
//! answer nor moves the order of those that do.

use crate::document::FIELDS;
use crate::index::{Index, SERVICE_FIELDS};
use crate::tuning::Tuning;

/// One caller's view of an index.
pub(crate) struct View<'a> {
    pub index: &'a Index,
    visible: Vec<bool>,
    all_visible: bool,
    count: usize,
    average_lengths: [f32; FIELDS],
    /// Per service, the length of its visible tools' service fields.
    service_lengths: Vec<f32>,
    service_average_length: f32,
    service_count: usize,
}

impl<'a> View<'a> {
    /// The view of the documents `visible` admits.
    pub fn new(index: &'a Index, visible: impl Fn(usize) -> bool) -> Self {
        let visible: Vec<bool> = (0..index.docs.len()).map(visible).collect();
        let count = visible.iter().filter(|&&v| v).count();
        let mut totals = [0u64; FIELDS];
        let mut service_lengths = vec![0f32; index.services.len()];
        for doc in (0..visible.len()).filter(|&d| visible[d]) {
            let lengths = &index.lengths[doc];
            for (total, &length) in totals.iter_mut().zip(lengths) {
                *total += u64::from(length);
            }
            let service: u32 = SERVICE_FIELDS.iter().map(|&f| lengths[f as usize]).sum();
            service_lengths[index.doc_service[doc] as usize] += service as f32;
        }
        let average_lengths = totals.map(|t| (t as f32 / count.max(1) as f32).max(1.0));
        let service_count = service_lengths.iter().filter(|&&l| l > 0.0).count();
        let service_average_length =
            (service_lengths.iter().sum::<f32>() / service_count.max(1) as f32).max(1.0);
        View {
            index,
            all_visible: count == visible.len(),
            visible,
            count,
            average_lengths,
            service_lengths,
            service_average_length,
            service_count,
        }
    }

    /// How many documents there are to rank.
    pub fn len(&self) -> usize {
        self.visible.len()
    }

    /// Whether the caller may see `doc`.
    pub fn sees(&self, doc: usize) -> bool {
        self.visible[doc]
    }

    /// How many visible documents hold `term`.
    pub fn document_frequency(&self, term: u32) -> usize {
        let postings = &self.index.postings[term as usize];
        if self.all_visible {
            return postings.len();
        }
        postings
            .iter()
            .filter(|p| self.visible[p.doc as usize])
            .count()
    }

    /// BM25's inverse document frequency of a term `df` visible documents hold (never
    /// negative).
    pub fn idf(&self, df: usize) -> f32 {
        idf(self.count, df)
    }

    /// BM25F: the field-weighted, length-normalised count of a term in a document, saturated.
    pub fn term_score(&self, tuning: &Tuning, idf: f32, doc: usize, counts: &[u16; FIELDS]) -> f32 {
        let lengths = &self.index.lengths[doc];
        let mut frequency = 0.0;
        for field in 0..FIELDS {
            if counts[field] == 0 {
                continue;
            }
            let norm =
                1.0 - tuning.b + tuning.b * lengths[field] as f32 / self.average_lengths[field];
            frequency += tuning.field_weights[field] * f32::from(counts[field]) / norm;
        }
        idf * frequency * (tuning.k1 + 1.0) / (tuning.k1 + frequency)
    }

    /// Each service's BM25 score for `alternatives` of one concept (term id, weight): its
    /// visible tools taken as one document; the best alternative per service.
    pub fn service_scores(&self, tuning: &Tuning, alternatives: &[(u32, f32)], into: &mut [f32]) {
        let mut best = vec![0f32; self.service_lengths.len()];
        let mut counts = vec![0u32; self.service_lengths.len()];
        for &(term, weight) in alternatives {
            counts.iter_mut().for_each(|c| *c = 0);
            for posting in &self.index.postings[term as usize] {
                let doc = posting.doc as usize;
                if self.visible[doc] {
                    let count: u16 = SERVICE_FIELDS
                        .iter()
                        .map(|&f| posting.counts[f as usize])
                        .sum();
                    counts[self.index.doc_service[doc] as usize] += u32::from(count);
                }
            }
            let df = counts.iter().filter(|&&c| c > 0).count();
            let idf = idf(self.service_count, df);
            for (service, &tf) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
                let tf = tf as f32;
                let norm = 1.0 - tuning.b
                    + tuning.b * self.service_lengths[service] / self.service_average_length;
                let score = weight * idf * tf * (tuning.k1 + 1.0) / (tf + tuning.k1 * norm);
                best[service] = best[service].max(score);
            }
        }
        for (total, best) in into.iter_mut().zip(best) {
            *total += best;
        }
    }
}

/// BM25's inverse document frequency among `n` documents of a term `df` of them hold.
fn idf(n: usize, df: usize) -> f32 {
    let (n, df) = (n as f32, df as f32);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}
