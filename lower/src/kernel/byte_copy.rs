//! Kernels that only copy bytes: every element of one buffer stored, unchanged and at the same
//! offset, into another of the same size. A transpose or reshape whose layouts leave the bytes
//! where they are (JAX's `{0,1}` transposes of row-major arrays) lowers to one; the program
//! then copies the buffer instead of compiling and launching a kernel.

use super::{IndexSrc, Kernel, MemType, Op, Stmt, Ty};

/// Whether `kernel` copies its buffer 0 into its buffer 1 byte for byte: two buffers of one
/// plain scalar type and length, and a nest of loops from 0 (over the grid and loops
/// without branches) whose only statements load buffer 0 and store that value into buffer 1
/// at the same index, an index that visits every element once (a sum of the loop variables,
/// scaled as the row-major strides of their extents, in some order).
pub fn is_byte_copy(kernel: &Kernel) -> bool {
    let [src, dst] = kernel.buffers.as_slice() else { return false };
    let scalar = matches!(src.mem, MemType::Scalar(t) if t != Ty::Pred);
    if !scalar || src.mem != dst.mem || src.len != dst.len || src.writable || !dst.writable {
        return false;
    }
    // The loop variables' extents, the grid's first.
    let mut extents = vec![(kernel.grid.var, 0, kernel.grid.extent)];
    let mut body = kernel.body.as_slice();
    while let [Stmt::Loop(l)] = body {
        if l.start != 0 || !l.reductions.is_empty() {
            return false;
        }
        extents.push((l.var, l.start, l.end));
        body = &l.body;
    }
    let [Stmt::Let(v, Op::Load { buf: from, index, .. }), Stmt::Store { buf: to, index: at, value, .. }] = body else {
        return false;
    };
    if from.0 != 0 || to.0 != 1 || value != v || index != at || index.offset != 0 {
        return false;
    }
    // Each term one loop variable, no division or remainder; each variable once.
    let mut strides: Vec<(i64, i64)> = Vec::with_capacity(index.terms.len());
    for (i, term) in index.terms.iter().enumerate() {
        let IndexSrc::Var(var) = term.src else { return false };
        if term.div != 1 || term.modulo.is_some() || index.terms[..i].iter().any(|t| t.src == term.src) {
            return false;
        }
        let Some(&(_, _, extent)) = extents.iter().find(|(v, _, _)| *v == var) else { return false };
        strides.push((term.scale, extent));
    }
    // Variables the index does not use must run once (else they store the same elements again).
    let used = |var| index.terms.iter().any(|t| t.src == IndexSrc::Var(var));
    if extents.iter().any(|&(var, _, extent)| !used(var) && extent != 1) {
        return false;
    }
    strides.sort_unstable();
    let mut covered: i64 = 1;
    for (scale, extent) in strides {
        if scale != covered {
            return false;
        }
        let Some(next) = covered.checked_mul(extent) else { return false };
        covered = next;
    }
    covered == src.len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{IndexExpr, KernelBuilder, Term};

    fn t(v: super::super::VarId, scale: i64) -> Term {
        Term { src: IndexSrc::Var(v), div: 1, modulo: None, scale }
    }

    /// `dst[g*cols + i] = src[g*cols + i]` (or with `load_at`/`store_at` changing the index).
    fn copy(rows: i64, cols: i64, len: i64, src_ty: Ty, store_scale: i64) -> Kernel {
        let mut b = KernelBuilder::new("copy", rows);
        let src = b.buffer("src", MemType::Scalar(src_ty), len, false);
        let dst = b.buffer("dst", MemType::Scalar(Ty::F32), len, true);
        let g = b.grid_var();
        let i = b.begin_loop(0, cols);
        let load = IndexExpr { terms: vec![t(g, cols), t(i, 1)], offset: 0 };
        let store = IndexExpr { terms: vec![t(g, cols), t(i, store_scale)], offset: 0 };
        let v = b.load(src, load);
        b.store(dst, store, v);
        b.end_loop();
        b.finish()
    }

    #[test]
    fn whole_buffer_copies_are_byte_copies() {
        assert!(is_byte_copy(&copy(37, 53, 37 * 53, Ty::F32, 1)));
        assert!(is_byte_copy(&copy(1, 8, 8, Ty::F32, 1)));
    }

    #[test]
    fn a_variable_counted_twice_is_not_a_byte_copy() {
        // `v*1 + v*3` over v in 0..3 scales like a 3x3 row-major walk but visits 0, 4 and 8.
        let mut b = KernelBuilder::new("diagonal", 1);
        let src = b.buffer("src", MemType::Scalar(Ty::F32), 9, false);
        let dst = b.buffer("dst", MemType::Scalar(Ty::F32), 9, true);
        let v = b.begin_loop(0, 3);
        let index = IndexExpr { terms: vec![t(v, 1), t(v, 3)], offset: 0 };
        let x = b.load(src, index.clone());
        b.store(dst, index, x);
        b.end_loop();
        assert!(!is_byte_copy(&b.finish()));
    }

    #[test]
    fn partial_reordering_or_converting_copies_are_not() {
        // A buffer longer than what the loops visit (padding left unwritten).
        assert!(!is_byte_copy(&copy(37, 53, 37 * 53 + 1, Ty::F32, 1)));
        // Another element order on the store side.
        assert!(!is_byte_copy(&copy(4, 4, 16, Ty::F32, 4)));
        // Different element types.
        assert!(!is_byte_copy(&copy(4, 4, 16, Ty::I32, 1)));
    }
}
