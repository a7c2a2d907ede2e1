//! The executable (DESIGN.md section 7): a buffer table (parameters, results, temporaries at
//! offsets in their memory space's arena, constants), the program's native entry (its step
//! tree compiled: see [`crate::entry`]), the kernel launches and host operations that entry
//! calls back for, the infeed and outfeed queues, and the owner of the machine code.
//!
//! Everything that does not depend on the caller's buffers is done once, in
//! [`Executable::new`]: constants placed, launches and host operations checked against the
//! buffer table, and one run state built. A **run state** is what one run needs for itself:
//! the temp arenas and the caller's addresses. A run takes an idle state (or builds one),
//! writes the caller's parameter and result addresses into it, calls the entry, and returns
//! the state when done, so a warmed-up run allocates nothing (host operations aside: they
//! hand literals to the host). Caller buffers that are not 64-byte
//! aligned (kernels may assume `Program::ALIGNMENT`) go through a staging copy kept per
//! parameter/result in the state.
//!
//! Runs from several threads proceed side by side, each in its own state; at most
//! [`Executable::max_concurrent_runs`] states exist (so memory stays bounded: that many
//! arenas), and a run finding them all busy waits for one. An executable whose temps live in a
//! memory space with a registered capacity has one state: its runs take turns, since a second
//! arena would not fit the space.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::buffer::{is_aligned, AlignedBuffer, ALIGNMENT};
use tessera_hlo::Literal;

use crate::entry::{EntryFn, HostFailure, RunContext, RunHooks, BAD_DIMENSION_SIZE, HOST_FAILED, OK};
use crate::error::RuntimeError;
use crate::gemm::GemmThreads;
use crate::host_io::{leaf_shapes, read_value, write_value, HostQueues};
use crate::memory_space::{Arena, MemorySpaces};
use crate::step::{HostEntry, HostValueEntry};
use crate::thread_pool::ThreadPool;
use crate::KernelFn;

/// Where a buffer of the table lives.
#[derive(Clone, Debug)]
pub enum BufferRole {
    /// Caller-owned entry parameter `n` (read-only).
    Parameter(usize),
    /// Caller-owned entry result `n`.
    Result(usize),
    /// At `offset` bytes into the arena of memory space `space`.
    Temp { space: i64, offset: u64 },
    /// Read-only bytes owned by the executable.
    Constant(AlignedBuffer),
}

#[derive(Clone, Debug)]
pub struct BufferEntry {
    /// For error messages.
    pub name: String,
    /// Physical size in bytes.
    pub bytes: u64,
    pub role: BufferRole,
}

#[derive(Clone, Debug)]
pub struct LaunchEntry {
    /// The kernel's name, for diagnostics.
    pub name: String,
    pub function: KernelFn,
    /// The grid runs `0..extent`.
    pub extent: i64,
    /// `buffers[i]` (an index into the buffer table) is bound to the kernel's buffer `i`.
    pub buffers: Vec<usize>,
    /// Bytes one launch loads and stores, when known (`Kernel::traffic_bytes`): the thread
    /// pool splits a launch by it. `None`: the sizes of its buffers stand in.
    pub traffic: Option<u64>,
}

/// What an executable is made of, before validation.
pub struct ExecutableParts {
    pub buffers: Vec<BufferEntry>,
    /// The launches `entry` makes through `tessera_rt_launch_ctx`, by index (and those it
    /// calls directly, so profiles and counts name them).
    pub launches: Vec<LaunchEntry>,
    /// The host operations `entry` performs through `tessera_rt_host`, by index.
    pub hosts: Vec<HostEntry>,
    /// The message of each run-time check, by the index a failing entry reports.
    pub checks: Vec<String>,
    /// The program's step tree, compiled.
    pub entry: EntryFn,
    /// Arena size in bytes per memory space, in the order the entry's `temps` follow.
    pub arenas: Vec<(i64, u64)>,
    /// Owns the machine code behind `entry` and every `LaunchEntry::function`.
    pub code: Box<dyn Any + Send + Sync>,
}

/// What `tessera_rt_launch_ctx` needs of a launch.
#[derive(Clone, Copy)]
pub(crate) struct LaunchRun {
    pub function: KernelFn,
    pub extent: i64,
    /// Bytes the launch moves (its traffic, or the sizes of its buffers): the pool splits
    /// launches by it.
    pub work_bytes: u64,
}

/// What one run owns while it runs: its temps, the caller's addresses and staging copies.
struct RunState {
    /// Owned memory `temps` points into; kept alive, never read directly.
    _arenas: Vec<Arena>,
    /// The base of each arena, in the executable's arena order (the entry's `ctx.temps`).
    temps: Vec<*mut u8>,
    /// Caller addresses of this run: parameters then results (the entry's `args` and
    /// `results`).
    bound: Vec<*mut u8>,
    /// Aligned stand-ins for unaligned caller buffers, parameters then results.
    staging: Vec<Option<AlignedBuffer>>,
    /// Per-launch time of this run while profiling is on (`Executable::set_profiling`).
    profile: Option<Profile>,
    /// Kernel launches of the current run.
    launches_run: u64,
}

/// Where the time of the profiled runs went: launches by launch index, and the steps that
/// are not launches (copies, host operations) together.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// `launches[j]`: how many times launch `j` ran and for how long in total.
    pub launches: Vec<(u64, Duration)>,
    pub copies: (u64, Duration),
    pub host: (u64, Duration),
}

impl RunState {
    /// Binds parameter `n` (`bytes`, at `address`): its own address when aligned, else an
    /// aligned staging copy of its bytes.
    fn bind_parameter(&mut self, n: usize, bytes: &[u8], address: *mut u8) -> Result<(), RuntimeError> {
        self.bound[n] = if is_aligned(address) {
            address
        } else {
            let staging = staged(&mut self.staging[n], bytes.len())?;
            staging.as_mut_slice().copy_from_slice(bytes);
            staging.as_mut_ptr()
        };
        Ok(())
    }

    /// Binds caller buffer `slot` (a result): its own address when aligned, else an aligned
    /// staging buffer that [`RunState::copy_back`] copies out after the run.
    fn bind_result(&mut self, slot: usize, result: &mut [u8]) -> Result<(), RuntimeError> {
        self.bound[slot] = if is_aligned(result.as_ptr()) {
            result.as_mut_ptr()
        } else {
            staged(&mut self.staging[slot], result.len())?.as_mut_ptr()
        };
        Ok(())
    }

    /// Copies a staged result out into the caller's unaligned buffer.
    fn copy_back(&self, slot: usize, result: &mut [u8]) {
        if let Some(staging) = self.staging[slot].as_ref().filter(|_| !is_aligned(result.as_ptr())) {
            result.copy_from_slice(staging.as_slice());
        }
    }
}

// SAFETY: the pointers are into memory the state owns (arenas), the executable owns
// (constants, read only) or a run borrows from its caller for its duration; a state is used by
// one run at a time (taken out of the idle list for the run).
unsafe impl Send for RunState {}

