//! The f16 casts ([`CastOp::F16ToF32`], [`CastOp::F32ToF16`]) spelled out in integer and f32
//! operations, for tiers whose target has no conversion instruction (Cranelift always; LLVM
//! without F16C). [`expand`] rewrites a kernel so that such casts become their sequences, each
//! defining the cast's own value id last, so the rest of the kernel is untouched; a widening
//! of a narrowing becomes one rounding of the narrowing's operand. The
//! sequences compute exactly what the casts define (the `half` crate's results, NaN payloads
//! included), which the tests check on every f16 input and around every rounding boundary of
//! f32 inputs.

use std::collections::{HashMap, HashSet};

use super::{
    definitions, BinOp, CallArg, CastOp, CmpOp, Const, IndexExpr, IndexSrc, Kernel, KernelBuilder, Op, Stmt, Ty,
    ValueId,
};

/// Which casts [`expand`] leaves to the tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// None: every cast becomes its sequence.
    Nothing,
    /// The conversions of f16 data in memory: widening a loaded value (or a narrowing's
    /// result), and narrowing a value whose every use is a store or such a widening. That is
    /// all the lowering writes, and all LLVM 22's x86 instruction selection takes reliably:
    /// it aborts on a half moved from an i16 it holds in a mask register (an i16 made from a
    /// compare, which only hand-made or random kernels widen).
    MemoryConversions,
}

/// `kernel` with its f16 casts, but those `keep` names, replaced by their integer sequences;
/// `None` when there is nothing to replace. The sequences' constants go to the front of the
/// kernel body, where every tier keeps constants out of loops.
pub fn expand(kernel: &Kernel, keep: Keep) -> Option<Kernel> {
    // Most kernels have no f16: they pass without a map or a copy.
    if !has_half_cast(&kernel.body) {
        return None;
    }
    let mut defs = HashMap::new();
    definitions(&kernel.body, &mut defs);
    let mut other_uses = HashSet::new();
    non_memory_uses(&kernel.body, &mut other_uses);
    let narrowing_kept = |v: &ValueId| keep == Keep::MemoryConversions && !other_uses.contains(v);
    let expanding: HashSet<ValueId> = defs
        .iter()
        .filter(|(id, op)| match op {
            Op::Cast { op: CastOp::F32ToF16, .. } => !narrowing_kept(id),
            Op::Cast { op: CastOp::F16ToF32, a, .. } => match defs.get(a) {
                Some(Op::Load { .. }) => keep == Keep::Nothing,
                Some(Op::Cast { op: CastOp::F32ToF16, .. }) => !narrowing_kept(a),
                _ => true,
            },
            _ => false,
        })
        .map(|(id, _)| *id)
        .collect();
    if expanding.is_empty() {
        return None;
    }
    let next = defs.keys().map(|v| v.0 + 1).max().unwrap_or(0);
    // Each narrowing's f32 operand: a widening of a narrowing rounds that operand to f16
    // precision in one sequence, cheaper than the two it replaces.
    let narrowed: HashMap<ValueId, ValueId> = defs
        .iter()
        .filter_map(|(id, op)| match op {
            Op::Cast { op: CastOp::F32ToF16, a, .. } => Some((*id, *a)),
            _ => None,
        })
        .collect();
    let mut b = KernelBuilder::continuing(next);
    let mut constants = Vec::new();
    let body = expand_list(&kernel.body, &expanding, &narrowed, &mut b, &mut constants);
    constants.extend(body);
    Some(Kernel { name: kernel.name.clone(), buffers: kernel.buffers.clone(), grid: kernel.grid, body: constants })
}

fn has_half_cast(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Let(_, Op::Cast { op: CastOp::F16ToF32 | CastOp::F32ToF16, .. }) => true,
        Stmt::Loop(l) => has_half_cast(&l.body),
        Stmt::If { then_body, else_body, .. } => has_half_cast(then_body) || has_half_cast(else_body),
        _ => false,
    })
}

