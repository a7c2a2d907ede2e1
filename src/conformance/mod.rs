//! Corpus conformance: run a case of `../shared/corpus` on any backend, with logical or
//! physical (`--physical`) I/O, and judge its outputs by the case's tolerances. The test suite
//! and `tessera corpus` both use it, so the pass table a person reads is the one CI asserts.

pub use tessera_hlo::corpus::{bench_args, case, tolerance};

use std::time::{Duration, Instant};

use tessera_codegen::CodegenError;
use tessera_hlo::eval::EvalError;
use tessera_hlo::{ArrayShape, LayoutMap, Literal, Shape};
use tessera_lower::LowerError;

pub use tessera_hlo::corpus::Case;

use crate::{Client, Error, Executable};

/// The operations the kernel lowering covers (the end-to-end issue's list): a case built only
/// from these must pass on every JIT tier; anything else may be refused with an error naming
/// the op.
pub const CORE_OPS: &[&str] = &[
    "parameter",
    "constant",
    "tuple",
    "get-tuple-element",
    "call",
    "broadcast",
    "iota",
    "reshape",
    "bitcast",
    "transpose",
    "slice",
    "reverse",
    "pad",
    "concatenate",
    "copy",
    "reduce",
    "dot",
    "convert",
    "bitcast-convert",
    "select",
    "clamp",
    "compare",
    "abs",
    "negate",
    "sign",
    "not",
    "sqrt",
    "rsqrt",
    "cbrt",
    "exponential",
    "exponential-minus-one",
    "log",
    "log-plus-one",
    "logistic",
    "sine",
    "cosine",
    "tan",
    "tanh",
    "erf",
    "floor",
    "ceil",
    "round-nearest-afz",
    "round-nearest-even",
    "is-finite",
    "popcnt",
    "count-leading-zeros",
    "add",
    "subtract",
    "multiply",
    "divide",
    "remainder",
    "power",
    "atan2",
    "maximum",
    "minimum",
    "and",
    "or",
    "xor",
    "shift-left",
    "shift-right-logical",
    "shift-right-arithmetic",
];

/// Whether every op of `case` is in [`CORE_OPS`] and no value is complex (complex numbers
/// come with the next issue).
pub fn uses_only_core_ops(case: &Case) -> bool {
    let complex = case.module.computations.iter().flat_map(|c| &c.instructions).any(|i| {
        i.shape.leaves().iter().any(|(_, s)| {
            s.as_array().is_some_and(|a| {
                matches!(a.element_type, tessera_hlo::ElementType::C64 | tessera_hlo::ElementType::C128)
            })
        })
    });
    !complex && case.opcodes().iter().all(|op| CORE_OPS.contains(&op.as_str()))
}

/// How arguments and results cross the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Literals in, literals out (`Executable::run`): the runtime lays them out.
    Logical,
    /// Raw physical buffers in the entry layouts (`Executable::run_raw`), argument padding
    /// filled with garbage (all-ones bytes: NaN for floats) that must never be read as data.
    Physical,
}

pub enum Outcome {
    Pass {
        compile: Duration,
        run: Duration,
    },
    /// The backend refused the module with an error naming what it lacks.
    Unsupported(String),
    /// It ran and an output is wrong.
    Mismatch(String),
    /// Any other error (never acceptable for a case the backend claims to support).
    Failed(String),
}

impl Outcome {
    pub fn is_pass(&self) -> bool {
        matches!(self, Outcome::Pass { .. })
    }
}

/// A compile or run error as an outcome: a refusal naming what is missing, or a failure.
pub fn classify(e: Error) -> Outcome {
    match &e {
        Error::Lower { source: LowerError::Unsupported { .. }, .. }
        | Error::Codegen(CodegenError::Unsupported { .. })
        | Error::Eval(EvalError::Unsupported { .. } | EvalError::UnsupportedType { .. }) => {
            Outcome::Unsupported(e.to_string())
        }
        _ => Outcome::Failed(e.to_string()),
    }
}

