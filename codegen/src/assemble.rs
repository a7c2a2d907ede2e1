//! Executable assembly: a buffer-assigned [`Program`] and its [`CompiledProgram`] become a
//! runtime [`Executable`], through the program's image (`crate::image`): the image is checked
//! against the program and the kernels (launch arity, buffer sizes against what each kernel
//! may address), so a lowering bug becomes an error, not a stray access; then constants are
//! copied into aligned buffers, each launch gets its function, host operations are bound to
//! the host functions registered for their targets, and the machine code's owner moves into
//! the executable so it outlives every call. A cached program is instantiated from its image
//! the same way.

use std::sync::Arc;

use tessera_lower::Program;
use tessera_runtime::{Executable, HostFunctions, MemorySpaces, RuntimeError, ThreadPool};

use crate::image::ProgramImage;
use crate::CompiledProgram;

/// Builds the executable for `program` (after buffer assignment) from its compiled kernels and
/// entry; a custom-call in it is an error (no host functions: see [`assemble_with_host`]).
pub fn assemble(
    program: &Program,
    compiled: CompiledProgram,
    spaces: &MemorySpaces,
    pool: Arc<ThreadPool>,
) -> Result<Executable, RuntimeError> {
    assemble_with_host(program, compiled, spaces, pool, &HostFunctions::new())
}

/// [`assemble`] with the host functions custom-calls run, by target; a custom-call whose
/// target has none is an error naming the target.
pub fn assemble_with_host(
    program: &Program,
    compiled: CompiledProgram,
    spaces: &MemorySpaces,
    pool: Arc<ThreadPool>,
    host: &HostFunctions,
) -> Result<Executable, RuntimeError> {
    assemble_image(program, compiled, spaces, pool, host).map(|(exe, _)| exe)
}