/// Every value used other than as a stored value or a widening's operand.
fn non_memory_uses(body: &[Stmt], uses: &mut HashSet<ValueId>) {
    let index = |i: &IndexExpr, uses: &mut HashSet<ValueId>| {
        uses.extend(i.terms.iter().filter_map(|t| match t.src {
            IndexSrc::Value(v) => Some(v),
            IndexSrc::Var(_) => None,
        }))
    };
    for s in body {
        match s {
            Stmt::Let(_, Op::Cast { op: CastOp::F16ToF32, .. }) => {}
            Stmt::Let(_, Op::Load { index: i, .. }) => index(i, uses),
            Stmt::Let(_, op) => uses.extend(op.operands()),
            Stmt::Loop(l) => non_memory_uses(&l.body, uses),
            Stmt::DeclLocal { init, .. } => {
                uses.insert(*init);
            }
            Stmt::SetLocal { value, .. } => {
                uses.insert(*value);
            }
            Stmt::Store { index: i, .. } => index(i, uses),
            Stmt::If { cond, then_body, else_body } => {
                uses.insert(*cond);
                non_memory_uses(then_body, uses);
                non_memory_uses(else_body, uses);
            }
            Stmt::Call { args, .. } => {
                for a in args {
                    match a {
                        CallArg::Ptr { index: i, .. } => index(i, uses),
                        CallArg::Value(v) => {
                            uses.insert(*v);
                        }
                        CallArg::I64(_) => {}
                    }
                }
            }
        }
    }
}

fn expand_list(
    body: &[Stmt],
    expanding: &HashSet<ValueId>,
    narrowed: &HashMap<ValueId, ValueId>,
    b: &mut KernelBuilder,
    constants: &mut Vec<Stmt>,
) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(body.len());
    for stmt in body {
        match stmt {
            Stmt::Let(id, Op::Cast { op: op @ (CastOp::F16ToF32 | CastOp::F32ToF16), a, .. })
                if expanding.contains(id) =>
            {
                let last = match (op, narrowed.get(a)) {
                    (CastOp::F16ToF32, Some(&f)) => f16_round_trip(b, f),
                    (CastOp::F16ToF32, None) => f16_to_f32_bits(b, *a),
                    _ => f32_to_f16_bits(b, *a),
                };
                // Each sequence ends in the op that makes its result, which takes the cast's id.
                for s in b.take_body() {
                    match s {
                        Stmt::Let(v, op) if v == last => out.push(Stmt::Let(*id, op)),
                        s @ Stmt::Let(_, Op::Const(_)) => constants.push(s),
                        s => out.push(s),
                    }
                }
            }
            Stmt::Loop(l) => {
                let mut l = l.clone();
                l.body = expand_list(&l.body, expanding, narrowed, b, constants);
                out.push(Stmt::Loop(l));
            }
            Stmt::If { cond, then_body, else_body } => out.push(Stmt::If {
                cond: *cond,
                then_body: expand_list(then_body, expanding, narrowed, b, constants),
                else_body: expand_list(else_body, expanding, narrowed, b, constants),
            }),
            s => out.push(s.clone()),
        }
    }
    out
}

fn c32(b: &mut KernelBuilder, v: u32) -> ValueId {
    b.constant(Const::Int { ty: Ty::I32, bits: i64::from(v as i32) })
}

/// `x op y` on I32, `y` a constant (for the sequences here and `emit::half`'s bf16 ones).
pub(crate) fn bin(b: &mut KernelBuilder, op: BinOp, x: ValueId, y: u32) -> ValueId {
    let c = c32(b, y);
    b.binary(op, Ty::I32, x, c)
}

