//! Watch fan-out measurement, shared by the store and API server
//! benchmarks: one writer creates stamped values (a sequence number and the
//! send time) at a fixed rate, every watcher records each delivery in a
//! [`Tracker`], and [`finish_watchers`] ends the watchers once they have
//! seen everything or a grace period has passed, so that a stalled watch
//! ends the run instead of hanging it and shows as undelivered events.
//!
//! A long-lived watch that is not of stamped values (the node benchmark's
//! watch of every pod) reports its health in a [`Liveness`].
//!
//! ```
//! use std::time::{Duration, Instant};
//! use orchestra_benches::watch::{Tracker, WatchOutcome};
//!
//! let mut tracker = Tracker::new(Instant::now(), 2);
//! tracker.record(Some((0, 0)), 1_000);
//! tracker.record(Some((1, 500)), 2_000);
//! assert!(tracker.done());
//! let outcome = WatchOutcome::collect(vec![tracker], 2, Duration::from_secs(1));
//! assert_eq!((outcome.delivered, outcome.expected, outcome.anomalies), (2, 2, 0));
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};

use crate::stats::Latencies;

/// One watcher's record: the next sequence number it expects, the delivery
/// latency of each event, and what went wrong.
#[derive(Debug)]
pub struct Tracker {
    base: Instant,
    total: u64,
    next: u64,
    latencies: Vec<u64>,
    anomalies: u64,
    first_problem: Option<String>,
}

impl Tracker {
    /// A watcher expecting `total` events stamped against `base`.
    pub fn new(base: Instant, total: u64) -> Tracker {
        Tracker {
            base,
            total,
            next: 0,
            latencies: Vec::with_capacity(total.min(1 << 20) as usize),
            anomalies: 0,
            first_problem: None,
        }
    }

    /// Records one delivered event with its stamp `(seq, sent_ns)` (`None`
    /// if it had none), received at `now_ns`: in sequence, its latency
    /// counts; otherwise it is an anomaly.
    pub fn record(&mut self, stamp: Option<(u64, u64)>, now_ns: u64) {
        match stamp {
            Some((seq, sent)) if seq == self.next => {
                self.latencies.push(now_ns.saturating_sub(sent));
                self.next += 1;
            }
            other => self.anomaly(format!("expected seq {}, got {:?}", self.next, other.map(|s| s.0))),
        }
    }

    /// Counts an event that should not have come (undecodable, of the wrong
    /// type), remembering the first problem.
    pub fn anomaly(&mut self, problem: String) {
        self.anomalies += 1;
        self.fail(problem);
    }

    /// Remembers `problem` (the watch failed or was cancelled) unless an
    /// earlier one is known.
    pub fn fail(&mut self, problem: String) {
        self.first_problem.get_or_insert(problem);
    }

    /// Nanoseconds since the base instant: the clock of the stamps.
    pub fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// True once every expected event arrived.
    pub fn done(&self) -> bool {
        self.next >= self.total
    }

    /// Lowers the number of events expected to `target` (the writer put
    /// fewer).
    pub fn limit(&mut self, target: u64) {
        self.total = self.total.min(target);
    }
}

/// What the watchers are told while they run.
#[derive(Debug, Clone, Copy)]
pub struct WatchControl {
    /// Events the writer put in all (the events asked for until it stops early).
    pub target: u64,
    /// Stop now, delivered or not.
    pub stop: bool,
}

/// The watchers' side of the control channel.
pub type ControlRx = tokio::sync::watch::Receiver<WatchControl>;

/// A control channel expecting `events` events.
pub fn control_channel(events: u64) -> (tokio::sync::watch::Sender<WatchControl>, ControlRx) {
    tokio::sync::watch::channel(WatchControl { target: events, stop: false })
}

/// Applies a control change to `tracker`; true if its task should end.
pub fn on_control(control: &mut ControlRx, tracker: &mut Tracker) -> bool {
    let c = *control.borrow_and_update();
    tracker.limit(c.target);
    c.stop || tracker.done()
}

/// Feeds the items of one watch's `stream` to `handle` (which records them
/// in the tracker, and returns false to stop) until the tracker has every
/// event, the stream ends or fails, or the control says stop. Returns the
/// tracker.
pub async fn follow<S, T, E>(
    mut tracker: Tracker,
    mut control: ControlRx,
    mut stream: S,
    mut handle: impl FnMut(&mut Tracker, T) -> bool,
) -> Tracker
where
    S: Stream<Item = Result<T, E>> + Unpin,
    E: std::fmt::Display,
{
    while !tracker.done() {
        tokio::select! {
            item = stream.next() => match item {
                Some(Ok(item)) => if !handle(&mut tracker, item) { break },
                Some(Err(e)) => {
                    tracker.fail(format!("watch failed: {e}"));
                    break;
                }
                None => break,
            },
            Ok(()) = control.changed() => if on_control(&mut control, &mut tracker) { break },
        }
    }
    tracker
}

