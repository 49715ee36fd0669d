//! The knobs of ranking and abstaining, in one place: the evaluation (`make bench`) compares
//! values of them; the defaults are what ships.

use crate::document::FIELDS;

/// The knobs of ranking and abstaining, documented with the values chosen and why in
/// `docs/tool-search.md`.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// BM25's term-frequency saturation.
    pub k1: f32,
    /// BM25's length normalisation, the same in every field.
    pub b: f32,
    /// Each field's weight, by `Field as usize`.
    pub field_weights: [f32; FIELDS],
    /// What a match through a thesaurus group counts, against the need's own word.
    pub synonym_weight: f32,
    /// What a match of a longer index term the need's word begins counts ("mongo", "mongodb").
    pub prefix_weight: f32,
    /// The shortest word matched as a prefix of longer terms.
    pub min_prefix: usize,
    /// Below this coverage the best document is not a good match.
    pub min_coverage: f32,
    /// What the score of a tool that does not do the act a request names is multiplied by.
    pub other_act: f32,
    /// What the score of a tool's service (all its tools as one document) adds to the tool's.
    pub service_weight: f32,
    /// What a tool's score gains, in proportion of its score, when the need holds all of its
    /// name's information (the share of its name's idf the need matches).
    pub name_bonus: f32,
    /// What a tool's score gains, in proportion of its score, for the share of the need's
    /// adjacent term pairs its name, titles or first sentence hold adjacent too.
    pub phrase_bonus: f32,
    /// What a match of a compound ending in the need's word counts ("link", "deeplink").
    pub compound_weight: f32,
    /// What a word of a phrase that modifies the need's object counts ("from the main
    /// branch", "for the payments schedule"), against the act and its object.
    pub modifier_weight: f32,
    /// What the word a literal's shape implies ("file" for a path) counts, against a word of
    /// the need's own in the literal's place.
    pub shape_weight: f32,
    /// What the score of a tool that takes no arguments is multiplied by when the need names
    /// an object (a literal, or a word no tool holds): the tool cannot be told which.
    pub no_input: f32,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            k1: 1.2,
            b: 0.75,
            //              name title lead body args argtext service context
            field_weights: [2.0, 2.0, 2.0, 1.0, 1.0, 0.5, 2.0, 1.0],
            synonym_weight: 0.6,
            prefix_weight: 0.8,
            min_prefix: 4,
            min_coverage: 0.15,
            other_act: 0.7,
            service_weight: 0.25,
            name_bonus: 0.5,
            phrase_bonus: 0.25,
            compound_weight: 0.5,
            modifier_weight: 0.7,
            shape_weight: 0.7,
            no_input: 0.8,
        }
    }
}
