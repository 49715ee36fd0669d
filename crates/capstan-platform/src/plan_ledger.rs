//! The ledger of applied plan tokens: what makes a token single-use (docs/base-tools.md,
//! "Plan tokens").
//!
//! Every token names the ledger of the sidecar that issued it, and only that ledger accepts
//! it, so one ledger sees every apply of its tokens. Apply records a token here before its
//! first write; a second apply of it — the same caller retrying, a replay after what it
//! created was deleted — finds it and is refused. Entries are forgotten once the token has
//! expired (a token past its expiry is refused anyway).
//!
//! Without a file the ledger lives in memory with an id drawn per process: a restart forgets
//! what was applied, so it also forgets its id, and every token issued before is refused
//! (plan again). With a file (`CAPSTAN_PLAN_LEDGER`, on a volume that outlives the
//! container), the id and the applied tokens survive restarts, so plans made before a
//! restart still apply — once. The file is locked while the process holds it; two processes
//! never share one.
//!
//! Hand-written: a few hundred bytes of JSON lines with an fsync per entry are all a sidecar
//! needs, and no crate offers a durable set with expiry without a database.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::plan_token::{Verified, valid_id};

/// Most tokens remembered at once: ten thousand applies within one plan lifetime (15 minutes
/// by default) is eleven a second from one assistant's sidecar. Beyond it apply refuses
/// (retryable) rather than forget a token that could still be replayed.
pub const LEDGER_CAPACITY: usize = 10_000;

/// Why the ledger could not be opened; each names the setting to fix.
#[derive(Debug, Error)]
pub enum LedgerError {
    /// The file cannot be opened, read, locked or written.
    #[error("CAPSTAN_PLAN_LEDGER {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// No randomness to draw an id from.
    #[error("drawing a plan ledger id: {0}")]
    Random(String),
}

/// Why a token could not be recorded as applied.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum NotRecorded {
    /// It was applied before.
    #[error("applied already")]
    AlreadyApplied,
    /// The ledger is full of live tokens.
    #[error(
        "the sidecar's ledger of applied plans is full ({LEDGER_CAPACITY} live plans); retry \
         once older plans have expired"
    )]
    Full,
    /// The entry could not be written to the ledger's file.
    #[error("the ledger of applied plans could not be written: {0}")]
    Io(String),
}

/// One line of the file: the ledger's id (first line), or an applied token.
#[derive(Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
enum Line {
    Ledger(String),
    Applied { token: String, expires: u64 },
}

struct State {
    applied: HashMap<[u8; 32], u64>,
    file: Option<File>,
    /// Lines in the file, to know when compacting pays.
    lines: usize,
}

/// The applied tokens of one sidecar.
pub struct PlanLedger {
    id: String,
    path: Option<PathBuf>,
    state: Mutex<State>,
}

