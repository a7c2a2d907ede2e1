//! Argmax and argmin over a row in lanes. JAX's `argmax`/`argmin` is a variadic reduce of the
//! values and an iota of their positions with a reducer of compares and selects; reduced
//! serially, one element at a time, it runs at one compare chain per element (an
//! f32[64,65536] argmax took 20 ms, XLA:CPU 7 ms). Such a reduce whose position output alone
//! is read becomes two lane reductions over the row: its maximum (minimum) value, with NaN
//! above everything, then the smallest position holding that value (a NaN, if the maximum is
//! one). That is exactly what the serial form returns: the first NaN if there is one, else the
//! first of the largest values, the init's position winning a tie (it comes first).
//!
//! The reducer is checked, not trusted: it may only compare values with values and positions
//! with positions (each in its type's own order) and combine the results with boolean ops and
//! selects, so what it returns depends only on how its operands compare; it is evaluated on
//! one operand pair of every such case (values less, equal, greater, either or both NaN;
//! positions less or equal, the only orders a serial reduction of increasing positions gives
//! it) and must pick the position the rule above picks.

use tessera_hlo::ir::AttrList;
use tessera_hlo::ir::{ComparisonDirection, ComparisonType};
use tessera_hlo::{CompId, ElementType, InstId, Module, Opcode};

use super::{index, types, Emitter, Frame};
use crate::kernel::{BinOp, CmpOp, Const, IndexExpr, Reduction, Tail, Ty, ValueId};
use crate::LowerError;

/// A reduce recognized as an argmax or argmin over one row.
pub(super) struct ArgRow {
    /// Max or min of the values (`FMax`, `SMax`, `UMax` or the `Min`s).
    op: BinOp,
    /// Register types of the values and of the positions.
    value_ty: Ty,
    index_ty: Ty,
    /// The reduced dimension, its extent, and lanes per reduction.
    dim: usize,
    extent: i64,
    lanes: i64,
    /// The init position, a constant no greater than any position.
    init_index: i64,
}

/// Reduce `id` of `comp` as an [`ArgRow`], when it is one: two inputs, values and an iota of
/// their positions along the one reduced dimension (the row: contiguous, at least two lanes'
/// worth of elements), a constant init position of at most 0, a reducer that checks out
/// (module doc), and only the positions read (`get-tuple-element` 1): the value the serial
/// form returns for ties of +0.0 and -0.0 is the last one's, which the lanes do not track.
pub(super) fn arg_row(module: &Module, comp: &tessera_hlo::Computation, id: InstId) -> Option<ArgRow> {
    let inst = comp.inst(id);
    let (inputs, inits, reducer) = super::reduce::reduction_parts(inst).ok()?;
    let ([_, positions], [_, init_pos]) = (inputs, inits) else { return None };
    let tessera_hlo::Shape::Tuple(outs) = &inst.shape else { return None };
    let (value_et, index_et) = (outs.first()?.element_type(), outs.get(1)?.element_type());
    let users = comp.users();
    let reads_positions_only = users[id.index()].iter().all(|&u| {
        let user = comp.inst(u);
        user.opcode == Opcode::GetTupleElement && user.attr_int("index") == Some(1)
    });
    if users[id.index()].is_empty() || !reads_positions_only {
        return None;
    }
    let op = extreme(module, reducer, value_et)?;
    let index_ty = match index_et {
        ElementType::S32 => Ty::I32,
        ElementType::S64 => Ty::I64,
        _ => return None,
    };
    let value_ty = types::reg_ty(value_et).filter(|_| !types::is_minifloat(value_et))?;
    let init_index = comp.inst(*init_pos).literal().and_then(|l| match index_ty {
        Ty::I32 => l.get::<i32>(&[]).ok().map(i64::from),
        _ => l.get::<i64>(&[]).ok(),
    })?;
    if init_index > 0 || comp.inst(*init_pos).opcode != Opcode::Constant {
        return None;
    }
    let lanes = if value_ty.bits() == 64 || index_ty == Ty::I64 { 8 } else { 16 };
    let (dim, extent) = super::reduce::contiguous_row(comp, inst, lanes).ok()??;
    if !is_position(comp, *positions, dim) {
        return None;
    }
    Some(ArgRow { op, value_ty, index_ty, dim, extent, lanes, init_index })
}

/// Whether `id` is the position along dimension `dim` of each element: an iota over `dim`, or
/// a one-dimensional iota broadcast onto `dim`.
fn is_position(comp: &tessera_hlo::Computation, id: InstId, dim: usize) -> bool {
    let inst = comp.inst(id);
    match inst.opcode {
        Opcode::Iota => inst.attr_int("iota_dimension") == Some(dim as i64),
        Opcode::Broadcast => {
            let Some(&operand) = inst.operands.first() else { return false };
            let iota = comp.inst(operand);
            iota.opcode == Opcode::Iota
                && iota.shape.dims().len() == 1
                && inst.attr_ints("dimensions") == Some(&[dim as i64][..])
        }
        _ => false,
    }
}

