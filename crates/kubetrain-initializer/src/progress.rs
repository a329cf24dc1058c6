//! Progress: a bar (bytes, rate, ETA) on a terminal, periodic log lines otherwise.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, HumanDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;

use crate::config::ProgressMode;

/// Counts bytes across all parallel downloads and shows them.
pub(crate) struct Progress {
    done: Arc<AtomicU64>,
    bar: Option<ProgressBar>,
    logger: Option<JoinHandle<()>>,
}

impl Progress {
    pub(crate) fn start(mode: ProgressMode, label: String, total: u64, interval: Duration) -> Self {
        let done = Arc::new(AtomicU64::new(0));
        let use_bar = match mode {
            ProgressMode::Auto => std::io::stderr().is_terminal(),
            ProgressMode::Bar => true,
            ProgressMode::Log | ProgressMode::Off => false,
        };
        let use_log = matches!(mode, ProgressMode::Log) || (mode == ProgressMode::Auto && !use_bar);
        let bar = use_bar.then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{prefix} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
            )
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_prefix(label.clone());
            bar
        });
        let logger = use_log.then(|| {
            let done = Arc::clone(&done);
            tokio::spawn(log_periodically(done, label, total, interval))
        });
        Self { done, bar, logger }
    }

    pub(crate) fn add(&self, bytes: u64) {
        self.done.fetch_add(bytes, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    /// Takes back bytes that will be downloaded again (the server restarted a file).
    pub(crate) fn sub(&self, bytes: u64) {
        self.done.fetch_sub(bytes, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.dec(bytes);
        }
    }

    pub(crate) fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if let Some(logger) = &self.logger {
            logger.abort();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(logger) = &self.logger {
            logger.abort();
        }
    }
}

async fn log_periodically(done: Arc<AtomicU64>, label: String, total: u64, interval: Duration) {
    let start = Instant::now();
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let bytes = done.load(Ordering::Relaxed);
        tracing::info!("{}", progress_line(&label, bytes, total, start.elapsed()));
    }
}

/// `dataset s3://b/p: 512.00 MiB of 1.00 GiB (50%), 120.00 MiB/s, ETA 4 seconds`.
pub(crate) fn progress_line(label: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-3);
    let rate = done as f64 / secs;
    let percent = done.saturating_mul(100).checked_div(total).unwrap_or(100);
    let eta = if rate > 0.0 {
        let left = total.saturating_sub(done) as f64 / rate;
        HumanDuration(Duration::from_secs_f64(left.min(1e7))).to_string()
    } else {
        "unknown".into()
    };
    format!(
        "{label}: {} of {} ({percent}%), {}/s, ETA {eta}",
        HumanBytes(done),
        HumanBytes(total),
        HumanBytes(rate as u64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_line() {
        let line = progress_line("model hf://a/b", 512 << 20, 1 << 30, Duration::from_secs(4));
        assert_eq!(
            line,
            "model hf://a/b: 512.00 MiB of 1.00 GiB (50%), 128.00 MiB/s, ETA 4 seconds"
        );
        let line = progress_line("x", 0, 0, Duration::ZERO);
        assert!(
            line.contains("(100%)") && line.contains("ETA unknown"),
            "{line}"
        );
    }
}