/// [`assemble_with_host`], returning the program's image too (what the compile cache stores).
pub fn assemble_image(
    program: &Program,
    compiled: CompiledProgram,
    spaces: &MemorySpaces,
    pool: Arc<ThreadPool>,
    host: &HostFunctions,
) -> Result<(Executable, ProgramImage), RuntimeError> {
    let CompiledProgram { kernels, entry, plan, objects, tier } = compiled;
    let image = ProgramImage::new(tier, program, &plan, objects)?;
    if kernels.functions.len() != image.code.kernels.len() {
        return Err(RuntimeError::Invalid(format!(
            "{} compiled functions for {} kernels",
            kernels.functions.len(),
            image.code.kernels.len()
        )));
    }
    let exe = image.instantiate(kernels, entry, spaces, pool, host)?;
    Ok((exe, image))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::{ArrayShape, ElementType};
    use tessera_lower::kernel::{Grid, Kernel, KernelBuffer, MemType, Ty, VarId};
    use tessera_lower::{assign_buffers, Buffer, BufferId, BufferKind, Launch, Step};

    /// out[i] = a[i] + b[i] over i32, buffers (a, b, out).
    unsafe extern "C" fn add_i32(buffers: *const *mut u8, lo: i64, hi: i64) {
        unsafe {
            let (a, b, out) = (*buffers as *const i32, *buffers.add(1) as *const i32, *buffers.add(2) as *mut i32);
            for i in lo as usize..hi as usize {
                *out.add(i) = (*a.add(i)).wrapping_add(*b.add(i));
            }
        }
    }

    fn buffer(name: &str, n: i64, kind: BufferKind) -> Buffer {
        Buffer {
            name: name.into(),
            shape: ArrayShape::new(ElementType::S32, &[n]),
            bytes: 4 * n as u64,
            memory_space: 0,
            kind,
            offset: None,
        }
    }

    fn add_kernel(n: i64) -> Kernel {
        let kb =
            |name: &str, writable| KernelBuffer { name: name.into(), mem: MemType::Scalar(Ty::I32), len: n, writable };
        Kernel {
            name: "add".into(),
            buffers: vec![kb("a", false), kb("b", false), kb("out", true)],
            grid: Grid { var: VarId(0), extent: n },
            body: vec![],
        }
    }

    /// r = (p + c) + p, through a temp.
    fn program(n: i64) -> Program {
        let c: Vec<u8> = (0..n as i32).flat_map(|x| (10 * x).to_le_bytes()).collect();
        Program {
            buffers: vec![
                buffer("p", n, BufferKind::Parameter(0)),
                buffer("c", n, BufferKind::Constant(c)),
                buffer("t", n, BufferKind::Temp),
                buffer("r", n, BufferKind::Result(0)),
            ],
            kernels: vec![add_kernel(n)],
            steps: vec![
                Step::Launch(Launch { kernel: 0, args: vec![BufferId(0), BufferId(1), BufferId(2)] }),
                Step::Launch(Launch { kernel: 0, args: vec![BufferId(2), BufferId(0), BufferId(3)] }),
            ],
            parameters: vec![BufferId(0)],
            results: vec![BufferId(3)],
            arenas: vec![],
            aliases: vec![],
        }
    }

    fn launch_mut(p: &mut Program, i: usize) -> &mut Launch {
        match &mut p.steps[i] {
            Step::Launch(l) => l,
            _ => panic!("step {i} is not a launch"),
        }
    }

    /// `program`'s entry (LLVM's, which calls kernels at any address) over `count` copies of
    /// `add_i32`; a program the plan refuses is its error.
    fn compiled(program: &Program, count: usize) -> Result<CompiledProgram, String> {
        let plan = crate::entry::EntryPlan::new(program)?;
        let functions = vec![add_i32 as crate::KernelFn; count];
        let (kernels, entry, objects) = crate::llvm::entry_calling(&plan, &functions).map_err(|e| e.to_string())?;
        Ok(CompiledProgram { kernels, entry, plan, objects, tier: crate::Tier::Llvm })
    }

    fn pool() -> Arc<ThreadPool> {
        Arc::new(ThreadPool::new(Some(2)).unwrap())
    }

    #[test]
    fn assembled_program_runs() {
        for n in [3i64, 50_000] {
            let mut p = program(n);
            assign_buffers(&mut p, &Default::default()).unwrap();
            let exe = assemble(&p, compiled(&p, 1).unwrap(), &MemorySpaces::new(), pool()).unwrap();
            assert_eq!(exe.launches()[0].extent, n);
            let input: Vec<u8> = (0..n as i32).flat_map(|x| x.to_le_bytes()).collect();
            let mut out = vec![0u8; input.len()];
            exe.run(&[&input], &mut [&mut out]).unwrap();
            let got: Vec<i32> = out.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
            assert_eq!(got, (0..n as i32).map(|x| 12 * x).collect::<Vec<_>>());
        }
    }

    #[test]
    fn inconsistent_programs_are_errors() {
        let mut unassigned = program(4);
        let err = compiled(&unassigned, 1).err().unwrap();
        assert!(err.contains("has no offset"), "{err}");
        assign_buffers(&mut unassigned, &Default::default()).unwrap();
        let err = assemble(&unassigned, compiled(&unassigned, 2).unwrap(), &MemorySpaces::new(), pool()).err().unwrap();
        assert!(err.to_string().contains("2 compiled functions for 1 kernels"), "{err}");

        let mut too_long = program(4);
        too_long.kernels[0].buffers[1].len = 5;
        assign_buffers(&mut too_long, &Default::default()).unwrap();
        let err = compiled(&too_long, 1).err().unwrap();
        assert!(err.contains("addresses 5 elements of buffer 'c' (16 bytes)"), "{err}");

        let mut writes_param = program(4);
        launch_mut(&mut writes_param, 1).args = vec![BufferId(2), BufferId(3), BufferId(0)];
        assign_buffers(&mut writes_param, &Default::default()).unwrap();
        let err = compiled(&writes_param, 1).err().unwrap();
        assert!(err.contains("writes read-only buffer 'p'"), "{err}");

        let mut arity = program(4);
        launch_mut(&mut arity, 0).args.pop();
        assign_buffers(&mut arity, &Default::default()).unwrap();
        let err = compiled(&arity, 1).err().unwrap();
        assert!(err.contains("binds 2 buffers to kernel 'add', which has 3"), "{err}");
    }

    #[test]
    fn packed_buffers_count_bits() {
        use crate::image::addressed_bytes;
        assert_eq!(addressed_bytes(MemType::Packed { bits: 4, pred: false }, 5), Some(3));
        assert_eq!(addressed_bytes(MemType::Pred, 5), Some(5));
        assert_eq!(addressed_bytes(MemType::Scalar(Ty::F64), 2), Some(16));
        assert_eq!(addressed_bytes(MemType::Scalar(Ty::F64), -1), None);
    }
}
