//! A closed-loop load driver.
//!
//! C clients run concurrently as Tokio tasks; each issues one operation,
//! waits for its answer, and issues the next, for a warm-up period (not
//! recorded) and then for the measured duration. Every measured operation's
//! latency is recorded.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stats::Latencies;

/// The outcome of one closed-loop run.
#[derive(Debug)]
pub struct LoopResult {
    /// Operations that completed successfully and started in the measured window.
    pub ops: u64,
    /// From the start of the measured window until the last client stopped.
    pub elapsed: Duration,
    /// Latencies of the measured successful operations.
    pub latencies: Latencies,
    /// Failed operations (measured window and warm-up).
    pub errors: u64,
    /// The text of the first failure, if any.
    pub first_error: Option<String>,
}

impl LoopResult {
    /// Successful operations per second.
    pub fn throughput(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What one client task reports back.
struct ClientReport {
    latencies: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

/// Runs `states.len()` concurrent clients. Client `c` owns `states[c]`; each
/// operation is `op(state, c, n)` for its `n`-th operation (warm-up included),
/// which hands the state back with the result. Clients stop issuing once
/// `warmup + duration` has passed; operations that *started* in the measured
/// window count.
///
/// A client that sees more than 1000 failures gives up early, so a broken
/// backend cannot spin.
pub async fn closed_loop<S, F, Fut, E>(states: Vec<S>, warmup: Duration, duration: Duration, op: F) -> LoopResult
where
    S: Send + 'static,
    F: Fn(S, usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = (S, Result<(), E>)> + Send + 'static,
    E: Display,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let measure_from = start + warmup;
    let deadline = measure_from + duration;
    let tasks: Vec<_> = states
        .into_iter()
        .enumerate()
        .map(|(client, state)| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut state = Some(state);
                let mut report = ClientReport { latencies: Vec::with_capacity(4096), errors: 0, first_error: None };
                let mut n = 0u64;
                loop {
                    let t0 = Instant::now();
                    if t0 >= deadline || report.errors > 1000 {
                        break;
                    }
                    let (s, result) = op(state.take().expect("state is handed back"), client, n).await;
                    state = Some(s);
                    n += 1;
                    match result {
                        Ok(()) if t0 >= measure_from => report.latencies.push(t0.elapsed().as_nanos() as u64),
                        Ok(()) => {}
                        Err(e) => {
                            report.errors += 1;
                            if report.first_error.is_none() {
                                report.first_error = Some(e.to_string());
                            }
                        }
                    }
                }
                report
            })
        })
        .collect();
    let mut parts = Vec::with_capacity(tasks.len());
    let (mut errors, mut first_error) = (0, None);
    for task in tasks {
        let report = task.await.expect("load client panicked");
        errors += report.errors;
        if first_error.is_none() {
            first_error = report.first_error;
        }
        parts.push(report.latencies);
    }
    let elapsed = Instant::now().saturating_duration_since(measure_from);
    let latencies = Latencies::merge(parts);
    LoopResult { ops: latencies.len() as u64, elapsed, latencies, errors, first_error }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_operations_and_errors() {
        // What is counted, not how fast: every call is either a measured
        // success or an error (there is no warm-up), and each client's
        // sixth call outlasts the window, so nothing depends on the host's
        // speed.
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = calls.clone();
        let result = closed_loop(vec![(); 4], Duration::ZERO, Duration::from_millis(300), move |s, c, n| {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move {
                if n == 5 {
                    tokio::time::sleep(Duration::from_millis(600)).await;
                }
                let r = if c == 0 && n == 0 { Err("boom") } else { Ok(()) };
                (s, r)
            }
        })
        .await;
        let calls = calls.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(result.ops + result.errors, calls, "{result:?}");
        assert_eq!(result.ops, result.latencies.len() as u64);
        assert_eq!(result.errors, 1);
        assert_eq!(result.first_error.as_deref(), Some("boom"));
        assert!(result.elapsed >= Duration::from_millis(300));
    }
}
