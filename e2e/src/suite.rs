//! Running a test binary's trials against one control plane, always tearing it down.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use libtest_mimic::{Arguments, Failed, Trial};
use tokio::runtime::Runtime;

use crate::{ControlPlane, HarnessError, PlaneOptions};

/// What every trial of a suite shares.
pub struct Env {
    /// The control plane.
    pub plane: ControlPlane,
    /// An admin client.
    pub client: Client,
    /// The runtime trials block on.
    pub runtime: Runtime,
}

/// A trial's result.
pub type Outcome = Result<(), Failed>;

/// A trial body against what a suite shares (`E`).
pub type BodyOn<E> = Box<dyn FnOnce(&E) -> Outcome + Send>;

/// A trial body.
pub type Body = BodyOn<Env>;

/// Runs `trials` against a fresh control plane named `suite`: starts it, installs the CRDs
/// given by `crds`, runs `setup`, runs the trials (one at a time when `sequential`), and
/// always stops it. `--list` lists without starting anything.
pub fn run(
    suite: &str,
    sequential: bool,
    setup: impl FnOnce(&Env) -> Result<(), HarnessError>,
    trials: Vec<(String, Body)>,
) -> ExitCode {
    run_with(suite, &PlaneOptions::default(), sequential, setup, trials)
}

/// [`run`] with a control plane started with `options`.
pub fn run_with(
    suite: &str,
    options: &PlaneOptions,
    sequential: bool,
    setup: impl FnOnce(&Env) -> Result<(), HarnessError>,
    trials: Vec<(String, Body)>,
) -> ExitCode {
    let mut args = Arguments::from_args();
    if sequential {
        args.test_threads = Some(1);
    }
    if args.list {
        return list_only(&args, trials);
    }
    let env = match start(suite, options) {
        Ok(env) => env,
        Err(error) => {
            eprintln!("{suite}: cannot start the control plane: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(error) = setup(&env) {
        eprintln!("{suite}: cannot set up the control plane: {error}");
        let _ = env.plane.stop();
        return ExitCode::FAILURE;
    }
    let env = Arc::new(env);
    let conclusion = run_against(&args, &env, trials);
    if let Err(error) = env.plane.stop() {
        eprintln!("{suite}: control-plane down: {error}");
    }
    conclusion.exit_code()
}

/// `--list`: the trials' names, with nothing started.
pub(crate) fn list_only<E>(args: &Arguments, trials: Vec<(String, BodyOn<E>)>) -> ExitCode {
    let listed = trials
        .into_iter()
        .map(|(name, _)| Trial::test(name, || Ok(())))
        .collect();
    libtest_mimic::run(args, listed).exit_code()
}

/// Runs `trials` against `env`.
pub(crate) fn run_against<E: Send + Sync + 'static>(
    args: &Arguments,
    env: &Arc<E>,
    trials: Vec<(String, BodyOn<E>)>,
) -> libtest_mimic::Conclusion {
    let trials = trials
        .into_iter()
        .map(|(name, body)| {
            let env = env.clone();
            Trial::test(name, move || body(&env))
        })
        .collect();
    libtest_mimic::run(args, trials)
}

/// Runs `body` against a fresh control plane named `suite` on a new multi-threaded runtime,
/// and always stops the plane; a panic in `body` is raised again once it is down. For the
/// benchmarks and soaks, which use one plane from start to end (test suites use [`run`]).
pub fn with_plane<T>(suite: &str, body: impl FnOnce(&ControlPlane, &Runtime) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let plane = ControlPlane::start(suite).unwrap_or_else(|e| panic!("control plane: {e}"));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&plane, &runtime)));
    let _ = plane.stop();
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

fn start(suite: &str, options: &PlaneOptions) -> Result<Env, HarnessError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| HarnessError::Io {
            path: "tokio runtime".into(),
            source,
        })?;
    let plane = ControlPlane::start_with(suite, options)?;
    let client = match runtime.block_on(async {
        let client = plane.client().await?;
        plane.install_crds(&client).await?;
        Ok::<_, HarnessError>(client)
    }) {
        Ok(client) => client,
        Err(error) => {
            let _ = plane.stop();
            return Err(error);
        }
    };
    Ok(Env {
        plane,
        client,
        runtime,
    })
}

/// Runs `body` with what a suite's setup kept in `kept` (its world), or fails naming why there
/// is none: the lock was poisoned, or setup failed before keeping it.
pub fn with_kept<W, T>(
    kept: &std::sync::Mutex<Option<W>>,
    body: impl FnOnce(&W) -> Result<T, Failed>,
) -> Result<T, Failed> {
    let guard = kept.lock().map_err(|_| "the world is poisoned")?;
    let world = guard.as_ref().ok_or("no world: setup failed")?;
    body(world)
}

/// What a suite's setup kept in `kept`, taken for its teardown — also after a trial panicked
/// holding the lock, so a failed trial never leaves the world's processes running.
pub fn take_kept<W>(kept: &std::sync::Mutex<Option<W>>) -> Option<W> {
    kept.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

/// A trial named `name` running `body`.
pub fn trial(
    name: impl Into<String>,
    body: impl FnOnce(&Env) -> Outcome + Send + 'static,
) -> (String, Body) {
    (name.into(), Box::new(body))
}

/// `Ok` when `condition` holds, else a failure with `message`.
pub fn check(condition: bool, message: impl FnOnce() -> String) -> Outcome {
    if condition {
        Ok(())
    } else {
        Err(message().into())
    }
}

/// Polls `probe` every 100 ms until it returns `Some`, or fails after `timeout` with the last
/// thing `describe` says. A bound on how long to wait for an outcome, not a performance claim.
pub async fn eventually<T, F, Fut>(
    timeout: Duration,
    mut probe: F,
    describe: impl Fn() -> String,
) -> Result<T, Failed>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if started.elapsed() > timeout {
            return Err(format!("not within {timeout:?}: {}", describe()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
