//! No head-of-line blocking (issue 60): the small calls of a few sessions, measured alone and
//! while two other sessions of the same sidecar keep it busy — one sending request bodies at
//! the sidecar's cap (4 MiB, `echo`ed back) and one reading a provider's answer that arrives a
//! byte at a time (`drip-calls`) — and, as the control, while the same two sessions call the
//! upstreams directly: the load's CPU on the shared cores without the sidecar serving it.
//!
//! The small calls are made by both clients in turn while the busy sessions run: the rmcp
//! client of this process, then `mcpload` (the Go SDK, its own process) — an outside client
//! sees the same round.
//!
//! The small calls go to one upstream, the large ones to another and the slow ones to a third,
//! so no upstream's own queue stands between them. The two busy sessions run on a runtime of
//! their own (a thread of this process), so the measuring clients' tasks never wait behind
//! them in this process; the conditions alternate round by round.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use capstan_testkit::mcpload_call;

use super::*;

/// Sessions making the small calls, and their calls each per round.
const SMALL_SESSIONS: usize = 8;
const SMALL_CALLS: usize = 400;
/// Rounds per condition.
const HOL_ROUNDS: usize = 5;
/// The `echo` argument of a large call: its request, with the envelope, just under the cap.
const LARGE_TEXT: usize = 4 * 1024 * 1024 - 4096;
/// How often the busy session sends a large call (when the last has been answered): five
/// 4 MiB bodies a second each way leave the shared cores room for the rest, so what the small
/// calls wait for is the sidecar's serving of the large ones, not the machine being full.
const LARGE_EVERY: Duration = Duration::from_millis(200);
/// The slow provider sends its answer's bytes this far apart.
const DRIP: &str = "drip-calls:1";

/// One client's small calls under each condition.
pub struct Sides {
    pub alone: Side,
    pub beside_sidecar: Side,
    pub beside_direct: Side,
}

impl Sides {
    /// The small calls' p99 beside the busy sessions over alone: the goal's figure.
    pub fn p99_rise(&self) -> f64 {
        self.beside_sidecar.p99 / self.alone.p99
    }
}

/// The small calls' figures under each condition, per client, with what the busy sessions
/// got done.
pub struct HeadOfLine {
    pub rmcp: Sides,
    pub independent: Sides,
    /// Large calls and slow answers completed beside the sidecar's rounds, and beside the
    /// control's.
    pub busy_sidecar: (usize, usize),
    pub busy_direct: (usize, usize),
}

/// Where the busy sessions send their calls.
#[derive(Clone, Copy)]
enum Busy {
    None,
    Sidecar,
    Direct,
}

/// Measures the round: its own upstreams and sidecar.
pub async fn head_of_line() -> HeadOfLine {
    let (small, large) = (EchoUpstream::start_json(), EchoUpstream::start_json());
    let slow = DemoProvider::start(&[DRIP]);
    let documents = json!([
        binding_document("one", "one", &small.url(), &["echo"]),
        binding_document("two", "two", &large.url(), &["echo"]),
        binding_document("three", "three", &slow.url("/mcp"), &["streams_get"]),
    ]);
    let hosts = [small.host(), large.host(), slow.host()];
    let sidecar = Sidecar::start(&documents, &hosts, &[]);
    let mut clients = Vec::new();
    for _ in 0..SMALL_SESSIONS {
        clients.push(session(&sidecar, None).await);
    }
    let arguments = json!({"text": "orders"});
    run(&clients, "one__echo", &arguments, 5).await;
    let targets = Targets {
        socket: sidecar.socket.clone(),
        large: large.url(),
        slow: slow.url("/mcp"),
    };
    let outside = small_calls_args(&sidecar, &arguments);
    let mut rounds: [Vec<Stats>; 3] = Default::default();
    let mut outside_rounds: [Vec<Stats>; 3] = Default::default();
    let mut busy = [(0, 0); 3];
    for _ in 0..HOL_ROUNDS {
        for (index, condition) in [Busy::None, Busy::Sidecar, Busy::Direct]
            .into_iter()
            .enumerate()
        {
            let background = BusySessions::start(condition, &targets).await;
            let (latencies, wall) = run(&clients, "one__echo", &arguments, SMALL_CALLS).await;
            let report = tokio::task::block_in_place(|| mcpload_call(&outside));
            let (large, slow) = background.stop();
            busy[index].0 += large;
            busy[index].1 += slow;
            rounds[index].push(stats(latencies, wall));
            let small = sidecar_independent::medians(&report, "sidecar");
            outside_rounds[index].push(Stats {
                p50: small.p50,
                p99: small.p99,
                throughput: small.throughput,
            });
        }
    }
    for client in clients {
        let _ = client.cancel().await;
    }
    let sides = |rounds: &[Vec<Stats>; 3]| Sides {
        alone: side(&rounds[0]),
        beside_sidecar: side(&rounds[1]),
        beside_direct: side(&rounds[2]),
    };
    HeadOfLine {
        rmcp: sides(&rounds),
        independent: sides(&outside_rounds),
        busy_sidecar: busy[1],
        busy_direct: busy[2],
    }
}

/// `mcpload call`'s small calls: as many sessions and calls as the rmcp client's, one round
/// (its sessions opened and warmed before it), through the sidecar.
fn small_calls_args(sidecar: &Sidecar, arguments: &Value) -> Vec<String> {
    vec![
        "--header".into(),
        "X-Capstan-Project: bench".into(),
        "--args".into(),
        arguments.to_string(),
        "--target".into(),
        sidecar_independent::sidecar_target("sidecar", sidecar, "echo", "2025-11-25"),
        "--sessions".into(),
        SMALL_SESSIONS.to_string(),
        "--calls".into(),
        SMALL_CALLS.to_string(),
        "--rounds".into(),
        "1".into(),
    ]
}

