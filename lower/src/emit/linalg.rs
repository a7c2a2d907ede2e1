//! `cholesky` and `triangular-solve` as kernel loops, one matrix of the batch per grid index.
//!
//! Both are emitted loops rather than runtime functions: the matrices in HLO programs that
//! use them are small (the factorizations XLA's expanders emit work on blocks), the loops
//! read operands through `elem` and write through the output layout with no relayout
//! copies, and every tier (and the kernel interpreter) runs them with nothing to declare.
//!
//! As in the reference interpreter, each matrix is computed in f64 in a private scratch
//! buffer (row-major, one matrix per batch index, so grid indices never share it) with the
//! same operation order, and rounded once to the result type. The kernel IR's loops have
//! constant bounds, so a triangular loop (`k < j`) runs the full range under a guard.

use tessera_hlo::ir::{AttrList, TriangularTranspose};
use tessera_hlo::InstId;

use super::{index, types, Emitter, Frame};
use crate::kernel::{BinOp, BufId, CastOp, CmpOp, Const, IndexExpr, MemType, Op, Ty, UnOp, ValueId, VarId};
use crate::LowerError;

/// One matrix of a batch: its batch coordinates and where its scratch matrix starts.
struct Batch {
    coords: Vec<IndexExpr>,
    base: IndexExpr,
}

impl<'m> Emitter<'m> {
    /// The batch of matrices of `dims` (all but the last two), one per grid index.
    fn matrix_batch(&mut self, dims: &[i64], matrix_len: i64) -> Batch {
        let bdims = &dims[..dims.len() - 2];
        let count: i64 = bdims.iter().product();
        let flat = if count > 1 {
            self.grid_extent = count;
            let gv = self.b.grid_var();
            self.bounds.set_var(gv, 0, count - 1);
            index::var(gv)
        } else {
            index::constant(0)
        };
        let mut coords = Vec::with_capacity(bdims.len());
        let mut stride = count;
        for &n in bdims {
            stride /= n.max(1);
            let q = self.idiv(&flat, stride.max(1));
            coords.push(self.irem(&q, n.max(1)));
        }
        Batch { coords, base: index::scale(&flat, matrix_len) }
    }

    /// Element `(i, j)` of the matrix `batch` of `id`, widened to f64.
    fn matrix_elem(
        &mut self,
        f: &Frame<'m>,
        id: InstId,
        batch: &Batch,
        i: &IndexExpr,
        j: &IndexExpr,
    ) -> Result<ValueId, LowerError> {
        let mut idx = batch.coords.clone();
        idx.push(i.clone());
        idx.push(j.clone());
        let inst = f.comp.inst(id);
        let ty = types::reg(inst.shape.element_type(), &inst.name)?;
        let v = self.elem(f, id, &idx)?;
        Ok(if ty == Ty::F64 { v } else { self.b.cast(CastOp::FPExt, Ty::F32, Ty::F64, v) })
    }

    /// Element `(row, col)` of a row-major `cols`-wide scratch matrix at `base`.
    fn scratch_at(base: &IndexExpr, row: &IndexExpr, col: &IndexExpr, cols: i64) -> IndexExpr {
        index::add(base, &index::add(&index::scale(row, cols), col))
    }

    fn f64_const(&mut self, x: f64) -> ValueId {
        self.b.constant(Const::F64(x.to_bits()))
    }

    /// `a < b` for two index expressions.
    fn index_lt(&mut self, a: &IndexExpr, b: &IndexExpr) -> ValueId {
        let x = self.b.let_(Op::Index(a.clone()));
        let y = self.b.let_(Op::Index(b.clone()));
        self.b.cmp(CmpOp::Slt, Ty::I64, x, y)
    }

    /// Opens a loop, returning its variable and the cache mark to forget at its end.
    fn linalg_loop(&mut self, n: i64) -> (VarId, super::Mark) {
        let mark = self.mark();
        (self.open_loop(0, n), mark)
    }

