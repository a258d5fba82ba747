//! Percentiles, medians, and the environment knobs of the benches.

use std::time::Duration;

/// `name` from the environment as a number, or `default` when unset or not a number.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `q` quantile (0.0–1.0) of `sorted`, nearest rank; zero when empty.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// p50 and p99 of `samples` (sorted in place).
pub fn p50_p99(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    (percentile(samples, 0.50), percentile(samples, 0.99))
}

/// p50 and p99 of `samples`, in microseconds.
pub fn p50_p99_us(mut samples: Vec<Duration>) -> (f64, f64) {
    let (p50, p99) = p50_p99(&mut samples);
    (p50.as_secs_f64() * 1e6, p99.as_secs_f64() * 1e6)
}

/// The median of `values` (the upper one of an even count); NaN when empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `d` in whole microseconds, as a table cell.
pub fn micros(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}
