//! What the benchmarks (`make bench`, `e2e/benches/`) share: medians, kubectl that must
//! succeed, and the alternating CPU measure that compares sides within one run.

use std::future::Future;

use crate::ControlPlane;

/// The median of `values` (the upper one of an even count).
pub fn median<T: PartialOrd + Copy>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}

/// `kubectl` on `plane` with `input`: its standard output; a failure stops the benchmark.
pub fn kubectl(plane: &ControlPlane, args: &[&str], input: Option<&str>) -> String {
    let output = plane.kubectl_with_input(args, input);
    assert!(
        output.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        crate::printed(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The CPU per call (µs) of `sides` sides, `rounds` times: in each round the sides take turns
/// every `chunk` calls (`call(side)` makes one), the order rotated, `chunks` turns each, every
/// turn's CPU read from the scheduler's nanosecond accounting of process `pid(side)` — so a
/// drift of the machine's load falls on every side alike. One vector of rounds per side.
pub async fn alternating_cpu<F, Fut>(
    sides: usize,
    pid: impl Fn(usize) -> u32,
    (rounds, chunks, chunk): (usize, usize, usize),
    mut call: F,
) -> Vec<Vec<f64>>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); sides];
    for _ in 0..rounds {
        let mut spent = vec![0u64; sides];
        for turn in 0..chunks {
            for k in 0..sides {
                let i = (turn + k) % sides;
                let before = capstan_testkit::cpu_nanos(pid(i));
                for _ in 0..chunk {
                    call(i).await;
                }
                spent[i] += capstan_testkit::cpu_nanos(pid(i)) - before;
            }
        }
        for (i, nanos) in spent.into_iter().enumerate() {
            cpu[i].push(nanos as f64 / 1e3 / (chunk * chunks) as f64);
        }
    }
    cpu
}