/// The longest the writer may take for `events` at `rate` per second: three
/// times its schedule plus two seconds. A system that cannot keep up with
/// the rate gets fewer events rather than an unbounded run.
pub fn writer_budget(events: u64, rate: f64) -> Duration {
    Duration::from_secs_f64(3.0 * events as f64 / rate + 2.0)
}

/// How long watchers may still take after the writer's last write: a watch
/// that delivers nothing in that time is stalled.
pub fn watch_grace(quick: bool) -> Duration {
    if quick { Duration::from_secs(5) } else { Duration::from_secs(15) }
}

/// Writes up to `events` stamped values at `rate` per second with
/// `write(seq, sent_ns)`, one after the other, within [`writer_budget`].
/// Returns how many it wrote and how long that took.
pub async fn run_writer<F, Fut, E>(
    events: u64,
    rate: f64,
    base: Instant,
    mut write: F,
) -> Result<(u64, Duration), String>
where
    F: FnMut(u64, u64) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    // Ticks keep to an absolute schedule (a late write is followed by the
    // next at once), so timer granularity does not lower the rate; a system
    // slower than the rate gets back-to-back writes.
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let budget = writer_budget(events, rate);
    let mut written = 0;
    while written < events && started.elapsed() < budget {
        ticker.tick().await;
        let sent = base.elapsed().as_nanos() as u64;
        write(written, sent).await.map_err(|e| format!("watch writer {written}: {e}"))?;
        written += 1;
    }
    Ok((written, started.elapsed()))
}

/// Tells the watchers how many events there are, waits until every watcher
/// task ended or `grace` passed, then stops the rest and collects their
/// trackers (a task may hold several watches).
pub async fn finish_watchers<T>(
    tasks: Vec<tokio::task::JoinHandle<T>>,
    control: tokio::sync::watch::Sender<WatchControl>,
    written: u64,
    grace: Duration,
) -> Vec<Tracker>
where
    T: IntoIterator<Item = Tracker>,
{
    let _ = control.send(WatchControl { target: written, stop: false });
    let deadline = tokio::time::Instant::now() + grace;
    let mut all = futures::future::join_all(tasks);
    let joined = tokio::select! {
        joined = &mut all => joined,
        _ = tokio::time::sleep_until(deadline) => {
            let _ = control.send(WatchControl { target: written, stop: true });
            all.await
        }
    };
    joined.into_iter().flat_map(|r| r.expect("watcher task panicked")).collect()
}

/// The watch test's result.
#[derive(Debug)]
pub struct WatchOutcome {
    /// Delivery latencies of every watcher.
    pub latencies: Latencies,
    /// Events delivered in sequence, over all watchers.
    pub delivered: u64,
    /// Events that should have been: watchers × events written.
    pub expected: u64,
    /// Out-of-order, duplicate, missing or undecodable events.
    pub anomalies: u64,
    /// The first thing that went wrong, if anything did.
    pub first_problem: Option<String>,
    /// Events the writer wrote.
    pub events: u64,
    /// How long the writer took.
    pub writer_time: Duration,
}

impl WatchOutcome {
    /// Sums up `trackers` after the writer wrote `events` in `writer_time`.
    pub fn collect(trackers: Vec<Tracker>, events: u64, writer_time: Duration) -> WatchOutcome {
        let expected = trackers.len() as u64 * events;
        let delivered = trackers.iter().map(|t| t.next.min(events)).sum();
        let anomalies = trackers.iter().map(|t| t.anomalies).sum();
        let first_problem = trackers.iter().find_map(|t| t.first_problem.clone());
        let latencies = Latencies::merge(trackers.into_iter().map(|t| t.latencies));
        WatchOutcome { latencies, delivered, expected, anomalies, first_problem, events, writer_time }
    }
}

/// Whether a long-lived watch still delivers: the events and errors it
/// reported and when it last delivered one. Shared between the task that
/// reads the watch and the code that waits on it, which gives up on a
/// watch idle for too long.
#[derive(Debug)]
pub struct Liveness {
    epoch: Instant,
    events: AtomicU64,
    errors: AtomicU64,
    /// Milliseconds since `epoch` at the last event.
    last_event_ms: AtomicU64,
}

impl Default for Liveness {
    fn default() -> Liveness {
        Liveness {
            epoch: Instant::now(),
            events: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_event_ms: AtomicU64::new(0),
        }
    }
}

