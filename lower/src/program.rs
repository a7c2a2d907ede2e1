//! A lowered module: the buffers it touches, its kernels, and the step tree that runs them
//! (kernel launches, buffer copies, loops, branches and host operations). It is what the
//! lowering hands to codegen and what codegen turns into a runtime executable; nothing
//! downstream looks at HLO again.
//!
//! The step tree is plain data (no closures, no pointers) so that every consumer can walk it
//! the same way: the kernel interpreter, the JIT executable, and ahead-of-time emission.

use tessera_hlo::{ArrayShape, ElementType, Shape};

use crate::kernel::Kernel;

/// Index into [`Program::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

#[derive(Clone, Debug, PartialEq)]
pub enum BufferKind {
    /// Entry parameter `n` (tuple parameters are flattened depth-first): caller-owned,
    /// read-only.
    Parameter(usize),
    /// Entry result `n` (tuple results flattened depth-first): caller-owned. Every result is a
    /// distinct buffer that aliases nothing else, so a caller can hand in any memory.
    Result(usize),
    /// Lives in its memory space's arena at `offset` (see [`Buffer::offset`]) for the duration
    /// of its live range.
    Temp,
    /// Read-only data baked into the executable: the physical bytes in the buffer's layout.
    Constant(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// The HLO instruction it holds (for diagnostics and the text form).
    pub name: String,
    /// Shape with its layout: the physical truth of the bytes.
    pub shape: ArrayShape,
    /// Physical size in bytes (tile and tail padding included).
    pub bytes: u64,
    /// The memory space (`S(n)`; 0 is host memory).
    pub memory_space: i64,
    pub kind: BufferKind,
    /// For `Temp` buffers after buffer assignment: the byte offset inside the arena of
    /// `memory_space`. Assigned offsets respect [`Program::ALIGNMENT`].
    pub offset: Option<u64>,
}

/// One kernel launch: `args[i]` is bound to the kernel's buffer `i`.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub kernel: usize,
    pub args: Vec<BufferId>,
}

/// One step of a program. Steps of a list run in order; a step reads only what earlier steps
/// (or the caller) wrote.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Launch(Launch),
    /// Copies `src`'s bytes into `dst`; both have the same size (and the same layout, so the
    /// bytes mean the same values).
    Copy {
        src: BufferId,
        dst: BufferId,
    },
    /// Runs `cond`, then, while the scalar pred in `pred` (written by `cond`, or one of the
    /// loop's own buffers) is true, runs `body` and `cond` again. Loop-carried state lives in
    /// buffers that `body` itself writes back.
    While {
        cond: Vec<Step>,
        pred: BufferId,
        body: Vec<Step>,
    },
    /// Runs one of `branches`, chosen by the scalar in `selector`: a pred picks branch 0 when
    /// true and 1 when false; an s32 picks its index, and an index out of range picks the last
    /// branch (XLA's semantics).
    Conditional {
        selector: BufferId,
        branches: Vec<Vec<Step>>,
    },
    /// Hands buffers to the host and back.
    Host(HostOp),
    /// Fails the run with `message` unless the s32 scalar in `value` equals `equals`: a
    /// `set-dimension-size` whose size is known only at run time must leave the static size,
    /// because dynamic shapes are not supported.
    Check {
        value: BufferId,
        equals: i64,
        message: String,
    },
}

/// A value crossing to or from the host: its shape (a tuple or an array, every array with its
/// layout) and the buffers of its array leaves, depth-first.
#[derive(Clone, Debug, PartialEq)]
pub struct HostValue {
    pub shape: Shape,
    pub buffers: Vec<BufferId>,
}

/// Operations the host performs between kernels, on literals made from buffers.
#[derive(Clone, Debug, PartialEq)]
pub enum HostOp {
    /// Calls the host function registered for `target` on the operands; its result is laid
    /// out into `result`'s buffers. `name` is the HLO instruction (for diagnostics).
    CustomCall { name: String, target: String, operands: Vec<HostValue>, result: HostValue },
    /// Takes the next literal of the executable's infeed queue into `result`'s buffers; an
    /// empty queue is an error.
    Infeed { name: String, result: HostValue },
    /// Appends the operand, as a literal, to the executable's outfeed queue.
    Outfeed { name: String, operand: HostValue },
}

impl HostOp {
    /// The HLO instruction it comes from.
    pub fn name(&self) -> &str {
        match self {
            HostOp::CustomCall { name, .. } | HostOp::Infeed { name, .. } | HostOp::Outfeed { name, .. } => name,
        }
    }

