//! Transposes in registers. The lowering walks a transposed read in blocks
//! (`tessera_lower`'s `emit::transposed`): a scalar loop over the parameter's rows, and in it
//! one vector iteration whose lanes read one element from each of `W` rows of the parameter,
//! `S` elements apart. `vector.rs` reads such a load lane by lane, a load and an insert per
//! element; here eight iterations of the outer loop run together instead. Each lane's row
//! gives one contiguous `<8 x T>` load covering the eight iterations, and a shuffle network
//! (on AVX, LLVM selects `vunpck[lh]ps`, `vunpck[lh]pd`, `vinsertf128` and `vperm2f128`)
//! turns the `W` rows into the eight iterations' `<W x T>` vectors. The eight copies of the
//! body then run in order with those vectors in place of the strided loads: the same values,
//! so the same results, with about a third of the instructions per element.
//!
//! The outer loop's body must be that one vector loop, of exactly one vector iteration (so the
//! copies run in the original order), without branches or locals, whose loads are all such
//! strided loads (a transpose or a relayout, maybe with arithmetic on the values, but no other
//! stream: see `plan`); they must be 32-bit, step one element per outer iteration, and read a
//! buffer the kernel does not write, of a function whose launches pass disjoint buffers (so
//! the loads may move above the earlier copies' stores). Anything else keeps `vector.rs`'s
//! lane-by-lane form.

use std::collections::HashMap;

use inkwell::types::VectorType;
use inkwell::values::{BasicValue, BasicValueEnum, VectorValue};

use tessera_lower::kernel::{BufId, IndexExpr, IndexSrc, Loop, MemType, Op, Stmt, Ty, ValueId, VarId};

use super::function::Translator;
use crate::CodegenError;

/// Outer iterations that run together: one `<8 x T>` row per lane, a 256-bit register.
const BLOCK: u32 = 8;

/// A strided load the block serves from transposed rows.
struct RowLoad {
    id: ValueId,
    buf: BufId,
    index: IndexExpr,
    ty: Ty,
    stride: i64,
}

/// The inner vector loop of `outer` and its strided loads, when `outer` has the shape of the
/// module doc.
fn plan<'l>(outer: &'l Loop, writable: &dyn Fn(BufId) -> bool) -> Option<(&'l Loop, Vec<RowLoad>)> {
    if outer.vector_width != 1 || !outer.reductions.is_empty() || outer.end - outer.start < i64::from(BLOCK) {
        return None;
    }
    let [Stmt::Loop(inner)] = outer.body.as_slice() else { return None };
    let w = inner.vector_width;
    if !matches!(w, 8 | 16) || !inner.reductions.is_empty() || inner.end - inner.start != i64::from(w) {
        return None;
    }
    // The loads `vector.rs` would read lane by lane, a cache line or more apart.
    let strided = super::vector::strided_loads(inner)?;
    let mut loads = Vec::new();
    for stmt in &inner.body {
        match stmt {
            Stmt::Let(id, Op::Load { buf, index, mem }) => {
                // Another stream beside the rows (`transpose(x) + y`) ran slower this way where
                // rows lie a power of two apart: an f32[4096,4096] 20.3 -> 25.7 ms, where
                // f32[4000,4000] ran 16.0 -> 14.2. A block's eight copies read eight rows of
                // `y` 16 KiB apart, all in one cache set beside the 16 rows being transposed.
                let stride = *strided.get(id)?;
                let ty = match mem {
                    MemType::Scalar(t @ (Ty::F32 | Ty::I32)) => *t,
                    _ => return None,
                };
                if writable(*buf) || !steps_by_one(index, outer.var) {
                    return None;
                }
                loads.push(RowLoad { id: *id, buf: *buf, index: index.clone(), ty, stride });
            }
            Stmt::Let(..) | Stmt::Store { .. } => {}
            _ => return None,
        }
    }
    (!loads.is_empty()).then_some((inner, loads))
}

