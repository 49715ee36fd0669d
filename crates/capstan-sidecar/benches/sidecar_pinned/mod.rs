//! The minimal upstream's call rounds again with the proxies apart from the load (`taskset`):
//! the sidecar and `tcp-hop` on one core, this benchmark's own client, the upstreams and the
//! independent client (`mcpload`, which inherits its spawner's cores) on the other. On the
//! shared cores all three processes contend for two CPUs, so a proxy's figures include waiting
//! for the others; pinned, a reader sees the sidecar's own cost beside the hop's without that
//! contention (issue 60; `docs/benchmarks.md`).

use super::*;

/// The core the proxies run on (the sidecar, the hop).
const PROXY_CORE: &str = "1";
/// The core the load runs on (the clients, the upstreams).
const LOAD_CORE: &str = "0";

/// The pinned call rounds from both clients.
pub struct Pinned {
    pub rmcp: Figures,
    pub independent: Figures,
}

/// Measures `workload`'s call rounds (it must have a hop) pinned as the module says, from both
/// clients, and gives every process its cores back afterwards. None on a machine with fewer
/// than two CPUs.
pub async fn pinned(workload: &Workload) -> Option<Pinned> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (_, hop) = workload.hop.as_ref()?;
    if cpus < 2 {
        eprintln!("sidecar bench: {cpus} CPU, no pinned round");
        return None;
    }
    let me = std::process::id();
    let load: Vec<u32> = std::iter::once(me)
        .chain(workload.pids.iter().copied())
        .collect();
    for &pid in &load {
        pin(pid, LOAD_CORE);
    }
    pin(*hop, PROXY_CORE);
    let variant = Workload {
        calls_only: true,
        pinned: true,
        ..workload.clone()
    };
    let rmcp = measure(&variant).await;
    let independent = sidecar_independent::independent(&variant).await;
    let all = format!("0-{}", cpus - 1);
    for pid in load.into_iter().chain([*hop]) {
        pin(pid, &all);
    }
    Some(Pinned { rmcp, independent })
}

/// Pins the sidecar a pinned workload starts to the proxies' core (`measure`, `independent`).
pub fn pin_sidecar(workload: &Workload, sidecar: &Sidecar) {
    if workload.pinned {
        pin(sidecar.pid(), PROXY_CORE);
    }
}

/// Every thread of `pid` onto `cpus` (a `taskset` list); threads it starts later inherit it.
fn pin(pid: u32, cpus: &str) {
    let status = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("taskset (util-linux) runs");
    assert!(status.success(), "taskset -a -p -c {cpus} {pid}: {status}");
}
