//! The binding table: which caller each MCP session belongs to; sessions take their places
//! from the sidecar's admission (`admission.rs`).
//!
//! A session is bound when its `initialize` made a task; the table holds the task weakly, so a
//! binding whose task is gone (the session ended) is dead and serves nothing — no callback from
//! the task is needed to forget it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use axum::http::HeaderName;

use crate::admission::{Admission, Full, Place};
use crate::caller_check::CallerCheck;
use crate::identity::Identity;
use crate::task::Task;

/// A place among the open sessions, held by a session's task for its whole life (so a task
/// whose client went away mid-`initialize` still counts until the reaper ends it).
pub type SessionPermit = Place;

struct Binding {
    fingerprint: [u8; 32],
    task: Weak<Task>,
    created: Instant,
}

/// What a session id names, as the binding table knows it.
pub enum Lookup {
    /// Bound to the caller with this identity digest, with its live task.
    Bound([u8; 32], Arc<Task>),
    /// Not bound (never, or no longer): nothing of this session is served.
    Unbound,
}

/// The binding table could not be read: a panic poisoned its lock. Callers refuse the request.
#[derive(Debug)]
pub struct Poisoned;

/// Session id → the identity bound at `initialize`; the admission sessions take places from.
pub struct Sessions {
    project_header: HeaderName,
    bindings: Mutex<HashMap<String, Binding>>,
    admission: Arc<Admission>,
    caller_check: Option<Arc<CallerCheck>>,
    /// Sessions ended by the sidecar (a revoked caller) whose rmcp sessions the reaper closes.
    ended: Mutex<Vec<String>>,
}

impl Sessions {
    /// Bindings for requests naming their project in `project_header`, with places given out
    /// by `admission`.
    pub fn new(project_header: HeaderName, admission: Arc<Admission>) -> Self {
        Self {
            project_header,
            bindings: Mutex::new(HashMap::new()),
            admission,
            caller_check: None,
            ended: Mutex::default(),
        }
    }

    /// The same table, admitting a new session (or a composition read) only for callers
    /// `check` admits.
    pub fn with_caller_check(mut self, check: Arc<CallerCheck>) -> Self {
        self.caller_check = Some(check);
        self
    }

    /// The caller check, when one is configured (`CAPSTAN_CALLER_CHECK=sar`).
    pub fn caller_check(&self) -> Option<&CallerCheck> {
        self.caller_check.as_deref()
    }

    /// The header carrying the project.
    pub fn project_header(&self) -> &HeaderName {
        &self.project_header
    }

    /// The admission places are taken from.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// A place for a new session or task of `identity`, or the cap that is full.
    pub fn admit(&self, identity: &Identity) -> Result<SessionPermit, Full> {
        self.admission.admit(identity)
    }

    /// Ends session `id` at once, as the sidecar's decision (its caller was revoked): later
    /// requests naming it are not served (404), its task's upstream sessions and streams
    /// close, and the reaper closes the rmcp session.
    pub fn end(&self, id: &str) {
        let task = self
            .bindings
            .lock()
            .ok()
            .and_then(|mut bindings| bindings.remove(id))
            .and_then(|binding| binding.task.upgrade());
        if let Some(task) = task {
            task.shutdown();
        }
        if let Ok(mut ended) = self.ended.lock() {
            ended.push(id.to_owned());
        }
    }

    /// The sessions ended by [`Sessions::end`] since the last call, for the reaper to close.
    pub fn take_ended(&self) -> Vec<String> {
        self.ended
            .lock()
            .map(|mut ended| std::mem::take(&mut *ended))
            .unwrap_or_default()
    }

    /// The live sessions whose tasks hold open streams, with their ids: what the caller check
    /// re-checks between requests (a stream receives without asking).
    pub fn streaming(&self) -> Vec<(String, Arc<Task>)> {
        let Ok(bindings) = self.bindings.lock() else {
            return Vec::new();
        };
        bindings
            .iter()
            .filter_map(|(id, b)| Some((id.clone(), b.task.upgrade()?)))
            .filter(|(_, task)| task.open_streams() > 0)
            .collect()
    }

    /// Binds session `id` to the caller with `fingerprint` and its `task`.
    pub fn bind(&self, id: &str, fingerprint: [u8; 32], task: &Arc<Task>) -> Result<(), Poisoned> {
        let mut bindings = self.bindings.lock().map_err(|_| Poisoned)?;
        bindings.insert(
            id.to_owned(),
            Binding {
                fingerprint,
                task: Arc::downgrade(task),
                created: Instant::now(),
            },
        );
        Ok(())
    }