/// [`CastOp::F16ToF32`] in integer and f32 operations. A normal f16 is its exponent and
/// mantissa bits moved up and rebiased. A subnormal (or zero) m 2^-24 is made as the normal
/// 2^-14 (1 + m/1024) less 2^-14, exact, so no subnormal f32 ever enters an operation (a
/// caller's denormals-are-zero mode cannot flush it). Infinity and NaN take the top exponent,
/// NaNs with the quiet bit set.
fn f16_to_f32_bits(b: &mut KernelBuilder, h: ValueId) -> ValueId {
    let x = b.cast(CastOp::ZExt, Ty::I16, Ty::I32, h);
    let em = bin(b, BinOp::And, x, 0x7fff);
    let sh = bin(b, BinOp::Shl, em, 13);
    let normal = bin(b, BinOp::Add, sh, (127 - 15) << 23);
    let special = bin(b, BinOp::Add, normal, (127 - 15) << 23);
    let is_nan = bin_cmp(b, CmpOp::Sgt, em, 0x7c00);
    let quiet = c32(b, 0x0040_0000);
    let zero = c32(b, 0);
    let quiet = b.select(Ty::I32, is_nan, quiet, zero);
    let special = b.binary(BinOp::Or, Ty::I32, special, quiet);
    let one_more = bin(b, BinOp::Add, normal, 1 << 23);
    let shifted = b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, one_more);
    // 2^-14, the smallest normal f16.
    let min_normal = b.constant(Const::F32(0x3880_0000));
    let small = b.binary(BinOp::Sub, Ty::F32, shifted, min_normal);
    let small = b.cast(CastOp::Bitcast, Ty::F32, Ty::I32, small);
    let is_special = bin_cmp(b, CmpOp::Sgt, em, 0x7bff);
    let is_small = bin_cmp(b, CmpOp::Slt, em, 0x0400);
    let r = b.select(Ty::I32, is_special, special, normal);
    let r = b.select(Ty::I32, is_small, small, r);
    let sign = bin(b, BinOp::And, x, 0x8000);
    let sign = bin(b, BinOp::Shl, sign, 16);
    let r = b.binary(BinOp::Or, Ty::I32, r, sign);
    b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, r)
}

fn bin_cmp(b: &mut KernelBuilder, op: CmpOp, x: ValueId, y: u32) -> ValueId {
    let c = c32(b, y);
    b.cmp(op, Ty::I32, x, c)
}

/// [`CastOp::F32ToF16`] in integer and f32 operations. Compares are strict (`Sgt`, `Slt`),
/// one instruction on x86's 32-bit lanes where `Sge` takes two.
fn f32_to_f16_bits(b: &mut KernelBuilder, f: ValueId) -> ValueId {
    let x = b.cast(CastOp::Bitcast, Ty::F32, Ty::I32, f);
    let sign = bin(b, BinOp::LShr, x, 16);
    let sign = bin(b, BinOp::And, sign, 0x8000);
    let a = bin(b, BinOp::And, x, 0x7fff_ffff);
    let t = bin(b, BinOp::LShr, a, 13);
    // Normal results: rebias and round half to even on the 13 dropped bits; a carry rolls
    // into the exponent (up to infinity), which is the correct rounding.
    let odd = bin(b, BinOp::And, t, 1);
    let rebias = bin(b, BinOp::Add, a, ((15u32.wrapping_sub(127)) << 23).wrapping_add(0xfff));
    let rounded = b.binary(BinOp::Add, Ty::I32, rebias, odd);
    let normal = bin(b, BinOp::LShr, rounded, 13);
    // Subnormal results: adding 0.5 aligns the 10 mantissa bits at the bottom of the f32 and
    // rounds them to nearest even in the IEEE addition itself.
    let af = b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, a);
    let magic = b.constant(Const::F32(0.5f32.to_bits()));
    let sum = b.binary(BinOp::Add, Ty::F32, af, magic);
    let sum = b.cast(CastOp::Bitcast, Ty::F32, Ty::I32, sum);
    let sub = bin(b, BinOp::Sub, sum, 0.5f32.to_bits());
    // A NaN's t is 0x3fc00 plus its upper 10 payload bits: the f16 NaN, quiet bit set, is
    // that less 0x38000 (0x3fc00 - 0x7c00).
    let nan = bin(b, BinOp::Or, t, 0x200);
    let nan = bin(b, BinOp::Sub, nan, 0x3_8000);
    let is_nan = bin_cmp(b, CmpOp::Sgt, a, 0x7f80_0000);
    let inf = c32(b, 0x7c00);
    let big = b.select(Ty::I32, is_nan, nan, inf);
    // Magnitudes from 2^16 (infinity, NaN, or rounding to infinity) and below 2^-14.
    let is_big = bin_cmp(b, CmpOp::Sgt, a, ((127 + 16) << 23) - 1);
    let is_sub = bin_cmp(b, CmpOp::Slt, a, 113 << 23);
    let r = b.select(Ty::I32, is_sub, sub, normal);
    let r = b.select(Ty::I32, is_big, big, r);
    let r = b.binary(BinOp::Or, Ty::I32, r, sign);
    b.cast(CastOp::Trunc, Ty::I32, Ty::I16, r)
}

