//! A coordinate sweep of the ranking's knobs on the development queries, with two-fold
//! cross-validation (queries split by the parity of their number): each knob's value is picked
//! on one half and scored on the other, so a reader sees how much of a gain is fitted to the
//! queries it was picked on. For working on the method (`CAPSTAN_TOOLSEARCH_SWEEP=1`); the
//! report shows only the shipped tuning.

use capstan_search::{Index, Tuning};

use crate::metrics::Query;

/// (recall@1, recall@5, MRR) of `tuning` over the answerable `queries`.
pub fn evaluate(
    index: &Index,
    ids: &[String],
    tuning: &Tuning,
    queries: &[&Query],
) -> (f64, f64, f64) {
    let (mut r1, mut r5, mut mrr, mut n) = (0.0, 0.0, 0.0, 0.0);
    for query in queries.iter().filter(|q| !q.expected.is_empty()) {
        n += 1.0;
        let answer = index.search_with(tuning, &query.query, usize::MAX, |_| true);
        let rank = answer
            .hits
            .iter()
            .position(|h| query.expected.contains(&ids[h.doc]));
        if let Some(rank) = rank {
            r1 += f64::from(rank == 0);
            r5 += f64::from(rank < 5);
            mrr += 1.0 / (rank + 1) as f64;
        }
    }
    (r1 / n, r5 / n, mrr / n)
}

type Knob = (&'static str, fn(&mut Tuning, f32), &'static [f32]);

const KNOBS: &[Knob] = &[
    (
        "name",
        |t, v| t.field_weights[0] = v,
        &[1.0, 2.0, 3.0, 4.0, 6.0],
    ),
    (
        "title",
        |t, v| t.field_weights[1] = v,
        &[0.5, 1.0, 2.0, 3.0],
    ),
    ("lead", |t, v| t.field_weights[2] = v, &[0.5, 1.0, 2.0, 3.0]),
    (
        "body",
        |t, v| t.field_weights[3] = v,
        &[0.25, 0.5, 1.0, 1.5],
    ),
    (
        "args",
        |t, v| t.field_weights[4] = v,
        &[0.25, 0.5, 1.0, 2.0],
    ),
    (
        "argtext",
        |t, v| t.field_weights[5] = v,
        &[0.0, 0.25, 0.5, 1.0],
    ),
    (
        "service",
        |t, v| t.field_weights[6] = v,
        &[0.5, 1.0, 2.0, 3.0, 4.0],
    ),
    (
        "modifier",
        |t, v| t.modifier_weight = v,
        &[0.4, 0.5, 0.6, 0.7, 0.85, 1.0],
    ),
    (
        "shape",
        |t, v| t.shape_weight = v,
        &[0.3, 0.5, 0.7, 0.85, 1.0],
    ),
    (
        "no_input",
        |t, v| t.no_input = v,
        &[0.6, 0.7, 0.8, 0.9, 1.0],
    ),
    (
        "synonym",
        |t, v| t.synonym_weight = v,
        &[0.3, 0.45, 0.6, 0.8],
    ),
    (
        "other_act",
        |t, v| t.other_act = v,
        &[0.4, 0.55, 0.7, 0.85, 1.0],
    ),
    (
        "service_weight",
        |t, v| t.service_weight = v,
        &[0.0, 0.25, 0.5, 1.0, 1.5],
    ),
    (
        "name_bonus",
        |t, v| t.name_bonus = v,
        &[0.0, 0.25, 0.5, 1.0, 2.0],
    ),
    (
        "phrase_bonus",
        |t, v| t.phrase_bonus = v,
        &[0.0, 0.25, 0.5, 1.0],
    ),
    (
        "compound_weight",
        |t, v| t.compound_weight = v,
        &[0.0, 0.3, 0.5, 0.8],
    ),
    ("k1", |t, v| t.k1 = v, &[0.8, 1.2, 1.6, 2.0]),
    ("b", |t, v| t.b = v, &[0.3, 0.5, 0.75, 0.9]),
];

pub fn run(index: &Index, ids: &[String], queries: &[Query]) {
    let even: Vec<&Query> = queries
        .iter()
        .filter(|q| number(&q.id).is_multiple_of(2))
        .collect();
    let odd: Vec<&Query> = queries
        .iter()
        .filter(|q| !number(&q.id).is_multiple_of(2))
        .collect();
    let all: Vec<&Query> = queries.iter().collect();
    for (pick, check, label) in [
        (&even, &odd, "pick even, check odd"),
        (&odd, &even, "pick odd, check even"),
        (&all, &all, "all"),
    ] {
        let mut tuning = Tuning::default();
        let start = (
            evaluate(index, ids, &tuning, pick),
            evaluate(index, ids, &tuning, check),
        );
        for _round in 0..2 {
            for (name, set, values) in KNOBS {
                let mut best = (f64::MIN, 0.0);
                for &value in *values {
                    let mut trial = tuning.clone();
                    set(&mut trial, value);
                    let (r1, r5, mrr) = evaluate(index, ids, &trial, pick);
                    let objective = mrr + r5 + r1;
                    if objective > best.0 + 1e-9 {
                        best = (objective, value);
                    }
                }
                set(&mut tuning, best.1);
                eprintln!("  {label}: {name} = {}", best.1);
            }
        }
        let end = (
            evaluate(index, ids, &tuning, pick),
            evaluate(index, ids, &tuning, check),
        );
        eprintln!(
            "{label}: picked-on {:?} -> {:?}; checked-on {:?} -> {:?}\n  {tuning:?}",
            start.0, end.0, start.1, end.1
        );
    }
}

fn number(id: &str) -> u32 {
    id.trim_start_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or(0)
}
