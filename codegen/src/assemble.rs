//! Executable assembly: a buffer-assigned [`Program`] and its [`CompiledProgram`] become a
//! runtime [`Executable`]. Constants are copied into aligned buffers, each launch of the plan
//! gets its function, grid extent (from `Kernel::grid`) and buffer list, host operations are
//! bound to the host functions registered for their targets, and the machine code's owner
//! moves into the executable so it outlives every call.
//!
//! The program is checked against the kernels on the way (launch arity, buffer sizes against
//! what each kernel may address: the plan does it), so a lowering bug becomes an error, not a
//! stray access.

use std::sync::Arc;

use tessera_lower::kernel::{Kernel, MemType};
use tessera_lower::{BufferId, BufferKind, HostOp, HostValue, Launch, Program};
use tessera_runtime::{
    AlignedBuffer, BufferEntry, BufferRole, Executable, ExecutableParts, HostEntry, HostFunctions, HostValueEntry,
    LaunchEntry, MemorySpaces, RuntimeError, ThreadPool,
};

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
    let invalid = |m: String| Err(RuntimeError::Invalid(m));
    let CompiledProgram { kernels: compiled, entry, plan } = compiled;
    if compiled.functions.len() != program.kernels.len() {
        return invalid(format!(
            "{} compiled functions for {} kernels",
            compiled.functions.len(),
            program.kernels.len()
        ));
    }

    let mut buffers = Vec::with_capacity(program.buffers.len());
    for b in &program.buffers {
        let role = match &b.kind {
            BufferKind::Parameter(n) => BufferRole::Parameter(*n),
            BufferKind::Result(n) => BufferRole::Result(*n),
            BufferKind::Temp => match b.offset {
                Some(offset) => BufferRole::Temp { space: b.memory_space, offset },
                None => return invalid(format!("temp '{}' has no offset (buffer assignment did not run)", b.name)),
            },
            BufferKind::Constant(bytes) => {
                if bytes.len() as u64 != b.bytes {
                    return invalid(format!("constant '{}' holds {} bytes, not {}", b.name, bytes.len(), b.bytes));
                }
                BufferRole::Constant(AlignedBuffer::from_bytes(bytes)?)
            }
        };
        buffers.push(BufferEntry { name: b.name.clone(), bytes: b.bytes, role });
    }
    for (n, id) in program.parameters.iter().enumerate() {
        if program.buffers.get(id.0 as usize).map(|b| &b.kind) != Some(&BufferKind::Parameter(n)) {
            return invalid(format!("parameter {n} is buffer {}, which is not parameter {n}", id.0));
        }
    }
    for (n, id) in program.results.iter().enumerate() {
        if program.buffers.get(id.0 as usize).map(|b| &b.kind) != Some(&BufferKind::Result(n)) {
            return invalid(format!("result {n} is buffer {}, which is not result {n}", id.0));
        }
    }

    let mut launches = Vec::with_capacity(plan.launches.len());
    for (kernel, args) in &plan.launches {
        let launch = Launch { kernel: *kernel, args: args.clone() };
        let k = check_launch(program, &launch).map_err(RuntimeError::Invalid)?;
        launches.push(LaunchEntry {
            name: k.name.clone(),
            function: compiled.functions[*kernel],
            extent: k.grid.extent,
            buffers: args.iter().map(|id| id.0 as usize).collect(),
            traffic: k.traffic_bytes(),
        });
    }
    let hosts = plan.hosts.iter().map(|op| host_op(program, host, op)).collect::<Result<_, _>>()?;
    let parts = ExecutableParts {
        buffers,
        launches,
        hosts,
        checks: plan.checks.clone(),
        entry,
        arenas: program.arenas.clone(),
        code: compiled.code,
    };
    Executable::new(parts, spaces, pool)
}

fn buffer(program: &Program, id: BufferId) -> Result<usize, RuntimeError> {
    let i = id.0 as usize;
    if i < program.buffers.len() {
        Ok(i)
    } else {
        Err(RuntimeError::Invalid(format!("a step names buffer {i} of {}", program.buffers.len())))
    }
}

