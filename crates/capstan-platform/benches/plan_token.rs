//! Plan-token benchmark (`make bench`): signing and verifying one token for a plan of 1 and of
//! 50 manifests (a realistic Deployment-sized manifest each), and what share of that is the RFC
//! 8785 canonicalization the MAC covers. Medians of interleaved runs; nothing is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

use capstan_platform::{Caller, DEFAULT_PLAN_TTL, PlanKeys, PlanPayload};
use serde_json::{Value, json};

const RUNS: usize = 2001;

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// A manifest about the size of a small Deployment (~1.3 KiB of JSON), keys deliberately out of
/// canonical order.
fn manifest(index: usize) -> Value {
    json!({
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {
            "namespace": "team-a",
            "name": format!("web-{index}"),
            "labels": {"app.kubernetes.io/name": "web", "app.kubernetes.io/part-of": "shop"},
            "annotations": {"example.com/owner": "team-a", "example.com/ticket": format!("OPS-{index}")}
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "web"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "web"}},
                "spec": {
                    "containers": [{
                        "name": "web",
                        "image": "registry.example.com/shop/web:1.42.0",
                        "ports": [{"containerPort": 8080, "name": "http"}],
                        "env": [
                            {"name": "LOG_LEVEL", "value": "info"},
                            {"name": "UPSTREAM", "value": "http://api.team-a.svc:8080"},
                            {"name": "CACHE_TTL_SECONDS", "value": "30"}
                        ],
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                      "limits": {"memory": "256Mi"}},
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                                           "periodSeconds": 5}
                    }]
                }
            }
        }
    })
}

fn payload(count: usize) -> PlanPayload {
    PlanPayload {
        project: "acme".into(),
        plane: "https://acme.example.com:6443".into(),
        caller: Caller {
            username: "system:serviceaccount:team-a:assistant".into(),
            uid: "6f1c2d7e-2b1a-4c4e-9d0f-3a5b7c9e1f20".into(),
        },
        manifests: (0..count).map(manifest).collect(),
        resource_versions: (0..count)
            .map(|i| (i % 2 == 0).then(|| format!("{}", 1000 + i)))
            .collect(),
    }
}

/// The ledger id tokens of the benchmark name.
const LEDGER: &str = "bench-ledger";

fn main() {
    let keys = PlanKeys::from_secret("bench-plan-token-key-of-thirty-two-bytes!").unwrap();
    let now = SystemTime::now();
    let expires = now + DEFAULT_PLAN_TTL;
    println!(
        "<!-- bench:plan_token -->\n### Plan tokens (`crates/capstan-platform/benches/plan_token.rs`)\n\n```text"
    );
    println!(
        "plan tokens: HMAC-SHA256 over RFC 8785 canonical JSON, medians of {RUNS} interleaved runs"
    );
    println!(
        "{:>10} {:>12} {:>12} {:>12} {:>14} {:>14}",
        "manifests", "input bytes", "sign", "verify", "canonicalize", "verify/sign"
    );
    for count in [1, 50] {
        let plan = payload(count);
        let bytes = plan.canonical(keys.signing_id(), LEDGER, 0).len();
        let token = keys.sign(&plan, LEDGER, expires);
        let (mut sign, mut verify, mut canonical) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let t = Instant::now();
            black_box(keys.sign(black_box(&plan), LEDGER, expires));
            sign.push(t.elapsed());
            let t = Instant::now();
            keys.verify(black_box(&token), black_box(&plan), LEDGER, now)
                .unwrap();
            verify.push(t.elapsed());
            let t = Instant::now();
            black_box(plan.canonical(keys.signing_id(), LEDGER, 0));
            canonical.push(t.elapsed());
        }
        let (sign, verify, canonical) = (median(sign), median(verify), median(canonical));
        println!(
            "{count:>10} {bytes:>12} {:>12.1?} {:>12.1?} {:>14.1?} {:>14.2}",
            sign,
            verify,
            canonical,
            verify.as_secs_f64() / sign.as_secs_f64()
        );
    }
    println!("```\n<!-- /bench:plan_token -->");
}
