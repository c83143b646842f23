//! Per-key exponential back-off, as the kubelet's `flowcontrol.Backoff`
//! for crash loops and image pulls: the first retry is immediate, then the
//! delay starts at `initial` and doubles up to `max`; an entry not bumped for
//! `reset_after` (2 × `max` by default: a container that ran 10 minutes)
//! starts over.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// Durations of a [`Backoff`].
///
/// Built with [`new`](Self::new) or [`Default`] and the `with_*` setters, so
/// that a new setting is not a breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_node::agent::backoff::BackoffConfig;
///
/// let config = BackoffConfig::new(Duration::from_secs(1), Duration::from_secs(30))
///     .with_reset_after(Duration::from_secs(120));
/// assert_eq!(config.reset_after, Duration::from_secs(120));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackoffConfig {
    /// First delay (10 s).
    pub initial: Duration,
    /// Largest delay (5 min).
    pub max: Duration,
    /// An entry untouched this long is forgotten (10 min).
    pub reset_after: Duration,
}

impl BackoffConfig {
    /// `initial` doubling to `max`, reset after 2 × `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max, reset_after: max * 2 }
    }

    /// Sets [`initial`](Self::initial).
    pub fn with_initial(mut self, initial: Duration) -> Self {
        self.initial = initial;
        self
    }

    /// Sets [`max`](Self::max) (leaving [`reset_after`](Self::reset_after) as it is).
    pub fn with_max(mut self, max: Duration) -> Self {
        self.max = max;
        self
    }

    /// Sets [`reset_after`](Self::reset_after).
    pub fn with_reset_after(mut self, reset_after: Duration) -> Self {
        self.reset_after = reset_after;
        self
    }
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self::new(Duration::from_secs(10), Duration::from_secs(300))
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last_update: Instant,
}

/// Back-off state of many keys (container names, images).
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    entries: HashMap<String, Entry>,
}

impl Backoff {
    /// An empty back-off.
    pub fn new(config: BackoffConfig) -> Self {
        Self { config, entries: HashMap::new() }
    }

    fn live(&self, key: &str, now: Instant) -> Option<Entry> {
        self.entries
            .get(key)
            .copied()
            .filter(|e| now.saturating_duration_since(e.last_update) <= self.config.reset_after)
    }

    /// If `key` is backing off from an event at `since`: how long is left,
    /// and the whole delay (for messages).
    pub fn remaining(&self, key: &str, since: Instant, now: Instant) -> Option<(Duration, Duration)> {
        let entry = self.live(key, now)?;
        let until = since + entry.delay;
        (now < until).then(|| (until - now, entry.delay))
    }

    /// Records a retry at `now`: the next delay is `initial`, or double the
    /// previous one up to `max`.
    pub fn next(&mut self, key: &str, now: Instant) {
        let delay = match self.live(key, now) {
            Some(e) => (e.delay * 2).min(self.config.max),
            None => self.config.initial,
        };
        self.entries.insert(key.to_owned(), Entry { delay, last_update: now });
    }

    /// The current delay of `key`, if any.
    pub fn delay(&self, key: &str, now: Instant) -> Option<Duration> {
        self.live(key, now).map(|e| e.delay)
    }

    /// Forgets `key`.
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }
}

/// Formats a duration as Go's `time.Duration.String()` does for whole
/// seconds and above (`10s`, `1m20s`, `5m0s`), milliseconds below (`200ms`).
pub fn go_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let millis = d.as_millis() % 1000;
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let seconds =
        if millis == 0 { format!("{s}s") } else { format!("{s}.{}s", format!("{millis:03}").trim_end_matches('0')) };
    if h > 0 {
        format!("{h}h{m}m{seconds}")
    } else if m > 0 {
        format!("{m}m{seconds}")
    } else {
        seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_retry_is_immediate_then_doubles_to_max() {
        let mut b = Backoff::new(BackoffConfig::new(Duration::from_secs(10), Duration::from_secs(300)));
        let t0 = Instant::now();
        assert_eq!(b.remaining("c", t0, t0), None, "first restart is immediate");
        b.next("c", t0);
        let mut expected = vec![];
        let mut now = t0;
        for _ in 0..7 {
            let exited = now + Duration::from_secs(1);
            let (left, delay) = b.remaining("c", exited, exited).unwrap();
            assert_eq!(left, delay);
            expected.push(delay.as_secs());
            now = exited + delay;
            assert_eq!(b.remaining("c", exited, now), None);
            b.next("c", now);
        }
        assert_eq!(expected, [10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn entries_reset_after_a_long_run() {
        let mut b = Backoff::new(BackoffConfig::new(Duration::from_secs(10), Duration::from_secs(300)));
        let t0 = Instant::now();
        b.next("c", t0);
        b.next("c", t0 + Duration::from_secs(15));
        assert_eq!(b.delay("c", t0 + Duration::from_secs(15)), Some(Duration::from_secs(20)));
        let later = t0 + Duration::from_secs(15 + 601);
        assert_eq!(b.remaining("c", later, later), None);
        b.next("c", later);
        assert_eq!(b.delay("c", later), Some(Duration::from_secs(10)));
        b.reset("c");
        assert_eq!(b.delay("c", later), None);
    }

    #[test]
    fn go_durations() {
        let cases = [(10, "10s"), (80, "1m20s"), (300, "5m0s"), (3725, "1h2m5s")];
        for (secs, text) in cases {
            assert_eq!(go_duration(Duration::from_secs(secs)), text);
        }
        assert_eq!(go_duration(Duration::from_millis(200)), "200ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
    }
}