/// A parameter of [`Executable::run_donated`]: memory the run only reads, or memory the caller
/// gives up, which a result [`Executable::aliases`] pairs with it is written into.
pub enum Parameter<'a> {
    Lent(&'a [u8]),
    Donated(&'a mut [u8]),
}

impl Parameter<'_> {
    /// The parameter's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Parameter::Lent(bytes) => bytes,
            Parameter::Donated(bytes) => bytes,
        }
    }
}

/// The run states: idle ones, and how many exist.
struct States {
    idle: Vec<RunState>,
    live: usize,
    /// Runs waiting for a state: a returned state wakes one (a wake-up is a system call, so
    /// runs nobody waits for skip it).
    waiting: usize,
}

/// An executable's infeed and outfeed queues, to share with another executable.
#[derive(Clone)]
pub struct SharedQueues(Arc<HostQueues>);

/// A state out of the idle list for one run; dropping it (also when a host function panics)
/// gives the state back, so runs never wait for a state nobody will return.
struct TakenState<'a> {
    exe: &'a Executable,
    state: Option<RunState>,
}

impl Drop for TakenState<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            self.exe.return_state(state);
        }
    }
}

/// Addresses of the executable's constant buffers, in buffer order (the entry's
/// `ctx.constants`).
struct ConstantAddresses(Vec<*mut u8>);
// SAFETY: the addresses point into constant buffers the executable owns and never writes
// after `new`; compiled code only reads through them.
unsafe impl Send for ConstantAddresses {}
unsafe impl Sync for ConstantAddresses {}

pub struct Executable {
    buffers: Vec<BufferEntry>,
    launches: Vec<LaunchEntry>,
    /// `runs[j]`: what launch `j` runs.
    runs: Vec<LaunchRun>,
    hosts: Vec<HostEntry>,
    checks: Vec<String>,
    entry: EntryFn,
    /// Shared with another executable of the same program (`share_host_queues`).
    queues: Arc<HostQueues>,
    /// Table index of parameter `n` / result `n`.
    parameters: Vec<usize>,
    results: Vec<usize>,
    /// `(result, parameter)` pairs a donated run writes into one memory (`set_aliases`).
    aliases: Vec<(usize, usize)>,
    arenas: Vec<(i64, u64)>,
    /// Allocates the arenas of new run states.
    spaces: MemorySpaces,
    constants: ConstantAddresses,
    states: Mutex<States>,
    /// Signalled when a run returns its state.
    state_returned: Condvar,
    max_states: usize,
    profiling: AtomicBool,
    /// The profile of the runs since profiling was turned on.
    profile: Mutex<Option<Profile>>,
    last_run_launches: AtomicU64,
    pool: Arc<ThreadPool>,
    /// Declared last so the code is freed after everything that could call it.
    _code: Box<dyn Any + Send + Sync>,
}

impl Executable {
    /// Validates the parts, checks the arenas against the memory spaces' capacities,
    /// allocates them and builds every launch's pointer table.
    pub fn new(
        parts: ExecutableParts,
        spaces: &MemorySpaces,
        pool: Arc<ThreadPool>,
    ) -> Result<Executable, RuntimeError> {
        let ExecutableParts { mut buffers, launches, hosts, checks, entry, arenas, code } = parts;
        let invalid = |m: String| Err(RuntimeError::Invalid(m));

        let mut parameters = Vec::new();
        let mut results = Vec::new();
        for (i, b) in buffers.iter().enumerate() {
            let slot = match b.role {
                BufferRole::Parameter(n) => Some((&mut parameters, n)),
                BufferRole::Result(n) => Some((&mut results, n)),
                _ => None,
            };
            if let Some((list, n)) = slot {
                if list.len() <= n {
                    list.resize(n + 1, usize::MAX);
                }
                if list[n] != usize::MAX {
                    return invalid(format!("buffers {} and {i} are both parameter/result {n}", list[n]));
                }
                list[n] = i;
            }
        }
        if let Some(n) = parameters.iter().position(|&i| i == usize::MAX) {
            return invalid(format!("no buffer is parameter {n}"));
        }
        if let Some(n) = results.iter().position(|&i| i == usize::MAX) {
            return invalid(format!("no buffer is result {n}"));
        }

        for (k, &(space, bytes)) in arenas.iter().enumerate() {
            if arenas[..k].iter().any(|&(s, _)| s == space) {
                return invalid(format!("two arenas for memory space S({space})"));
            }
            spaces.check(space, bytes)?;
        }

        let mut constants = Vec::new();
        for b in buffers.iter_mut() {
            match &mut b.role {
                BufferRole::Temp { space, offset } => {
                    let Some(&(_, arena_bytes)) = arenas.iter().find(|(s, _)| s == space) else {
                        return invalid(format!("temp '{}' is in S({space}), which has no arena", b.name));
                    };
                    let end = offset.checked_add(b.bytes);
                    if end.is_none_or(|e| e > arena_bytes) {
                        return invalid(format!(
                            "temp '{}' ({} bytes at offset {offset}) does not fit the {arena_bytes}-byte arena of S({space})",
                            b.name, b.bytes,
                        ));
                    }
                    if *offset % ALIGNMENT as u64 != 0 {
                        return invalid(format!("temp '{}' is at unaligned offset {offset}", b.name));
                    }
                }
                BufferRole::Constant(data) => {
                    if data.len() as u64 != b.bytes {
                        return invalid(format!("constant '{}' has {} bytes, not {}", b.name, data.len(), b.bytes));
                    }
                    constants.push(data.as_mut_ptr());
                }
                BufferRole::Parameter(_) | BufferRole::Result(_) => {}
            }
        }

        let mut runs = Vec::with_capacity(launches.len());
        for launch in &launches {
            if launch.extent < 0 {
                return invalid(format!("launch of '{}' has grid extent {}", launch.name, launch.extent));
            }
            let mut bytes = 0u64;
            for &i in &launch.buffers {
                let Some(b) = buffers.get(i) else {
                    return invalid(format!("launch of '{}' names buffer {i} of {}", launch.name, buffers.len()));
                };
                bytes = bytes.saturating_add(b.bytes);
            }
            let work_bytes = launch.traffic.map_or(bytes, |t| t.min(bytes));
            runs.push(LaunchRun { function: launch.function, extent: launch.extent, work_bytes });
        }
        for op in &hosts {
            check_host(op, &buffers)?;
        }

        // A second arena in a space with a capacity would not fit it (buffer assignment sized
        // one arena against it): such executables keep one state.
        let bounded = arenas.iter().any(|&(space, _)| spaces.get(space).capacity.is_some());
        let max_states = if bounded { 1 } else { Executable::max_concurrent_runs_default() };
        let exe = Executable {
            buffers,
            launches,
            runs,
            hosts,
            checks,
            entry,
            queues: Arc::default(),
            parameters,
            results,
            aliases: Vec::new(),
            arenas,
            spaces: spaces.clone(),
            constants: ConstantAddresses(constants),
            states: Mutex::new(States { idle: Vec::new(), live: 0, waiting: 0 }),
            state_returned: Condvar::new(),
            max_states,
            profiling: AtomicBool::new(false),
            profile: Mutex::new(None),
            last_run_launches: AtomicU64::new(0),
            pool,
            _code: code,
        };
        // The first state is built now, so an arena that cannot be allocated fails the
        // compile, not the first run.
        let first = exe.new_state()?;
        let mut states = exe.states.lock().unwrap_or_else(|e| e.into_inner());
        states.idle.push(first);
        states.live = 1;
        drop(states);
        Ok(exe)
    }

