//! The timer that tells when a wait on a node has been silent for `node_timeout_ms`
//! (`health`), kept by each node connection across its waits.
//!
//! A fresh `tokio::time::timeout` per wait registers and removes a timer-wheel entry
//! under the runtime's timer lock on every round trip, a cost paid by every routed
//! query. This timer instead stays registered: a wait whose silence began at `since`
//! is due at `since + limit`; the timer's deadline is never later than that (silences
//! begin later and later), so it may fire early, and is then moved to the wait's own
//! deadline. It is re-armed at most once per `limit`, whatever the number of waits.

use std::pin::Pin;
use std::time::{Duration, Instant};
use tokio::time::Sleep;

pub struct SilenceTimer {
    limit: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl SilenceTimer {
    pub fn new(limit: Duration) -> Self {
        SilenceTimer { limit, sleep: None }
    }

    /// Completes once `limit` has passed since `since`. Cancel-safe: the timer is
    /// kept for the next wait.
    pub async fn elapsed(&mut self, since: Instant) {
        let due = since + self.limit;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due.into())));
        loop {
            sleep.as_mut().await;
            if Instant::now() >= due {
                return;
            }
            sleep.as_mut().reset(due.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fires_at_each_waits_own_deadline() {
        let limit = Duration::from_millis(100);
        let mut timer = SilenceTimer::new(limit);
        let start = Instant::now();
        timer.elapsed(start).await;
        assert!(start.elapsed() >= limit);
        // A later silence: the timer (already fired) is moved to the new deadline.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let since = Instant::now();
        timer.elapsed(since).await;
        assert!(since.elapsed() >= limit);
        // A wait cut short leaves the timer armed for the next one.
        let since = Instant::now();
        let cut = tokio::time::timeout(Duration::from_millis(40), timer.elapsed(since)).await;
        assert!(cut.is_err());
        tokio::time::sleep(Duration::from_millis(20)).await;
        let later = Instant::now();
        timer.elapsed(later).await;
        assert!(
            later.elapsed() >= limit,
            "fired early: {:?}",
            later.elapsed()
        );
    }
}