    fn close_loop(&mut self, mark: super::Mark) {
        self.b.end_loop();
        self.forget_since(mark);
    }

    /// Writes the scratch matrices, rounded once to the result type, to output 0 through its
    /// layout. With `transposed`, result element (r, c) is scratch element (c, r); with
    /// `zero_upper`, scratch elements above the diagonal are written as zeros.
    fn store_matrix(
        &mut self,
        batch: &Batch,
        scratch: BufId,
        rows: i64,
        cols: i64,
        transposed: bool,
        zero_upper: bool,
    ) {
        let out = &self.outputs[0];
        let (map, buf, et) = (out.map.clone(), out.buf, out.et);
        let reg = types::reg_ty(et).unwrap_or(Ty::F32);
        let (r, mr) = self.linalg_loop(rows);
        let (c, mc) = self.linalg_loop(cols);
        let (ri, ci) = (index::var(r), index::var(c));
        let (sr, sc) = if transposed { (&ci, &ri) } else { (&ri, &ci) };
        let x = self.b.load(scratch, Self::scratch_at(&batch.base, sr, sc, cols));
        let x = if zero_upper {
            let above = self.index_lt(sr, sc);
            let zero = self.f64_const(0.0);
            self.b.select(Ty::F64, above, zero, x)
        } else {
            x
        };
        let x = if reg == Ty::F32 { self.b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, x) } else { x };
        let x = types::to_mem(&mut self.b, et, x);
        let mut idx = batch.coords.clone();
        idx.push(ri);
        idx.push(ci);
        let addr = self.layout_offset(&map, &idx);
        self.b.store(buf, addr, x);
        self.close_loop(mc);
        self.close_loop(mr);
    }

    /// The float operands and result of a linear-algebra op, checked.
    fn linalg_types(&mut self, f: &Frame<'m>, id: InstId) -> Result<(), LowerError> {
        let inst = f.comp.inst(id);
        for &o in inst.operands.iter().chain(std::iter::once(&id)) {
            let i = f.comp.inst(o);
            let a = super::array_shape(&i.shape, &inst.name)?;
            // The reference interpreter has no complex factorizations either.
            if a.element_type.is_complex() {
                return Err(LowerError::unsupported(&inst.name, format!("{} on complex numbers", inst.opcode)));
            }
            let ty = types::reg(a.element_type, &inst.name)?;
            if !ty.is_float() {
                return Err(LowerError::invalid(&inst.name, format!("{} needs floating-point operands", inst.opcode)));
            }
            if a.dims.len() < 2 {
                return Err(LowerError::invalid(
                    &inst.name,
                    format!("{} needs operands of rank 2 or more", inst.opcode),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn emit_cholesky(&mut self) -> Result<(), LowerError> {
        let f = self.fused_frame();
        let id = self.comp.root;
        self.linalg_types(&f, id)?;
        let inst = self.comp.inst(id);
        let name = inst.name.clone();
        let [a] = inst.operands[..] else {
            return Err(LowerError::invalid(&name, "cholesky needs one operand"));
        };
        let dims = inst.shape.dims().to_vec();
        let n = dims[dims.len() - 1];
        if f.comp.inst(a).shape.dims() != dims.as_slice() || dims[dims.len() - 2] != n {
            return Err(LowerError::invalid(&name, "cholesky needs square matrices and a result of the same shape"));
        }
        let lower = inst.attr_bool("lower").unwrap_or(false);
        if dims.contains(&0) {
            return Ok(());
        }
        let count: i64 = dims[..dims.len() - 2].iter().product();
        let l = self.b.buffer(format!("{name}.factor"), MemType::Scalar(Ty::F64), count * n * n, true);
        let batch = self.matrix_batch(&dims, n * n);
        let at = |i: &IndexExpr, j: &IndexExpr| Self::scratch_at(&batch.base, i, j, n);

        // L starts as A in its lower form (for `lower=false`, A's upper triangle transposed).
        let (i, mi) = self.linalg_loop(n);
        let (j, mj) = self.linalg_loop(n);
        let (iv, jv) = (index::var(i), index::var(j));
        let x =
            if lower { self.matrix_elem(&f, a, &batch, &iv, &jv)? } else { self.matrix_elem(&f, a, &batch, &jv, &iv)? };
        self.b.store(l, at(&iv, &jv), x);
        self.close_loop(mj);
        self.close_loop(mi);

        // Column by column: the pivot, then the entries below it.
        let (j, mj) = self.linalg_loop(n);
        let jv = index::var(j);
        let d0 = self.b.load(l, at(&jv, &jv));
        let d = self.b.local(Ty::F64, d0);
        let (k, mk) = self.linalg_loop(n);
        let kv = index::var(k);
        let below = self.index_lt(&kv, &jv);
        self.b.begin_if(below);
        let ljk = self.b.load(l, at(&jv, &kv));
        let sq = self.b.binary(BinOp::Mul, Ty::F64, ljk, ljk);
        let cur = self.b.get_local(d);
        let next = self.b.binary(BinOp::Sub, Ty::F64, cur, sq);
        self.b.set_local(d, next);
        self.b.end_if();
        self.close_loop(mk);
        let dsum = self.b.get_local(d);
        let pivot = self.b.unary(UnOp::Sqrt, Ty::F64, dsum);
        self.b.store(l, at(&jv, &jv), pivot);
        let (i, mi) = self.linalg_loop(n);
        let iv = index::var(i);
        let after = self.index_lt(&jv, &iv);
        self.b.begin_if(after);
        let s0 = self.b.load(l, at(&iv, &jv));
        let s = self.b.local(Ty::F64, s0);
        let (k, mk) = self.linalg_loop(n);
        let kv = index::var(k);
        let below = self.index_lt(&kv, &jv);
        self.b.begin_if(below);
        let lik = self.b.load(l, at(&iv, &kv));
        let ljk = self.b.load(l, at(&jv, &kv));
        let p = self.b.binary(BinOp::Mul, Ty::F64, lik, ljk);
        let cur = self.b.get_local(s);
        let next = self.b.binary(BinOp::Sub, Ty::F64, cur, p);
        self.b.set_local(s, next);
        self.b.end_if();
        self.close_loop(mk);
        let sum = self.b.get_local(s);
        let q = self.b.binary(BinOp::FDiv, Ty::F64, sum, pivot);
        self.b.store(l, at(&iv, &jv), q);
        self.b.end_if();
        self.close_loop(mi);
        self.close_loop(mj);

        // The result holds the factor in its triangle and zeros in the other one (the
        // interpreter's choice); for `lower=false` it is U = L^T.
        self.store_matrix(&batch, l, n, n, !lower, true);
        Ok(())
    }

    /// Solves op(A) X = B (`left_side`) or X op(A) = B by substitution, A read only in its
    /// `lower` or upper triangle, its diagonal taken as ones when `unit_diagonal`; op is the
    /// identity or (`TRANSPOSE`, and `ADJOINT`, the same for real matrices) the transpose.
    pub(crate) fn emit_triangular_solve(&mut self) -> Result<(), LowerError> {
        let f = self.fused_frame();
        let id = self.comp.root;
        self.linalg_types(&f, id)?;
        let inst = self.comp.inst(id);
        let name = inst.name.clone();
        let [a, b] = inst.operands[..] else {
            return Err(LowerError::invalid(&name, "triangular-solve needs two operands"));
        };
        let left = inst.attr_bool("left_side").unwrap_or(false);
        let lower = inst.attr_bool("lower").unwrap_or(false);
        let unit = inst.attr_bool("unit_diagonal").unwrap_or(false);
        let transpose = match inst.attr_word("transpose_a") {
            None => false,
            Some(w) => match TriangularTranspose::parse(w) {
                Some(TriangularTranspose::NoTranspose) => false,
                Some(TriangularTranspose::Transpose | TriangularTranspose::Adjoint) => true,
                None => return Err(LowerError::invalid(&name, format!("unknown transpose_a {w}"))),
            },
        };
        let dims = inst.shape.dims().to_vec();
        let a_dims = f.comp.inst(a).shape.dims().to_vec();
        let r = dims.len();
        let (rows, cols) = (dims[r - 2], dims[r - 1]);
        let m = a_dims[a_dims.len() - 1];
        let fits = a_dims.len() == r
            && a_dims[r - 2] == m
            && a_dims[..r - 2] == dims[..r - 2]
            && f.comp.inst(b).shape.dims() == dims.as_slice()
            && if left { rows == m } else { cols == m };
        if !fits {
            return Err(LowerError::invalid(&name, "triangular-solve operand shapes do not fit"));
        }
        if dims.contains(&0) {
            return Ok(());
        }
        let count: i64 = dims[..r - 2].iter().product();
        let xs = self.b.buffer(format!("{name}.x"), MemType::Scalar(Ty::F64), count * rows * cols, true);
        let batch = self.matrix_batch(&dims, rows * cols);
        let at = |i: &IndexExpr, j: &IndexExpr| Self::scratch_at(&batch.base, i, j, cols);

        let (i, mi) = self.linalg_loop(rows);
        let (j, mj) = self.linalg_loop(cols);
        let (iv, jv) = (index::var(i), index::var(j));
        let x = self.matrix_elem(&f, b, &batch, &iv, &jv)?;
        self.b.store(xs, at(&iv, &jv), x);
        self.close_loop(mj);
        self.close_loop(mi);

        // T = op(A) is lower triangular when exactly one of `lower` and the transpose holds.
        // Left: T X = B, rows of X solved in T's triangular order, one column at a time.
        // Right: X T = B is T^T X^T = B^T: entries of each row of X solved in the order of
        // T^T's triangle, each using T's column instead of its row.
        let t_lower = lower != transpose;
        let forward = if left { t_lower } else { !t_lower };
        let (outer, mo) = self.linalg_loop(if left { cols } else { rows });
        let (step, ms) = self.linalg_loop(m);
        let ov = index::var(outer);
        let sv = index::var(step);
        // The unknown solved at this step: `step` in forward order, `m-1-step` backwards.
        let iv = if forward { sv } else { index::add_const(&index::scale(&sv, -1), m - 1) };
        let place = |p: &IndexExpr| if left { at(p, &ov) } else { at(&ov, p) };
        let s0 = self.b.load(xs, place(&iv));
        let s = self.b.local(Ty::F64, s0);
        let (k, mk) = self.linalg_loop(m);
        let kv = index::var(k);
        let solved = if forward { self.index_lt(&kv, &iv) } else { self.index_lt(&iv, &kv) };
        let mark = self.mark();
        self.b.begin_if(solved);
        // T(i, k) on the left, T(k, i) on the right; T(p, q) = A(q, p) when transposed.
        let (p, q) = if left { (&iv, &kv) } else { (&kv, &iv) };
        let (p, q) = if transpose { (q, p) } else { (p, q) };
        let t = self.matrix_elem(&f, a, &batch, p, q)?;
        let xk = self.b.load(xs, place(&kv));
        let prod = self.b.binary(BinOp::Mul, Ty::F64, t, xk);
        let cur = self.b.get_local(s);
        let next = self.b.binary(BinOp::Sub, Ty::F64, cur, prod);
        self.b.set_local(s, next);
        self.b.end_if();
        self.forget_since(mark);
        self.close_loop(mk);
        let sum = self.b.get_local(s);
        let x = if unit {
            sum
        } else {
            let d = self.matrix_elem(&f, a, &batch, &iv, &iv)?;
            self.b.binary(BinOp::FDiv, Ty::F64, sum, d)
        };
        self.b.store(xs, place(&iv), x);
        self.close_loop(ms);
        self.close_loop(mo);

        self.store_matrix(&batch, xs, rows, cols, false, false);
        Ok(())
    }
}