    /// How many runs may proceed at once by default: two per core, at least 8 (callers
    /// beyond that wait for a state, which bounds the memory runs hold).
    fn max_concurrent_runs_default() -> usize {
        crate::thread_pool::available_cores().saturating_mul(2).max(8)
    }

    /// How many runs may proceed at once (each holds its own temp arenas); more wait.
    pub fn max_concurrent_runs(&self) -> usize {
        self.max_states
    }

    /// A fresh run state: arenas allocated.
    fn new_state(&self) -> Result<RunState, RuntimeError> {
        let mut arenas = Vec::with_capacity(self.arenas.len());
        for &(space, bytes) in &self.arenas {
            arenas.push(self.spaces.allocate(space, bytes)?);
        }
        let temps = arenas.iter_mut().map(|a| a.memory.as_mut_ptr()).collect();
        let callers = self.parameters.len() + self.results.len();
        Ok(RunState {
            _arenas: arenas,
            temps,
            bound: vec![std::ptr::null_mut(); callers],
            staging: vec![None; callers],
            profile: None,
            launches_run: 0,
        })
    }

    /// An idle state, a new one while fewer than `max_states` exist, or else the next one a
    /// run returns.
    fn take_state(&self) -> Result<RunState, RuntimeError> {
        // A poisoned lock only means a caller panicked while holding it; the list itself is
        // always consistent.
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(state) = states.idle.pop() {
                return Ok(state);
            }
            if states.live < self.max_states {
                states.live += 1;
                drop(states);
                let state = self.new_state();
                if state.is_err() {
                    let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
                    states.live -= 1;
                    // A waiting run may now build a state of its own.
                    if states.waiting > 0 {
                        self.state_returned.notify_one();
                    }
                }
                return state;
            }
            states.waiting += 1;
            states = self.state_returned.wait(states).unwrap_or_else(|e| e.into_inner());
            states.waiting -= 1;
        }
    }

    fn return_state(&self, mut state: RunState) {
        self.last_run_launches.store(state.launches_run, Ordering::Relaxed);
        if let Some(run) = state.profile.take() {
            if let Some(total) = self.profile.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                total.absorb(&run);
            }
        }
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.idle.push(state);
        if states.waiting > 0 {
            self.state_returned.notify_one();
        }
    }

    pub fn parameter_count(&self) -> usize {
        self.parameters.len()
    }

    pub fn result_count(&self) -> usize {
        self.results.len()
    }

    /// The table entry of parameter `n`.
    pub fn parameter(&self, n: usize) -> Option<&BufferEntry> {
        self.parameters.get(n).map(|&i| &self.buffers[i])
    }

    /// The table entry of result `n`.
    pub fn result(&self, n: usize) -> Option<&BufferEntry> {
        self.results.get(n).map(|&i| &self.buffers[i])
    }

    pub fn buffers(&self) -> &[BufferEntry] {
        &self.buffers
    }

    pub fn launches(&self) -> &[LaunchEntry] {
        &self.launches
    }

    /// What launch `j` runs, for `tessera_rt_launch_ctx`.
    pub(crate) fn launch_entry(&self, j: usize) -> Option<LaunchRun> {
        self.runs.get(j).copied()
    }

    pub(crate) fn pool(&self) -> &ThreadPool {
        &self.pool
    }

    /// Queues a literal for the next `infeed` to read (first in, first out). An infeed that
    /// runs with nothing queued fails the run with [`RuntimeError::Host`].
    pub fn push_infeed(&self, literal: Literal) {
        self.queues.push_infeed(literal);
    }

    /// A handle on this executable's infeed and outfeed queues, for
    /// [`Executable::use_host_queues`].
    pub fn host_queues(&self) -> SharedQueues {
        SharedQueues(self.queues.clone())
    }

    /// Makes `queues` (another executable's) this one's infeed and outfeed queues, so both
    /// push and pop the same values: two executables of one program, one replacing the other,
    /// as the tiered backend switches from Cranelift's code to LLVM's.
    pub fn use_host_queues(&mut self, queues: SharedQueues) {
        self.queues = queues.0;
    }

    /// Literals queued and not yet read.
    pub fn infeed_len(&self) -> usize {
        self.queues.infeed_len()
    }

    /// The oldest literal an `outfeed` produced and nobody took yet.
    pub fn pop_outfeed(&self) -> Option<Literal> {
        self.queues.pop_outfeed()
    }

    pub fn outfeed_len(&self) -> usize {
        self.queues.outfeed_len()
    }

    /// Arena bytes per memory space.
    pub fn arenas(&self) -> &[(i64, u64)] {
        &self.arenas
    }

    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Starts (or stops) timing every step of the following runs, from a fresh [`Profile`].
    /// Timing a launch adds two clock reads to it; leave it off when measuring whole runs.
    pub fn set_profiling(&self, on: bool) {
        let mut profile = self.profile.lock().unwrap_or_else(|e| e.into_inner());
        *profile = on.then(|| self.empty_profile());
        self.profiling.store(on, Ordering::Relaxed);
    }

    fn empty_profile(&self) -> Profile {
        Profile { launches: vec![Default::default(); self.launches.len()], ..Profile::default() }
    }

    /// How many kernel launches the last run to finish made (loops and conditionals decide
    /// how many).
    pub fn last_run_launches(&self) -> u64 {
        self.last_run_launches.load(Ordering::Relaxed)
    }

    /// What the runs since `set_profiling(true)` spent where (`None` when profiling is off).
    pub fn profile(&self) -> Option<Profile> {
        self.profile.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Declares the `(result, parameter)` pairs whose result the program may write into the
    /// parameter's memory (`tessera_lower::Program::aliases`): [`Executable::run_donated`]
    /// passes the entry one address for both.
    pub fn set_aliases(&mut self, aliases: Vec<(usize, usize)>) -> Result<(), RuntimeError> {
        for (k, &(r, p)) in aliases.iter().enumerate() {
            let (Some(&rb), Some(&pb)) = (self.results.get(r), self.parameters.get(p)) else {
                return Err(RuntimeError::Invalid(format!("alias of result {r} and parameter {p}: no such buffers")));
            };
            if self.buffers[rb].bytes != self.buffers[pb].bytes {
                return Err(RuntimeError::Invalid(format!("result {r} and parameter {p} differ in size")));
            }
            if aliases[..k].iter().any(|&(r2, p2)| r2 == r || p2 == p) {
                return Err(RuntimeError::Invalid(format!("result {r} or parameter {p} is aliased twice")));
            }
        }
        self.aliases = aliases;
        Ok(())
    }

    /// The `(result, parameter)` pairs a donated run writes into one memory.
    pub fn aliases(&self) -> &[(usize, usize)] {
        &self.aliases
    }

    /// [`Executable::run`] for a caller that donates some of its parameters: each result that
    /// [`Executable::aliases`] pairs with a [`Parameter::Donated`] one is written into that
    /// parameter's memory (its `results` slot must be empty), which may save the copy of it
    /// (an in-place update of a donated cache writes only its window); a result paired with a
    /// [`Parameter::Lent`] one gets its slot, as in `run`. A donated parameter must be 64-byte
    /// aligned; afterwards it holds the result.
    pub fn run_donated(&self, parameters: &mut [Parameter<'_>], results: &mut [&mut [u8]]) -> Result<(), RuntimeError> {
        self.check("parameters", parameters.len(), &self.parameters, parameters.iter().map(|p| p.bytes().len()))?;
        let donated = |p: usize| matches!(parameters.get(p), Some(Parameter::Donated(_)));
        let shared = |n: usize| self.aliases.iter().find(|&&(r, p)| r == n && donated(p)).map(|&(_, p)| p);
        let shared: Vec<Option<usize>> = (0..self.results.len()).map(shared).collect();
        if results.len() != self.results.len() {
            return Err(RuntimeError::Count { what: "results", expected: self.results.len(), found: results.len() });
        }
        for (n, r) in results.iter().enumerate() {
            let b = &self.buffers[self.results[n]];
            let expected = if shared[n].is_some() { 0 } else { b.bytes };
            if r.len() as u64 != expected {
                return Err(RuntimeError::Size {
                    what: "result",
                    index: n,
                    name: b.name.clone(),
                    expected,
                    found: r.len() as u64,
                });
            }
        }
        for &p in shared.iter().flatten() {
            if !is_aligned(parameters[p].bytes().as_ptr()) {
                return Err(RuntimeError::Invalid(format!("donated parameter {p} is not 64-byte aligned")));
            }
        }
        let mut taken = TakenState { exe: self, state: Some(self.take_state()?) };
        let state = taken.state.as_mut().expect("taken above");
        let np = parameters.len();
        for (n, p) in parameters.iter_mut().enumerate() {
            match p {
                Parameter::Donated(bytes) => {
                    let address = bytes.as_mut_ptr();
                    state.bind_parameter(n, bytes, address)?;
                }
                // The entry never writes a parameter it was given this way: no donated result
                // shares its memory.
                Parameter::Lent(bytes) => state.bind_parameter(n, bytes, bytes.as_ptr() as *mut u8)?,
            }
        }
        for (n, r) in results.iter_mut().enumerate() {
            match shared[n] {
                Some(p) => state.bound[np + n] = state.bound[p],
                None => state.bind_result(np + n, r)?,
            }
        }
        self.run_bound(state)?;
        for (n, r) in results.iter_mut().enumerate().filter(|(n, _)| shared[*n].is_none()) {
            state.copy_back(np + n, r);
        }
        Ok(())
    }

    /// Runs every launch in order on the caller's buffers: `parameters[n]` holds parameter
    /// `n`'s physical bytes, `results[n]` receives result `n`'s. Sizes must match exactly.
    /// Runs from several threads proceed side by side (see the module documentation); a host
    /// function must not run the executable that calls it while its memory space limits the
    /// executable to one state.
    pub fn run(&self, parameters: &[&[u8]], results: &mut [&mut [u8]]) -> Result<(), RuntimeError> {
        self.check("parameters", parameters.len(), &self.parameters, parameters.iter().map(|p| p.len()))?;
        self.check("results", results.len(), &self.results, results.iter().map(|r| r.len()))?;
        let mut taken = TakenState { exe: self, state: Some(self.take_state()?) };
        let state = taken.state.as_mut().expect("taken above");
        self.run_in(state, parameters, results)
    }

    /// A run in `state`: every address a run binds is rewritten here, so a state that an
    /// earlier run left (even by an error) is sound to use.
    fn run_in(
        &self,
        state: &mut RunState,
        parameters: &[&[u8]],
        results: &mut [&mut [u8]],
    ) -> Result<(), RuntimeError> {
        let np = parameters.len();
        for (n, p) in parameters.iter().enumerate() {
            // The entry never writes a parameter it was given this way.
            state.bind_parameter(n, p, p.as_ptr() as *mut u8)?;
        }
        for (n, r) in results.iter_mut().enumerate() {
            state.bind_result(np + n, r)?;
        }
        self.run_bound(state)?;
        for (n, r) in results.iter_mut().enumerate() {
            state.copy_back(np + n, r);
        }
        Ok(())
    }

    /// Calls the entry on the addresses bound in `state` (parameters, then results).
    fn run_bound(&self, state: &mut RunState) -> Result<(), RuntimeError> {
        let np = self.parameters.len();
        state.profile = self.profiling.load(Ordering::Relaxed).then(|| self.empty_profile());
        let mut hooks = RunHooks { exe: self, profile: state.profile.as_mut(), host_failure: None };
        let mut ctx = RunContext::new(&state.temps, &self.constants.0, &mut hooks);
        let code = {
            let _gemm = GemmThreads::enter(&self.pool);
            let args = state.bound.as_ptr();
            // SAFETY: the entry was compiled for this buffer table: `args`/`results` hold
            // every caller buffer, aligned and of the checked sizes, which the borrows keep
            // alive, sharing an address only as `aliases` allows (the program was built for
            // that); `temps` are this state's arenas, `constants` ours; the hooks outlive the
            // call.
            unsafe { (self.entry)(args, args.add(np), &mut ctx) }
        };
        state.launches_run = ctx.launches;
        let failed = ctx.failed;
        let host_failure = hooks.host_failure.take();
        match code {
            OK => {}
            BAD_DIMENSION_SIZE => {
                let message = self.checks.get(failed as usize).cloned();
                return Err(RuntimeError::Check(message.unwrap_or_else(|| format!("run-time check {failed} failed"))));
            }
            HOST_FAILED => {
                return match host_failure {
                    Some(HostFailure::Error(e)) => Err(e),
                    Some(HostFailure::Panic(panic)) => std::panic::resume_unwind(panic),
                    None => {
                        Err(RuntimeError::Invalid("the entry reported a host failure the runtime did not see".into()))
                    }
                }
            }
            other => return Err(RuntimeError::Invalid(format!("the entry returned code {other}"))),
        }
        Ok(())
    }

    /// Host operation `index` on the buffers of `table` (its values' leaves, operands first).
    ///
    /// # Safety
    /// `table` holds one address per leaf, each of its buffer's size, valid for the call;
    /// nothing else touches them meanwhile.
    pub(crate) unsafe fn host_step(&self, index: i64, table: *const *mut u8) -> Result<(), RuntimeError> {
        let Some(op) = usize::try_from(index).ok().and_then(|i| self.hosts.get(i)) else {
            return Err(RuntimeError::Invalid(format!("the entry ran host operation {index} of {}", self.hosts.len())));
        };
        let (reads, writes) = op.values();
        let mut next = 0usize;
        let mut leaves = |value: &HostValueEntry| -> Vec<(usize, *mut u8)> {
            let out = value
                .buffers
                .iter()
                .enumerate()
                // SAFETY: the caller's contract: one table slot per leaf, in order.
                .map(|(k, &b)| (b, unsafe { *table.add(next + k) }))
                .collect();
            next += value.buffers.len();
            out
        };
        let reads: Vec<_> = reads.into_iter().map(|v| (v, leaves(v))).collect();
        let writes: Vec<_> = writes.into_iter().map(|v| (v, leaves(v))).collect();
        self.host(op, &reads, &writes)
    }

    /// `reads` and `writes`: the op's values, each with its leaves' buffers and addresses.
    fn host(
        &self,
        op: &HostEntry,
        reads: &[(&HostValueEntry, Vec<(usize, *mut u8)>)],
        writes: &[(&HostValueEntry, Vec<(usize, *mut u8)>)],
    ) -> Result<(), RuntimeError> {
        let fail = |message: String| RuntimeError::Host { op: op.kind(), name: op.name().to_string(), message };
        let read = |(value, leaves): &(&HostValueEntry, Vec<(usize, *mut u8)>)| -> Result<Literal, RuntimeError> {
            // SAFETY: each leaf's address holds its buffer's bytes (`host_step`'s contract);
            // nothing writes while they are read.
            let bytes: Vec<&[u8]> = leaves
                .iter()
                .map(|&(b, p)| unsafe { std::slice::from_raw_parts(p as *const u8, self.buffers[b].bytes as usize) })
                .collect();
            read_value(value, &bytes).map_err(fail)
        };
        let write = |(value, leaves): &(&HostValueEntry, Vec<(usize, *mut u8)>), literal: &Literal| {
            let parts = write_value(value, literal).map_err(|m| fail(format!("the host's value: {m}")))?;
            for (&(b, p), bytes) in leaves.iter().zip(parts) {
                if bytes.len() as u64 != self.buffers[b].bytes {
                    return Err(fail(format!("buffer '{}' does not hold the value's layout", self.buffers[b].name)));
                }
                // SAFETY: the buffer has exactly `bytes.len()` bytes and is writable (checked
                // in `new`); the bytes come from a separate allocation.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
            }
            Ok(())
        };
        match op {
            HostEntry::CustomCall { target, function, .. } => {
                let args = reads.iter().map(read).collect::<Result<Vec<_>, _>>()?;
                let out =
                    function(&args).map_err(|m| fail(format!("the function registered for '{target}' failed: {m}")))?;
                write(&writes[0], &out)
            }
            HostEntry::Infeed { .. } => {
                let literal = self
                    .queues
                    .pop_infeed()
                    .ok_or_else(|| fail("nothing is queued (Executable::push_infeed queues values)".into()))?;
                write(&writes[0], &literal)
            }
            HostEntry::Outfeed { .. } => {
                let literal = read(&reads[0])?;
                self.queues.push_outfeed(literal);
                Ok(())
            }
        }
    }

    fn check(
        &self,
        what: &'static str,
        found: usize,
        slots: &[usize],
        lens: impl Iterator<Item = usize>,
    ) -> Result<(), RuntimeError> {
        if found != slots.len() {
            return Err(RuntimeError::Count { what, expected: slots.len(), found });
        }
        for (index, (len, &i)) in lens.zip(slots).enumerate() {
            let b = &self.buffers[i];
            if len as u64 != b.bytes {
                let what = if what == "parameters" { "parameter" } else { "result" };
                return Err(RuntimeError::Size {
                    what,
                    index,
                    name: b.name.clone(),
                    expected: b.bytes,
                    found: len as u64,
                });
            }
        }
        Ok(())
    }
}

impl Profile {
    /// Adds another run's counts and times to these.
    fn absorb(&mut self, run: &Profile) {
        for (total, part) in self.launches.iter_mut().zip(&run.launches) {
            total.0 += part.0;
            total.1 += part.1;
        }
        for (total, part) in [(&mut self.copies, run.copies), (&mut self.host, run.host)] {
            total.0 += part.0;
            total.1 += part.1;
        }
    }
}

/// Checks a host operation's values against the buffer table: leaves that match their
/// shapes, written ones writable.
fn check_host(op: &HostEntry, buffers: &[BufferEntry]) -> Result<(), RuntimeError> {
    let invalid = |m: String| Err(RuntimeError::Invalid(m));
    let read_only = |b: &BufferEntry| matches!(b.role, BufferRole::Parameter(_) | BufferRole::Constant(_));
    let (reads, writes) = op.values();
    for (value, written) in reads.into_iter().map(|v| (v, false)).chain(writes.into_iter().map(|v| (v, true))) {
        let shapes = leaf_shapes(&value.shape);
        if shapes.len() != value.buffers.len() {
            return invalid(format!("{} '{}': a value's buffers do not match its shape", op.kind(), op.name()));
        }
        for (shape, &i) in shapes.into_iter().zip(&value.buffers) {
            let Some(b) = buffers.get(i) else {
                return invalid(format!("{} '{}' names buffer {i} of {}", op.kind(), op.name(), buffers.len()));
            };
            let bytes =
                shape.as_array().and_then(|a| tessera_hlo::LayoutMap::new(a).ok()).map(|m| m.physical_byte_size());
            if bytes.is_none_or(|n| n as u64 != b.bytes) || (written && read_only(b)) {
                return invalid(format!("{} '{}': buffer '{}' does not fit {shape}", op.kind(), op.name(), b.name));
            }
        }
    }
    Ok(())
}

/// The staging buffer of one caller slot, allocated on first use.
fn staged(slot: &mut Option<AlignedBuffer>, len: usize) -> Result<&mut AlignedBuffer, RuntimeError> {
    if slot.as_ref().is_none_or(|s| s.len() != len) {
        *slot = Some(AlignedBuffer::zeroed(len)?);
    }
    Ok(slot.as_mut().expect("set above"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{tessera_rt_host, tessera_rt_launch_ctx, RunContext};

    /// `two_step`'s program: launch 0 on (p0, c, sum), then launch 1 on (sum, out).
    unsafe extern "C" fn two_step_entry(args: *const *mut u8, results: *const *mut u8, ctx: *mut RunContext) -> i32 {
        unsafe {
            let sum = (*(*ctx).temps).add(64);
            let first = [*args, *(*ctx).constants, sum];
            tessera_rt_launch_ctx(ctx, 0, first.as_ptr());
            let second = [sum, *results];
            tessera_rt_launch_ctx(ctx, 1, second.as_ptr());
        }
        OK
    }

    /// Runs launch 0 on the buffers it names: parameter 0, then results in order.
    unsafe extern "C" fn launch_0(args: *const *mut u8, results: *const *mut u8, ctx: *mut RunContext) -> i32 {
        unsafe {
            let table = [*args, *args.add(1), *results];
            tessera_rt_launch_ctx(ctx, 0, table.as_ptr());
        }
        OK
    }

    unsafe extern "C" fn nothing(_args: *const *mut u8, _results: *const *mut u8, _ctx: *mut RunContext) -> i32 {
        OK
    }

    /// out[i] = a[i] + b[i] (f32), buffers (a, b, out).
    unsafe extern "C" fn add(buffers: *const *mut u8, lo: i64, hi: i64) {
        unsafe {
            let (a, b, out) = (*buffers as *const f32, *buffers.add(1) as *const f32, *buffers.add(2) as *mut f32);
            for i in lo as usize..hi as usize {
                *out.add(i) = *a.add(i) + *b.add(i);
            }
        }
    }

    /// out[i] = a[i] * 2 (f32), buffers (a, out).
    unsafe extern "C" fn double(buffers: *const *mut u8, lo: i64, hi: i64) {
        unsafe {
            let (a, out) = (*buffers as *const f32, *buffers.add(1) as *mut f32);
            for i in lo as usize..hi as usize {
                *out.add(i) = *a.add(i) * 2.0;
            }
        }
    }

    fn entry(name: &str, bytes: u64, role: BufferRole) -> BufferEntry {
        BufferEntry { name: name.into(), bytes, role }
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    /// result = 2 * (p0 + c) with the sum in a temp of S(space), n elements.
    fn two_step(n: usize, space: i64, threads: usize, spaces: &MemorySpaces) -> Result<Executable, RuntimeError> {
        let bytes = 4 * n as u64;
        let constant: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let parts = ExecutableParts {
            buffers: vec![
                entry("p0", bytes, BufferRole::Parameter(0)),
                entry("c", bytes, BufferRole::Constant(AlignedBuffer::from_bytes(&f32_bytes(&constant))?)),
                entry("sum", bytes, BufferRole::Temp { space, offset: 64 }),
                entry("out", bytes, BufferRole::Result(0)),
            ],
            launches: vec![
                LaunchEntry {
                    name: "add".into(),
                    function: add,
                    extent: n as i64,
                    buffers: vec![0, 1, 2],
                    traffic: None,
                },
                LaunchEntry {
                    name: "double".into(),
                    function: double,
                    extent: n as i64,
                    buffers: vec![2, 3],
                    traffic: None,
                },
            ],
            hosts: vec![],
            checks: vec![],
            entry: two_step_entry,
            arenas: vec![(space, 64 + bytes)],
            code: Box::new(()),
        };
        Executable::new(parts, spaces, Arc::new(ThreadPool::new(Some(threads))?))
    }

    #[test]
    fn runs_launches_in_order_through_temps_and_constants() {
        for (n, threads) in [(5, 1), (100_000, 2), (100_000, 3)] {
            let exe = two_step(n, 0, threads, &MemorySpaces::new()).unwrap();
            let input: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
            let input = f32_bytes(&input);
            for round in 0..3 {
                let mut out = vec![0u8; 4 * n];
                exe.run(&[&input], &mut [&mut out]).unwrap();
                let expect: Vec<f32> = (0..n).map(|i| 2.0 * (0.5 * i as f32 + i as f32)).collect();
                assert_eq!(floats(&out), expect, "n {n}, threads {threads}, round {round}");
            }
        }
    }

    #[test]
    fn profiling_counts_every_launch_until_turned_off() {
        let n = 1000;
        let exe = two_step(n, 0, 1, &MemorySpaces::new()).unwrap();
        let input = f32_bytes(&vec![1.0; n]);
        let mut out = vec![0u8; 4 * n];
        assert!(exe.profile().is_none());
        exe.set_profiling(true);
        for _ in 0..3 {
            exe.run(&[&input], &mut [&mut out]).unwrap();
        }
        let p = exe.profile().unwrap();
        assert_eq!(p.launches.iter().map(|l| l.0).collect::<Vec<_>>(), vec![3, 3]);
        assert_eq!(exe.last_run_launches(), 2);
        assert!(p.launches.iter().all(|l| !l.1.is_zero()));
        assert_eq!((p.copies.0, p.host.0), (0, 0));
        // Turning it on again starts from zero; off, runs are not timed.
        exe.set_profiling(true);
        exe.run(&[&input], &mut [&mut out]).unwrap();
        assert_eq!(exe.profile().unwrap().launches[0].0, 1);
        exe.set_profiling(false);
        exe.run(&[&input], &mut [&mut out]).unwrap();
        assert!(exe.profile().is_none());
    }

    #[test]
    fn unaligned_caller_buffers_are_staged() {
        let n = 9;
        let exe = two_step(n, 0, 1, &MemorySpaces::new()).unwrap();
        let input = f32_bytes(&vec![1.0; n]);
        let mut shifted_in = vec![0u8; 4 * n + 1];
        let mut shifted_out = vec![0u8; 4 * n + 1];
        // One of the two offsets is unaligned whatever the allocation's alignment.
        for off in [0, 1] {
            let end = off + 4 * n;
            shifted_in[off..end].copy_from_slice(&input);
            exe.run(&[&shifted_in[off..end]], &mut [&mut shifted_out[off..end]]).unwrap();
            let expect: Vec<f32> = (0..n).map(|i| 2.0 * (1.0 + i as f32)).collect();
            assert_eq!(floats(&shifted_out[off..end]), expect);
        }
    }

    #[test]
    fn argument_errors_name_the_argument() {
        let exe = two_step(4, 0, 1, &MemorySpaces::new()).unwrap();
        let good = vec![0u8; 16];
        let mut out = vec![0u8; 16];
        let err = exe.run(&[], &mut [&mut out]).unwrap_err();
        assert_eq!(err.to_string(), "the executable takes 1 parameters but 0 were given");
        let err = exe.run(&[&good[..12]], &mut [&mut out]).unwrap_err();
        assert_eq!(err.to_string(), "parameter 0 ('p0') needs 16 bytes but the buffer has 12");
        let mut short = vec![0u8; 20];
        let err = exe.run(&[&good], &mut [&mut short]).unwrap_err();
        assert_eq!(err.to_string(), "result 0 ('out') needs 16 bytes but the buffer has 20");
        let err = exe.run(&[&good], &mut []).unwrap_err();
        assert!(matches!(err, RuntimeError::Count { what: "results", expected: 1, found: 0 }));
    }

    #[test]
    fn arenas_respect_registered_capacities() {
        let mut spaces = MemorySpaces::new();
        spaces.register(1, 100);
        let err = two_step(16, 1, 1, &spaces).err().unwrap();
        assert_eq!(err, RuntimeError::SpaceOverflow { space: 1, capacity: 100, needed: 128 });
        spaces.register(1, 128);
        let exe = two_step(16, 1, 1, &spaces).unwrap();
        assert_eq!(exe.arenas(), &[(1, 128)]);
    }

    /// Runs `runs` times on each of `threads` threads, each thread with its own input, and
    /// checks every result: runs sharing temps would mix their sums.
    fn run_concurrently(exe: &Executable, n: usize, threads: usize, runs: usize) {
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    let input: Vec<f32> = (0..n).map(|i| (t * 1000 + i) as f32).collect();
                    let expect: Vec<f32> = input.iter().enumerate().map(|(i, x)| 2.0 * (x + i as f32)).collect();
                    let input = f32_bytes(&input);
                    for run in 0..runs {
                        let mut out = vec![0u8; 4 * n];
                        exe.run(&[&input], &mut [&mut out]).unwrap();
                        assert_eq!(floats(&out), expect, "thread {t}, run {run}");
                    }
                });
            }
        });
    }

    #[test]
    fn concurrent_runs_each_get_their_own_temps() {
        let exe = two_step(4096, 0, 1, &MemorySpaces::new()).unwrap();
        assert!(exe.max_concurrent_runs() >= 8);
        run_concurrently(&exe, 4096, 6, 300);
        assert_eq!(exe.last_run_launches(), 2);
        let states = exe.states.lock().unwrap();
        assert!(
            states.live <= 6 && states.idle.len() == states.live,
            "{} live, {} idle",
            states.live,
            states.idle.len()
        );
    }

    #[test]
    fn a_space_with_a_capacity_keeps_one_state_and_runs_take_turns() {
        let mut spaces = MemorySpaces::new();
        spaces.register(1, 64 + 4 * 512);
        let exe = two_step(512, 1, 1, &spaces).unwrap();
        assert_eq!(exe.max_concurrent_runs(), 1);
        run_concurrently(&exe, 512, 4, 200);
        assert_eq!(exe.states.lock().unwrap().live, 1);
    }

    #[test]
    fn profiles_of_concurrent_runs_add_up() {
        let exe = two_step(256, 0, 1, &MemorySpaces::new()).unwrap();
        exe.set_profiling(true);
        run_concurrently(&exe, 256, 3, 50);
        let profile = exe.profile().unwrap();
        assert_eq!(profile.launches.iter().map(|l| l.0).collect::<Vec<_>>(), vec![150, 150]);
    }

    #[test]
    fn malformed_parts_are_rejected() {
        let pool = Arc::new(ThreadPool::new(Some(1)).unwrap());
        let spaces = MemorySpaces::new();
        let make = |buffers: Vec<BufferEntry>, launch: Vec<usize>, arenas: Vec<(i64, u64)>| ExecutableParts {
            buffers,
            launches: vec![LaunchEntry {
                name: "k".into(),
                function: double,
                extent: 1,
                buffers: launch,
                traffic: None,
            }],
            hosts: vec![],
            checks: vec![],
            entry: nothing,
            arenas,
            code: Box::new(()),
        };
        let cases = [
            (make(vec![entry("a", 4, BufferRole::Parameter(1))], vec![0], vec![]), "no buffer is parameter 0"),
            (make(vec![entry("a", 4, BufferRole::Result(0))], vec![3], vec![]), "names buffer 3"),
            (
                make(vec![entry("t", 64, BufferRole::Temp { space: 0, offset: 64 })], vec![0], vec![(0, 100)]),
                "does not fit",
            ),
            (make(vec![entry("t", 4, BufferRole::Temp { space: 0, offset: 4 })], vec![0], vec![(0, 100)]), "unaligned"),
            (make(vec![entry("t", 4, BufferRole::Temp { space: 2, offset: 0 })], vec![0], vec![]), "no arena"),
        ];
        for (parts, text) in cases {
            let err = Executable::new(parts, &spaces, pool.clone()).err().unwrap();
            assert!(err.to_string().contains(text), "{err}");
        }
    }

    const N: usize = 128;

    /// C = A·B for N×N row-major f32 through the runtime GEMM, buffers (a, b, c).
    unsafe extern "C" fn gemm_kernel(buffers: *const *mut u8, _lo: i64, _hi: i64) {
        let n = N as i64;
        unsafe {
            crate::gemm::tessera_rt_gemm_f32(
                n,
                n,
                n,
                *buffers as *const f32,
                n,
                1,
                *buffers.add(1) as *const f32,
                n,
                1,
                *buffers.add(2) as *mut f32,
                n,
                1,
            )
        }
    }

    #[test]
    fn kernels_calling_gemm_use_the_executable_threads() {
        let bytes = (4 * N * N) as u64;
        for threads in [1, 2] {
            let parts = ExecutableParts {
                buffers: vec![
                    entry("a", bytes, BufferRole::Parameter(0)),
                    entry("b", bytes, BufferRole::Parameter(1)),
                    entry("c", bytes, BufferRole::Result(0)),
                ],
                launches: vec![LaunchEntry {
                    name: "dot".into(),
                    function: gemm_kernel,
                    extent: 1,
                    buffers: vec![0, 1, 2],
                    traffic: None,
                }],
                hosts: vec![],
                checks: vec![],
                entry: launch_0,
                arenas: vec![],
                code: Box::new(()),
            };
            let pool = Arc::new(ThreadPool::new(Some(threads)).unwrap());
            let exe = Executable::new(parts, &MemorySpaces::new(), pool).unwrap();
            let a: Vec<f32> = (0..N * N).map(|i| (i % 7) as f32 - 3.0).collect();
            // B = 2·I, so C = 2·A exactly.
            let b: Vec<f32> = (0..N * N).map(|i| if i / N == i % N { 2.0 } else { 0.0 }).collect();
            let mut out = vec![0u8; 4 * N * N];
            exe.run(&[&f32_bytes(&a), &f32_bytes(&b)], &mut [&mut out]).unwrap();
            assert_eq!(floats(&out), a.iter().map(|x| 2.0 * x).collect::<Vec<_>>(), "threads {threads}");
        }
    }

    /// s[0] += 1 (i32), buffers (s).
    unsafe extern "C" fn increment(buffers: *const *mut u8, _lo: i64, _hi: i64) {
        unsafe { *(*buffers as *mut i32) += 1 }
    }

    /// pred = s[0] < limit[0] (i32 in, one byte out), buffers (s, limit, pred).
    unsafe extern "C" fn less(buffers: *const *mut u8, _lo: i64, _hi: i64) {
        unsafe { *(*buffers.add(2)) = u8::from(*(*buffers as *const i32) < *(*buffers.add(1) as *const i32)) }
    }

    /// What a compiled entry would do with `control_flow`'s buffers: a counter loop (copy
    /// in, while, copy out), a branch on an s32 selector copying one of two constants, an
    /// outfeed, optionally a custom-call, and an infeed.
    unsafe fn control_flow_steps(
        args: *const *mut u8,
        results: *const *mut u8,
        ctx: *mut RunContext,
        call: bool,
    ) -> i32 {
        unsafe {
            let (start, limit) = (*args, *args.add(1));
            let temps = *(*ctx).temps;
            let (s, pred) = (temps, temps.add(64));
            let (count, branch, fed) = (*results, *results.add(1), *results.add(2));
            std::ptr::copy(start, s, 4);
            loop {
                let lt = [s, limit, pred];
                tessera_rt_launch_ctx(ctx, 1, lt.as_ptr());
                if *pred == 0 {
                    break;
                }
                tessera_rt_launch_ctx(ctx, 0, [s].as_ptr());
            }
            std::ptr::copy(s, count, 4);
            let chosen = if *(limit as *const i32) == 0 { 0 } else { 1 };
            std::ptr::copy(*(*ctx).constants.add(chosen), branch, 4);
            let mut host = 0;
            for table in [vec![count], if call { vec![count, branch] } else { vec![] }, vec![fed]] {
                if table.is_empty() {
                    continue;
                }
                let code = tessera_rt_host(ctx, host, table.as_ptr());
                if code != OK {
                    return code;
                }
                host += 1;
            }
        }
        OK
    }

    unsafe extern "C" fn control_flow_plain(
        args: *const *mut u8,
        results: *const *mut u8,
        ctx: *mut RunContext,
    ) -> i32 {
        unsafe { control_flow_steps(args, results, ctx, false) }
    }

    unsafe extern "C" fn control_flow_call(args: *const *mut u8, results: *const *mut u8, ctx: *mut RunContext) -> i32 {
        unsafe { control_flow_steps(args, results, ctx, true) }
    }

    fn control_flow(host: crate::step::HostFunctions) -> Executable {
        use crate::step::{HostEntry, HostValueEntry};
        let i32_entry = |name: &str, role| entry(name, 4, role);
        let scalar = |bytes: [u8; 4]| BufferRole::Constant(AlignedBuffer::from_bytes(&bytes).unwrap());
        let s32 = tessera_hlo::Shape::scalar(tessera_hlo::ElementType::S32);
        let mut hosts = vec![HostEntry::Outfeed {
            name: "out".into(),
            operand: HostValueEntry { shape: s32.clone(), buffers: vec![4] },
        }];
        let call = host.get("twice").cloned();
        if let Some(f) = &call {
            hosts.push(HostEntry::CustomCall {
                name: "cc".into(),
                target: "twice".into(),
                function: f.clone(),
                operands: vec![HostValueEntry { shape: s32.clone(), buffers: vec![4] }],
                result: HostValueEntry { shape: s32.clone(), buffers: vec![5] },
            });
        }
        hosts.push(HostEntry::Infeed { name: "in".into(), result: HostValueEntry { shape: s32, buffers: vec![8] } });
        let parts = ExecutableParts {
            buffers: vec![
                i32_entry("start", BufferRole::Parameter(0)),
                i32_entry("limit", BufferRole::Parameter(1)),
                i32_entry("s", BufferRole::Temp { space: 0, offset: 0 }),
                entry("pred", 1, BufferRole::Temp { space: 0, offset: 64 }),
                i32_entry("count", BufferRole::Result(0)),
                i32_entry("branch", BufferRole::Result(1)),
                i32_entry("c0", scalar(100i32.to_le_bytes())),
                i32_entry("c1", scalar(200i32.to_le_bytes())),
                i32_entry("fed", BufferRole::Result(2)),
            ],
            launches: vec![
                LaunchEntry { name: "inc".into(), function: increment, extent: 1, buffers: vec![2], traffic: None },
                LaunchEntry { name: "lt".into(), function: less, extent: 1, buffers: vec![2, 1, 3], traffic: None },
            ],
            hosts,
            checks: vec![],
            entry: if call.is_some() { control_flow_call } else { control_flow_plain },
            arenas: vec![(0, 128)],
            code: Box::new(()),
        };
        Executable::new(parts, &MemorySpaces::new(), Arc::new(ThreadPool::new(Some(1)).unwrap())).unwrap()
    }

    #[test]
    fn entries_launch_and_reach_the_host() {
        let exe = control_flow(Default::default());
        let i32s = |b: &[u8]| i32::from_le_bytes(b.try_into().unwrap());
        // The selector is `limit`: 0 picks branch 0, anything else the last.
        for (start, limit, count, branch) in
            [(0, 5, 5, 200), (7, 3, 7, 200), (-2, 0, 0, 100), (0, 1, 1, 200), (-3, -1, -1, 200)]
        {
            exe.push_infeed(tessera_hlo::Literal::scalar(start * 10));
            let (mut c, mut b, mut fed) = ([0u8; 4], [0u8; 4], [0u8; 4]);
            exe.run(&[&i32::to_le_bytes(start), &i32::to_le_bytes(limit)], &mut [&mut c, &mut b, &mut fed]).unwrap();
            assert_eq!((i32s(&c), i32s(&b), i32s(&fed)), (count, branch, start * 10), "start {start}, limit {limit}");
            // The condition's kernel once more than the body's, which runs count - start times.
            assert_eq!(exe.last_run_launches(), 2 * (count - start) as u64 + 1);
            assert_eq!(exe.pop_outfeed().unwrap().to_vec::<i32>().unwrap(), vec![count]);
        }
        let (mut c, mut b, mut fed) = ([0u8; 4], [0u8; 4], [0u8; 4]);
        let err = exe.run(&[&[0; 4], &[0; 4]], &mut [&mut c, &mut b, &mut fed]).unwrap_err();
        assert_eq!(err.to_string(), "infeed 'in': nothing is queued (Executable::push_infeed queues values)");

        let mut host = crate::step::HostFunctions::new();
        host.insert(
            "twice".into(),
            Arc::new(|args: &[tessera_hlo::Literal]| {
                let v = args[0].to_vec::<i32>().map_err(|e| e.to_string())?[0];
                if v < 0 {
                    panic!("twice of a negative count");
                }
                Ok(tessera_hlo::Literal::scalar(2 * v))
            }),
        );
        let exe = control_flow(host);
        exe.push_infeed(tessera_hlo::Literal::scalar(1i32));
        exe.run(&[&i32::to_le_bytes(0), &i32::to_le_bytes(21)], &mut [&mut c, &mut b, &mut fed]).unwrap();
        assert_eq!(i32s(&b), 42, "the custom-call overwrote the branch's value");
        // A host function's panic crosses the compiled entry as a panic of `run`, and the run
        // state comes back for the next run.
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (mut c, mut b, mut fed) = ([0u8; 4], [0u8; 4], [0u8; 4]);
            exe.run(&[&i32::to_le_bytes(-5), &i32::to_le_bytes(-9)], &mut [&mut c, &mut b, &mut fed])
        }));
        assert!(panic.is_err());
        exe.push_infeed(tessera_hlo::Literal::scalar(3i32));
        exe.run(&[&i32::to_le_bytes(0), &i32::to_le_bytes(2)], &mut [&mut c, &mut b, &mut fed]).unwrap();
        assert_eq!((i32s(&b), i32s(&fed)), (4, 3));
    }

    /// Fails check 1.
    unsafe extern "C" fn failing_check(_args: *const *mut u8, _results: *const *mut u8, ctx: *mut RunContext) -> i32 {
        unsafe { (*ctx).failed = 1 };
        BAD_DIMENSION_SIZE
    }

    #[test]
    fn a_failed_check_fails_the_run_with_its_message() {
        let parts = ExecutableParts {
            buffers: vec![],
            launches: vec![],
            hosts: vec![],
            checks: vec!["first".into(), "size 3 is not 4".into()],
            entry: failing_check,
            arenas: vec![],
            code: Box::new(()),
        };
        let exe = Executable::new(parts, &MemorySpaces::new(), Arc::new(ThreadPool::new(Some(1)).unwrap())).unwrap();
        assert_eq!(exe.run(&[], &mut []).unwrap_err(), RuntimeError::Check("size 3 is not 4".into()));
    }

    #[test]
    fn empty_executable_runs() {
        let parts = ExecutableParts {
            buffers: vec![],
            launches: vec![],
            hosts: vec![],
            checks: vec![],
            entry: nothing,
            arenas: vec![],
            code: Box::new(()),
        };
        let exe = Executable::new(parts, &MemorySpaces::new(), Arc::new(ThreadPool::new(Some(1)).unwrap())).unwrap();
        exe.run(&[], &mut []).unwrap();
    }
}
