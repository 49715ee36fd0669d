//! Timeouts and caps of a composition, each default named once: the composer's `Default` and
//! the sidecar's flags both read these constants.

use std::time::Duration;

/// Connect plus `initialize` plus `tools/list` per upstream. 5 s: the contract's number; a
/// slower upstream degrades its binding rather than the whole composition.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One forwarded `tools/call`. 30 s: long enough for a diagnosis tool, short enough that a
/// stuck upstream frees the model's turn.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One knowledge source or skill body. 5 s: the contract's number.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes kept of one knowledge source. 256 KiB: a provider's full docs fit; one provider cannot
/// fill the prompt alone.
pub const DEFAULT_KNOWLEDGE_SOURCE_CAP: usize = 256 * 1024;

/// Bytes of knowledge in the instructions altogether. 1 MiB: a few providers' full docs;
/// beyond that the prompt is the problem.
pub const DEFAULT_KNOWLEDGE_TOTAL_CAP: usize = 1024 * 1024;

/// Bytes kept of one skill body. 64 KiB: the contract's number.
pub const DEFAULT_SKILL_CAP: usize = 64 * 1024;

/// Timeouts and caps. The defaults are the contract's numbers (the constants above).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connect plus `initialize` plus `tools/list` per upstream.
    pub connect_timeout: Duration,
    /// One forwarded `tools/call`.
    pub call_timeout: Duration,
    /// One knowledge source.
    pub knowledge_timeout: Duration,
    /// Bytes kept of one knowledge source.
    pub knowledge_source_cap: usize,
    /// Bytes of knowledge in the instructions altogether.
    pub knowledge_total_cap: usize,
    /// One skill body.
    pub skill_timeout: Duration,
    /// Bytes kept of one skill body.
    pub skill_cap: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            knowledge_timeout: DEFAULT_FETCH_TIMEOUT,
            knowledge_source_cap: DEFAULT_KNOWLEDGE_SOURCE_CAP,
            knowledge_total_cap: DEFAULT_KNOWLEDGE_TOTAL_CAP,
            skill_timeout: DEFAULT_FETCH_TIMEOUT,
            skill_cap: DEFAULT_SKILL_CAP,
        }
    }
}
