//! Machine code loaded from relocatable objects: both JIT tiers write their code as objects
//! (the form the compile cache stores), and LLVM's ORC JIT linker (JITLink, through `LLJIT`)
//! places them in executable memory, applies their relocations and binds their undefined
//! symbols: the runtime's functions (by the addresses `tessera_runtime` gives), and anything
//! else (libm, `memcpy`, compiler-rt helpers LLVM calls) from the process. One loader for a
//! fresh compile and a cached one means the code that runs is exactly the code that is cached.

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};

use llvm_sys::core::LLVMCreateMemoryBufferWithMemoryRangeCopy;
use llvm_sys::error::{LLVMDisposeErrorMessage, LLVMErrorRef, LLVMGetErrorMessage};
use llvm_sys::orc2::lljit::{
    LLVMOrcCreateLLJIT, LLVMOrcCreateLLJITBuilder, LLVMOrcLLJITAddObjectFile, LLVMOrcLLJITGetExecutionSession,
    LLVMOrcLLJITGetGlobalPrefix, LLVMOrcLLJITMangleAndIntern, LLVMOrcLLJITRef,
};
use llvm_sys::orc2::{
    LLVMJITEvaluatedSymbol, LLVMJITSymbolFlags, LLVMJITSymbolGenericFlags, LLVMOrcAbsoluteSymbols,
    LLVMOrcCJITDylibSearchOrderElement, LLVMOrcCLookupSetElement, LLVMOrcCSymbolMapPair, LLVMOrcCSymbolMapPairs,
    LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess, LLVMOrcDisposeMaterializationUnit,
    LLVMOrcExecutionSessionCreateJITDylib, LLVMOrcExecutionSessionLookup, LLVMOrcExecutionSessionRef,
    LLVMOrcExecutionSessionSetErrorReporter, LLVMOrcJITDylibAddGenerator, LLVMOrcJITDylibClear, LLVMOrcJITDylibDefine,
    LLVMOrcJITDylibLookupFlags, LLVMOrcJITDylibRef, LLVMOrcLookupKind, LLVMOrcSymbolLookupFlags,
};

/// The process's JIT linker: one `LLJIT` (its creation, a target machine included, costs
/// about 0.6 ms, more than linking a small program), shared by every [`LoadedCode`], each in
/// a library (`JITDylib`) of its own. ORC's C interface cannot remove a library from the
/// session, so a cleared library goes back to `idle` for the next program: the session holds
/// as many libraries as programs were ever alive at once, not one per program ever loaded.
struct Jit {
    jit: LLVMOrcLLJITRef,
    session: LLVMOrcExecutionSessionRef,
    /// Numbers the libraries (their names must be unique in the session).
    libraries: AtomicU64,
    /// Empty libraries (each already searching the process's symbols), ready for reuse.
    idle: Mutex<Vec<Library>>,
}

/// A library of the session.
struct Library(LLVMOrcJITDylibRef);
// SAFETY: a library is only touched through the internally synchronized session.
unsafe impl Send for Library {}

// SAFETY: ORC's execution session is internally synchronized; the instance lives as long as
// the process (it is never disposed of, so no use can outlive it).
unsafe impl Send for Jit {}
unsafe impl Sync for Jit {}

static JIT: OnceLock<Result<Jit, String>> = OnceLock::new();

