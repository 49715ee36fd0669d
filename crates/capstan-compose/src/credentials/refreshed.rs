//! A token held for reuse until it should be asked anew — what a workload token (per audience)
//! and an exchanged token (per caller and spec) share: one ask at a time (the slot is locked
//! while one runs), a fresh token reused, a token past its refresh time asked anew but still
//! used while valid if asking fails, and a failure answering for [`RETRY_AFTER`] before the
//! next request asks again.

use std::time::Duration;

use capstan_upstream::credential::CredentialError;
use tokio::time::Instant;
use tracing::warn;

/// How long a failed ask answers for its slot before the next request asks again: a caller
/// calling in a loop costs the issuer one request a second at most.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A token and its times.
#[derive(Clone)]
pub struct Held<T> {
    /// The token (never shown by `Debug`).
    pub value: T,
    /// When to ask anew.
    pub refresh_at: Instant,
    /// When it stops being valid: until then it is used if asking anew fails.
    pub expires_at: Instant,
}

impl<T> std::fmt::Debug for Held<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("refresh_at", &self.refresh_at)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// One key's slot, shared by every credential of the key and locked while one asks.
pub type Slot<T> = std::sync::Arc<tokio::sync::Mutex<Refreshed<T>>>;

/// What is held for one key: the token, and the last failure to get one.
pub struct Refreshed<T> {
    held: Option<Held<T>>,
    failed: Option<(Instant, CredentialError)>,
}

impl<T> std::fmt::Debug for Refreshed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refreshed")
            .field("held", &self.held)
            .field("failed", &self.failed)
            .finish()
    }
}

impl<T> Default for Refreshed<T> {
    fn default() -> Self {
        Self {
            held: None,
            failed: None,
        }
    }
}

impl<T: Clone> Refreshed<T> {
    /// The token: the held one while fresh, else the one `ask` gets (the held one while it is
    /// still valid if `ask` fails; `audience` names it in that warning).
    pub async fn get<F>(&mut self, ask: F, audience: &str) -> Result<T, CredentialError>
    where
        F: Future<Output = Result<Held<T>, CredentialError>>,
    {
        let now = Instant::now();
        if let Some(held) = self.held.as_ref().filter(|h| now < h.refresh_at) {
            return Ok(held.value.clone());
        }
        let valid = self.held.as_ref().is_some_and(|h| now < h.expires_at);
        if let (false, Some((at, error))) = (valid, &self.failed)
            && now.duration_since(*at) < RETRY_AFTER
        {
            return Err(error.clone());
        }
        match ask.await {
            Ok(held) => {
                let value = held.value.clone();
                *self = Self {
                    held: Some(held),
                    failed: None,
                };
                Ok(value)
            }
            Err(error) => {
                self.failed = Some((now, error.clone()));
                match self.held.as_ref().filter(|h| now < h.expires_at) {
                    Some(held) => {
                        warn!(%audience, %error, "a token could not be asked anew; the current one is used until it expires");
                        Ok(held.value.clone())
                    }
                    None => Err(error),
                }
            }
        }
    }

    /// Whether a fresh token is held (what a sweep keeps).
    pub fn is_fresh(&self, now: Instant) -> bool {
        self.held.as_ref().is_some_and(|h| now < h.refresh_at)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn held(value: u32, refresh: u64, expires: u64) -> Held<u32> {
        let now = Instant::now();
        Held {
            value,
            refresh_at: now + Duration::from_secs(refresh),
            expires_at: now + Duration::from_secs(expires),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_should_be_reused_while_fresh_kept_while_valid_and_a_failure_held_a_second() {
        let mut slot = Refreshed::default();
        assert_eq!(
            slot.get(async { Ok(held(1, 10, 20)) }, "t").await.unwrap(),
            1
        );
        // Fresh: not asked.
        let unasked = async { panic!("asked while fresh") };
        assert_eq!(slot.get(unasked, "t").await.unwrap(), 1);
        // Past its refresh time, asking fails: the valid one is used.
        tokio::time::advance(Duration::from_secs(11)).await;
        let down = CredentialError::transient("down");
        assert_eq!(slot.get(async { Err(down.clone()) }, "t").await.unwrap(), 1);
        // Expired, asking fails: the failure; asked again within a second, the same failure
        // without asking.
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            slot.get(async { Err(down.clone()) }, "t")
                .await
                .unwrap_err(),
            down
        );
        let unasked = async { panic!("asked within a second of a failure") };
        assert_eq!(slot.get(unasked, "t").await.unwrap_err(), down);
        // A second later it asks again.
        tokio::time::advance(RETRY_AFTER).await;
        assert_eq!(
            slot.get(async { Ok(held(2, 10, 20)) }, "t").await.unwrap(),
            2
        );
    }
}
