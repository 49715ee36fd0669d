//! Timeouts and caps of a composition, each default named once: the composer's `Default` and
//! the sidecar's flags both read these constants. The timeouts both the sidecar and the
//! controller's Composed probe take are one set of flags, [`UpstreamTimeouts`], so that the two
//! cannot name, default or bound them differently.

use std::time::Duration;

/// Connect plus `initialize` plus `tools/list` per upstream. 5 s: the contract's number; a
/// slower upstream degrades its binding rather than the whole composition.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One forwarded `tools/call`. 30 s: long enough for a diagnosis tool, short enough that a
/// stuck upstream frees the model's turn.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub use capstan_upstream::mcp::DEFAULT_QUESTION_TIMEOUT;

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
    /// One forwarded `tools/call`, not counting the time its provider's questions wait for the
    /// caller's answers.
    pub call_timeout: Duration,
    /// How long one of those questions waits for the caller's answer.
    pub question_timeout: Duration,
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
            question_timeout: DEFAULT_QUESTION_TIMEOUT,
            knowledge_timeout: DEFAULT_FETCH_TIMEOUT,
            knowledge_source_cap: DEFAULT_KNOWLEDGE_SOURCE_CAP,
            knowledge_total_cap: DEFAULT_KNOWLEDGE_TOTAL_CAP,
            skill_timeout: DEFAULT_FETCH_TIMEOUT,
            skill_cap: DEFAULT_SKILL_CAP,
        }
    }
}

/// The upstream timeouts the sidecar and the controller's Composed probe share, as flags: set
/// both alike, or a provider the sidecars compose reads as degraded in the probe (or the other
/// way round). Each is at least 1 s: 0 would fail every upstream at once, as if the provider
/// were at fault.
#[derive(Clone, Debug, clap::Args)]
pub struct UpstreamTimeouts {
    /// Seconds to connect, initialize and list one MCP upstream. The sidecar and the
    /// controller's Composed probe both take it: set both alike, or a provider one composes
    /// reads as degraded in the other.
    #[arg(long, env = "CAPSTAN_CONNECT_TIMEOUT_SECONDS", default_value_t = DEFAULT_CONNECT_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub connect_timeout_seconds: u64,

    /// Seconds to fetch one knowledge source or skill body; set alike in the sidecar and the
    /// controller's Composed probe.
    #[arg(long, env = "CAPSTAN_FETCH_TIMEOUT_SECONDS", default_value_t = DEFAULT_FETCH_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub fetch_timeout_seconds: u64,
}

impl UpstreamTimeouts {
    /// `limits` with these timeouts: connect, knowledge and skill fetches.
    pub fn applied_to(&self, limits: Limits) -> Limits {
        let fetch = Duration::from_secs(self.fetch_timeout_seconds);
        Limits {
            connect_timeout: Duration::from_secs(self.connect_timeout_seconds),
            knowledge_timeout: fetch,
            skill_timeout: fetch,
            ..limits
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Flags {
        #[command(flatten)]
        timeouts: UpstreamTimeouts,
    }

    /// A timeout of 0 s would fail every upstream at once: refused when the process starts,
    /// naming the flag; 1 s is taken.
    #[test]
    fn a_zero_upstream_timeout_should_be_refused_at_start() {
        for flag in ["--connect-timeout-seconds", "--fetch-timeout-seconds"] {
            let Err(refused) = Flags::try_parse_from(["process", flag, "0"]) else {
                panic!("{flag} 0 was taken");
            };
            assert_eq!(
                refused.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{flag}"
            );
            assert!(refused.to_string().contains(flag), "{refused}");
            let taken = Flags::try_parse_from(["process", flag, "1"]);
            assert!(taken.is_ok(), "{flag} 1: {taken:?}");
        }
    }

    #[test]
    fn the_timeouts_should_set_connect_and_both_fetches_and_keep_the_rest() {
        let Ok(flags) = Flags::try_parse_from([
            "process",
            "--connect-timeout-seconds",
            "7",
            "--fetch-timeout-seconds",
            "11",
        ]) else {
            panic!("the flags were refused");
        };
        let limits = Limits {
            call_timeout: Duration::from_secs(99),
            skill_cap: 3,
            ..Limits::default()
        };
        let applied = flags.timeouts.applied_to(limits);
        assert_eq!(applied.connect_timeout, Duration::from_secs(7));
        assert_eq!(applied.knowledge_timeout, Duration::from_secs(11));
        assert_eq!(applied.skill_timeout, Duration::from_secs(11));
        assert_eq!(applied.call_timeout, Duration::from_secs(99));
        assert_eq!(applied.skill_cap, 3);
        let Ok(defaults) = Flags::try_parse_from(["process"]) else {
            panic!("no flags were refused");
        };
        assert_eq!(defaults.timeouts.connect_timeout_seconds, 5);
        assert_eq!(defaults.timeouts.fetch_timeout_seconds, 5);
    }
}