/// A reducer's operands as the check sees them: a value, a position, or a compare's outcome.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Abs {
    Value(f64),
    Position(i64),
    Pred(bool),
}

/// `Max`/`Min` of `value_et` when `reducer` is an argmax/argmin reducer (module doc).
fn extreme(module: &Module, reducer: CompId, value_et: ElementType) -> Option<BinOp> {
    let c = module.get(reducer)?;
    let float = value_et.is_float();
    let signed = matches!(value_et, ElementType::S32 | ElementType::S64);
    let unsigned = matches!(value_et, ElementType::U32 | ElementType::U64);
    if !(float || signed || unsigned) {
        return None;
    }
    let values: &[f64] = if float { &[1.0, 2.0, f64::NAN] } else { &[1.0, 2.0] };
    let picks = |max: bool| {
        values.iter().all(|&va| {
            values.iter().all(|&vb| {
                [(1, 1), (1, 2)].iter().all(|&(ia, ib)| {
                    let want = if va.is_nan() {
                        ia
                    } else if vb.is_nan() {
                        ib
                    } else if va == vb || (va > vb) == max {
                        ia
                    } else {
                        ib
                    };
                    let args = [Abs::Value(va), Abs::Position(ia), Abs::Value(vb), Abs::Position(ib)];
                    matches!(run(c, value_et, &args), Some((_, Abs::Position(got))) if got == want)
                })
            })
        })
    };
    let max = if picks(true) {
        true
    } else if picks(false) {
        false
    } else {
        return None;
    };
    Some(match (float, signed, max) {
        (true, _, true) => BinOp::FMax,
        (true, _, false) => BinOp::FMin,
        (_, true, true) => BinOp::SMax,
        (_, true, false) => BinOp::SMin,
        (_, _, true) => BinOp::UMax,
        (_, _, false) => BinOp::UMin,
    })
}

/// The reducer's (value, position) result on abstract operands, or `None` if it does anything
/// beyond compares of like operands in their type's order, boolean ops and selects.
fn run(c: &tessera_hlo::Computation, value_et: ElementType, args: &[Abs; 4]) -> Option<(Abs, Abs)> {
    let mut vals: Vec<Option<Abs>> = vec![None; c.instructions.len()];
    for (i, inst) in c.instructions.iter().enumerate() {
        let get = |k: usize| inst.operands.get(k).and_then(|&o| vals[o.0 as usize]);
        let v = match inst.opcode {
            Opcode::Parameter => {
                let n = usize::try_from(inst.parameter_number()?).ok()?;
                // Parameters 0 and 2 are values, 1 and 3 positions.
                let et = inst.shape.element_type();
                let want = if n % 2 == 0 { value_et } else { et };
                (et == want).then_some(*args.get(n)?)?
            }
            Opcode::Compare => {
                let dir = inst.attr_word("direction").and_then(ComparisonDirection::parse)?;
                let natural = match inst.attr_word("type").and_then(ComparisonType::parse) {
                    None => true,
                    Some(ComparisonType::Float) => value_et.is_float(),
                    Some(ComparisonType::Signed) => true,
                    Some(ComparisonType::Unsigned) => matches!(value_et, ElementType::U32 | ElementType::U64),
                    Some(ComparisonType::TotalOrder) => false,
                };
                // Positions are signed; an unsigned compare type can only be the values'.
                let (x, y) = match (get(0)?, get(1)?) {
                    (Abs::Value(x), Abs::Value(y)) if natural => (x, y),
                    (Abs::Position(x), Abs::Position(y))
                        if inst
                            .attr_word("type")
                            .and_then(ComparisonType::parse)
                            .is_none_or(|t| t == ComparisonType::Signed) =>
                    {
                        (x as f64, y as f64)
                    }
                    _ => return None,
                };
                Abs::Pred(match dir {
                    ComparisonDirection::Eq => x == y,
                    ComparisonDirection::Ne => x != y,
                    ComparisonDirection::Lt => x < y,
                    ComparisonDirection::Le => x <= y,
                    ComparisonDirection::Gt => x > y,
                    ComparisonDirection::Ge => x >= y,
                })
            }
            Opcode::And | Opcode::Or | Opcode::Xor => match (get(0)?, get(1)?) {
                (Abs::Pred(x), Abs::Pred(y)) => Abs::Pred(match inst.opcode {
                    Opcode::And => x && y,
                    Opcode::Or => x || y,
                    _ => x != y,
                }),
                _ => return None,
            },
            Opcode::Not => match get(0)? {
                Abs::Pred(x) => Abs::Pred(!x),
                _ => return None,
            },
            Opcode::Select => match (get(0)?, get(1)?, get(2)?) {
                (Abs::Pred(p), t @ Abs::Value(_), f @ Abs::Value(_))
                | (Abs::Pred(p), t @ Abs::Position(_), f @ Abs::Position(_)) => {
                    if p {
                        t
                    } else {
                        f
                    }
                }
                _ => return None,
            },
            Opcode::Tuple if inst.operands.len() == 2 && c.root.0 as usize == i => {
                return match (get(0)?, get(1)?) {
                    (v @ Abs::Value(_), p @ Abs::Position(_)) => Some((v, p)),
                    _ => None,
                };
            }
            _ => return None,
        };
        vals[i] = Some(v);
    }
    None
}

