//! A compiled program as plain data: its objects ([`ObjectCode`]) and everything its runtime
//! executable is built from (the buffer table with the constants' bytes, the launches, the
//! host operations, the run-time checks' messages, the arenas), with no address in it.
//!
//! A fresh compile makes an image from the lowered program and its entry plan
//! ([`ProgramImage::new`], which checks them against each other and against the kernels); the
//! compile cache stores images ([`ProgramImage::encode`], [`ProgramImage::decode`]); and either
//! way [`ProgramImage::instantiate`] builds the executable from an image and its loaded code.
//! So a cached program runs exactly as a freshly compiled one does.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tessera_hlo::Shape;
use tessera_lower::kernel::{Kernel, MemType};
use tessera_lower::{BufferId, BufferKind, HostOp, HostValue, Launch, Program};
use tessera_runtime::{
    AlignedBuffer, BufferEntry, BufferRole, EntryFn, Executable, ExecutableParts, HostEntry, HostFunctions,
    HostValueEntry, LaunchEntry, MemorySpaces, RuntimeError, ThreadPool,
};

use crate::entry::EntryPlan;
use crate::{CodegenError, CompiledKernels, ObjectCode, Tier};

/// A compiled program, ready to store or to instantiate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramImage {
    /// The tier that compiled it.
    pub tier: Tier,
    pub code: ObjectCode,
    pub buffers: Vec<ImageBuffer>,
    /// The launches the entry makes, by the index it passes the runtime.
    pub launches: Vec<ImageLaunch>,
    /// The host operations the entry performs, by index.
    pub hosts: Vec<ImageHost>,
    /// The message of each run-time check, by the index a failing entry reports.
    pub checks: Vec<String>,
    /// Arena size in bytes per memory space, in the order the entry's temps follow.
    pub arenas: Vec<(i64, u64)>,
    /// `(result, parameter)` pairs a donated run may place in one memory (`Program::aliases`).
    pub aliases: Vec<(usize, usize)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageBuffer {
    pub name: String,
    pub bytes: u64,
    pub role: ImageRole,
}

/// Where a buffer lives (`tessera_runtime::BufferRole`, with a constant's bytes as data).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ImageRole {
    Parameter(usize),
    Result(usize),
    Temp { space: i64, offset: u64 },
    Constant(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageLaunch {
    /// The kernel's name, for profiles and diagnostics.
    pub name: String,
    /// Index into the code's kernels.
    pub kernel: usize,
    pub extent: i64,
    /// Indices into the buffer table, one per kernel buffer.
    pub buffers: Vec<usize>,
    /// Bytes one launch moves, when known (the thread pool splits launches by it).
    pub traffic: Option<u64>,
}

/// A host operation (`tessera_runtime::HostEntry`), its custom-call bound by target name
/// when instantiated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ImageHost {
    CustomCall { name: String, target: String, operands: Vec<ImageValue>, result: ImageValue },
    Infeed { name: String, result: ImageValue },
    Outfeed { name: String, operand: ImageValue },
}

/// A value the host sees as a literal: its shape as HLO text (printing is canonical, so it
/// parses back to the same shape) and the buffers of its array leaves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageValue {
    pub shape: String,
    pub buffers: Vec<usize>,
}

/// Bumped whenever the encoding changes, so an old cache entry is never misread.
const FORMAT: u32 = 1;

