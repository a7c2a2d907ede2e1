//! A computation builder after XLA's `ComputationBuilder`/`XlaBuilder`.
//!
//! A [`Builder`] collects instructions of one computation. Every op method returns an
//! [`XlaOp`], a `Copy` handle that remembers its builder, so ops compose like XLA's:
//!
//! ```
//! use tessera_hlo::builder::Builder;
//! use tessera_hlo::{ElementType, Shape};
//!
//! let b = Builder::new("axpy");
//! let alpha = b.parameter(0, &Shape::scalar(ElementType::F32), "alpha");
//! let x = b.parameter(1, &Shape::array(ElementType::F32, &[10]), "x");
//! let y = b.parameter(2, &Shape::array(ElementType::F32, &[10]), "y");
//! let axpy = b.add(b.mul(alpha, x), y); // the scalar is broadcast explicitly
//! let module = b.build(axpy).unwrap();
//! assert_eq!(module.entry_comp().root_inst().shape.dims(), &[10]);
//! ```
//!
//! Errors are deferred as in XLA: the first failing op records a [`BuildError`] naming the op
//! and the reason, every later op becomes a no-op returning an invalid handle, and
//! [`Builder::build`] returns the recorded error. Nothing panics on bad input.
//!
//! Shapes are inferred as ops are added, by the verifier's shape inference
//! ([`crate::verify::infer_shape`]): the builder only adds what HLO itself leaves to the
//! client, namely the implicit broadcasting of [`broadcast semantics`](Builder::add_broadcast),
//! which it lowers to explicit `broadcast`/`reshape` instructions as XLA's builder does.
//!
//! Called computations (reduction functions, loop bodies, branches...) are [`Module`]s built
//! by another builder, ideally a [`Builder::create_sub_builder`] so instruction numbering is
//! shared; the calling builder imports them, with their own callees, into the module it
//! builds.

mod computations;
mod effects;
mod einsum;
mod elementwise;
mod linalg;
mod shape_ops;
mod types;

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::fmt;
use std::rc::Rc;

use crate::element_type::ElementType;
use crate::ir::{
    AttrValue, Attribute, CompId, Computation, InstId, Instruction, Module, Opcode, Payload, ProgramShape,
};
use crate::layout::Layout;
use crate::literal::{Literal, NativeType};
use crate::shape::{ArrayShape, Shape};

pub use types::{
    default_conv_dimension_numbers, ComparisonDirection, ComparisonType, ConvDimensionNumbers, ConvOptions,
    DotDimensionNumbers, FftType, GatherDimensionNumbers, Padding, Precision, RandomDistribution,
    ScatterDimensionNumbers, TriangularTranspose,
};

/// XLA's name for a builder; the same type.
pub type ComputationBuilder = Builder;

/// The first error a builder met: which computation, which op, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("in computation `{computation}`, {op}: {reason}")]
pub struct BuildError {
    /// The builder's name.
    pub computation: String,
    /// The op (builder method) that failed, e.g. `add`, `reduce`, `einsum`.
    pub op: String,
    pub reason: String,
}

/// A handle to the value of one op of a [`Builder`]. Cheap to copy; only meaningful with the
/// builder that made it (using it with another builder is a recorded error, not a panic).
#[derive(Clone, Copy)]
pub struct XlaOp<'b> {
    builder: &'b Builder,
    /// `None` for the result of a failed op.
    id: Option<InstId>,
}

impl<'b> XlaOp<'b> {
    /// The builder this op belongs to.
    pub fn builder(&self) -> &'b Builder {
        self.builder
    }

    /// False for the handle a failed op returns.
    pub fn is_valid(&self) -> bool {
        self.id.is_some()
    }

    /// The inferred shape of the op's value (`None` for a failed op).
    pub fn shape(&self) -> Option<Shape> {
        self.builder.get_shape(*self)
    }

    /// The instruction name the op got, e.g. `add.3` (`None` for a failed op).
    pub fn name(&self) -> Option<String> {
        let id = self.id?;
        self.builder.state.borrow().instructions.get(id.index()).map(|i| i.name.clone())
    }
}