impl<'m> Emitter<'m> {
    /// The positions output of argmax/argmin `id` at output element `idx`, by the two lane
    /// reductions of the module doc; the values output (which nothing reads) is the init value.
    pub(super) fn arg_reduce(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        idx: &[IndexExpr],
        row: ArgRow,
    ) -> Result<Vec<ValueId>, LowerError> {
        let inst = f.comp.inst(id);
        let name = inst.name.clone();
        let (inputs, inits, _) = super::reduce::reduction_parts(inst)?;
        let (values, positions, init_value) = (inputs[0], inputs[1], inits[0]);
        let reduced: Vec<i64> = inst.attr_ints("dimensions").map(<[i64]>::to_vec).unwrap_or_default();
        let in_rank = super::layout_map(&f.comp.inst(values).shape, &name)?.dims().len();
        let mut full = vec![IndexExpr::default(); in_rank];
        let mut kept = idx.iter();
        for (d, slot) in full.iter_mut().enumerate() {
            // Reduced dimensions other than the row's have extent 1: index 0.
            if !reduced.contains(&(d as i64)) {
                *slot = kept.next().cloned().ok_or_else(|| LowerError::invalid(&name, "index rank mismatch"))?;
            }
        }
        let tail = if row.extent % row.lanes == 0 { Tail::None } else { Tail::Peel };
        let float = row.value_ty.is_float();

        // The row's extreme value, the init included (it is the accumulator's start).
        let init = self.elem(f, init_value, &[])?;
        let acc = self.b.local(row.value_ty, init);
        let mark = self.mark();
        let v = self.open_loop(0, row.extent);
        full[row.dim] = index::var(v);
        let x = self.elem(f, values, &full)?;
        let a = self.b.get_local(acc);
        let m = self.b.binary(row.op, row.value_ty, a, x);
        self.b.set_local(acc, m);
        self.b.end_loop_reducing(row.lanes as u32, tail, vec![Reduction { local: acc, op: row.op, ty: row.value_ty }]);
        self.forget_since(mark);
        let extreme = self.b.get_local(acc);
        let extreme_nan = float.then(|| self.b.cmp(CmpOp::FNe, row.value_ty, extreme, extreme));

        // The first position holding it (or, for a NaN, holding a NaN).
        let none = match row.index_ty {
            Ty::I32 => i64::from(i32::MAX),
            _ => i64::MAX,
        };
        let none = self.b.constant(Const::Int { ty: row.index_ty, bits: none });
        let first = self.b.local(row.index_ty, none);
        let mark = self.mark();
        let v = self.open_loop(0, row.extent);
        full[row.dim] = index::var(v);
        let x = self.elem(f, values, &full)?;
        let here = self.elem(f, positions, &full)?;
        let matches = self.holds(row.value_ty, x, extreme, extreme_nan);
        let candidate = self.b.select(row.index_ty, matches, here, none);
        let so_far = self.b.get_local(first);
        let min = self.b.binary(BinOp::SMin, row.index_ty, so_far, candidate);
        self.b.set_local(first, min);
        self.b.end_loop_reducing(
            row.lanes as u32,
            tail,
            vec![Reduction { local: first, op: BinOp::SMin, ty: row.index_ty }],
        );
        self.forget_since(mark);
        let first = self.b.get_local(first);

        // The init comes first: where it holds the extreme, its position (at most 0) wins.
        let init_holds = self.holds(row.value_ty, init, extreme, extreme_nan);
        let init_index = self.b.constant(Const::Int { ty: row.index_ty, bits: row.init_index });
        let position = self.b.select(row.index_ty, init_holds, init_index, first);
        Ok(vec![init, position])
    }

    /// Whether `x` is `extreme`: equal to it, or both NaN (`extreme_nan` for floats).
    fn holds(&mut self, ty: Ty, x: ValueId, extreme: ValueId, extreme_nan: Option<ValueId>) -> ValueId {
        let equal = self.b.cmp(if ty.is_float() { CmpOp::FEq } else { CmpOp::Eq }, ty, x, extreme);
        match extreme_nan {
            Some(extreme_nan) => {
                let x_nan = self.b.cmp(CmpOp::FNe, ty, x, x);
                let both = self.b.binary(BinOp::And, Ty::Pred, x_nan, extreme_nan);
                self.b.binary(BinOp::Or, Ty::Pred, equal, both)
            }
            None => equal,
        }
    }
}
