//! Progress on stderr for slow commands (compiling, timing, interpreter runs): nothing for
//! work under a second, so quick runs and stdout stay clean.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Progress on stderr for work that takes longer than a second; silent otherwise, so quick
/// runs and stdout stay clean.
pub struct Progress {
    stop: Arc<AtomicBool>,
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
        let stop = Arc::new(AtomicBool::new(false));
        let shown = Arc::new(AtomicBool::new(false));
        let (stop2, shown2) = (stop.clone(), shown.clone());
        let thread = std::thread::spawn(move || {
            let mut first = true;
            loop {
                // Sleep in slices so dropping the guard is not held up for a second.
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(50));
                    if stop2.load(Ordering::Relaxed) {
                        return;
                    }
                }
                if let Some(message) = tick(first) {
                    eprintln!("tessera: {message}");
                    shown2.store(true, Ordering::Relaxed);
                }
                first = false;
            }
        });
        Progress { stop, shown, start: Instant::now(), report_done, thread: Some(thread) }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if self.report_done && self.shown.load(Ordering::Relaxed) {
            eprintln!("tessera: done in {:.1} s", self.start.elapsed().as_secs_f64());
        }
    }
}