impl PartialEq for XlaOp<'_> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.builder, other.builder) && self.id == other.id
    }
}

impl Eq for XlaOp<'_> {}

impl fmt::Debug for XlaOp<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "XlaOp({}/{})", self.builder.name, name),
            None => write!(f, "XlaOp({}/<failed>)", self.builder.name),
        }
    }
}

/// State shared by a builder and its sub-builders: XLA numbers instructions and computations
/// with one counter per builder tree, which keeps generated names unique in the module.
#[derive(Debug, Default)]
struct Shared {
    next_id: Cell<i64>,
}

impl Shared {
    fn next_id(&self) -> i64 {
        let id = self.next_id.get() + 1;
        self.next_id.set(id);
        id
    }
}

#[derive(Debug, Default)]
struct State {
    instructions: Vec<Instruction>,
    /// Computations called from this one (and their callees), `CompId(i)` being entry `i`.
    embedded: Vec<Computation>,
    /// Modules already imported, with the id their entry got: importing the same reduction
    /// function twice reuses it.
    imported: Vec<(Module, CompId)>,
}

/// Builds one computation; see the [module documentation](self).
#[derive(Debug)]
pub struct Builder {
    name: String,
    shared: Rc<Shared>,
    state: RefCell<State>,
    error: Rc<RefCell<Option<BuildError>>>,
    /// A sub-builder reports [`Builder::build_and_note_error`] failures to its parent.
    parent_error: Option<Rc<RefCell<Option<BuildError>>>>,
}

/// What an op adds: everything but the name and the inferred shape.
struct Spec {
    opcode: Opcode,
    /// The declared result shape, for ops whose result is not determined by their operands
    /// (parameter, constant, convert, reshape, broadcast, iota, rng, custom-call, ...); a
    /// placeholder otherwise.
    declared: Shape,
    attrs: Vec<Attribute>,
    payload: Payload,
    /// The name before XLA's `.N` suffix; the opcode name when empty.
    base_name: String,
}

impl Spec {
    fn new(opcode: Opcode) -> Spec {
        Spec {
            opcode,
            declared: Shape::Tuple(Vec::new()),
            attrs: Vec::new(),
            payload: Payload::None,
            base_name: String::new(),
        }
    }

    fn declared(mut self, shape: Shape) -> Spec {
        self.declared = shape;
        self
    }

    fn attr(mut self, name: &str, value: AttrValue) -> Spec {
        self.attrs.push(Attribute { name: name.to_string(), value });
        self
    }

    fn payload(mut self, payload: Payload) -> Spec {
        self.payload = payload;
        self
    }

    fn named(mut self, name: &str) -> Spec {
        self.base_name = name.to_string();
        self
    }
}

/// An error message inside an op; [`Builder::op`] turns it into a [`BuildError`].
type OpResult<T> = Result<T, String>;

impl Builder {
    /// A builder for a computation called `name`.
    pub fn new(name: &str) -> Builder {
        Builder {
            name: sanitize(name),
            shared: Rc::new(Shared::default()),
            state: RefCell::new(State::default()),
            error: Rc::new(RefCell::new(None)),
            parent_error: None,
        }
    }

