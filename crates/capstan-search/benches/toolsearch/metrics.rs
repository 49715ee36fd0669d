//! The corpus README's metrics: recall@1/5/10 and MRR over the answerable queries, per kind,
//! for `multi` the share with every expected tool in the top 10, and for the unservable
//! queries how many still get a tool.

use std::path::Path;

use serde::Deserialize;

/// One labelled query.
#[derive(Debug, Deserialize)]
pub struct Query {
    pub id: String,
    pub query: String,
    pub expected: Vec<String>,
    pub kind: String,
}

pub fn load(path: &Path) -> Vec<Query> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

/// A ranking of tool ids, best first, and whether the search called its best a match.
pub struct Ranked {
    pub ids: Vec<String>,
    pub matched: bool,
}

impl Ranked {
    /// Ranks `ids` by `scores`, highest first, ties by id; documents scoring 0 are not ranked.
    pub fn from_scores(ids: &[String], scores: &[f32], matched: bool) -> Self {
        let mut order: Vec<usize> = (0..ids.len()).filter(|&i| scores[i] > 0.0).collect();
        order.sort_by(|&a, &b| {
            scores[b]
                .total_cmp(&scores[a])
                .then_with(|| ids[a].cmp(&ids[b]))
        });
        Ranked {
            ids: order.into_iter().map(|i| ids[i].clone()).collect(),
            matched,
        }
    }

    /// The 1-based rank of the first expected tool.
    fn first(&self, expected: &[String]) -> Option<usize> {
        self.ids
            .iter()
            .position(|id| expected.contains(id))
            .map(|p| p + 1)
    }
}

#[derive(Default)]
struct Tally {
    queries: usize,
    at: [usize; 3],
    reciprocal: f64,
    all_in_10: usize,
    strict_at_5: usize,
}

impl Tally {
    fn add(&mut self, query: &Query, ranked: &Ranked) {
        self.queries += 1;
        let first = ranked.first(&query.expected);
        for (slot, k) in [1, 5, 10].into_iter().enumerate() {
            if first.is_some_and(|r| r <= k) {
                self.at[slot] += 1;
            }
        }
        if first.is_some_and(|r| r <= 5) && ranked.matched {
            self.strict_at_5 += 1;
        }
        self.reciprocal += first.map_or(0.0, |r| 1.0 / r as f64);
        let top10 = &ranked.ids[..ranked.ids.len().min(10)];
        if query.expected.iter().all(|e| top10.contains(e)) {
            self.all_in_10 += 1;
        }
    }

    fn row(&self, label: &str) -> String {
        let n = self.queries.max(1) as f64;
        let share = |c: usize| c as f64 / n;
        format!(
            "| {label} ({}) | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            self.queries,
            share(self.at[0]),
            share(self.at[1]),
            share(self.at[2]),
            self.reciprocal / n,
            share(self.strict_at_5),
        )
    }
}

/// The figures of one search over one query set.
pub struct Report {
    all: Tally,
    kinds: Vec<(String, Tally)>,
    none: usize,
    none_matched: usize,
    answerable_abstained: usize,
}

impl Report {
    pub fn new(queries: &[Query], ranked: &[Ranked]) -> Self {
        let mut report = Report {
            all: Tally::default(),
            kinds: Vec::new(),
            none: 0,
            none_matched: 0,
            answerable_abstained: 0,
        };
        for (query, ranked) in queries.iter().zip(ranked) {
            if query.expected.is_empty() {
                report.none += 1;
                if ranked.matched && !ranked.ids.is_empty() {
                    report.none_matched += 1;
                }
                continue;
            }
            if !ranked.matched {
                report.answerable_abstained += 1;
            }
            report.all.add(query, ranked);
            match report.kinds.iter_mut().find(|(k, _)| *k == query.kind) {
                Some((_, tally)) => tally.add(query, ranked),
                None => {
                    let mut tally = Tally::default();
                    tally.add(query, ranked);
                    report.kinds.push((query.kind.clone(), tally));
                }
            }
        }
        report.kinds.sort_by(|a, b| a.0.cmp(&b.0));
        report
    }

    pub fn print(&self, search: &str) {
        println!("{search}:\n");
        println!("| queries | recall@1 | recall@5 | recall@10 | MRR | recall@5, matched |");
        println!("|---|---:|---:|---:|---:|---:|");
        println!("{}", self.all.row("answerable"));
        for (kind, tally) in &self.kinds {
            println!("{}", tally.row(kind));
        }
        let multi = self
            .kinds
            .iter()
            .find(|(k, _)| k == "multi")
            .map(|(_, t)| t);
        let share = |a: usize, b: usize| a as f64 / b.max(1) as f64;
        println!(
            "\nmulti, every expected tool in the top 10: {:.3}; unservable queries still given a \
             tool: {}/{} ({:.3}); answerable queries answered \"no good match\": {}/{} ({:.3})\n",
            multi.map_or(0.0, |t| share(t.all_in_10, t.queries)),
            self.none_matched,
            self.none,
            share(self.none_matched, self.none),
            self.answerable_abstained,
            self.all.queries,
            share(self.answerable_abstained, self.all.queries),
        );
    }
}

/// The answerable queries whose expected tools are not in the top 5, and the unservable ones
/// given a tool, with what was ranked — for working on the method, never for the report.
pub fn print_misses(queries: &[Query], ranked: &[Ranked], beyond: usize) {
    for (query, ranked) in queries.iter().zip(ranked) {
        let first = ranked.first(&query.expected);
        let miss = if query.expected.is_empty() {
            ranked.matched
        } else {
            first.is_none_or(|r| r > beyond) || !ranked.matched
        };
        if miss {
            let top: Vec<&str> = ranked.ids.iter().take(5).map(String::as_str).collect();
            eprintln!(
                "{} [{}] {:?} matched={} first={:?}\n    expected {:?}\n    top {:?}",
                query.id, query.kind, query.query, ranked.matched, first, query.expected, top
            );
        }
    }
}
