//! `einsum`: numpy-style index equations (`"ij,jk->ik"`) lowered to `reduce`,
//! `dot_general` and `transpose`.
//!
//! The label bookkeeping (which labels are batch, contracting or free, the output extents,
//! the permutations) is the shape algebra's ([`crate::algebra::index_string`]); this file
//! only splits the equation into per-operand index strings and emits the ops. Labels one
//! operand has that neither the other operand nor the output has are summed out first,
//! since a product cannot express them.

use super::{Builder, OpResult, XlaOp};
use crate::algebra::{permutation, plan_einsum, IndexedShape};
use crate::element_type::ElementType;

/// One operand's labels as the algebra's comma-separated index string (`"ij"` -> `"i,j"`).
fn index_string(term: &str, what: &str) -> OpResult<String> {
    if term.contains('.') {
        return Err(format!("{what} {term:?}: ellipses (`...`) are not supported"));
    }
    Ok(term.chars().map(String::from).collect::<Vec<_>>().join(","))
}

/// The operand terms and the output term of an equation. Without `->` the output is every
/// label that occurs exactly once, in alphabetical order (numpy's implicit mode).
fn parse_equation(equation: &str) -> OpResult<(Vec<String>, String)> {
    let equation: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (inputs, output) = match equation.split_once("->") {
        Some((inputs, output)) => (inputs, Some(output)),
        None => (equation.as_str(), None),
    };
    let terms: Vec<String> = inputs.split(',').map(str::to_string).collect();
    let output = match output {
        Some(o) => o.to_string(),
        None => {
            let mut once: Vec<char> =
                inputs.chars().filter(|&c| c != ',' && inputs.chars().filter(|&d| d == c).count() == 1).collect();
            once.sort_unstable();
            once.into_iter().collect()
        }
    };
    Ok((terms, output))
}

impl Builder {
    /// Evaluates an einsum equation over one or two operands: `"ij,jk->ik"` (matmul),
    /// `"bij,bjk->bik"` (batch matmul), `"ij->ji"` (transpose), `"i,j->ij"` (outer product),
    /// `"ij->i"` (row sums). Labels are single letters; a label repeated within one operand
    /// (a diagonal or trace, `"ii->"`), ellipses, and output labels no operand has (their
    /// extent would be unknown) are errors.
    pub fn einsum<'b>(&'b self, equation: &str, operands: &[XlaOp<'b>]) -> XlaOp<'b> {
        self.op("einsum", || {
            let (terms, output) = parse_equation(equation)?;
            if terms.len() != operands.len() {
                return Err(format!(
                    "equation {equation:?} has {} operand terms but {} operands were given",
                    terms.len(),
                    operands.len()
                ));
            }
            let out = index_string(&output, "output")?;
            let mut indexed = Vec::new();
            for (i, (term, &op)) in terms.iter().zip(operands).enumerate() {
                let shape = self.array(op, &format!("operand {i}"))?;
                if !shape.is_static() {
                    return Err(format!("operand {i} has a dynamic shape"));
                }
                let extents: Vec<u64> = shape.dims.iter().map(|&d| d as u64).collect();
                let spec = index_string(term, &format!("operand {i}"))?;
                let labelled = IndexedShape::new(&spec, &extents).map_err(|e| format!("operand {i}: {e}"))?;
                indexed.push((op, labelled, shape.element_type));
            }
            match indexed.as_slice() {
                [(op, a, ty)] => {
                    let (op, a) = self.sum_labels_not_in(*op, a, *ty, &[&out])?;
                    let perm = permutation(&a, &out).map_err(|e| e.to_string())?;
                    self.transpose_unless_identity(op, &perm)
                }
                [(lop, l, lty), (rop, r, rty)] => {
                    let r_spec = r.labels().join(",");
                    let l_spec = l.labels().join(",");
                    let (lop, l) = self.sum_labels_not_in(*lop, l, *lty, &[&out, &r_spec])?;
                    let (rop, r) = self.sum_labels_not_in(*rop, r, *rty, &[&out, &l_spec])?;
                    let plan =
                        plan_einsum(&l.labels().join(","), l.extents(), &r.labels().join(","), r.extents(), &out)
                            .map_err(|e| e.to_string())?;
                    let as_i64 = |v: Vec<usize>| v.into_iter().map(|d| d as i64).collect::<Vec<_>>();
                    let dnums = super::DotDimensionNumbers {
                        lhs_batch_dims: as_i64(plan.lhs_batch_dims()),
                        rhs_batch_dims: as_i64(plan.rhs_batch_dims()),
                        lhs_contracting_dims: as_i64(plan.lhs_contracting_dims()),
                        rhs_contracting_dims: as_i64(plan.rhs_contracting_dims()),
                    };
                    let dot = self.dot_general_inner(lop, rop, &dnums, None, None)?;
                    self.transpose_unless_identity(dot, &plan.dot_to_output_permutation())
                }
                _ => Err(format!("einsum takes one or two operands, not {}", operands.len())),
            }
        })
    }

    /// Sums out the labels of `a` that none of the index strings `keep` has.
    fn sum_labels_not_in<'b>(
        &'b self,
        op: XlaOp<'b>,
        a: &IndexedShape,
        ty: ElementType,
        keep: &[&str],
    ) -> OpResult<(XlaOp<'b>, IndexedShape)> {
        let kept = |label: &str| keep.iter().any(|k| k.split(',').any(|l| l == label));
        let summed: Vec<i64> = a.labels().iter().enumerate().filter(|(_, l)| !kept(l)).map(|(i, _)| i as i64).collect();
        if summed.is_empty() {
            return Ok((op, a.clone()));
        }
        let remaining: Vec<(String, u64)> =
            a.labels().iter().zip(a.extents()).filter(|(l, _)| kept(l)).map(|(l, &e)| (l.clone(), e)).collect();
        let spec = remaining.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>().join(",");
        let extents: Vec<u64> = remaining.iter().map(|&(_, e)| e).collect();
        let reduced_shape = IndexedShape::new(&spec, &extents).map_err(|e| e.to_string())?;
        let adder = if ty == ElementType::Pred {
            self.scalar_computation("or", ty, |s, x, y| s.or(x, y))
        } else {
            self.scalar_computation("add", ty, |s, x, y| s.add(x, y))
        };
        let zero = self.zero(ty);
        let reduced = self.reduce_inner(&[op], &[zero], &adder, &summed)?;
        Ok((reduced, reduced_shape))
    }

    fn transpose_unless_identity<'b>(&'b self, op: XlaOp<'b>, perm: &[usize]) -> OpResult<XlaOp<'b>> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(op);
        }
        let perm: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
        self.transpose_inner(op, &perm)
    }
}