    /// A builder for a computation this one will call (a reduction function, a loop body...):
    /// it shares this builder's instruction numbering, so names stay unique and XLA-like, and
    /// [`Builder::build_and_note_error`] reports its failure here.
    pub fn create_sub_builder(&self, name: &str) -> Builder {
        Builder {
            name: sanitize(name),
            shared: Rc::clone(&self.shared),
            state: RefCell::new(State::default()),
            error: Rc::new(RefCell::new(None)),
            parent_error: Some(Rc::clone(&self.error)),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first error recorded so far.
    pub fn first_error(&self) -> Option<BuildError> {
        self.error.borrow().clone()
    }

    /// The inferred shape of an op of this builder (`None` for a failed op or another
    /// builder's op).
    pub fn get_shape(&self, op: XlaOp<'_>) -> Option<Shape> {
        if !std::ptr::eq(op.builder, self) {
            return None;
        }
        let id = op.id?;
        self.state.borrow().instructions.get(id.index()).map(|i| i.shape.clone())
    }

    /// Builds the module whose entry is this computation with `root` as its result. Called
    /// computations come first, the entry last; `entry_computation_layout` gives the
    /// parameter and result shapes with their layouts (row-major unless a parameter shape
    /// said otherwise).
    pub fn build(&self, root: XlaOp<'_>) -> Result<Module, BuildError> {
        if let Some(e) = self.first_error() {
            return Err(e);
        }
        let root = self.operand_id(root).map_err(|reason| self.error_for("build", reason))?;
        let state = self.state.borrow();
        let params = check_parameters(&state.instructions).map_err(|reason| self.error_for("build", reason))?;

        let mut entry = Computation::new(format!("{}.{}", self.name, self.shared.next_id()));
        entry.instructions = state.instructions.clone();
        entry.root = root;
        let program_shape = ProgramShape {
            parameters: params.iter().map(|&id| entry.inst(id).shape.clone()).collect(),
            result: entry.inst(root).shape.clone(),
        };

        let mut module = Module::new(entry.name.clone());
        module.computations = state.embedded.clone();
        module.entry = module.add_computation(entry);
        uniquify_names(&mut module);
        module.name = module.entry_comp().name.clone();
        module.set_attr("entry_computation_layout", AttrValue::ProgramShape(program_shape));
        Ok(module)
    }

    /// As [`Builder::build`], but a failure is also recorded as the parent builder's error
    /// (for a sub-builder) and an empty module comes back, which the parent rejects when it
    /// is used: XLA's `BuildAndNoteError`.
    pub fn build_and_note_error(&self, root: XlaOp<'_>) -> Module {
        match self.build(root) {
            Ok(m) => m,
            Err(e) => {
                let sink = self.parent_error.as_ref().unwrap_or(&self.error);
                sink.borrow_mut().get_or_insert(e);
                Module::new(self.name.clone())
            }
        }
    }

    /// A scalar computation of two parameters of type `ty`, e.g. the `add` a sum reduction
    /// needs: `b.scalar_computation("add", F32, |s, x, y| s.add(x, y))`. Built with a
    /// sub-builder; failures are reported as for [`Builder::build_and_note_error`].
    pub fn scalar_computation(
        &self,
        name: &str,
        ty: ElementType,
        body: impl for<'s> FnOnce(&'s Builder, XlaOp<'s>, XlaOp<'s>) -> XlaOp<'s>,
    ) -> Module {
        let sub = self.create_sub_builder(name);
        let x = sub.parameter(0, &Shape::scalar(ty), "x");
        let y = sub.parameter(1, &Shape::scalar(ty), "y");
        let root = body(&sub, x, y);
        sub.build_and_note_error(root)
    }

    // ---- Core machinery -------------------------------------------------------------------

    fn error_for(&self, op: &str, reason: String) -> BuildError {
        BuildError { computation: self.name.clone(), op: op.to_string(), reason }
    }

    fn failed(&self) -> XlaOp<'_> {
        XlaOp { builder: self, id: None }
    }

    /// Runs one public op: a no-op after an earlier error, and the first error otherwise.
    fn op<'b>(&'b self, name: &str, f: impl FnOnce() -> OpResult<XlaOp<'b>>) -> XlaOp<'b> {
        if self.error.borrow().is_some() {
            return self.failed();
        }
        match f() {
            Ok(op) => op,
            Err(reason) => {
                self.error.borrow_mut().get_or_insert_with(|| self.error_for(name, reason));
                self.failed()
            }
        }
    }

    /// The instruction of an operand, checking that it is this builder's and valid.
    fn operand_id(&self, op: XlaOp<'_>) -> OpResult<InstId> {
        if !std::ptr::eq(op.builder, self) {
            let what = op.name().map_or_else(|| "a failed op".to_string(), |n| format!("`{n}`"));
            return Err(format!("operand {what} belongs to builder `{}`, not this one", op.builder.name));
        }
        op.id.ok_or_else(|| "operand is the result of a failed op".to_string())
    }