/// Whether `index` moves by exactly one element per step of `var` (one plain term of scale 1,
/// and no value term, which might depend on it).
fn steps_by_one(index: &IndexExpr, var: VarId) -> bool {
    let mine: Vec<_> = index.terms.iter().filter(|t| t.src == IndexSrc::Var(var)).collect();
    let plain = matches!(mine.as_slice(), [t] if t.scale == 1 && t.div == 1 && t.modulo.is_none());
    plain && index.terms.iter().all(|t| matches!(t.src, IndexSrc::Var(_)))
}

impl<'a, 'ctx> Translator<'a, 'ctx> {
    /// Translates `outer` with its transposed loads served from registers (module doc); false
    /// when it does not have that shape (nothing was emitted then).
    pub fn transposed_loop(&mut self, outer: &Loop) -> Result<bool, CodegenError> {
        if !self.disjoint {
            return Ok(false);
        }
        let kernel = self.kernel;
        let writable = |b: BufId| kernel.buffers.get(b.0 as usize).is_none_or(|k| k.writable);
        let Some((inner, loads)) = plan(outer, &writable) else { return Ok(false) };
        let i64t = self.ctx.i64_type();
        let trip = outer.end - outer.start;
        let main_end = outer.start + (trip - trip % i64::from(BLOCK));
        let (start, end) = (i64t.const_int(outer.start as u64, true), i64t.const_int(main_end as u64, true));
        self.counted_loop_by(outer.var, start, end, i64::from(BLOCK), |t| {
            let base = t.var(outer.var)?;
            t.define_var(inner.var)?;
            t.vars.insert(inner.var, i64t.const_int(inner.start as u64, true));
            let mut columns: HashMap<ValueId, Vec<BasicValueEnum<'ctx>>> = HashMap::new();
            for load in &loads {
                columns.insert(load.id, t.transposed_rows(load, inner.vector_width)?);
            }
            for u in 0..BLOCK {
                let at = t.builder.build_int_nsw_add(base, i64t.const_int(u64::from(u), false), "block_iv");
                t.vars.insert(outer.var, at.map_err(t.err())?);
                t.transposed = columns.iter().map(|(&id, cols)| (id, cols[u as usize])).collect();
                t.forget_defined(&inner.body);
                let r = t.inner_vector_body(inner);
                t.transposed.clear();
                r?;
            }
            t.vars.insert(outer.var, base);
            t.vars.remove(&inner.var);
            Ok(())
        })?;
        if outer.end > main_end {
            let (start, end) = (i64t.const_int(main_end as u64, true), i64t.const_int(outer.end as u64, true));
            self.counted_loop_by(outer.var, start, end, 1, |t| t.block_of(&outer.body))?;
        }
        Ok(true)
    }