/// Where the busy sessions' calls go: the sidecar's socket, or the upstreams directly.
#[derive(Clone)]
struct Targets {
    socket: std::path::PathBuf,
    large: String,
    slow: String,
}

/// The two busy sessions, on a runtime of their own.
struct BusySessions {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(usize, usize)>>,
}

impl BusySessions {
    /// Starts them against `condition`'s targets and returns once both have sent a call.
    async fn start(condition: Busy, targets: &Targets) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        if matches!(condition, Busy::None) {
            return Self { stop, thread: None };
        }
        let started = Arc::new(AtomicUsize::new(0));
        let (flag, targets, begun) = (stop.clone(), targets.clone(), started.clone());
        let thread = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(busy(condition, targets, flag, begun))
        });
        while started.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops them after their calls in flight: (large calls, slow answers) completed.
    fn stop(self) -> (usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.map_or((0, 0), |thread| {
            tokio::task::block_in_place(|| thread.join().unwrap())
        })
    }
}

/// The busy sessions' loops until `stop`: (large calls, slow answers) completed.
async fn busy(
    condition: Busy,
    targets: Targets,
    stop: Arc<AtomicBool>,
    started: Arc<AtomicUsize>,
) -> (usize, usize) {
    let client = |url: String, tool: &'static str| {
        let socket = targets.socket.clone();
        async move {
            match condition {
                Busy::Sidecar => {
                    let transport =
                        kept_alive("http://localhost/mcp", Some(&socket), Some("bench"), None);
                    let client = ClientConfig::default().serve(transport).await.unwrap();
                    (
                        client,
                        format!("{}__{tool}", if tool == "echo" { "two" } else { "three" }),
                    )
                }
                _ => (direct(&url).await, tool.to_owned()),
            }
        }
    };
    let (large, large_tool) = client(targets.large.clone(), "echo").await;
    let (slow, slow_tool) = client(targets.slow.clone(), "streams_get").await;
    let text = "x".repeat(LARGE_TEXT);
    let large_loop = async {
        let arguments = json!({ "text": text });
        let mut done = 0;
        started.fetch_add(1, Ordering::SeqCst);
        while !stop.load(Ordering::SeqCst) {
            let next = tokio::time::Instant::now() + LARGE_EVERY;
            let result = large
                .call_tool(params(&large_tool, &arguments))
                .await
                .unwrap();
            assert_ne!(result.is_error, Some(true), "{large_tool}: {result:?}");
            done += 1;
            tokio::time::sleep_until(next).await;
        }
        done
    };
    let slow_loop = async {
        let arguments = json!({ "name": "orders" });
        let mut done = 0;
        started.fetch_add(1, Ordering::SeqCst);
        while !stop.load(Ordering::SeqCst) {
            let call = slow.call_tool(params(&slow_tool, &arguments));
            // A dripping answer takes ~a second: the round may end while one is on its way.
            tokio::select! {
                result = call => {
                    assert_ne!(result.unwrap().is_error, Some(true), "{slow_tool}");
                    done += 1;
                }
                () = until(&stop) => {}
            }
        }
        done
    };
    let counts = futures::join!(large_loop, slow_loop);
    let _ = large.cancel().await;
    let _ = slow.cancel().await;
    counts
}

/// Resolves once `stop` is set.
async fn until(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The round's table (`docs/benchmarks.md`).
pub fn report_head_of_line(out: &mut String, h: &HeadOfLine) {
    out.push_str(&format!(
        "\n#### No head-of-line blocking\n\n\
         {SMALL_SESSIONS} sessions each making {SMALL_CALLS} small `echo` calls a round through \
         the sidecar, alone, and while two more sessions keep the same sidecar busy: one \
         sending {} MiB request bodies (the cap) echoed back, five a second, one reading a \
         provider's answer that arrives a byte every millisecond; and, as the control, while those two call their \
         upstreams directly (the load's CPU on the shared cores, without the sidecar serving \
         it). The same small calls from `mcpload` (the Go SDK) follow the rmcp client's in \
         each round, beside the same busy sessions. Medians of {HOL_ROUNDS} rounds, the \
         conditions alternated.\n\n\
         | condition | client | small calls p50 | p99 | p99 / alone | large calls | slow answers |\n\
         |---|---|---|---|---|---|---|\n",
        (LARGE_TEXT + 4096) / (1024 * 1024)
    ));
    for (client, sides) in [
        (sidecar_tracing::CLIENTS[0], &h.rmcp),
        (sidecar_tracing::CLIENTS[1], &h.independent),
    ] {
        let rows = [
            ("alone", &sides.alone, None),
            (
                "beside the busy sessions, through the sidecar",
                &sides.beside_sidecar,
                Some(h.busy_sidecar),
            ),
            (
                "beside the busy sessions, direct (control)",
                &sides.beside_direct,
                Some(h.busy_direct),
            ),
        ];
        for (label, side, busy) in rows {
            let (large, slow) = busy.map_or(("–".into(), "–".into()), |(l, s)| {
                (l.to_string(), s.to_string())
            });
            out.push_str(&format!(
                "| {label} | {client} | {:.3} ms | {:.3} ms | {:.2}× | {large} | {slow} |\n",
                side.p50,
                side.p99,
                side.p99 / sides.alone.p99,
            ));
        }
    }
}