/// [`CastOp::F16ToF32`] of [`CastOp::F32ToF16`] of `f`: `f` rounded to the nearest f16 (ties
/// to even), as an f32, without the f16 bits in between. Normal results round the 13 bits
/// below an f16 mantissa in place, a carry rolling into the exponent; subnormal ones round
/// in the IEEE addition of 0.5, whose ulp is the f16 subnormal step 2^-24; magnitudes from
/// 65520 on become infinity; a NaN keeps its upper 10 payload bits and gets the quiet bit.
fn f16_round_trip(b: &mut KernelBuilder, f: ValueId) -> ValueId {
    let x = b.cast(CastOp::Bitcast, Ty::F32, Ty::I32, f);
    let a = bin(b, BinOp::And, x, 0x7fff_ffff);
    let sign = b.binary(BinOp::Xor, Ty::I32, x, a);
    let t = bin(b, BinOp::LShr, a, 13);
    let odd = bin(b, BinOp::And, t, 1);
    let up = bin(b, BinOp::Add, a, 0xfff);
    let up = b.binary(BinOp::Add, Ty::I32, up, odd);
    let normal = bin(b, BinOp::And, up, !0x1fff);
    let af = b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, a);
    let half = b.constant(Const::F32(0.5f32.to_bits()));
    let sum = b.binary(BinOp::Add, Ty::F32, af, half);
    let sub = b.binary(BinOp::Sub, Ty::F32, sum, half);
    let sub = b.cast(CastOp::Bitcast, Ty::F32, Ty::I32, sub);
    let nan = bin(b, BinOp::Or, a, 0x0040_0000);
    let nan = bin(b, BinOp::And, nan, !0x1fff);
    let is_nan = bin_cmp(b, CmpOp::Sgt, a, 0x7f80_0000);
    let inf = c32(b, 0x7f80_0000);
    let big = b.select(Ty::I32, is_nan, nan, inf);
    // 65520 (0x477ff000) is halfway from the largest f16, 65504, to 2^16: ties go to even,
    // which is up.
    let is_big = bin_cmp(b, CmpOp::Sgt, a, 0x477f_efff);
    let is_sub = bin_cmp(b, CmpOp::Slt, a, 113 << 23);
    let r = b.select(Ty::I32, is_sub, sub, normal);
    let r = b.select(Ty::I32, is_big, big, r);
    let r = b.binary(BinOp::Or, Ty::I32, r, sign);
    b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{run_kernel, verify_kernel, IndexExpr, MemType};

    /// A kernel converting every element of an `n`-element `from` buffer by `op` into a `to`
    /// buffer, in a loop and (for the first element) once more at the top level, where a
    /// cast sits outside any loop.
    fn kernel(op: CastOp, from: Ty, to: Ty, n: i64) -> Kernel {
        let mut b = KernelBuilder::new("conv", 1);
        let src = b.buffer("src", MemType::Scalar(from), n, false);
        let dst = b.buffer("dst", MemType::Scalar(to), n, true);
        let x = b.load(src, IndexExpr::constant(0));
        let y = b.cast(op, from, to, x);
        b.store(dst, IndexExpr::constant(0), y);
        let i = b.begin_loop(1, n);
        let x = b.load(src, IndexExpr::var(i, 1));
        let y = b.cast(op, from, to, x);
        b.store(dst, IndexExpr::var(i, 1), y);
        b.end_loop_vectorized(8, crate::kernel::Tail::Peel);
        b.finish()
    }

    /// The cast run as defined (the interpreter's `half` crate) and as its expansion.
    fn both(op: CastOp, from: Ty, to: Ty, input: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let n = (input.len() / (from.bits() / 8) as usize) as i64;
        let k = kernel(op, from, to, n);
        let e = expand(&k, Keep::Nothing).expect("the kernel has casts to expand");
        verify_kernel(&e).unwrap_or_else(|err| panic!("expanded kernel invalid: {err}\n{e}"));
        assert!(!has_half_cast(&e.body), "casts left:\n{e}");
        let run = |k: &Kernel| {
            let mut inp = input.to_vec();
            let mut out = vec![0u8; n as usize * (to.bits() / 8) as usize];
            run_kernel(k, &mut [&mut inp, &mut out]).expect("conversion kernel runs");
            out
        };
        (run(&k), run(&e))
    }

    #[test]
    fn f16_widening_matches_half_on_all_inputs() {
        let input: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
        let (cast, expanded) = both(CastOp::F16ToF32, Ty::I16, Ty::F32, &input);
        for (h, (c, e)) in (0..=u16::MAX).zip(cast.chunks_exact(4).zip(expanded.chunks_exact(4))) {
            let want = ::half::f16::from_bits(h).to_f32().to_bits().to_le_bytes();
            assert_eq!(c, want, "cast of f16 bits {h:#06x}");
            assert_eq!(e, want, "expansion of f16 bits {h:#06x}");
        }
    }

    /// Each upper half of an f32 with every low half at, one below and one above a multiple
    /// of 2^12 (an f16 mantissa's halfway points and the values it holds exactly), and a
    /// stride through all other bit patterns.
    fn narrowing_inputs() -> Vec<u32> {
        let lows: Vec<u32> = (0..16u32).flat_map(|k| [0xffff, 0, 1].map(|d| (k * 0x1000 + d) & 0xffff)).collect();
        let mut inputs: Vec<u32> =
            (0..=u16::MAX).flat_map(|h| lows.iter().map(move |&l| (u32::from(h) << 16) | l)).collect();
        inputs.extend((0..u32::MAX).step_by(4093));
        inputs
    }

    #[test]
    fn f32_narrowing_matches_half_around_every_boundary() {
        let inputs = narrowing_inputs();
        let bytes: Vec<u8> = inputs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let (cast, expanded) = both(CastOp::F32ToF16, Ty::F32, Ty::I16, &bytes);
        for (x, (c, e)) in inputs.into_iter().zip(cast.chunks_exact(2).zip(expanded.chunks_exact(2))) {
            let want = ::half::f16::from_f32(f32::from_bits(x)).to_bits().to_le_bytes();
            assert_eq!(c, want, "cast of f32 bits {x:#010x}");
            assert_eq!(e, want, "expansion of f32 bits {x:#010x}");
        }
    }

    #[test]
    fn f16_round_trips_match_half_around_every_boundary() {
        let inputs = narrowing_inputs();
        let n = inputs.len() as i64;
        let mut b = KernelBuilder::new("round_trip", 1);
        let src = b.buffer("src", MemType::Scalar(Ty::F32), n, false);
        let dst = b.buffer("dst", MemType::Scalar(Ty::F32), n, true);
        let i = b.begin_loop(0, n);
        let x = b.load(src, IndexExpr::var(i, 1));
        let h = b.cast(CastOp::F32ToF16, Ty::F32, Ty::I16, x);
        let y = b.cast(CastOp::F16ToF32, Ty::I16, Ty::F32, h);
        b.store(dst, IndexExpr::var(i, 1), y);
        b.end_loop_vectorized(8, crate::kernel::Tail::Peel);
        let k = b.finish();
        let e = expand(&k, Keep::Nothing).expect("the kernel has casts to expand");
        verify_kernel(&e).unwrap_or_else(|err| panic!("expanded kernel invalid: {err}\n{e}"));
        // The widening reads the f32 operand, not the narrowing, which is left unused.
        let widening_reads_narrowing = |body: &[Stmt]| {
            let Some(Stmt::Loop(l)) = body.iter().find(|s| matches!(s, Stmt::Loop(_))) else { return true };
            l.body.iter().any(|s| matches!(s, Stmt::Let(_, op) if op.operands().contains(&h)))
        };
        assert!(!widening_reads_narrowing(&e.body), "round trip still widens the f16 bits:\n{e}");
        let mut input: Vec<u8> = inputs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = vec![0u8; inputs.len() * 4];
        run_kernel(&e, &mut [&mut input, &mut out]).expect("round-trip kernel runs");
        for (x, got) in inputs.into_iter().zip(out.chunks_exact(4)) {
            let want = ::half::f16::from_f32(f32::from_bits(x)).to_f32().to_bits().to_le_bytes();
            assert_eq!(got, want, "round trip of f32 bits {x:#010x}");
        }
    }

    /// Widenings of loads and of stored narrowings stay casts; a narrowing used by anything
    /// but a store or a widening, a widening of its result, and a widening of a computed i16
    /// become sequences.
    #[test]
    fn memory_conversions_are_kept_and_the_others_expanded() {
        let mut b = KernelBuilder::new("mixed", 1);
        let src = b.buffer("src", MemType::Scalar(Ty::I16), 4, false);
        let dst = b.buffer("dst", MemType::Scalar(Ty::I16), 4, true);
        let at = |i| IndexExpr::constant(i);
        let x = b.load(src, at(0));
        let wide = b.cast(CastOp::F16ToF32, Ty::I16, Ty::F32, x);
        let narrow = b.cast(CastOp::F32ToF16, Ty::F32, Ty::I16, wide);
        b.store(dst, at(0), narrow);
        let again = b.cast(CastOp::F16ToF32, Ty::I16, Ty::F32, narrow);
        let shared = b.cast(CastOp::F32ToF16, Ty::F32, Ty::I16, again);
        let one = b.constant(Const::Int { ty: Ty::I16, bits: 1 });
        let bumped = b.binary(BinOp::Add, Ty::I16, shared, one);
        b.store(dst, at(1), bumped);
        let from_shared = b.cast(CastOp::F16ToF32, Ty::I16, Ty::F32, shared);
        let computed = b.cast(CastOp::F16ToF32, Ty::I16, Ty::F32, bumped);
        let sum = b.binary(BinOp::Add, Ty::F32, from_shared, computed);
        let last = b.cast(CastOp::F32ToF16, Ty::F32, Ty::I16, sum);
        b.store(dst, at(2), last);
        let k = b.finish();
        let e = expand(&k, Keep::MemoryConversions).expect("some casts expand");
        verify_kernel(&e).unwrap_or_else(|err| panic!("expanded kernel invalid: {err}\n{e}"));
        let casts: Vec<ValueId> = e
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::Let(v, Op::Cast { op: CastOp::F16ToF32 | CastOp::F32ToF16, .. }) => Some(*v),
                _ => None,
            })
            .collect();
        assert_eq!(casts, vec![wide, narrow, again, last], "kept casts in:\n{e}");
        let mut input: Vec<u8> = [0x3c00u16, 0x7e01, 0x0001, 0xfbff].iter().flat_map(|h| h.to_le_bytes()).collect();
        let run = |k: &Kernel, input: &mut Vec<u8>| {
            let mut out = vec![0u8; 8];
            run_kernel(k, &mut [input, &mut out]).expect("kernel runs");
            out
        };
        assert_eq!(run(&k, &mut input), run(&e, &mut input));
    }

    #[test]
    fn kernels_without_half_casts_are_left_alone() {
        let k = kernel(CastOp::FPExt, Ty::F32, Ty::F64, 4);
        assert!(expand(&k, Keep::Nothing).is_none());
    }
}