impl ProgramImage {
    /// The image of `program` (after buffer assignment) compiled by `tier` into `code`,
    /// following `plan`. The program is checked on the way (launch arity, buffer sizes against
    /// what each kernel may address, parameters and results in place), so a lowering bug
    /// becomes an error, not a stray access.
    pub fn new(
        tier: Tier,
        program: &Program,
        plan: &EntryPlan,
        code: ObjectCode,
    ) -> Result<ProgramImage, RuntimeError> {
        let invalid = |m: String| Err(RuntimeError::Invalid(m));
        if code.kernels.len() != program.kernels.len() {
            return invalid(format!("{} compiled functions for {} kernels", code.kernels.len(), program.kernels.len()));
        }
        let mut buffers = Vec::with_capacity(program.buffers.len());
        for b in &program.buffers {
            let role = match &b.kind {
                BufferKind::Parameter(n) => ImageRole::Parameter(*n),
                BufferKind::Result(n) => ImageRole::Result(*n),
                BufferKind::Temp => match b.offset {
                    Some(offset) => ImageRole::Temp { space: b.memory_space, offset },
                    None => return invalid(format!("temp '{}' has no offset (buffer assignment did not run)", b.name)),
                },
                BufferKind::Constant(bytes) => {
                    if bytes.len() as u64 != b.bytes {
                        return invalid(format!("constant '{}' holds {} bytes, not {}", b.name, bytes.len(), b.bytes));
                    }
                    ImageRole::Constant(bytes.clone())
                }
            };
            buffers.push(ImageBuffer { name: b.name.clone(), bytes: b.bytes, role });
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
            launches.push(ImageLaunch {
                name: k.name.clone(),
                kernel: *kernel,
                extent: k.grid.extent,
                buffers: args.iter().map(|id| id.0 as usize).collect(),
                traffic: k.traffic_bytes(),
            });
        }
        let hosts = plan.hosts.iter().map(|op| host_op(program, op)).collect::<Result<_, _>>()?;
        Ok(ProgramImage {
            tier,
            code,
            buffers,
            launches,
            hosts,
            checks: plan.checks.clone(),
            arenas: program.arenas.clone(),
            aliases: program.aliases.clone(),
        })
    }

    /// Links the image's objects into memory: its kernels and its entry.
    pub fn load(&self, timings: &mut crate::Timings) -> Result<(CompiledKernels, EntryFn), CodegenError> {
        self.code.load_program(self.tier, timings)
    }

