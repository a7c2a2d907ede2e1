//! Ops that wrap or forward other work rather than compute: fusion, the async and copy
//! start/done pairs, add-dependency, domain, bitcast, and the dimension-size queries.

use super::collectives::zeros;
use super::{Arr, Buf, EvalError, Evaluator, Value};
use crate::element_type::ElementType;
use crate::ir::{AttrList, Instruction, Opcode};
use crate::literal::Literal;
use crate::shape::Shape;

impl Evaluator<'_> {
    pub(crate) fn eval_wrapper(&self, inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
        use Opcode as O;
        let first = || ops.first().map(|v| (*v).clone()).ok_or_else(|| EvalError::invalid(inst, "missing operand"));
        let args = || ops.iter().map(|v| (*v).clone()).collect::<Vec<_>>();
        match inst.opcode {
            O::Fusion => {
                let comp = inst.called("calls").ok_or_else(|| EvalError::invalid(inst, "fusion without calls"))?;
                self.run_comp(comp, args())
            }
            // async-start: ((operands), result, context...); the wrapped work runs right away.
            O::AsyncStart => {
                let comp = inst.called("calls").ok_or_else(|| EvalError::invalid(inst, "async-start without calls"))?;
                let result = self.run_comp(comp, args())?;
                let mut parts = vec![Value::Tuple(args()), result];
                if let Shape::Tuple(shapes) = &inst.shape {
                    for s in shapes.iter().skip(2) {
                        parts.push(zeros(s)?);
                    }
                }
                Ok(Value::Tuple(parts))
            }
            O::AsyncUpdate | O::AddDependency | O::Domain => first(),
            O::AsyncDone => match first()? {
                Value::Tuple(mut vs) if vs.len() >= 2 => Ok(vs.swap_remove(1)),
                _ => Err(EvalError::invalid(inst, "async-done operand is not an async-start tuple")),
            },
            // copy-start: (destination, source, context).
            O::CopyStart => {
                let v = first()?;
                let context = match &inst.shape {
                    Shape::Tuple(s) if s.len() == 3 => zeros(&s[2])?,
                    _ => return Err(EvalError::invalid(inst, "copy-start returns a three-element tuple")),
                };
                Ok(Value::Tuple(vec![v.clone(), v, context]))
            }
            O::CopyDone => match first()? {
                Value::Tuple(mut vs) if !vs.is_empty() => Ok(vs.swap_remove(0)),
                _ => Err(EvalError::invalid(inst, "copy-done operand is not a copy-start tuple")),
            },
            O::GetDimensionSize => {
                let Some(Value::Arr(a)) = ops.first() else {
                    return Err(EvalError::invalid(inst, "get-dimension-size needs an array"));
                };
                let d = dimension(inst, a)?;
                Ok(Value::Arr(Arr { ty: ElementType::S32, dims: vec![], buf: Buf::Int(vec![a.dims[d]]) }))
            }
            O::SetDimensionSize => {
                let (Some(Value::Arr(a)), Some(Value::Arr(size))) = (ops.first(), ops.get(1)) else {
                    return Err(EvalError::invalid(inst, "set-dimension-size needs an array and a size"));
                };
                let d = dimension(inst, a)?;
                // Values here are static: a size equal to the bound changes nothing, anything
                // smaller would need dynamic shapes.
                match &size.buf {
                    Buf::Int(v) if v.len() == 1 && v[0] == a.dims[d] => Ok(Value::Arr((*a).clone())),
                    _ => Err(EvalError::Unsupported { opcode: "set-dimension-size below the bound".into() }),
                }
            }
            op => Err(EvalError::Unsupported { opcode: op.name().to_string() }),
        }
    }
}

pub(crate) fn handles(op: Opcode) -> bool {
    use Opcode as O;
    matches!(
        op,
        O::Fusion
            | O::AsyncStart
            | O::AsyncUpdate
            | O::AsyncDone
            | O::AddDependency
            | O::Domain
            | O::CopyStart
            | O::CopyDone
            | O::GetDimensionSize
            | O::SetDimensionSize
    )
}

fn dimension(inst: &Instruction, a: &Arr) -> Result<usize, EvalError> {
    match inst.attr_ints("dimensions") {
        Some([d]) => usize::try_from(*d).ok().filter(|&d| d < a.dims.len()),
        _ => None,
    }
    .ok_or_else(|| EvalError::invalid(inst, "needs one dimension in range"))
}

/// bitcast: the operand's physical bytes (in its declared layout) read as the result shape
/// (in its layout).
pub(crate) fn bitcast(inst: &Instruction, operand_shape: &Shape, v: &Value) -> Result<Value, EvalError> {
    let Value::Arr(_) = v else {
        return Err(EvalError::invalid(inst, "bitcast of a non-array"));
    };
    let lit = v.to_literal(operand_shape)?;
    let bytes = lit.physical_bytes()?.to_vec();
    let out = Literal::from_physical_bytes(inst.shape.clone(), bytes)
        .map_err(|e| EvalError::invalid(inst, format!("bitcast changes the buffer size: {e}")))?;
    Value::from_literal(&out, &inst.name)
}

/// A sharding annotation ([`crate::ir::SHARDING_ANNOTATIONS`]) on one device: its one
/// operand, which must already have the result's dimensions and type (one shard of one device
/// is the whole array).
pub(crate) fn sharding_annotation(inst: &Instruction, ops: &[&Value]) -> Result<Value, EvalError> {
    let [v] = ops else {
        return Err(EvalError::invalid(inst, "a sharding annotation takes one operand"));
    };
    let same = match (v, &inst.shape) {
        (Value::Arr(a), Shape::Array(s)) => a.ty == s.element_type && a.dims == s.dims,
        _ => false,
    };
    if !same {
        return Err(EvalError::invalid(
            inst,
            "on one device a sharding annotation's result has its operand's dimensions and type",
        ));
    }
    Ok((*v).clone())
}