    /// The `BLOCK` vectors of `w` lanes that `load` reads on the block's outer iterations:
    /// lane `l`'s `BLOCK` elements are contiguous (one step apart per iteration), loaded as one
    /// row, and the rows transposed in groups of eight.
    fn transposed_rows(&mut self, load: &RowLoad, w: u32) -> Result<Vec<BasicValueEnum<'ctx>>, CodegenError> {
        let err = self.err();
        let base = self.element_ptr(load.buf, &load.index)?;
        let et = self.llvm_type(load.ty);
        let vt = self.vector_type(load.ty, BLOCK);
        let i64t = self.ctx.i64_type();
        let mut rows = Vec::with_capacity(w as usize);
        for lane in 0..w {
            let offset = i64t.const_int((load.stride * i64::from(lane)) as u64, true);
            // SAFETY: the row holds elements the scalar loops read: lane `lane` of the block's
            // outer iterations, all inside the main part of the outer loop.
            let ptr = unsafe { self.builder.build_in_bounds_gep(et, base, &[offset], "row") }.map_err(&err)?;
            let row = self.builder.build_load(vt, ptr, "row").map_err(&err)?;
            if let Some(inst) = row.as_instruction_value() {
                inst.set_alignment(load.ty.bits() / 8).map_err(|e| self.unsupported(e.to_string()))?;
            }
            rows.push(row.into_vector_value());
        }
        // Each group of eight rows (lanes) becomes eight columns (iterations) of eight lanes;
        // the groups' columns are then joined lane-wise.
        let mut groups = Vec::new();
        for group in rows.chunks(BLOCK as usize) {
            groups.push(self.transpose8(group)?);
        }
        let mut out = Vec::with_capacity(BLOCK as usize);
        for u in 0..BLOCK as usize {
            let mut v = groups[0][u];
            for g in &groups[1..] {
                v = self.concat(v, g[u])?;
            }
            out.push(v.into());
        }
        Ok(out)
    }

    /// The 8x8 transpose of `rows` (eight `<8 x T>`): column `u` holds element `u` of each
    /// row, in row order. Interleaves within 128-bit halves, then pairs, then halves.
    fn transpose8(&self, rows: &[VectorValue<'ctx>]) -> Result<Vec<VectorValue<'ctx>>, CodegenError> {
        let shuffle = |a: VectorValue<'ctx>, b: VectorValue<'ctx>, mask: [u32; 8]| -> Result<_, CodegenError> {
            let i32t = self.ctx.i32_type();
            let m: Vec<_> = mask.iter().map(|&i| i32t.const_int(u64::from(i), false)).collect();
            self.builder.build_shuffle_vector(a, b, VectorType::const_vector(&m), "tr").map_err(self.err())
        };
        const UNPACK_LO: [u32; 8] = [0, 8, 1, 9, 4, 12, 5, 13];
        const UNPACK_HI: [u32; 8] = [2, 10, 3, 11, 6, 14, 7, 15];
        const PAIRS_LO: [u32; 8] = [0, 1, 8, 9, 4, 5, 12, 13];
        const PAIRS_HI: [u32; 8] = [2, 3, 10, 11, 6, 7, 14, 15];
        const HALVES_LO: [u32; 8] = [0, 1, 2, 3, 8, 9, 10, 11];
        const HALVES_HI: [u32; 8] = [4, 5, 6, 7, 12, 13, 14, 15];
        let mut t = Vec::with_capacity(8);
        for p in rows.chunks(2) {
            t.push(shuffle(p[0], p[1], UNPACK_LO)?);
            t.push(shuffle(p[0], p[1], UNPACK_HI)?);
        }
        // t[2k], t[2k+1]: rows 2k and 2k+1 interleaved, elements 0,1,4,5 and 2,3,6,7.
        let mut s = Vec::with_capacity(8);
        for (a, b) in [(0, 2), (4, 6)] {
            s.push(shuffle(t[a], t[b], PAIRS_LO)?);
            s.push(shuffle(t[a], t[b], PAIRS_HI)?);
            s.push(shuffle(t[a + 1], t[b + 1], PAIRS_LO)?);
            s.push(shuffle(t[a + 1], t[b + 1], PAIRS_HI)?);
        }
        // s[k] (k < 4): rows 0-3 of columns k and k + 4; s[k + 4]: rows 4-7 of the same.
        let mut cols = vec![None; 8];
        for k in 0..4 {
            cols[k] = Some(shuffle(s[k], s[k + 4], HALVES_LO)?);
            cols[k + 4] = Some(shuffle(s[k], s[k + 4], HALVES_HI)?);
        }
        cols.into_iter().map(|c| c.ok_or_else(|| self.unsupported("a transpose column is missing"))).collect()
    }

    /// `a` followed by `b` (two vectors of one type) as one vector of twice the lanes.
    fn concat(&self, a: VectorValue<'ctx>, b: VectorValue<'ctx>) -> Result<VectorValue<'ctx>, CodegenError> {
        let n = a.get_type().get_size();
        let i32t = self.ctx.i32_type();
        let m: Vec<_> = (0..2 * n).map(|i| i32t.const_int(u64::from(i), false)).collect();
        self.builder.build_shuffle_vector(a, b, VectorType::const_vector(&m), "join").map_err(self.err())
    }
}
