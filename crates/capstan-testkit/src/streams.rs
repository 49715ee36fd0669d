//! Reading a streamed response to its end, bounded as a whole.

use std::io::Read;
use std::time::{Duration, Instant};

/// A stream that did not end as [`read_until_end`] waited for it, with what it had carried.
#[derive(Debug, thiserror::Error)]
pub enum NotEnded {
    /// Still open when the limit passed.
    #[error("still open after {limit:?}: {read}")]
    Open {
        /// How long it was read for.
        limit: Duration,
        /// What it carried meanwhile.
        read: String,
    },
    /// A read failed before the end.
    #[error("{error}: {read}")]
    Failed {
        /// The failed read's error.
        error: std::io::Error,
        /// What it carried before.
        read: String,
    },
}

/// What `stream` carries until the server ends it, read for at most `limit` as a whole
/// (keep-alive comments would keep a per-read timeout from ever firing): `Err` with what was
/// read when it is still open after `limit` or a read fails.
pub fn read_until_end(stream: &mut impl Read, limit: Duration) -> Result<String, NotEnded> {
    let mut all = Vec::new();
    let mut chunk = [0u8; 4096];
    let started = Instant::now();
    let read = |all: &[u8]| String::from_utf8_lossy(all).into_owned();
    while started.elapsed() < limit {
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(read(&all)),
            Ok(n) => all.extend_from_slice(&chunk[..n]),
            Err(error) => {
                return Err(NotEnded::Failed {
                    error,
                    read: read(&all),
                });
            }
        }
    }
    Err(NotEnded::Open {
        limit,
        read: read(&all),
    })
}