fn jit() -> Result<&'static Jit, String> {
    JIT.get_or_init(|| {
        crate::llvm::initialize_native()?;
        let mut jit = null_mut();
        // SAFETY: the builder is consumed by `LLVMOrcCreateLLJIT` whatever it returns; the
        // reporter is a plain function.
        unsafe {
            check(LLVMOrcCreateLLJIT(&mut jit, LLVMOrcCreateLLJITBuilder()))
                .map_err(|e| format!("creating the JIT linker: {e}"))?;
            let session = LLVMOrcLLJITGetExecutionSession(jit);
            LLVMOrcExecutionSessionSetErrorReporter(session, ignore_error, null_mut());
            Ok(Jit { jit, session, libraries: AtomicU64::new(0), idle: Mutex::new(Vec::new()) })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Creates the process's JIT linker now (it is otherwise created by the first
/// [`LoadedCode::load`]): a client calls it on a thread of its own when it starts, so the
/// linker is ready by the time its first compile needs it.
pub fn prepare() {
    let _ = jit();
}

/// Linked objects in executable memory; dropping it frees the code.
pub struct LoadedCode {
    jit: &'static Jit,
    library: LLVMOrcJITDylibRef,
}

// SAFETY: the library is only touched through the session, which is internally synchronized;
// after `load` the only calls are lookups and `Drop`, which takes `&mut self`.
unsafe impl Send for LoadedCode {}
unsafe impl Sync for LoadedCode {}

impl Drop for LoadedCode {
    fn drop(&mut self) {
        // Removes everything the library holds (its code and data included), then keeps the
        // empty library for the next program. A library that failed to clear is not reused.
        // SAFETY: the library is live, and nothing can call into its code any more.
        if unsafe { check(LLVMOrcJITDylibClear(self.library)) }.is_ok() {
            self.jit.idle.lock().unwrap_or_else(|e| e.into_inner()).push(Library(self.library));
        }
    }
}
/// An LLVM error's message (consuming the error), or `Ok` for no error.
///
/// # Safety
/// `error` must be null or an unconsumed LLVM error.
unsafe fn check(error: LLVMErrorRef) -> Result<(), String> {
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: the caller passes an unconsumed error; getting its message consumes it.
    unsafe {
        let message = LLVMGetErrorMessage(error);
        let text = CStr::from_ptr(message).to_string_lossy().into_owned();
        LLVMDisposeErrorMessage(message);
        Err(text)
    }
}

/// # Safety
/// As [`check`].
unsafe fn consume(error: LLVMErrorRef) {
    // SAFETY: as the caller promises.
    let _ = unsafe { check(error) };
}

/// Session errors reach the caller through the failing lookup; ORC's default reporter would
/// also print them.
extern "C" fn ignore_error(_: *mut c_void, error: LLVMErrorRef) {
    // SAFETY: ORC hands the reporter an error it owns no longer.
    unsafe { consume(error) };
}

impl LoadedCode {
    /// Links `objects` (relocatable objects for the host) into fresh executable memory,
    /// binding `symbols` (name, address) first and the process's own symbols after. Objects
    /// are linked when a symbol of theirs is first looked up ([`LoadedCode::addresses`]).
    pub fn load(objects: &[&[u8]], symbols: &[(&str, *const u8)]) -> Result<LoadedCode, String> {
        let jit = jit()?;
        let idle = jit.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let library = match idle {
            Some(Library(library)) => library,
            None => new_library(jit)?,
        };
        // From here `Drop` clears the library on every error path.
        let code = LoadedCode { jit, library };
        let mut names = Vec::with_capacity(symbols.len());
        for (name, _) in symbols {
            names.push(CString::new(*name).map_err(|_| format!("symbol {name:?} holds a NUL"))?);
        }
        // SAFETY: the library is live; every pool entry made by `MangleAndIntern` is handed to
        // `LLVMOrcAbsoluteSymbols`, which takes it over, and the materialization unit goes to
        // `JITDylibDefine`, which takes it over unless it fails (then it is disposed of here).
        // Memory buffers are copies, owned by the JIT once added.
        unsafe {
            let flags = || LLVMJITSymbolFlags {
                GenericFlags: LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsExported as u8
                    | LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsCallable as u8,
                TargetFlags: 0,
            };
            let mut pairs: Vec<LLVMOrcCSymbolMapPair> = names
                .iter()
                .zip(symbols)
                .map(|(name, &(_, address))| LLVMOrcCSymbolMapPair {
                    Name: LLVMOrcLLJITMangleAndIntern(jit.jit, name.as_ptr()),
                    Sym: LLVMJITEvaluatedSymbol { Address: address as u64, Flags: flags() },
                })
                .collect();
            let unit = LLVMOrcAbsoluteSymbols(pairs.as_mut_ptr(), pairs.len());
            if let Err(e) = check(LLVMOrcJITDylibDefine(library, unit)) {
                LLVMOrcDisposeMaterializationUnit(unit);
                return Err(format!("defining the runtime's symbols: {e}"));
            }
            for (i, object) in objects.iter().enumerate() {
                let name = CString::new(format!("tessera-object-{i}")).expect("no NUL");
                let buffer = LLVMCreateMemoryBufferWithMemoryRangeCopy(
                    object.as_ptr().cast::<c_char>(),
                    object.len(),
                    name.as_ptr(),
                );
                check(LLVMOrcLLJITAddObjectFile(jit.jit, library, buffer))
                    .map_err(|e| format!("adding object {i}: {e}"))?;
            }
        }
        Ok(code)
    }

    /// The address of each defined symbol of `names`, linking the objects they need (in one
    /// lookup, so objects calling each other link together); an unknown symbol, an undefined
    /// reference or a relocation that cannot be applied is an error.
    pub fn addresses(&self, names: &[&str]) -> Result<Vec<*const u8>, String> {
        let mut c_names = Vec::with_capacity(names.len());
        for name in names {
            c_names.push(CString::new(*name).map_err(|_| format!("symbol {name:?} holds a NUL"))?);
        }
        let (sender, receiver) = mpsc::channel();
        // SAFETY: the library and session are live; the lookup takes over the interned names
        // of the set (and releases them); the callback gets a pointer to `request`, which
        // outlives it because this function waits for the callback's message.
        unsafe {
            let mut set: Vec<LLVMOrcCLookupSetElement> = c_names
                .iter()
                .map(|n| LLVMOrcCLookupSetElement {
                    Name: LLVMOrcLLJITMangleAndIntern(self.jit.jit, n.as_ptr()),
                    LookupFlags: LLVMOrcSymbolLookupFlags::LLVMOrcSymbolLookupFlagsRequiredSymbol,
                })
                .collect();
            let request = Request { wanted: set.iter().map(|e| e.Name as usize).collect(), sender };
            let mut order = [LLVMOrcCJITDylibSearchOrderElement {
                JD: self.library,
                JDLookupFlags: LLVMOrcJITDylibLookupFlags::LLVMOrcJITDylibLookupFlagsMatchAllSymbols,
            }];
            LLVMOrcExecutionSessionLookup(
                self.jit.session,
                LLVMOrcLookupKind::LLVMOrcLookupKindStatic,
                order.as_mut_ptr(),
                order.len(),
                set.as_mut_ptr(),
                set.len(),
                lookup_done,
                (&request as *const Request).cast_mut().cast(),
            );
            let found = receiver.recv().map_err(|_| "the JIT linker never answered".to_string())?;
            let found = found.map_err(|e| format!("linking: {e}"))?;
            found
                .iter()
                .zip(names)
                .map(|(&address, name)| match address {
                    0 => Err(format!("linking: '{name}' has no address")),
                    address => Ok(address as *const u8),
                })
                .collect()
        }
    }
}

/// A new library of the session, searching the process's symbols (after its own).
fn new_library(jit: &Jit) -> Result<LLVMOrcJITDylibRef, String> {
    let number = jit.libraries.fetch_add(1, Ordering::Relaxed);
    let name = CString::new(format!("tessera-program-{number}")).expect("no NUL");
    let mut library = null_mut();
    let mut generator = null_mut();
    // SAFETY: the session is live and the name outlives the call; the generator, once made,
    // is handed to the library, which owns it from then on.
    unsafe {
        check(LLVMOrcExecutionSessionCreateJITDylib(jit.session, &mut library, name.as_ptr()))
            .map_err(|e| format!("creating a JIT library: {e}"))?;
        check(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
            &mut generator,
            LLVMOrcLLJITGetGlobalPrefix(jit.jit),
            None,
            null_mut(),
        ))
        .map_err(|e| format!("searching the process's symbols: {e}"))?;
        LLVMOrcJITDylibAddGenerator(library, generator);
    }
    Ok(library)
}

/// What [`lookup_done`] answers: the address of each wanted name (a symbol pool entry, by
/// address: entries are unique per name), 0 if missing.
struct Request {
    wanted: Vec<usize>,
    sender: mpsc::Sender<Result<Vec<u64>, String>>,
}

/// Passes a lookup's result (or error) to the waiting [`LoadedCode::addresses`].
extern "C" fn lookup_done(error: LLVMErrorRef, result: LLVMOrcCSymbolMapPairs, count: usize, ctx: *mut c_void) {
    // SAFETY: `ctx` is the request `addresses` passed, alive until it receives this message;
    // on success `result` holds `count` pairs, valid (names included) during this call, and
    // the lookup holds the wanted names until then.
    unsafe {
        let request = &*(ctx as *const Request);
        let message = check(error).map(|()| {
            let pairs = std::slice::from_raw_parts(result, count);
            request
                .wanted
                .iter()
                .map(|&w| pairs.iter().find(|p| p.Name as usize == w).map_or(0, |p| p.Sym.Address))
                .collect()
        });
        let _ = request.sender.send(message);
    }
}