/// Compiles and runs `case` once on `client`'s backend and checks every output.
pub fn run_case(case: &Case, client: &Client, mode: Mode) -> Outcome {
    let exe = match client.compile(&case.module, &Default::default()) {
        Ok(exe) => exe,
        Err(e) => return classify(e),
    };
    let args = match case.arguments() {
        Ok(a) => a,
        Err(e) => return Outcome::Failed(format!("arguments: {e}")),
    };
    let outputs = match case.outputs() {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(format!("expected outputs: {e}")),
    };
    let start = Instant::now();
    let got = match mode {
        Mode::Logical => exe.run(&args),
        Mode::Physical => run_physical(&exe, &args),
    };
    let run = start.elapsed();
    let got = match got {
        Ok(g) => g,
        Err(e) => return classify(e),
    };
    if got.len() != outputs.len() {
        return Outcome::Mismatch(format!("{} outputs, expected {}", got.len(), outputs.len()));
    }
    for (i, (g, want)) in got.iter().zip(&outputs).enumerate() {
        if let Err(m) = tolerance::check(g, want) {
            return Outcome::Mismatch(format!("output {i}: {m}"));
        }
    }
    Outcome::Pass { compile: exe.compile_time(), run }
}

/// Runs on physical buffers built by hand from the layout math, so a backend that ignored a
/// layout (or read padding) cannot hide behind the runtime's own relayout.
pub fn run_physical(exe: &Executable, args: &[Literal]) -> Result<Vec<Literal>, Error> {
    let mut leaves = Vec::new();
    for a in args {
        flatten(a, &mut leaves);
    }
    let params: Vec<&ArrayShape> = exe.parameter_leaves().collect();
    if leaves.len() != params.len() {
        return Err(Error::Argument {
            index: leaves.len().min(params.len()),
            message: format!("{} argument leaves for {} parameters", leaves.len(), params.len()),
        });
    }
    let mut inputs = Vec::with_capacity(params.len());
    for (lit, shape) in leaves.iter().zip(&params) {
        inputs.push(physical_with_garbage(lit, shape)?);
    }
    let result_shapes: Vec<ArrayShape> = exe.result_leaves().cloned().collect();
    let mut results = Vec::with_capacity(result_shapes.len());
    for shape in &result_shapes {
        let bytes = tessera_hlo::layout_index::physical_byte_size(shape).map_err(tessera_hlo::LiteralError::from)?;
        // Whatever the kernels leave unwritten (output padding) is never read back.
        results.push(vec![0x5Au8; bytes as usize]);
    }
    let ins: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<&mut [u8]> = results.iter_mut().map(Vec::as_mut_slice).collect();
    exe.run_raw(&ins, &mut outs)?;
    result_shapes.into_iter().zip(results).map(|(s, b)| Ok(Literal::from_physical_bytes(Shape::Array(s), b)?)).collect()
}

/// Runs `exe` on resident buffers it is given (`Executable::execute_donated`), so results the
/// module's `input_output_alias` lets share a parameter's memory are computed in it.
pub fn run_donated(exe: &Executable, args: &[Literal]) -> Result<Vec<Literal>, Error> {
    let mut leaves = Vec::new();
    for a in args {
        flatten(a, &mut leaves);
    }
    let buffers =
        leaves.iter().enumerate().map(|(i, lit)| exe.transfer_argument(i, lit)).collect::<Result<Vec<_>, _>>()?;
    exe.execute_donated(buffers)?.iter().map(|b| b.to_literal()).collect()
}

fn flatten(lit: &Literal, out: &mut Vec<Literal>) {
    match lit.tuple_elements() {
        Some(es) => es.iter().for_each(|e| flatten(e, out)),
        None => out.push(lit.clone()),
    }
}

/// `lit` laid out for `shape`, with every padding slot overwritten by all-ones bytes (for
/// element sizes of a byte or more; packed sub-byte padding stays as the relayout left it).
pub fn physical_with_garbage(lit: &Literal, shape: &ArrayShape) -> Result<Vec<u8>, Error> {
    let laid = lit.relayout_like(&Shape::Array(shape.clone()))?;
    let mut bytes = laid.physical_bytes()?.to_vec();
    let map = LayoutMap::new(shape).map_err(tessera_hlo::LiteralError::from)?;
    let bits = map.element_size_bits() as usize;
    if bits >= 8 && !map.is_identity() {
        let width = bits / 8;
        for slot in 0..map.physical_element_count() {
            if map.logical_index(slot).is_none() {
                let at = slot as usize * width;
                bytes[at..at + width].fill(0xFF);
            }
        }
    }
    Ok(bytes)
}