    /// An operand's shape.
    fn shape(&self, op: XlaOp<'_>) -> OpResult<Shape> {
        let id = self.operand_id(op)?;
        let state = self.state.borrow();
        state.instructions.get(id.index()).map(|i| i.shape.clone()).ok_or_else(|| "unknown operand".to_string())
    }

    /// An operand's shape, which must be an array.
    fn array(&self, op: XlaOp<'_>, role: &str) -> OpResult<ArrayShape> {
        match self.shape(op)? {
            Shape::Array(a) => Ok(a),
            other => Err(format!("{role} must be an array, but has shape {other}")),
        }
    }

    /// The shape the verifier's shape inference gives `spec` applied to `operands`.
    fn infer(&self, spec: &Spec, operands: &[XlaOp<'_>]) -> OpResult<Shape> {
        let ids = operands.iter().map(|&o| self.operand_id(o)).collect::<OpResult<Vec<_>>>()?;
        let mut inst = Instruction::new(String::new(), spec.opcode, spec.declared.clone(), ids);
        inst.attrs = spec.attrs.clone();
        inst.payload = spec.payload.clone();
        self.infer_inst(&inst)
    }

    fn infer_inst(&self, inst: &Instruction) -> OpResult<Shape> {
        let state = self.state.borrow();
        let shapes: Vec<&Shape> = inst.operands.iter().map(|id| &state.instructions[id.index()].shape).collect();
        let called = |c: CompId| -> Option<ProgramShape> {
            let comp = state.embedded.get(c.index())?;
            let root = comp.get(comp.root)?;
            Some(ProgramShape { parameters: comp.parameter_shapes(), result: root.shape.clone() })
        };
        crate::verify::infer_shape(inst, &shapes, &called).map(with_default_layouts).map_err(|e| e.to_string())
    }

    /// Adds an instruction: checks its operands, infers its shape with the verifier's shape
    /// inference, names it `base.N`.
    fn emit<'b>(&'b self, spec: Spec, operands: &[XlaOp<'b>]) -> OpResult<XlaOp<'b>> {
        let ids = operands.iter().map(|&o| self.operand_id(o)).collect::<OpResult<Vec<_>>>()?;
        let mut inst = Instruction::new(String::new(), spec.opcode, spec.declared, ids);
        inst.attrs = spec.attrs;
        inst.payload = spec.payload;
        let inferred = self.infer_inst(&inst)?;
        check_static_sizes(&inferred)?;
        // The inference works up to layouts; a layout the caller gave (a parameter's, an
        // infeed's, a custom call's) is kept.
        if !inferred.compatible(&inst.shape) {
            inst.shape = inferred;
        }
        inst.shape = with_default_layouts(std::mem::replace(&mut inst.shape, Shape::Token));
        let base = if spec.base_name.is_empty() { spec.opcode.name().to_string() } else { sanitize(&spec.base_name) };
        inst.name = format!("{base}.{}", self.shared.next_id());
        let mut state = self.state.borrow_mut();
        state.instructions.push(inst);
        let id = InstId(state.instructions.len() as u32 - 1);
        Ok(XlaOp { builder: self, id: Some(id) })
    }

    /// Makes a built module callable from this computation, returning the id its entry gets
    /// in the module this builder builds.
    fn import(&self, callee: &Module) -> OpResult<CompId> {
        if callee.get(callee.entry).is_none() {
            return Err(format!("called computation `{}` is empty (was its build an error?)", callee.name));
        }
        let mut state = self.state.borrow_mut();
        if let Some((_, id)) = state.imported.iter().find(|(m, _)| m == callee) {
            return Ok(*id);
        }
        let offset = state.embedded.len() as u32;
        for comp in &callee.computations {
            let mut comp = comp.clone();
            for inst in &mut comp.instructions {
                for attr in &mut inst.attrs {
                    match &mut attr.value {
                        AttrValue::Computation(c) => c.0 += offset,
                        AttrValue::Computations(cs) => cs.iter_mut().for_each(|c| c.0 += offset),
                        _ => {}
                    }
                }
            }
            state.embedded.push(comp);
        }
        let id = CompId(callee.entry.0 + offset);
        state.imported.push((callee.clone(), id));
        Ok(id)
    }

    // ---- Inputs ---------------------------------------------------------------------------

    /// Parameter `number` of the computation, of the given shape. Arrays without a layout get
    /// the default row-major one. The name becomes `name.N` (`parameter.N` when empty).
    pub fn parameter<'b>(&'b self, number: i64, shape: &Shape, name: &str) -> XlaOp<'b> {
        self.op("parameter", || {
            if number < 0 {
                return Err(format!("parameter number {number} is negative"));
            }
            let taken = self.state.borrow().instructions.iter().any(|i| i.parameter_number() == Some(number));
            if taken {
                return Err(format!("parameter {number} already registered"));
            }
            let spec = Spec::new(Opcode::Parameter)
                .declared(with_default_layouts(shape.clone()))
                .payload(Payload::Parameter(number))
                .named(if name.is_empty() { "parameter" } else { name });
            self.emit(spec, &[])
        })
    }

