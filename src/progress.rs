//! Progress on stderr for slow commands (compiling, timing, interpreter runs): nothing for
//! work under a second, so quick runs and stdout stay clean.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Progress on stderr for work that takes longer than a second; silent otherwise, so quick
/// runs and stdout stay clean.
pub struct Progress {
    /// Dropped (disconnecting the thread's receiver) to stop the thread at once.
    stop: Option<mpsc::Sender<()>>,
    /// Set once something was printed.
    shown: Arc<AtomicBool>,
    start: Instant,
    /// Print the total time on drop if anything was shown.
    report_done: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Prints `label` once if the guard lives longer than a second, and the total time when
    /// it drops.
    pub fn after_a_second(label: String) -> Progress {
        Progress::spawn(true, move |first| first.then(|| label.clone()))
    }

    /// Prints `message()` every second while the guard lives (starting after one second).
    pub fn periodic(message: impl Fn() -> String + Send + 'static) -> Progress {
        Progress::spawn(false, move |_| Some(message()))
    }

    /// Every second the guard lives, prints what `tick(first)` returns (nothing for `None`).
    fn spawn(report_done: bool, tick: impl Fn(bool) -> Option<String> + Send + 'static) -> Progress {
        let (stop, stopped) = mpsc::channel::<()>();
        let shown = Arc::new(AtomicBool::new(false));
        let shown2 = shown.clone();
        let thread = std::thread::spawn(move || {
            let mut first = true;
            // Waiting on the channel (not sleeping) lets a drop end the thread at once: sleeping
            // in 50 ms slices held every `tessera run` up by up to 50 ms per guard, more than a
            // small module's whole compile.
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_secs(1)) {
                if let Some(message) = tick(first) {
                    eprintln!("tessera: {message}");
                    shown2.store(true, Ordering::Relaxed);
                }
                first = false;
            }
        });
        Progress { stop: Some(stop), shown, start: Instant::now(), report_done, thread: Some(thread) }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if self.report_done && self.shown.load(Ordering::Relaxed) {
            eprintln!("tessera: done in {:.1} s", self.start.elapsed().as_secs_f64());
        }
    }
}