impl Liveness {
    /// Records an event delivered now.
    pub fn event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
        self.last_event_ms.store(self.since_epoch_ms(), Ordering::Relaxed);
    }

    /// Records an error the watch reported.
    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Events delivered so far.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// Errors reported so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// How long since the last event (since the start if none came).
    pub fn idle(&self) -> Duration {
        Duration::from_millis(self.since_epoch_ms().saturating_sub(self.last_event_ms.load(Ordering::Relaxed)))
    }

    fn since_epoch_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trackers_count_what_arrives_in_order() {
        // (stamps received, expected total, delivered, anomalies, done)
        type Case = (&'static [Option<(u64, u64)>], u64, u64, u64, bool);
        let cases: &[Case] = &[
            (&[Some((0, 0)), Some((1, 0)), Some((2, 0))], 3, 3, 0, true),
            (&[Some((0, 0)), Some((2, 0))], 3, 1, 1, false),
            (&[Some((0, 0)), Some((0, 0)), Some((1, 0))], 2, 2, 1, true),
            (&[None, Some((0, 0))], 1, 1, 1, true),
            (&[], 1, 0, 0, false),
        ];
        for (stamps, total, delivered, anomalies, done) in cases {
            let mut tracker = Tracker::new(Instant::now(), *total);
            for stamp in *stamps {
                tracker.record(*stamp, 10);
            }
            assert_eq!(tracker.done(), *done, "{stamps:?}");
            let outcome = WatchOutcome::collect(vec![tracker], *total, Duration::ZERO);
            assert_eq!((outcome.delivered, outcome.anomalies), (*delivered, *anomalies), "{stamps:?}");
            assert_eq!(outcome.first_problem.is_some(), *anomalies > 0, "{stamps:?}");
        }
    }

    #[test]
    fn latencies_are_receive_minus_send() {
        let mut tracker = Tracker::new(Instant::now(), 2);
        tracker.record(Some((0, 1_000_000)), 3_000_000);
        tracker.record(Some((1, 5_000_000)), 4_000_000);
        let outcome = WatchOutcome::collect(vec![tracker], 2, Duration::ZERO);
        assert_eq!(outcome.latencies.max(), Duration::from_millis(2));
        assert_eq!(outcome.latencies.len(), 2);
    }

    #[test]
    fn a_stalled_watcher_is_stopped_after_the_grace() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let (control, controlled) = control_channel(3);
            let base = Instant::now();
            let mut tasks = Vec::new();
            // One watcher gets everything; the other stalls after one event.
            for delivered in [3, 1] {
                let tracker = Tracker::new(base, 3);
                // A stream of `delivered` stamps that then stays silent.
                let stamps =
                    futures::stream::iter((0..delivered).map(Ok::<_, String>)).chain(futures::stream::pending());
                let stream = Box::pin(stamps);
                let control = controlled.clone();
                tasks.push(tokio::spawn(async move {
                    [follow(tracker, control, stream, |t, seq| {
                        t.record(Some((seq, 0)), 0);
                        true
                    })
                    .await]
                }));
            }
            let trackers = finish_watchers(tasks, control, 3, Duration::from_millis(50)).await;
            let outcome = WatchOutcome::collect(trackers, 3, Duration::ZERO);
            assert_eq!((outcome.delivered, outcome.expected, outcome.anomalies), (4, 6, 0));
        });
    }

    #[test]
    fn a_failed_or_ended_watch_stops_following() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let (_control, controlled) = control_channel(3);
            let items = [Ok(0), Err("reset".to_owned()), Ok(1)];
            let failed =
                follow(Tracker::new(Instant::now(), 3), controlled.clone(), futures::stream::iter(items), |t, seq| {
                    t.record(Some((seq, 0)), 0);
                    true
                })
                .await;
            assert_eq!((failed.next, failed.first_problem.as_deref()), (1, Some("watch failed: reset")));
            let items = [Ok::<_, String>(0), Ok(1)];
            let ended = follow(Tracker::new(Instant::now(), 3), controlled, futures::stream::iter(items), |t, seq| {
                t.record(Some((seq, 0)), 0);
                true
            })
            .await;
            assert_eq!((ended.next, ended.done()), (2, false));
        });
    }

    #[test]
    fn watchers_expect_only_what_was_written() {
        let (control, mut controlled) = control_channel(10);
        let mut tracker = Tracker::new(Instant::now(), 10);
        tracker.record(Some((0, 0)), 0);
        control.send(WatchControl { target: 1, stop: false }).unwrap();
        assert!(on_control(&mut controlled, &mut tracker));
        assert_eq!(writer_budget(100, 50.0), Duration::from_secs(8));
    }

    #[test]
    fn liveness_counts_events_and_errors() {
        let liveness = Liveness::default();
        liveness.event();
        liveness.event();
        liveness.error();
        assert_eq!((liveness.events(), liveness.errors()), (2, 1));
    }
}