    /// A constant holding `literal` (any rank, or a tuple).
    pub fn constant_literal<'b>(&'b self, literal: &Literal) -> XlaOp<'b> {
        self.op("constant", || self.constant_inner(literal.clone()))
    }

    fn constant_inner(&self, literal: Literal) -> OpResult<XlaOp<'_>> {
        let spec = Spec::new(Opcode::Constant)
            .declared(with_default_layouts(literal.shape().clone()))
            .payload(Payload::Constant(literal));
        self.emit(spec, &[])
    }

    /// A scalar constant: `b.constant_r0(2.5f32)`, `b.constant_r0(true)`, `b.constant_r0(7u8)`.
    pub fn constant_r0<T: NativeType>(&self, value: T) -> XlaOp<'_> {
        self.op("constant", || self.constant_inner(array_literal(&[], &[value])?))
    }

    /// A vector constant.
    pub fn constant_r1<T: NativeType>(&self, values: &[T]) -> XlaOp<'_> {
        self.op("constant", || self.constant_inner(array_literal(&[values.len() as i64], values)?))
    }

    /// A vector of `length` copies of `value` (XLA's `ConstantR1(length, value)`).
    pub fn constant_r1_splat<T: NativeType>(&self, length: usize, value: T) -> XlaOp<'_> {
        self.op("constant", || self.constant_inner(array_literal(&[length as i64], &vec![value; length])?))
    }

    /// A matrix constant from its rows, which must have equal lengths.
    pub fn constant_r2<T: NativeType, R: AsRef<[T]>>(&self, rows: &[R]) -> XlaOp<'_> {
        self.op("constant", || {
            let cols = rows.first().map_or(0, |r| r.as_ref().len());
            if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| r.as_ref().len() != cols) {
                return Err(format!("row {i} has {} elements, row 0 has {cols}", r.as_ref().len()));
            }
            let values: Vec<T> = rows.iter().flat_map(|r| r.as_ref().iter().copied()).collect();
            self.constant_inner(array_literal(&[rows.len() as i64, cols as i64], &values)?)
        })
    }

    /// A constant of any rank from its dimensions and its elements in row-major order.
    pub fn constant_array<T: NativeType>(&self, dims: &[i64], values: &[T]) -> XlaOp<'_> {
        self.op("constant", || self.constant_inner(array_literal(dims, values)?))
    }

    /// The scalar zero of an element type (`false` for pred).
    pub fn zero(&self, ty: ElementType) -> XlaOp<'_> {
        self.op("constant", || {
            let lit = Literal::zeros(Shape::scalar(ty)).map_err(|e| e.to_string())?;
            self.constant_inner(lit)
        })
    }

    /// The scalar one of an element type (`true` for pred).
    pub fn one(&self, ty: ElementType) -> XlaOp<'_> {
        self.op("constant", || self.constant_inner(one_literal(ty)?))
    }
}

fn array_literal<T: NativeType>(dims: &[i64], values: &[T]) -> OpResult<Literal> {
    Literal::from_vec(dims, values.to_vec()).map_err(|e| e.to_string())
}

/// The scalar 1 of an element type.
fn one_literal(ty: ElementType) -> OpResult<Literal> {
    let bits = one_bits(ty).ok_or_else(|| format!("element type {ty} has no one"))?;
    Literal::from_bits_vec(Shape::scalar(ty), vec![bits]).map_err(|e| e.to_string())
}

