//! Following a backup, restore, drill or switchover to its end: a progress bar on a terminal,
//! a line per change otherwise (a CI log stays readable).

use std::future::Future;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::WaitArgs;
use crate::error::Error;

const POLL_EVERY: Duration = Duration::from_secs(1);

/// What one look at the object found.
pub enum Seen<T> {
    Done(T),
    Going { fraction: Option<f64>, message: String },
}

struct Progress {
    bar: Option<ProgressBar>,
    last_message: String,
}

impl Progress {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(1000);
            let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] [{bar:30}] {percent:>3}%  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("#>-");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress { bar, last_message: String::new() }
    }

    fn update(&mut self, fraction: Option<f64>, message: String) {
        match &self.bar {
            Some(bar) => {
                if let Some(fraction) = fraction {
                    bar.set_position((fraction.clamp(0.0, 1.0) * 1000.0) as u64);
                }
                bar.set_message(message);
            }
            None if message != self.last_message => {
                eprintln!("{message}");
                self.last_message = message;
            }
            None => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Calls `look` every second until it says done, showing its progress; gives up waiting (the
/// work goes on) after `wait.timeout` seconds.
pub async fn until<T, F, Fut>(what: &str, wait: WaitArgs, mut look: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Seen<T>, Error>>,
{
    let start = Instant::now();
    let mut progress = Progress::new();
    loop {
        match look().await {
            Ok(Seen::Done(result)) => {
                progress.finish();
                return Ok(result);
            }
            Ok(Seen::Going { fraction, message }) => progress.update(fraction, message),
            Err(error) => {
                progress.finish();
                return Err(error);
            }
        }
        if start.elapsed() > Duration::from_secs(wait.timeout) {
            progress.finish();
            return Err(Error::GaveUpWaiting { what: what.to_string(), seconds: wait.timeout });
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}