impl std::fmt::Debug for PlanLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanLedger")
            .field("id", &self.id)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn draw_id() -> Result<String, LedgerError> {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).map_err(|e| LedgerError::Random(e.to_string()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

fn hex(digest: &[u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl PlanLedger {
    /// A ledger in memory, with an id drawn for this process.
    pub fn in_memory() -> Result<Self, LedgerError> {
        Ok(Self {
            id: draw_id()?,
            path: None,
            state: Mutex::new(State {
                applied: HashMap::new(),
                file: None,
                lines: 0,
            }),
        })
    }

    /// The ledger kept in `path`, created when missing, its expired entries dropped (as of
    /// `now`, unix seconds). A file that cannot be read whole starts a new ledger (a new id:
    /// every token issued before is refused, never accepted twice).
    pub fn open(path: &Path, now: u64) -> Result<Self, LedgerError> {
        let error = |message: String| LedgerError::File {
            path: path.to_owned(),
            message,
        };
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| error(e.to_string()))?;
        file.try_lock().map_err(|e| {
            error(format!(
                "{e}: another process holds it; give each sidecar its own ledger file"
            ))
        })?;
        let mut id = None;
        let mut applied = HashMap::new();
        let mut whole = true;
        for line in BufReader::new(&file).lines() {
            let line = line.map_err(|e| error(e.to_string()))?;
            match serde_json::from_str::<Line>(&line) {
                Ok(Line::Ledger(found)) if id.is_none() && valid_id(&found) => id = Some(found),
                Ok(Line::Applied { token, expires }) if id.is_some() => match unhex(&token) {
                    Some(digest) => {
                        if expires > now {
                            applied.insert(digest, expires);
                        }
                    }
                    None => whole = false,
                },
                _ => whole = false,
            }
        }
        let id = match id {
            Some(id) if whole => id,
            _ => {
                if !whole {
                    tracing::warn!(path = %path.display(), "the plan ledger could not be read whole; starting a new one (plans made before are refused: plan again)");
                }
                applied.clear();
                draw_id()?
            }
        };
        let ledger = Self {
            id,
            path: Some(path.to_owned()),
            state: Mutex::new(State {
                applied,
                file: Some(file),
                lines: 0,
            }),
        };
        let mut state = ledger
            .state
            .lock()
            .map_err(|_| error("lock poisoned".into()))?;
        ledger.rewrite(&mut state)?;
        drop(state);
        Ok(ledger)
    }

    /// The id tokens of this ledger carry.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the token whose ledger digest is `digest` was applied.
    pub fn was_applied(&self, digest: &[u8; 32]) -> bool {
        match self.state.lock() {
            Ok(state) => state.applied.contains_key(digest),
            // A poisoned ledger admits nothing.
            Err(_) => true,
        }
    }

    /// Records the token `verified` names as applied, durably when the ledger has a file,
    /// unless it was applied before. `now` (unix seconds) drops expired entries.
    pub fn record(&self, verified: &Verified, now: u64) -> Result<(), NotRecorded> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| NotRecorded::Io("lock poisoned".into()))?;
        if state.applied.contains_key(&verified.digest) {
            return Err(NotRecorded::AlreadyApplied);
        }
        if state.applied.len() >= LEDGER_CAPACITY {
            state.applied.retain(|_, expires| *expires > now);
            if state.applied.len() >= LEDGER_CAPACITY {
                return Err(NotRecorded::Full);
            }
        }
        if let Some(file) = state.file.as_mut() {
            let line = Line::Applied {
                token: hex(&verified.digest),
                expires: verified.expires,
            };
            append(file, &line).map_err(|e| NotRecorded::Io(e.to_string()))?;
            state.lines += 1;
        }
        state.applied.insert(verified.digest, verified.expires);
        // The file holds dead lines once tokens expire: rewrite it when they outnumber the
        // live ones by far.
        if state.file.is_some() && state.lines > 2 * state.applied.len() + 1000 {
            state.applied.retain(|_, expires| *expires > now);
            if let Err(error) = self.rewrite(&mut state) {
                tracing::warn!(%error, "compacting the plan ledger");
            }
        }
        Ok(())
    }

    /// Writes the id and the live entries to a new file and moves it over the old one.
    fn rewrite(&self, state: &mut State) -> Result<(), LedgerError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let failed = |e: &dyn std::fmt::Display| LedgerError::File {
            path: path.clone(),
            message: format!("compacting: {e}"),
        };
        let temporary = path.with_extension("tmp");
        let mut file = File::create(&temporary).map_err(|e| failed(&e))?;
        let mut text =
            serde_json::to_string(&Line::Ledger(self.id.clone())).map_err(|e| failed(&e))?;
        text.push('\n');
        for (digest, expires) in &state.applied {
            let line = Line::Applied {
                token: hex(digest),
                expires: *expires,
            };
            text.push_str(&serde_json::to_string(&line).map_err(|e| failed(&e))?);
            text.push('\n');
        }
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| failed(&e))?;
        // Locked before it takes the old file's place; written at its end from now on (this
        // process is its only writer).
        file.try_lock().map_err(|e| failed(&e))?;
        std::fs::rename(&temporary, path).map_err(|e| failed(&e))?;
        state.file = Some(file);
        state.lines = 1 + state.applied.len();
        Ok(())
    }
}

fn append(file: &mut File, line: &Line) -> std::io::Result<()> {
    let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
    text.push('\n');
    file.write_all(text.as_bytes())?;
    file.sync_data()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn verified(byte: u8, expires: u64) -> Verified {
        Verified {
            digest: [byte; 32],
            expires,
        }
    }

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("capstan-ledger-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("plan-ledger")
    }

    #[test]
    fn a_token_should_be_recorded_once() {
        let ledger = PlanLedger::in_memory().unwrap();
        let token = verified(1, 200);
        assert!(!ledger.was_applied(&token.digest));
        assert_eq!(ledger.record(&token, 100), Ok(()));
        assert!(ledger.was_applied(&token.digest));
        assert_eq!(ledger.record(&token, 100), Err(NotRecorded::AlreadyApplied));
        assert_eq!(ledger.record(&verified(2, 200), 100), Ok(()));
        assert_ne!(PlanLedger::in_memory().unwrap().id(), ledger.id());
    }

    #[test]
    fn a_ledger_file_should_keep_its_id_and_tokens_across_a_restart_and_drop_expired_ones() {
        let path = temp("restart");
        let (id, applied, expired) = {
            let ledger = PlanLedger::open(&path, 100).unwrap();
            // Held: a second process is refused.
            let second = PlanLedger::open(&path, 100).unwrap_err().to_string();
            assert!(second.contains("another process holds it"), "{second}");
            ledger.record(&verified(1, 500), 100).unwrap();
            ledger.record(&verified(2, 150), 100).unwrap();
            (ledger.id().to_owned(), verified(1, 500), verified(2, 150))
        };
        let reopened = PlanLedger::open(&path, 200).unwrap();
        assert_eq!(reopened.id(), id);
        assert!(reopened.was_applied(&applied.digest));
        assert!(
            !reopened.was_applied(&expired.digest),
            "expired entries are dropped"
        );
        assert_eq!(
            reopened.record(&applied, 200),
            Err(NotRecorded::AlreadyApplied)
        );
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(lines, 2, "compacted on open: the id and one live token");
        drop(reopened);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_ledger_file_that_cannot_be_read_whole_should_start_anew() {
        let path = temp("torn");
        let id = {
            let ledger = PlanLedger::open(&path, 100).unwrap();
            ledger.record(&verified(1, 500), 100).unwrap();
            ledger.id().to_owned()
        };
        // A line torn by a crash mid-write.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"applied\":{\"token\":\"ab").unwrap();
        drop(file);
        let reopened = PlanLedger::open(&path, 100).unwrap();
        assert_ne!(
            reopened.id(),
            id,
            "a new id: tokens issued before are refused"
        );
        assert!(!reopened.was_applied(&verified(1, 500).digest));
        drop(reopened);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