    /// Buffers the host reads, then buffers it writes.
    pub fn reads_writes(&self) -> (Vec<BufferId>, Vec<BufferId>) {
        match self {
            HostOp::CustomCall { operands, result, .. } => {
                (operands.iter().flat_map(|o| o.buffers.iter().copied()).collect(), result.buffers.clone())
            }
            HostOp::Infeed { result, .. } => (Vec::new(), result.buffers.clone()),
            HostOp::Outfeed { operand, .. } => (operand.buffers.clone(), Vec::new()),
        }
    }
}

impl Step {
    /// Every buffer the step itself names (not those of nested steps).
    pub fn own_buffers(&self) -> Vec<BufferId> {
        match self {
            Step::Launch(l) => l.args.clone(),
            Step::Copy { src, dst } => vec![*src, *dst],
            Step::While { pred, .. } => vec![*pred],
            Step::Conditional { selector, .. } => vec![*selector],
            Step::Check { value, .. } => vec![*value],
            Step::Host(op) => {
                let (mut r, w) = op.reads_writes();
                r.extend(w);
                r
            }
        }
    }

    /// The buffers the step itself writes (not those of nested steps), given the program's
    /// `kernels`: a launch's writable buffers (all of them when the kernel is unknown), a
    /// copy's destination, what the host writes.
    pub fn own_writes(&self, kernels: &[Kernel]) -> Vec<BufferId> {
        match self {
            Step::Launch(l) => {
                let kernel = kernels.get(l.kernel);
                let writes = |i: usize| kernel.is_none_or(|k| k.buffers.get(i).is_none_or(|b| b.writable));
                l.args.iter().enumerate().filter(|&(i, _)| writes(i)).map(|(_, &a)| a).collect()
            }
            Step::Copy { dst, .. } => vec![*dst],
            Step::Host(op) => op.reads_writes().1,
            Step::While { .. } | Step::Conditional { .. } | Step::Check { .. } => Vec::new(),
        }
    }

    /// Every buffer `from` the step and its nested steps name becomes `to`.
    pub fn rename_buffer(&mut self, from: BufferId, to: BufferId) {
        self.map_buffers(&|b| if b == from { to } else { b });
    }

    /// Every buffer `b` the step and its nested steps name becomes `name(b)`.
    pub fn map_buffers(&mut self, name: &impl Fn(BufferId) -> BufferId) {
        let swap = |b: &mut BufferId| *b = name(*b);
        match self {
            Step::Launch(l) => l.args.iter_mut().for_each(swap),
            Step::Copy { src, dst } => [src, dst].into_iter().for_each(swap),
            Step::While { cond, pred, body } => {
                swap(pred);
                cond.iter_mut().chain(body.iter_mut()).for_each(|s| s.map_buffers(name));
            }
            Step::Conditional { selector, branches } => {
                swap(selector);
                branches.iter_mut().flatten().for_each(|s| s.map_buffers(name));
            }
            Step::Check { value, .. } => swap(value),
            Step::Host(op) => match op {
                HostOp::CustomCall { operands, result, .. } => {
                    operands.iter_mut().chain(std::iter::once(result)).for_each(|v| v.buffers.iter_mut().for_each(swap))
                }
                HostOp::Infeed { result: v, .. } | HostOp::Outfeed { operand: v, .. } => {
                    v.buffers.iter_mut().for_each(swap)
                }
            },
        }
    }

    /// The nested step lists, in the order they appear (a while's condition, then its body).
    pub fn children(&self) -> Vec<&[Step]> {
        match self {
            Step::While { cond, body, .. } => vec![cond, body],
            Step::Conditional { branches, .. } => branches.iter().map(|b| b.as_slice()).collect(),
            _ => Vec::new(),
        }
    }
}

/// Calls `f` on every step of `steps` and of their nested lists, depth-first, pre-order.
pub fn walk_steps<'a>(steps: &'a [Step], f: &mut impl FnMut(&'a Step)) {
    for s in steps {
        f(s);
        for child in s.children() {
            walk_steps(child, f);
        }
    }
}

/// What a conditional's selector holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorKind {
    Pred,
    S32,
}

