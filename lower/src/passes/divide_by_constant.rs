//! XLA's rule `A / Const => A * (1 / Const)` (its `AlgebraicSimplifier::HandleDivide`): a
//! floating-point division whose divisor is a constant becomes a multiply by the constant's
//! reciprocal, rounded to the element type. XLA:CPU applies it to every f16, bf16, f32 and
//! f64 division by a constant, so its results (the reference Tessera reproduces) are the
//! multiply's: `x / 3` in f32 differs from the correctly rounded quotient by one ulp in about
//! a third of the elements, and in f16, where the reciprocal rounds to 11 bits, `exp(x / 20)`
//! differed from XLA:CPU's by up to 7 ulps before this pass. `jnp.mean` divides by a
//! constant too.
//!
//! The rule changes values, so it runs where the interpreter sees it as well
//! (`numerics_pipeline`), on the module as it stands after call inlining and bf16
//! normalization in both pipelines: the compiled tiers and the reference rewrite the same
//! divisions and stay bit for bit alike.
//!
//! A divisor counts as a constant when it is one, or when it is computed from constants by
//! broadcasts, converts, reshapes and elementwise arithmetic (what XLA's constant folding
//! turns into a constant before its simplifier meets the division: `x / jnp.sqrt(8.0)`, or a
//! bf16 constant converted to f32 by bf16 normalization). Its value is what the interpreter
//! computes for it. The reciprocal of each element is `1 / c` in f32 or f64 arithmetic,
//! rounded once more to f16 for an f16 division, as XLA computes it (Eigen's half types
//! divide in f32); a bf16 division keeps the f32 reciprocal and multiplies in f32, since
//! XLA:CPU has widened it to f32 by then. As in XLA, a division of a constant by a constant
//! is left to constant folding, and integer and complex divisions are left alone (complex
//! reciprocals are rounded by the C++ library's complex division, which this pass does not
//! reproduce).

use tessera_hlo::eval::evaluate_instruction;
use tessera_hlo::{Computation, ElementType, InstId, Instruction, Literal, Module, Opcode, Shape};

use super::rewrite::{add_constant, add_splat, become_op};
use crate::pass::Pass;
use crate::LowerError;

/// Largest divisor (and intermediate value) evaluated, in elements: the size limit of
/// constant folding, so a divisor the folder would leave alone is left alone here too.
const MAX_ELEMENTS: usize = 1 << 16;
/// Deepest constant expression followed: JAX's divisors are a constant, perhaps broadcast,
/// converted or passed through a function or two.
const MAX_DEPTH: usize = 8;

#[derive(Default)]
pub struct DivideByConstant {
    rewrites: Vec<String>,
}

impl Pass for DivideByConstant {
    fn name(&self) -> &'static str {
        "divide_by_constant"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        self.rewrites.clear();
        let mut changed = false;
        for c in module.comp_ids().collect::<Vec<_>>() {
            let mut touched = false;
            for id in module.comp(c).post_order() {
                let Some((x, reciprocal)) = rewrite_of(module, module.comp(c), id) else { continue };
                let comp = module.comp_mut(c);
                let name = comp.inst(id).name.clone();
                let mut shape = comp.inst(comp.inst(id).operands[1]).shape.clone();
                if let Some(a) = shape.as_array_mut().filter(|a| a.element_type == ElementType::BF16) {
                    a.element_type = ElementType::F32;
                }
                let r = reciprocal_instruction(comp, &name, reciprocal, shape);
                if comp.inst(id).shape.element_type() == ElementType::BF16 {
                    // XLA:CPU has made this an f32 division of widened operands by the time its
                    // simplifier inverts the divisor: the reciprocal and the product are f32,
                    // and only the product is rounded to bf16.
                    let mut wide = comp.inst(x).shape.clone();
                    if let Some(a) = wide.as_array_mut() {
                        a.element_type = ElementType::F32;
                    }
                    let x32 = comp.add(Instruction::new(
                        comp.unique_name(&format!("{name}.dividend")),
                        Opcode::Convert,
                        wide.clone(),
                        vec![x],
                    ));
                    let product = comp.add(Instruction::new(
                        comp.unique_name(&format!("{name}.product")),
                        Opcode::Multiply,
                        wide,
                        vec![x32, r],
                    ));
                    become_op(comp, id, Opcode::Convert, vec![product]);
                } else {
                    become_op(comp, id, Opcode::Multiply, vec![x, r]);
                }
                self.rewrites.push(format!("{name}: x / c = x * (1/c)"));
                touched = true;
            }
            if touched {
                // The reciprocal and the bf16 form's instructions were appended.
                module.comp_mut(c).order_operands_first();
                changed = true;
            }
        }
        Ok(changed)
    }

    fn report(&self) -> Vec<String> {
        self.rewrites.clone()
    }
}

