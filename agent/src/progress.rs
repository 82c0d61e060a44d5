//! Progress lines on stderr at a fixed interval: rows and bytes done, rate, estimate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

pub struct Progress {
    operation: &'static str,
    rows: AtomicU64,
    bytes: AtomicU64,
    /// Expected bytes of table data (an estimate for backups), 0 when unknown.
    expected_bytes: u64,
    started: Instant,
}

impl Progress {
    pub fn new(operation: &'static str, expected_bytes: u64) -> Arc<Self> {
        Arc::new(Self {
            operation,
            rows: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            expected_bytes,
            started: Instant::now(),
        })
    }

    pub fn add(&self, rows: u64, bytes: u64) {
        self.rows.fetch_add(rows, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn line(&self) -> String {
        let rows = self.rows.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        let seconds = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = bytes as f64 / seconds;
        let mut line =
            format!("{}: {rows} rows, {} in {seconds:.0}s, {}/s", self.operation, mib(bytes as f64), mib(rate));
        if self.expected_bytes > 0 && rate > 0.0 {
            let percent = (bytes as f64 * 100.0 / self.expected_bytes as f64).min(100.0);
            let remaining = self.expected_bytes.saturating_sub(bytes) as f64 / rate;
            line.push_str(&format!(", ~{percent:.0}% of ~{}, ~{remaining:.0}s left", mib(self.expected_bytes as f64)));
        }
        line
    }

    /// The closing line: totals and the average rate, no estimate.
    pub fn final_line(&self) -> String {
        let rows = self.rows.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        let seconds = self.started.elapsed().as_secs_f64().max(0.001);
        format!(
            "{} done: {rows} rows, {} in {seconds:.1}s, {}/s",
            self.operation,
            mib(bytes as f64),
            mib(bytes as f64 / seconds)
        )
    }

    /// Prints a line every `interval` until the returned task is aborted.
    pub fn report_every(self: &Arc<Self>, interval: Duration) -> Option<JoinHandle<()>> {
        if interval.is_zero() {
            return None;
        }
        let progress = self.clone();
        Some(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                eprintln!("{}", progress.line());
            }
        }))
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_tells_rows_bytes_rate_and_estimate() {
        let progress = Progress::new("backup", 4 * 1024 * 1024);
        progress.add(10, 1024 * 1024);
        progress.add(5, 1024 * 1024);
        let line = progress.line();
        assert!(line.starts_with("backup: 15 rows, 2.0 MiB in "), "{line}");
        assert!(line.contains("MiB/s, ~50% of ~4.0 MiB, ~") && line.ends_with("s left"), "{line}");
    }

    #[test]
    fn without_an_expected_size_there_is_no_estimate() {
        let progress = Progress::new("restore", 0);
        progress.add(1, 10);
        assert!(!progress.line().contains('%'));
    }
}