impl SelectorKind {
    /// The kind of a scalar buffer of `shape`, if it can select a branch.
    pub fn of(shape: &ArrayShape) -> Option<SelectorKind> {
        if shape.rank() != 0 {
            return None;
        }
        match shape.element_type {
            ElementType::Pred => Some(SelectorKind::Pred),
            ElementType::S32 => Some(SelectorKind::S32),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub buffers: Vec<Buffer>,
    pub kernels: Vec<Kernel>,
    /// What the program does, in order.
    pub steps: Vec<Step>,
    /// Entry parameters, flattened depth-first.
    pub parameters: Vec<BufferId>,
    /// Entry results, flattened depth-first.
    pub results: Vec<BufferId>,
    /// Arena size in bytes per memory space (after buffer assignment), ascending by space.
    pub arenas: Vec<(i64, u64)>,
    /// `(result, parameter)`: entry result leaves a caller may write into a parameter leaf's
    /// memory (the module's `input_output_alias`, when the caller donates the parameter). The
    /// program touches such a parameter only before it first touches the result, or in that
    /// first step: a `Copy` into the result (a copy onto itself, which the entries skip), or a
    /// launch that reads each element of the parameter only where and before it writes the
    /// result's (`kernel::updates_in_place`; the launch is not disjoint). So it computes the
    /// same with the two in one memory or in two.
    pub aliases: Vec<(usize, usize)>,
}

impl Program {
    /// Alignment of every buffer: arguments, results, temps and constants (a cache line and a
    /// 512-bit vector).
    pub const ALIGNMENT: u64 = 64;

    /// Every kernel launch of the step tree, depth-first.
    pub fn launches(&self) -> Vec<&Launch> {
        let mut out = Vec::new();
        walk_steps(&self.steps, &mut |s| {
            if let Step::Launch(l) = s {
                out.push(l);
            }
        });
        out
    }

    /// For each kernel, how many times one run of the program launches it at most (both
    /// branches of a conditional counted), or `None` when a launch sits in a while loop, whose
    /// trip count is known only at run time.
    pub fn launches_per_run(&self) -> Vec<Option<u64>> {
        fn count(steps: &[Step], in_loop: bool, out: &mut [Option<u64>]) {
            for s in steps {
                match s {
                    Step::Launch(l) => {
                        if let Some(n) = out.get_mut(l.kernel) {
                            *n = if in_loop { None } else { n.map(|n| n.saturating_add(1)) };
                        }
                    }
                    Step::While { cond, body, .. } => {
                        count(cond, true, out);
                        count(body, true, out);
                    }
                    other => other.children().into_iter().for_each(|c| count(c, in_loop, out)),
                }
            }
        }
        let mut out = vec![Some(0); self.kernels.len()];
        count(&self.steps, false, &mut out);
        out
    }

    /// For each kernel, whether every launch of it passes buffers such that each buffer the
    /// kernel writes shares no byte with any other buffer of that launch: what lets a tier
    /// compile the kernel with its buffers known apart. Parameters, results and constants are
    /// allocations of their own (a result aliases nothing but, when donated, the parameter
    /// `aliases` pairs it with: the caller's contract, checked by every API that takes caller
    /// memory); two temps share bytes where their arena ranges overlap, which buffer
    /// assignment allows only for temps not live at one step. A temp without an offset yet
    /// (before buffer assignment) may share bytes with any temp.
    pub fn disjoint_launches(&self) -> Vec<bool> {
        let pairs: Vec<(BufferId, BufferId)> =
            self.aliases.iter().filter_map(|&(r, p)| Some((*self.results.get(r)?, *self.parameters.get(p)?))).collect();
        let aliased = |a: BufferId, b: BufferId| pairs.iter().any(|&(r, p)| (a, b) == (r, p) || (a, b) == (p, r));
        let mut disjoint = vec![true; self.kernels.len()];
        for launch in self.launches() {
            let Some(kernel) = self.kernels.get(launch.kernel) else { continue };
            let args = &launch.args;
            let writes = |i: usize| kernel.buffers.get(i).is_none_or(|b| b.writable);
            let clash = kernel.buffers.len() != args.len()
                || (0..args.len()).any(|i| {
                    (i + 1..args.len()).any(|j| {
                        (writes(i) || writes(j)) && (self.share_bytes(args[i], args[j]) || aliased(args[i], args[j]))
                    })
                });
            if clash {
                disjoint[launch.kernel] = false;
            }
        }
        disjoint
    }

    /// Whether buffers `a` and `b` may share a byte (see [`Program::disjoint_launches`]).
    fn share_bytes(&self, a: BufferId, b: BufferId) -> bool {
        if a == b {
            return true;
        }
        let (Some(x), Some(y)) = (self.buffers.get(a.0 as usize), self.buffers.get(b.0 as usize)) else {
            return true;
        };
        match (&x.kind, &y.kind) {
            (BufferKind::Temp, BufferKind::Temp) if x.memory_space == y.memory_space => match (x.offset, y.offset) {
                (Some(p), Some(q)) => {
                    x.bytes > 0 && y.bytes > 0 && p < q.saturating_add(y.bytes) && q < p.saturating_add(x.bytes)
                }
                _ => true,
            },
            _ => false,
        }
    }

    /// Every host operation of the step tree, depth-first.
    pub fn host_ops(&self) -> Vec<&HostOp> {
        let mut out = Vec::new();
        walk_steps(&self.steps, &mut |s| {
            if let Step::Host(op) = s {
                out.push(op);
            }
        });
        out
    }
}