    /// The executable of this image, running `kernels` and `entry` (its code, loaded), with
    /// `host`'s functions bound to its custom-calls; a custom-call whose target has none is
    /// an error naming the target. Every index is checked, so an inconsistent image is an
    /// error, never a stray access.
    pub fn instantiate(
        &self,
        kernels: CompiledKernels,
        entry: EntryFn,
        spaces: &MemorySpaces,
        pool: Arc<ThreadPool>,
        host: &HostFunctions,
    ) -> Result<Executable, RuntimeError> {
        let invalid = |m: String| RuntimeError::Invalid(m);
        let buffers = self
            .buffers
            .iter()
            .map(|b| {
                let role = match &b.role {
                    ImageRole::Parameter(n) => BufferRole::Parameter(*n),
                    ImageRole::Result(n) => BufferRole::Result(*n),
                    &ImageRole::Temp { space, offset } => BufferRole::Temp { space, offset },
                    ImageRole::Constant(bytes) => {
                        if bytes.len() as u64 != b.bytes {
                            return Err(invalid(format!(
                                "constant '{}' holds {} bytes, not {}",
                                b.name,
                                bytes.len(),
                                b.bytes
                            )));
                        }
                        BufferRole::Constant(AlignedBuffer::from_bytes(bytes)?)
                    }
                };
                Ok(BufferEntry { name: b.name.clone(), bytes: b.bytes, role })
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let launches = self
            .launches
            .iter()
            .map(|l| {
                let function = *kernels.functions.get(l.kernel).ok_or_else(|| {
                    invalid(format!("launch of '{}' names kernel {} of {}", l.name, l.kernel, kernels.functions.len()))
                })?;
                Ok(LaunchEntry {
                    name: l.name.clone(),
                    function,
                    extent: l.extent,
                    buffers: l.buffers.clone(),
                    traffic: l.traffic,
                })
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let hosts = self.hosts.iter().map(|op| host_entry(op, host)).collect::<Result<_, _>>()?;
        let parts = ExecutableParts {
            buffers,
            launches,
            hosts,
            checks: self.checks.clone(),
            entry,
            arenas: self.arenas.clone(),
            code: kernels.code,
        };
        let mut exe = Executable::new(parts, spaces, pool)?;
        exe.set_aliases(self.aliases.clone())?;
        Ok(exe)
    }

    /// The custom-call targets the image's host operations call.
    pub fn custom_call_targets(&self) -> impl Iterator<Item = (&str, &str)> {
        self.hosts.iter().filter_map(|h| match h {
            ImageHost::CustomCall { name, target, .. } => Some((name.as_str(), target.as_str())),
            _ => None,
        })
    }

    /// The image as bytes, for [`ProgramImage::decode`] in this build of Tessera.
    pub fn encode(&self) -> Vec<u8> {
        let bytes = FORMAT.to_le_bytes().to_vec();
        // Serializing plain data into a vector cannot fail.
        postcard::to_extend(self, bytes).expect("an image serializes")
    }

    /// An image from [`ProgramImage::encode`]'s bytes; anything else is an error.
    pub fn decode(bytes: &[u8]) -> Result<ProgramImage, String> {
        let (format, rest) = bytes.split_first_chunk::<4>().ok_or("the image is truncated")?;
        if u32::from_le_bytes(*format) != FORMAT {
            return Err(format!("image format {} is not {FORMAT}", u32::from_le_bytes(*format)));
        }
        let (image, unread) = postcard::take_from_bytes::<ProgramImage>(rest).map_err(|e| format!("{e}"))?;
        if !unread.is_empty() {
            return Err(format!("{} bytes follow the image", unread.len()));
        }
        Ok(image)
    }
}

fn buffer(program: &Program, id: BufferId) -> Result<usize, RuntimeError> {
    let i = id.0 as usize;
    if i < program.buffers.len() {
        Ok(i)
    } else {
        Err(RuntimeError::Invalid(format!("a step names buffer {i} of {}", program.buffers.len())))
    }
}

fn image_value(program: &Program, value: &HostValue) -> Result<ImageValue, RuntimeError> {
    let buffers = value.buffers.iter().map(|&b| buffer(program, b)).collect::<Result<_, _>>()?;
    Ok(ImageValue { shape: value.shape.to_string(), buffers })
}

fn host_op(program: &Program, op: &HostOp) -> Result<ImageHost, RuntimeError> {
    Ok(match op {
        HostOp::CustomCall { name, target, operands, result } => ImageHost::CustomCall {
            name: name.clone(),
            target: target.clone(),
            operands: operands.iter().map(|o| image_value(program, o)).collect::<Result<_, _>>()?,
            result: image_value(program, result)?,
        },
        HostOp::Infeed { name, result } => {
            ImageHost::Infeed { name: name.clone(), result: image_value(program, result)? }
        }
        HostOp::Outfeed { name, operand } => {
            ImageHost::Outfeed { name: name.clone(), operand: image_value(program, operand)? }
        }
    })
}

fn host_value(value: &ImageValue) -> Result<HostValueEntry, RuntimeError> {
    let shape: Shape =
        value.shape.parse().map_err(|e| RuntimeError::Invalid(format!("host value shape '{}': {e}", value.shape)))?;
    Ok(HostValueEntry { shape, buffers: value.buffers.clone() })
}

/// The runtime's form of a host operation, a custom-call bound to its target's function.
fn host_entry(op: &ImageHost, host: &HostFunctions) -> Result<HostEntry, RuntimeError> {
    Ok(match op {
        ImageHost::CustomCall { name, target, operands, result } => {
            let Some(function) = host.get(target) else {
                return Err(RuntimeError::Invalid(format!(
                    "custom-call '{name}' calls target '{target}', for which no host function is registered"
                )));
            };
            HostEntry::CustomCall {
                name: name.clone(),
                target: target.clone(),
                function: function.clone(),
                operands: operands.iter().map(host_value).collect::<Result<_, _>>()?,
                result: host_value(result)?,
            }
        }
        ImageHost::Infeed { name, result } => HostEntry::Infeed { name: name.clone(), result: host_value(result)? },
        ImageHost::Outfeed { name, operand } => {
            HostEntry::Outfeed { name: name.clone(), operand: host_value(operand)? }
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
pub(crate) fn addressed_bytes(mem: MemType, len: i64) -> Option<u64> {
    let len = u64::try_from(len).ok()?;
    Some(len.checked_mul(u64::from(mem.bits()))?.div_ceil(8))
}
