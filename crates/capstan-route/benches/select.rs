//! Selection benchmark (`make bench`): the cost of routing one `cap.*` call — merging 32
//! qualifiers, narrowing by the call's route, filtering and scoring — with 8 and with 64
//! candidates. A pure function; medians of interleaved runs; nothing is asserted.

#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use capstan_api::{CapabilityStatus, CostHint, RouteConstraint, RouteQualifierSpec};
use capstan_route::{Candidate, Catalog, Level, Requirements, RouteRequest, route_for, select};

const RUNS: usize = 20_001;
const SEARCH: &str = "cap.web.search";

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn candidates(count: usize) -> Vec<Candidate> {
    (0..count)
        .map(|i| Candidate {
            binding: format!("providers/p{i:03}"),
            service: Some(format!("p{i:03}.example")),
            server: format!("web{i:03}"),
            tool: format!("web{i:03}__search"),
            features: ["search.fresh", "search.render", "search.news"]
                .iter()
                .take(i % 4)
                .map(|f| (*f).to_owned())
                .collect(),
            cost_hint: Some(CostHint {
                base_micros_usd: (i % 5 != 0).then_some(500 + 137 * i as i64),
                bundled_in_broker: i % 2 == 0,
            }),
            quality: Some(4000 + (i as u16 * 91) % 6000),
            status: if i % 17 == 16 {
                CapabilityStatus::Quarantined
            } else {
                CapabilityStatus::Active
            },
            composed: i % 23 != 22,
        })
        .collect()
}

/// 32 qualifiers that agree: a mix of global and per-capability ignores, floors and ceilings,
/// and one wide `only`.
fn qualifiers() -> Vec<(String, RouteQualifierSpec)> {
    (0..32)
        .map(|i| {
            let constraint = match i % 4 {
                0 => RouteConstraint::Ignore {
                    targets: vec![format!("p{:03}", 200 + i)],
                },
                1 if i == 1 => RouteConstraint::Only {
                    targets: (0..64).map(|t| format!("web{t:03}")).collect(),
                },
                _ => RouteConstraint::None,
            };
            (
                format!("q{i:02}"),
                RouteQualifierSpec {
                    capability_id: (i % 3 != 0).then(|| SEARCH.to_owned()),
                    constraint,
                    min_quality: (i % 5 == 0).then_some(3000 + i as u16 * 10),
                    max_cost_micros_usd: (i % 7 == 0).then_some(20_000 - i as i64 * 10),
                },
            )
        })
        .collect()
}

fn main() {
    let spec = Catalog::embedded().get(SEARCH).unwrap();
    let qualifiers = qualifiers();
    let request = RouteRequest {
        prefer: vec!["web005".into()],
        ..RouteRequest::default()
    };
    let mut requirements = Requirements::new();
    requirements.insert("search.fresh".into(), Level::Prefer);
    println!(
        "<!-- bench:select -->\n### Route selection (`crates/capstan-route/benches/select.rs`)\n\n```text"
    );
    println!(
        "selection per call ({} qualifiers merged, route narrowed, filtered, scored), medians of {RUNS} interleaved runs",
        qualifiers.len()
    );
    let sets = [candidates(8), candidates(64)];
    let mut times = [Vec::with_capacity(RUNS), Vec::with_capacity(RUNS)];
    let mut merges = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        black_box(route_for(SEARCH, black_box(&qualifiers), black_box(&request)).unwrap());
        merges.push(t.elapsed());
        for (set, times) in sets.iter().zip(times.iter_mut()) {
            let t = Instant::now();
            let route = route_for(SEARCH, black_box(&qualifiers), black_box(&request)).unwrap();
            black_box(select(spec, black_box(set), &route, &requirements));
            times.push(t.elapsed());
        }
    }
    let [eight, sixty_four] = times.map(median);
    println!("{:>12} {:>12}", "candidates", "p50");
    println!("{:>12} {:>12.2?}", 8, eight);
    println!("{:>12} {:>12.2?}", 64, sixty_four);
    println!(
        "of which merging the qualifiers and the route: {:.2?}",
        median(merges)
    );
    println!(
        "64 / 8: {:.2}x",
        sixty_four.as_secs_f64() / eight.as_secs_f64()
    );
    println!("```\n<!-- /bench:select -->");
}