    /// What the table knows of session `id`.
    pub fn lookup(&self, id: &str) -> Result<Lookup, Poisoned> {
        let bindings = self.bindings.lock().map_err(|_| Poisoned)?;
        Ok(match bindings.get(id) {
            Some(binding) => match binding.task.upgrade() {
                Some(task) => Lookup::Bound(binding.fingerprint, task),
                None => Lookup::Unbound,
            },
            None => Lookup::Unbound,
        })
    }

    /// Ends the upstream sessions of every live task (at shutdown, once the grace period for
    /// in-flight requests is over); returns how many tasks there were.
    pub fn close_all(&self) -> usize {
        let Ok(bindings) = self.bindings.lock() else {
            return 0;
        };
        let live: Vec<Arc<Task>> = bindings.values().filter_map(|b| b.task.upgrade()).collect();
        for task in &live {
            task.shutdown();
        }
        live.len()
    }

    /// The live task bound to a session of the caller with `fingerprint`, if any (the newest
    /// binding wins), so inspection can reuse its composition.
    pub fn live_task(&self, fingerprint: &[u8; 32]) -> Option<Arc<Task>> {
        let bindings = self.bindings.lock().ok()?;
        bindings
            .values()
            .filter(|b| b.fingerprint == *fingerprint)
            .filter_map(|b| Some((b.created, b.task.upgrade()?)))
            .max_by_key(|(created, _)| *created)
            .map(|(_, task)| task)
    }

    /// Removes the binding of session `id`: later requests naming it are not served.
    pub fn remove(&self, id: &str) {
        if let Ok(mut bindings) = self.bindings.lock() {
            bindings.remove(id);
        }
    }

    /// Whether session `id` is bound to a live task.
    pub fn is_bound(&self, id: &str) -> bool {
        matches!(self.lookup(id), Ok(Lookup::Bound(..)))
    }

    /// The sessions to end: those whose task has been idle for at least `limit` (never while
    /// a call runs), and dead ones (their task is gone).
    pub fn idle(&self, limit: Duration) -> Vec<String> {
        let Ok(bindings) = self.bindings.lock() else {
            return Vec::new();
        };
        bindings
            .iter()
            .filter(|(_, binding)| {
                binding
                    .task
                    .upgrade()
                    .is_none_or(|task| task.idle() >= limit)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn poison(self: &Arc<Self>) {
        let sessions = self.clone();
        let _ = std::thread::spawn(move || {
            let _held = sessions.bindings.lock();
            panic!("poisoning the session table for the test");
        })
        .join();
    }
}

/// Passed from the identity middleware to `initialize` and back: the middleware offers the new
/// session's permit, `initialize` keeps it in the task it creates and leaves the task here for
/// the middleware to bind to the session id rmcp answers with.
#[derive(Clone, Default)]
pub struct TaskSlot(Arc<SlotInner>);

#[derive(Default)]
struct SlotInner {
    task: OnceLock<Weak<Task>>,
    permit: Mutex<Option<SessionPermit>>,
}

impl TaskSlot {
    /// Offers the permit the new session's task will hold.
    pub fn offer(&self, permit: SessionPermit) {
        if let Ok(mut slot) = self.0.permit.lock() {
            *slot = Some(permit);
        }
    }

    /// Takes the offered permit (once).
    pub fn take_permit(&self) -> Option<SessionPermit> {
        self.0.permit.lock().ok().and_then(|mut p| p.take())
    }

    /// Leaves the task `initialize` created.
    pub fn set_task(&self, task: &Arc<Task>) {
        let _ = self.0.task.set(Arc::downgrade(task));
    }

    /// The task `initialize` created, while it lives.
    pub fn task(&self) -> Option<Arc<Task>> {
        self.0.task.get().and_then(Weak::upgrade)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn admission(total: usize) -> Arc<Admission> {
        Admission::new(crate::admission::Caps {
            total,
            ..crate::admission::Caps::default()
        })
    }

    #[test]
    fn sessions_should_be_admitted_up_to_the_cap_and_again_when_one_ends() {
        let sessions = Sessions::new(HeaderName::from_static("x-capstan-project"), admission(2));
        let caller = Identity::new("p".into(), Some("t"));
        let first = sessions.admit(&caller).unwrap();
        let _second = sessions.admit(&caller).unwrap();
        assert!(sessions.admit(&caller).is_err());
        drop(first);
        assert!(sessions.admit(&caller).is_ok());
    }

    #[test]
    fn an_unknown_session_should_be_unbound_and_a_poisoned_table_an_error() {
        let sessions = Arc::new(Sessions::new(
            HeaderName::from_static("x-capstan-project"),
            admission(2),
        ));
        assert!(matches!(sessions.lookup("nope"), Ok(Lookup::Unbound)));
        sessions.poison();
        assert!(sessions.lookup("nope").is_err());
    }
}