/// For a division `id` the rule applies to: its dividend and the reciprocal of its divisor,
/// shaped as the divisor, or a scalar when the divisor splats one.
fn rewrite_of(module: &Module, comp: &Computation, id: InstId) -> Option<(InstId, Literal)> {
    let inst = comp.inst(id);
    let (Opcode::Divide, &[x, c]) = (inst.opcode, inst.operands.as_slice()) else { return None };
    let et = inst.shape.as_array()?.element_type;
    if !matches!(et, ElementType::F16 | ElementType::BF16 | ElementType::F32 | ElementType::F64)
        || comp.inst(x).opcode == Opcode::Constant
        || !inst.control_predecessors.is_empty()
    {
        return None;
    }
    let divisor = constant_value(module, comp, c, 0)?;
    let shape = &comp.inst(c).shape;
    let shape = if divisor.shape().rank() == 0 { Shape::scalar(et) } else { shape.clone() };
    Some((x, reciprocal(&divisor, et, &shape)?))
}

/// The value of `id` when constants alone determine it through ops the rule looks through.
/// A scalar stands for every element when `id` is an array that broadcasts one (JAX's
/// `x / 3`), whatever its size: only values held element by element count against
/// [`MAX_ELEMENTS`].
fn constant_value(module: &Module, comp: &Computation, id: InstId, depth: usize) -> Option<Literal> {
    use Opcode as O;
    let inst = comp.inst(id);
    if !inst.control_predecessors.is_empty() || depth >= MAX_DEPTH {
        return None;
    }
    let elements = inst.shape.as_array()?.element_count()? as usize;
    if inst.opcode == O::Constant {
        return inst.literal().filter(|_| elements <= MAX_ELEMENTS).cloned();
    }
    let through = matches!(
        inst.opcode,
        O::Broadcast
            | O::Convert
            | O::Reshape
            | O::Negate
            | O::Abs
            | O::Sqrt
            | O::Rsqrt
            | O::Cbrt
            | O::Exp
            | O::Log
            | O::Add
            | O::Subtract
            | O::Multiply
            | O::Divide
            | O::Power
            | O::Maximum
            | O::Minimum
    );
    if !through || inst.operands.is_empty() {
        return None;
    }
    let operands: Vec<Literal> =
        inst.operands.iter().map(|&o| constant_value(module, comp, o, depth + 1)).collect::<Option<_>>()?;
    if operands.iter().all(|l| l.shape().rank() == 0) && inst.shape.rank() > 0 {
        // A splat: broadcasts and reshapes keep the scalar, elementwise ops compute it once.
        if matches!(inst.opcode, O::Broadcast | O::Reshape) {
            return operands.into_iter().next();
        }
        let mut scalar = inst.clone();
        scalar.shape = Shape::scalar(inst.shape.element_type());
        return evaluate_instruction(module, &scalar, &operands).ok();
    }
    if elements > MAX_ELEMENTS || (inst.shape.rank() > 0 && operands.iter().any(|l| l.shape().rank() == 0)) {
        // Too large to hold, or a splat beside an array (not worth materializing).
        return None;
    }
    evaluate_instruction(module, inst, &operands).ok()
}

/// `1 / v` for every element of `divisor`, which holds `et`: rounded to `et`, but for bf16,
/// whose reciprocal is an f32 (see [`DivideByConstant::run`]); laid out as `shape`, the
/// divisor instruction's.
fn reciprocal(divisor: &Literal, et: ElementType, shape: &Shape) -> Option<Literal> {
    if divisor.element_type() != et {
        return None;
    }
    let bits = (0..divisor.element_count())
        .map(|i| {
            let b = divisor.get_bits(i)?;
            Some(match et {
                ElementType::F64 => u128::from((1.0 / f64::from_bits(b as u64)).to_bits()),
                ElementType::F32 => u128::from((1.0 / f32::from_bits(b as u32)).to_bits()),
                ElementType::F16 => {
                    u128::from(half::f16::from_f32(1.0 / half::f16::from_bits(b as u16).to_f32()).to_bits())
                }
                ElementType::BF16 => u128::from((1.0 / half::bf16::from_bits(b as u16).to_f32()).to_bits()),
                _ => return None,
            })
        })
        .collect::<Option<Vec<u128>>>()?;
    let mut shape = shape.clone();
    if et == ElementType::BF16 {
        shape.as_array_mut()?.element_type = ElementType::F32;
    }
    Literal::from_bits_vec(shape, bits).ok()
}

/// The reciprocal as an instruction of `comp` shaped as `shape` (the divisor's, f32 for
/// bf16): a scalar broadcast (JAX's `x / 3` divides by a broadcast scalar), which fusion then
/// folds into each kernel, or a constant array.
fn reciprocal_instruction(comp: &mut Computation, name: &str, reciprocal: Literal, shape: Shape) -> InstId {
    if reciprocal.shape().rank() == 0 {
        add_splat(comp, name, "reciprocal", reciprocal, shape)
    } else {
        add_constant(comp, &format!("{name}.reciprocal"), reciprocal)
    }
}