/// The bits of 1 in an element type.
fn one_bits(ty: ElementType) -> Option<u128> {
    use ElementType::*;
    Some(match ty {
        Pred | S1 | S2 | S4 | S8 | S16 | S32 | S64 | U1 | U2 | U4 | U8 | U16 | U32 | U64 => 1,
        F16 => half::f16::ONE.to_bits() as u128,
        BF16 => half::bf16::ONE.to_bits() as u128,
        F32 => 1f32.to_bits() as u128,
        F64 => 1f64.to_bits() as u128,
        C64 => 1f32.to_bits() as u128,
        C128 => 1f64.to_bits() as u128,
        _ => return None,
    })
}

/// Gives every array (also inside tuples) without a layout the default row-major one, as
/// XLA's builder does for the shapes it infers.
fn with_default_layouts(shape: Shape) -> Shape {
    match shape {
        Shape::Array(mut a) => {
            if a.layout.is_none() {
                a.layout = Some(Layout::row_major(a.rank()));
            }
            Shape::Array(a)
        }
        Shape::Tuple(elems) => Shape::Tuple(elems.into_iter().map(with_default_layouts).collect()),
        other => other,
    }
}

/// Rejects negative sizes in static dimensions, which a declared shape (reshape sizes,
/// broadcast sizes, a parameter's shape) could otherwise smuggle in.
fn check_static_sizes(shape: &Shape) -> OpResult<()> {
    for (_, leaf) in shape.leaves() {
        if let Shape::Array(a) = leaf {
            if a.dims.iter().zip(&a.dynamic).any(|(&d, &dynamic)| d < 0 && !dynamic) {
                return Err(format!("shape {leaf} has a negative dimension size"));
            }
        }
    }
    Ok(())
}

/// Parameter instructions in parameter-number order; the numbers must be `0..n`.
fn check_parameters(instructions: &[Instruction]) -> OpResult<Vec<InstId>> {
    let mut params: Vec<(i64, InstId)> = instructions
        .iter()
        .enumerate()
        .filter_map(|(i, inst)| inst.parameter_number().map(|n| (n, InstId(i as u32))))
        .collect();
    params.sort();
    if let Some((i, (n, _))) = params.iter().enumerate().find(|(i, (n, _))| *n != *i as i64) {
        return Err(format!("parameter numbers are not contiguous: parameter {i} is missing (next is {n})"));
    }
    Ok(params.into_iter().map(|(_, id)| id).collect())
}

/// Keeps names valid HLO identifiers: XLA's name sanitizer maps anything else to `_`.
fn sanitize(name: &str) -> String {
    let mut s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == '-') {
        s.insert(0, '_');
    }
    s
}

/// Makes computation names and instruction names unique in the module. Builders sharing a
/// counter never collide; separately built callees may, and are renamed (the entry keeps
/// its names, so the caller's own ops are printed as built).
fn uniquify_names(module: &mut Module) {
    let mut comp_names = HashSet::new();
    let mut inst_names = HashSet::new();
    let entry = module.entry.index();
    let order = std::iter::once(entry).chain((0..module.computations.len()).filter(|&i| i != entry));
    for ci in order.collect::<Vec<_>>() {
        let comp = &mut module.computations[ci];
        comp.name = unique_name(&mut comp_names, &comp.name);
        for inst in &mut comp.instructions {
            inst.name = unique_name(&mut inst_names, &inst.name);
        }
    }
}

fn unique_name(taken: &mut HashSet<String>, name: &str) -> String {
    if taken.insert(name.to_string()) {
        return name.to_string();
    }
    let (base, mut n) = match name.rsplit_once('.') {
        Some((base, suffix)) if !base.is_empty() => match suffix.parse::<u64>() {
            Ok(n) => (base, n + 1),
            Err(_) => (name, 1),
        },
        _ => (name, 1),
    };
    loop {
        let candidate = format!("{base}.{n}");
        if taken.insert(candidate.clone()) {
            return candidate;
        }
        n += 1;
    }
}
