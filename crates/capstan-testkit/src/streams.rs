//! Reading a streamed response to its end, bounded as a whole.

use std::io::Read;
use std::time::{Duration, Instant};

/// What `stream` carries until the server ends it, read for at most `limit` as a whole
/// (keep-alive comments would keep a per-read timeout from ever firing): `Err` with what was
/// read when it is still open after `limit` or a read fails.
pub fn read_until_end(stream: &mut impl Read, limit: Duration) -> Result<String, String> {
    let mut all = Vec::new();
    let mut chunk = [0u8; 4096];
    let started = Instant::now();
    while started.elapsed() < limit {
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(String::from_utf8_lossy(&all).into_owned()),
            Ok(n) => all.extend_from_slice(&chunk[..n]),
            Err(error) => return Err(format!("{error}: {}", String::from_utf8_lossy(&all))),
        }
    }
    Err(format!(
        "still open after {limit:?}: {}",
        String::from_utf8_lossy(&all)
    ))
}
