//! Where a stream of JSON lines goes (the metering events, the audit trail): `off`, `stdout`,
//! `stderr`, or a file, appended.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;

/// A line's usual length and then some: one allocation a line, none to grow it.
const LINE_CAPACITY: usize = 384;

/// A sink of JSON lines.
pub struct LineSink {
    what: &'static str,
    sink: Option<Mutex<Box<dyn Write + Send>>>,
}

impl LineSink {
    /// A sink from its configured name: `off`, `stdout`, `stderr`, or a file path (appended);
    /// `what` names its lines in the log when writing fails.
    pub fn open(sink: &str, what: &'static str) -> io::Result<Self> {
        let writer: Option<Box<dyn Write + Send>> = match sink {
            "off" | "" => None,
            "stdout" => Some(Box::new(io::stdout())),
            "stderr" => Some(Box::new(io::stderr())),
            path => Some(Box::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(Path::new(path))?,
            )),
        };
        Ok(Self {
            what,
            sink: writer.map(Mutex::new),
        })
    }

    /// Whether lines go anywhere.
    pub fn is_on(&self) -> bool {
        self.sink.is_some()
    }

    /// Writes `event` as one line. A failing sink is logged, never fails the caller.
    pub fn write(&self, event: &impl Serialize) {
        let Some(sink) = &self.sink else { return };
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        if serde_json::to_writer(&mut line, event).is_err() {
            return;
        }
        line.push(b'\n');
        let written = sink
            .lock()
            .map_err(|_| io::Error::other("sink poisoned"))
            .and_then(|mut w| w.write_all(&line).and_then(|()| w.flush()));
        if let Err(error) = written {
            tracing::warn!(%error, what = self.what, "writing an event");
        }
    }
}
