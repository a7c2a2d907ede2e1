//! The tiered backend: a program's Cranelift code runs at once while LLVM compiles the same
//! lowered program on a background thread; once LLVM's code is ready, runs switch to it. Both
//! tiers compile one `Program` and translate the kernel IR exactly (its accumulation orders
//! and inline math included), so a run gives the same bits on either tier; only the speed
//! changes.

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tessera_codegen::CpuTarget;
use tessera_lower::Program;
use tessera_runtime::{Executable as RuntimeExecutable, HostFunctions, MemorySpaces, ThreadPool};

use crate::cache::CachedProgram;
use crate::client::CacheSlot;
use crate::Backend;
use tessera_hlo::Shape;

/// LLVM's executable of the program, or why it could not be made.
type Peak = Result<(RuntimeExecutable, Duration), String>;

/// Where the background compile leaves its result. Runs read `peak` without locking; the
/// result is set under `lock`, so a waiter that found it unset is woken by `finished`.
#[derive(Default)]
struct Slot {
    peak: OnceLock<Peak>,
    lock: Mutex<()>,
    finished: Condvar,
}

impl Slot {
    fn finish(&self, peak: Peak) {
        let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.peak.set(peak);
        self.finished.notify_all();
    }
}

pub(crate) struct Tiered {
    /// Cranelift's executable: what runs until LLVM's is ready.
    fast: RuntimeExecutable,
    slot: Arc<Slot>,
    /// The background compile, joined on drop: a process that exits while LLVM compiles
    /// crashes in LLVM's static destructors, and a finished compile leaves its program in the
    /// compile cache for the next process.
    compile: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Tiered {
    fn drop(&mut self) {
        if let Some(compile) = self.compile.take() {
            let _ = compile.join();
        }
    }
}

/// What the background LLVM compile needs: the client's runtime resources, by value.
pub(crate) struct PeakJob {
    pub program: Program,
    pub cpu: CpuTarget,
    pub spaces: MemorySpaces,
    pub pool: Arc<ThreadPool>,
    pub host: HostFunctions,
    /// Where LLVM's program goes in the compile cache, with the entry signature's shapes.
    pub cache: Option<(CacheSlot, (Vec<Shape>, Shape))>,
}

impl Tiered {
    /// Runs `fast` now and starts compiling `job` with LLVM on a thread of its own.
    pub(crate) fn start(fast: RuntimeExecutable, job: PeakJob) -> Tiered {
        let slot = Arc::new(Slot::default());
        let background = slot.clone();
        // LLVM's executable uses the queues Cranelift's has, so values pushed before the
        // switch are read after it.
        let queues = fast.host_queues();
        let spawned = std::thread::Builder::new().name("tessera-llvm-tier".into()).spawn(move || {
            let start = Instant::now();
            let peak = compile_peak(&job).map(|mut exe| {
                exe.use_host_queues(queues);
                (exe, start.elapsed())
            });
            background.finish(peak);
        });
        let compile = match spawned {
            Ok(handle) => Some(handle),
            Err(e) => {
                slot.finish(Err(format!("could not start the LLVM compile thread: {e}")));
                None
            }
        };
        Tiered { fast, slot, compile }
    }

    /// The executable runs use now, and its tier.
    pub(crate) fn current(&self) -> (&RuntimeExecutable, Backend) {
        match self.slot.peak.get() {
            Some(Ok((exe, _))) => (exe, Backend::Llvm),
            _ => (&self.fast, Backend::Cranelift),
        }
    }

    /// Blocks until the background compile has finished; its error if it failed (runs then
    /// stay on Cranelift's code).
    pub(crate) fn wait(&self) -> Result<(), String> {
        let mut held = self.slot.lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.slot.peak.get().is_none() {
            held = self.slot.finished.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        drop(held);
        match self.slot.peak.get() {
            Some(Err(e)) => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// How long LLVM took (code generation and assembly), once it has finished.
    pub(crate) fn peak_compile_time(&self) -> Option<Duration> {
        match self.slot.peak.get() {
            Some(Ok((_, took))) => Some(*took),
            _ => None,
        }
    }
}

/// LLVM's executable of the job's program, stored in the compile cache when the job has a
/// slot (a failed store only costs the next process a compile).
fn compile_peak(job: &PeakJob) -> Result<RuntimeExecutable, String> {
    let compiled = tessera_codegen::CompiledProgram::compile(tessera_codegen::Tier::Llvm, &job.program, &job.cpu, None)
        .map_err(|e| e.to_string())?;
    let (exe, image) =
        tessera_codegen::assemble::assemble_image(&job.program, compiled, &job.spaces, job.pool.clone(), &job.host)
            .map_err(|e| e.to_string())?;
    if let Some((slot, (parameters, result))) = &job.cache {
        let program = CachedProgram { parameters: parameters.clone(), result: result.clone(), image };
        let _ = slot.cache.store(slot.key, &program);
    }
    Ok(exe)
}
