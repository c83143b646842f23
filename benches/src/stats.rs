//! Latency percentiles and medians.

use std::time::Duration;

/// A set of latency samples (nanoseconds), sorted once for percentile queries.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    sorted: Vec<u64>,
}

impl Latencies {
    /// Takes ownership of `samples` (nanoseconds, any order).
    pub fn from_nanos(mut samples: Vec<u64>) -> Latencies {
        samples.sort_unstable();
        Latencies { sorted: samples }
    }

    /// Merges several sample sets.
    pub fn merge(parts: impl IntoIterator<Item = Vec<u64>>) -> Latencies {
        Latencies::from_nanos(parts.into_iter().flatten().collect())
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// True if there are no samples.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The `p`-th percentile (`0.0..=100.0`, nearest rank); zero without samples.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.sorted.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.sorted.len()) - 1;
        Duration::from_nanos(self.sorted[index])
    }

    /// The largest sample.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.sorted.last().copied().unwrap_or(0))
    }
}

/// Milliseconds as a float, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Formats milliseconds with a precision that suits their size
/// (`0.412`, `12.3`, `1234`).
pub fn fmt_ms(d: Duration) -> String {
    fmt_sized(ms(d), 3)
}

/// Formats a figure with `small` decimals below 10, one below 1000 and
/// none above.
pub fn fmt_sized(v: f64, small: usize) -> String {
    if v < 10.0 {
        format!("{v:.small$}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// Formats a rate (`X/s` without the unit) compactly: `2345`, `12.3k`, `1.23M`.
pub fn fmt_rate(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2}M", per_second / 1e6)
    } else if per_second >= 1e4 {
        format!("{:.1}k", per_second / 1e3)
    } else {
        format!("{per_second:.0}")
    }
}

/// The median of `values` (the mean of the middle two for an even count);
/// zero for none.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 }
}

/// The geometric mean of positive `values` (zero for none).
pub fn geomean(values: &[f64]) -> f64 {
    let positive: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0).collect();
    if positive.is_empty() {
        return 0.0;
    }
    (positive.iter().map(|v| v.ln()).sum::<f64>() / positive.len() as f64).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let l = Latencies::from_nanos((1..=100).rev().collect());
        assert_eq!(l.percentile(50.0), Duration::from_nanos(50));
        assert_eq!(l.percentile(99.0), Duration::from_nanos(99));
        assert_eq!(l.percentile(100.0), Duration::from_nanos(100));
        assert_eq!(l.percentile(0.0), Duration::from_nanos(1));
        assert_eq!(Latencies::default().percentile(99.0), Duration::ZERO);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0]), 2.5);
        assert!((geomean(&[1.0, 4.0]) - 2.0).abs() < 1e-9);
    }
}
