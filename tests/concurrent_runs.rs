//! One executable run from many threads at once, as a host program serving requests runs it:
//! each run gets its own temps (a run state), so every result must equal the single-threaded
//! one bit for bit, and once the states exist memory must stay flat. Prints the throughput of
//! 1, 2 and 8 threads (reported, never asserted: the machine is shared).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tessera::{Backend, Client, CompileOptions, DeviceBuffer, Executable};
use tessera_hlo::corpus::Case;

mod tier_support;
use tier_support::corpus_case;

/// Resident memory of this process (Linux), in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("resident pages");
    pages * 4096
}

/// `threads` threads each running `runs` times on their own result buffers, every result
/// checked against `expected`; returns the wall time.
fn hammer(exe: &Executable, args: &[DeviceBuffer], expected: &[Vec<u8>], threads: usize, runs: usize) -> Duration {
    let checked = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let checked = &checked;
            s.spawn(move || {
                let refs: Vec<&DeviceBuffer> = args.iter().collect();
                let mut results = exe.new_results().unwrap();
                for run in 0..runs {
                    // A stale result from the previous run must not pass for this one's.
                    for r in &mut results {
                        r.bytes_mut().fill(0xA5);
                    }
                    exe.execute_into(&refs, &mut results).unwrap();
                    for (i, (r, e)) in results.iter().zip(expected).enumerate() {
                        assert!(
                            r.bytes() == &e[..],
                            "thread {t}, run {run}: result {i} differs from the single-threaded run"
                        );
                    }
                    checked.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    assert_eq!(checked.load(Ordering::Relaxed), threads * runs);
    start.elapsed()
}

#[test]
fn eight_threads_share_one_executable() {
    let dir = corpus_case("model_mlp2");
    let case = Case::load(&dir).unwrap();
    let literals = case.arguments().unwrap();
    let text = std::fs::read_to_string(dir.join("module.hlo")).unwrap();
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let exe = Client::new(backend).unwrap().compile_text(&text, &CompileOptions::default()).unwrap();
        let args: Vec<DeviceBuffer> =
            literals.iter().enumerate().map(|(i, l)| exe.transfer_argument(i, l).unwrap()).collect();
        let refs: Vec<&DeviceBuffer> = args.iter().collect();
        let expected: Vec<Vec<u8>> = exe.execute(&refs).unwrap().iter().map(|r| r.bytes().to_vec()).collect();

        // Warm-up: every state the load will use exists afterwards.
        hammer(&exe, &args, &expected, 8, 200);
        let warm = resident_bytes();
        let runs = 2000;
        let one = hammer(&exe, &args, &expected, 1, runs);
        let two = hammer(&exe, &args, &expected, 2, runs);
        let eight = hammer(&exe, &args, &expected, 8, runs);
        let grown = resident_bytes().saturating_sub(warm);
        let rate = |threads: usize, took: Duration| (threads * runs) as f64 / took.as_secs_f64();
        eprintln!(
            "{backend}: model_mlp2 runs/s: 1 thread {:.0}, 2 threads {:.0} ({:.2}x), 8 threads {:.0} ({:.2}x); \
             resident memory after warm-up grew {} KiB over {} runs",
            rate(1, one),
            rate(2, two),
            rate(2, two) / rate(1, one),
            rate(8, eight),
            rate(8, eight) / rate(1, one),
            grown / 1024,
            runs * 11
        );
        // Flat, give or take the allocator's bookkeeping: a run that allocated even a page for
        // itself would show 88 MB here.
        assert!(grown < 4 << 20, "{backend}: resident memory grew {grown} bytes under load");
    }
}