fn host_value(program: &Program, value: &HostValue) -> Result<HostValueEntry, RuntimeError> {
    let buffers = value.buffers.iter().map(|&b| buffer(program, b)).collect::<Result<_, _>>()?;
    Ok(HostValueEntry { shape: value.shape.clone(), buffers })
}

/// The runtime's form of a host operation, a custom-call bound to its target's function.
fn host_op(program: &Program, host: &HostFunctions, op: &HostOp) -> Result<HostEntry, RuntimeError> {
    Ok(match op {
        HostOp::CustomCall { name, target, operands, result } => {
            let Some(function) = host.get(target) else {
                return Err(RuntimeError::Invalid(format!(
                    "custom-call '{name}' calls target '{target}', for which no host function is registered"
                )));
            };
            HostEntry::CustomCall {
                name: name.clone(),
                target: target.clone(),
                function: function.clone(),
                operands: operands.iter().map(|o| host_value(program, o)).collect::<Result<_, _>>()?,
                result: host_value(program, result)?,
            }
        }
        HostOp::Infeed { name, result } => {
            HostEntry::Infeed { name: name.clone(), result: host_value(program, result)? }
        }
        HostOp::Outfeed { name, operand } => {
            HostEntry::Outfeed { name: name.clone(), operand: host_value(program, operand)? }
        }
    })
}

/// The kernel a launch runs, once the launch is shown consistent with it: one buffer per
/// kernel buffer, each as large as the kernel may address, none read-only that it writes.
pub(crate) fn check_launch<'p>(program: &'p Program, launch: &Launch) -> Result<&'p Kernel, String> {
    let Some(kernel) = program.kernels.get(launch.kernel) else {
        return Err(format!("a launch names kernel {} of {}", launch.kernel, program.kernels.len()));
    };
    if launch.args.len() != kernel.buffers.len() {
        return Err(format!(
            "a launch binds {} buffers to kernel '{}', which has {}",
            launch.args.len(),
            kernel.name,
            kernel.buffers.len()
        ));
    }
    for (kb, id) in kernel.buffers.iter().zip(&launch.args) {
        let Some(b) = program.buffers.get(id.0 as usize) else {
            return Err(format!("a launch of '{}' names buffer {} of {}", kernel.name, id.0, program.buffers.len()));
        };
        let needed = addressed_bytes(kb.mem, kb.len);
        if needed.is_none_or(|n| n > b.bytes) {
            return Err(format!(
                "kernel '{}' addresses {} elements of buffer '{}' ({} bytes)",
                kernel.name, kb.len, b.name, b.bytes
            ));
        }
        if kb.writable && matches!(b.kind, BufferKind::Parameter(_) | BufferKind::Constant(_)) {
            return Err(format!("kernel '{}' writes read-only buffer '{}'", kernel.name, b.name));
        }
    }
    Ok(kernel)
}

/// Bytes spanned by `len` elements of `mem` (sub-byte elements packed).
fn addressed_bytes(mem: MemType, len: i64) -> Option<u64> {
    let len = u64::try_from(len).ok()?;
    Some(len.checked_mul(u64::from(mem.bits()))?.div_ceil(8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::{ArrayShape, ElementType};
    use tessera_lower::kernel::{Grid, Kernel, KernelBuffer, Ty, VarId};
    use tessera_lower::{assign_buffers, Buffer, Step};

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
        let (code, entry) = crate::llvm::entry_calling(&plan, &functions).map_err(|e| e.to_string())?;
        let kernels = crate::CompiledKernels { functions, code: Box::new(code), timings: Default::default() };
        Ok(CompiledProgram { kernels, entry, plan })
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
        assert_eq!(addressed_bytes(MemType::Packed { bits: 4, pred: false }, 5), Some(3));
        assert_eq!(addressed_bytes(MemType::Pred, 5), Some(5));
        assert_eq!(addressed_bytes(MemType::Scalar(Ty::F64), 2), Some(16));
        assert_eq!(addressed_bytes(MemType::Scalar(Ty::F64), -1), None);
    }
}
