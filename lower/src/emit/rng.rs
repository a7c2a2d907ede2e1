//! Random numbers in kernels, bit for bit what `hlo::eval` (hlo/src/eval/rng.rs) computes.
//!
//! Both generators are counter-based, so every output element computes the generator block
//! its words come from on its own and keeps the word it needs: no element depends on another
//! and the grid splits freely. Philox's 32x32->64 multiplies are `I64` multiplies of
//! zero-extended words.
//!
//! - `rng-bit-generator(state)` writes `(new state, bits)`; the new state is stored once, by
//!   grid index 0.
//! - `rng` draws from the program's generator state: a `u64[2]` buffer (key = seed, counter)
//!   that [`state_init_kernel`] sets at the start of every run. A draw kernel reads the
//!   counter, and a separate [`state_advance_kernel`] launched after it moves the counter past
//!   the blocks it used (a draw kernel's grid indices may run on several threads, so none of
//!   them can write the counter the others read).

use tessera_hlo::ir::{AttrList, RandomAlgorithm};
use tessera_hlo::{ElementType, InstId, Instruction, LayoutMap, Opcode};

use super::{index, scalar, types, Emitter};
use crate::kernel::{
    BinOp, BufId, CastOp, CmpOp, IndexExpr, Kernel, KernelBuilder, MathFn, MemType, Op, Ty, UnOp, ValueId,
};
use crate::LowerError;

const PHILOX_M0: i64 = 0xD251_1F53;
const PHILOX_M1: i64 = 0xCD9E_8D57;
const PHILOX_W0: i64 = 0x9E37_79B9;
const PHILOX_W1: i64 = 0xBB67_AE85;
const THREEFRY_PARITY: i64 = 0x1BD1_1BDA;
const THREEFRY_ROTATIONS: [i64; 8] = [13, 15, 26, 6, 17, 29, 16, 24];

/// Elements of the generator state buffer the `rng` op draws from: key, counter.
pub const STATE_WORDS: i64 = 2;

fn c32(b: &mut KernelBuilder, v: i64) -> ValueId {
    scalar::int_const(b, Ty::I32, v as u32 as i32 as i64)
}

fn c64(b: &mut KernelBuilder, v: i64) -> ValueId {
    scalar::int_const(b, Ty::I64, v)
}

/// The low and high 32-bit halves of an `I64`.
fn split64(b: &mut KernelBuilder, x: ValueId) -> [ValueId; 2] {
    let lo = b.cast(CastOp::Trunc, Ty::I64, Ty::I32, x);
    let k = c64(b, 32);
    let hi = b.binary(BinOp::LShr, Ty::I64, x, k);
    let hi = b.cast(CastOp::Trunc, Ty::I64, Ty::I32, hi);
    [lo, hi]
}

/// `lo | hi << 32` of two 32-bit words.
fn join64(b: &mut KernelBuilder, lo: ValueId, hi: ValueId) -> ValueId {
    let lo = b.cast(CastOp::ZExt, Ty::I32, Ty::I64, lo);
    let hi = b.cast(CastOp::ZExt, Ty::I32, Ty::I64, hi);
    let k = c64(b, 32);
    let hi = b.binary(BinOp::Shl, Ty::I64, hi, k);
    b.binary(BinOp::Or, Ty::I64, lo, hi)
}

/// Philox4x32-10 (the same rounds as `eval::rng::philox4x32`).
fn philox4x32(b: &mut KernelBuilder, mut x: [ValueId; 4], mut key: [ValueId; 2]) -> [ValueId; 4] {
    let m0 = c64(b, PHILOX_M0);
    let m1 = c64(b, PHILOX_M1);
    let w0 = c32(b, PHILOX_W0);
    let w1 = c32(b, PHILOX_W1);
    let k32 = c64(b, 32);
    for round in 0..10 {
        let mul_hi_lo = |b: &mut KernelBuilder, a: ValueId, m: ValueId| {
            let a = b.cast(CastOp::ZExt, Ty::I32, Ty::I64, a);
            let p = b.binary(BinOp::Mul, Ty::I64, a, m);
            let hi = b.binary(BinOp::LShr, Ty::I64, p, k32);
            let hi = b.cast(CastOp::Trunc, Ty::I64, Ty::I32, hi);
            let lo = b.cast(CastOp::Trunc, Ty::I64, Ty::I32, p);
            (hi, lo)
        };
        let (h0, l0) = mul_hi_lo(b, x[0], m0);
        let (h1, l1) = mul_hi_lo(b, x[2], m1);
        let y0 = b.binary(BinOp::Xor, Ty::I32, h1, x[1]);
        let y0 = b.binary(BinOp::Xor, Ty::I32, y0, key[0]);
        let y2 = b.binary(BinOp::Xor, Ty::I32, h0, x[3]);
        let y2 = b.binary(BinOp::Xor, Ty::I32, y2, key[1]);
        x = [y0, l1, y2, l0];
        if round < 9 {
            key = [b.binary(BinOp::Add, Ty::I32, key[0], w0), b.binary(BinOp::Add, Ty::I32, key[1], w1)];
        }
    }
    x
}

fn rotl32(b: &mut KernelBuilder, x: ValueId, r: i64) -> ValueId {
    let left = c32(b, r);
    let right = c32(b, 32 - r);
    let l = b.binary(BinOp::Shl, Ty::I32, x, left);
    let r = b.binary(BinOp::LShr, Ty::I32, x, right);
    b.binary(BinOp::Or, Ty::I32, l, r)
}

/// ThreeFry2x32-20 (the same rounds as `eval::rng::threefry2x32`).
fn threefry2x32(b: &mut KernelBuilder, input: [ValueId; 2], key: [ValueId; 2]) -> [ValueId; 2] {
    let parity = c32(b, THREEFRY_PARITY);
    let k2 = b.binary(BinOp::Xor, Ty::I32, key[0], key[1]);
    let k2 = b.binary(BinOp::Xor, Ty::I32, k2, parity);
    let ks = [key[0], key[1], k2];
    let mut x = [b.binary(BinOp::Add, Ty::I32, input[0], ks[0]), b.binary(BinOp::Add, Ty::I32, input[1], ks[1])];
    for block in 0..5usize {
        let rot = if block % 2 == 0 { &THREEFRY_ROTATIONS[..4] } else { &THREEFRY_ROTATIONS[4..] };
        for &r in rot {
            x[0] = b.binary(BinOp::Add, Ty::I32, x[0], x[1]);
            let t = rotl32(b, x[1], r);
            x[1] = b.binary(BinOp::Xor, Ty::I32, t, x[0]);
        }
        x[0] = b.binary(BinOp::Add, Ty::I32, x[0], ks[(block + 1) % 3]);
        let n = c32(b, block as i64 + 1);
        let t = b.binary(BinOp::Add, Ty::I32, x[1], ks[(block + 2) % 3]);
        x[1] = b.binary(BinOp::Add, Ty::I32, t, n);
    }
    x
}

/// The 128-bit counter `(lo, hi) + d` (d an `I64` read as unsigned), carrying into `hi`.
fn counter_add(b: &mut KernelBuilder, lo: ValueId, hi: ValueId, d: ValueId) -> (ValueId, ValueId) {
    let sum = b.binary(BinOp::Add, Ty::I64, lo, d);
    let carried = b.cmp(CmpOp::Ult, Ty::I64, sum, lo);
    let carry = b.cast(CastOp::ZExt, Ty::Pred, Ty::I64, carried);
    (sum, b.binary(BinOp::Add, Ty::I64, hi, carry))
}

/// The Philox block for the 128-bit counter `(lo, hi) + block` under a 64-bit key.
fn philox_block(b: &mut KernelBuilder, key: ValueId, lo: ValueId, hi: ValueId, block: ValueId) -> [ValueId; 4] {
    let (lo, hi) = counter_add(b, lo, hi, block);
    let [a0, a1] = split64(b, lo);
    let [b0, b1] = split64(b, hi);
    let key = split64(b, key);
    philox4x32(b, [a0, a1, b0, b1], key)
}

/// `words[lane]` for an `I64` lane in `0..words.len()` (a power of two).
fn pick(b: &mut KernelBuilder, ty: Ty, words: &[ValueId], lane: ValueId) -> ValueId {
    let mut out = words[0];
    for (i, &w) in words.iter().enumerate().skip(1) {
        let k = c64(b, i as i64);
        let is = b.cmp(CmpOp::Eq, Ty::I64, lane, k);
        out = b.select(ty, is, w, out);
    }
    out
}

fn shr_and(b: &mut KernelBuilder, x: ValueId, shift: i64, mask: i64) -> (ValueId, ValueId) {
    let s = c64(b, shift);
    let m = c64(b, mask);
    (b.binary(BinOp::LShr, Ty::I64, x, s), b.binary(BinOp::And, Ty::I64, x, m))
}

/// Row-major strides of `dims`.
fn row_major_strides(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1];
    }
    strides
}

/// XLA's dimension ThreeFry interleaves its two 32-bit outputs along (as `eval::rng`).
fn split_dim(dims: &[i64]) -> usize {
    if let Some(d) = dims.iter().position(|&d| d % 2 == 0) {
        return d;
    }
    let mut best = 0;
    for (i, &d) in dims.iter().enumerate() {
        if d > dims[best] {
            best = i;
        }
    }
    best
}

/// Stores random `bits` (an `I32` or `I64` word) as an element of `et` in `mem`: the low bits
/// of the word, reinterpreted for floats.
fn store_bits(
    b: &mut KernelBuilder,
    buf: BufId,
    addr: IndexExpr,
    mem: MemType,
    word: ValueId,
    word_ty: Ty,
    name: &str,
) -> Result<(), LowerError> {
    let v = match mem {
        MemType::Scalar(t @ (Ty::I8 | Ty::I16 | Ty::I32)) if t != word_ty => b.cast(CastOp::Trunc, word_ty, t, word),
        MemType::Scalar(t) if t == word_ty => word,
        MemType::Scalar(Ty::F32) if word_ty == Ty::I32 => b.cast(CastOp::Bitcast, Ty::I32, Ty::F32, word),
        MemType::Scalar(Ty::F64) if word_ty == Ty::I64 => b.cast(CastOp::Bitcast, Ty::I64, Ty::F64, word),
        _ => return Err(LowerError::unsupported(name, format!("rng-bit-generator writing {mem:?} elements"))),
    };
    b.store(buf, addr, v);
    Ok(())
}

impl<'m> Emitter<'m> {
    /// Loads element `i` of a 1-D `u64` buffer laid out by `map`.
    fn load_word(&mut self, buf: BufId, map: &LayoutMap, i: i64) -> ValueId {
        let addr = self.layout_offset(map, &[index::constant(i)]);
        self.b.load(buf, addr)
    }

    /// `rng-bit-generator(state)` as the root of the computation: output 0 is the new state,
    /// output 1 the bits.
    pub(crate) fn emit_bit_generator(&mut self, id: InstId) -> Result<(), LowerError> {
        let inst = self.comp.inst(id);
        let name = inst.name.clone();
        let algorithm = match inst.attr_word("algorithm") {
            None => RandomAlgorithm::Default,
            Some(w) => RandomAlgorithm::parse(w)
                .ok_or_else(|| LowerError::invalid(&name, format!("unknown rng algorithm {w}")))?,
        };
        let [state_op] = inst.operands[..] else {
            return Err(LowerError::invalid(&name, "rng-bit-generator needs one state operand"));
        };
        if self.comp.inst(state_op).opcode != Opcode::Parameter || self.outputs.len() != 2 || self.params.len() != 1 {
            return Err(LowerError::unsupported(&name, "rng-bit-generator inside a fusion"));
        }
        let state = &self.params[0];
        let (state_buf, state_map) = (state.buf, state.map.clone());
        let words = state_map.dims().first().copied().unwrap_or(0);
        if state.et != ElementType::U64 || state_map.dims().len() != 1 || words < 2 {
            return Err(LowerError::unsupported(&name, "rng-bit-generator with a state other than u64[n], n >= 2"));
        }
        let philox = matches!(algorithm, RandomAlgorithm::Philox | RandomAlgorithm::Default);
        if philox && words > 3 {
            return Err(LowerError::unsupported(&name, "rng-bit-generator with a Philox state longer than 3"));
        }
        let out = &self.outputs[1];
        let (out_buf, out_map, out_mem, et) = (out.buf, out.map.clone(), out.mem, out.et);
        let (new_buf, new_map) = (self.outputs[0].buf, self.outputs[0].map.clone());
        let width = et.bit_width();
        if !(et.is_integral() || et.is_float()) || ![8, 16, 32, 64].contains(&width) {
            return Err(LowerError::unsupported(&name, format!("rng-bit-generator producing {}", et.name())));
        }
        let wide = width == 64;
        let dims = out_map.dims().to_vec();
        let n: i64 = dims.iter().product();

        // How far this call moves the counter (`eval::rng`'s philox_words / threefry_words).
        let advance = if philox {
            let words32 = if wide { 2 * n } else { n };
            (words32 + 3) / 4
        } else if wide {
            n
        } else if dims.is_empty() {
            1
        } else {
            let s = split_dim(&dims);
            dims.iter().enumerate().map(|(d, &e)| if d == s { (e + 1) / 2 } else { e }).product()
        };

        // The new state, written once.
        let gi = self.b.let_(Op::Index(index::var(self.b.grid_var())));
        let zero = c64(&mut self.b, 0);
        let first = self.b.cmp(CmpOp::Eq, Ty::I64, gi, zero);
        self.b.begin_if(first);
        let s: Vec<ValueId> = (0..words).map(|i| self.load_word(state_buf, &state_map, i)).collect();
        let delta = c64(&mut self.b, advance);
        let mut new_state = s.clone();
        if philox {
            // With two words the counter is (state[1], state[0]) and its carry is dropped.
            let hi = if words == 3 { s[2] } else { s[0] };
            let (lo, hi) = counter_add(&mut self.b, s[1], hi, delta);
            new_state[1] = lo;
            if words == 3 {
                new_state[2] = hi;
            }
        } else {
            new_state[1] = self.b.binary(BinOp::Add, Ty::I64, s[1], delta);
        }
        for (i, &v) in new_state.iter().enumerate() {
            let addr = self.layout_offset(&new_map, &[index::constant(i as i64)]);
            self.b.store(new_buf, addr, v);
        }
        self.b.end_if();

        let strides = row_major_strides(&dims);
        let rank = dims.len();
        let split = split_dim(&dims);
        let half_strides = {
            let mut half = dims.clone();
            if rank > 0 {
                half[split] = (dims[split] + 1) / 2;
            }
            row_major_strides(&half)
        };
        let mut body = |em: &mut Emitter<'m>, idx: &[IndexExpr], addr: &IndexExpr| -> Result<(), LowerError> {
            let key = em.load_word(state_buf, &state_map, 0);
            let c1 = em.load_word(state_buf, &state_map, 1);
            let (word, word_ty) = if philox {
                let hi = if words == 3 { em.load_word(state_buf, &state_map, 2) } else { key };
                let parts: Vec<(IndexExpr, i64)> = idx.iter().cloned().zip(strides.iter().copied()).collect();
                let lin = em.b.let_(Op::Index(index::linear(&parts)));
                let b = &mut em.b;
                if wide {
                    let (block, lane) = shr_and(b, lin, 1, 1);
                    let r = philox_block(b, key, c1, hi, block);
                    let w0 = join64(b, r[0], r[1]);
                    let w1 = join64(b, r[2], r[3]);
                    (pick(b, Ty::I64, &[w0, w1], lane), Ty::I64)
                } else {
                    let (block, lane) = shr_and(b, lin, 2, 3);
                    let r = philox_block(b, key, c1, hi, block);
                    (pick(b, Ty::I32, &r, lane), Ty::I32)
                }
            } else if wide || rank == 0 {
                let parts: Vec<(IndexExpr, i64)> = idx.iter().cloned().zip(strides.iter().copied()).collect();
                let lin = em.b.let_(Op::Index(index::linear(&parts)));
                let b = &mut em.b;
                let ctr = b.binary(BinOp::Add, Ty::I64, c1, lin);
                let input = split64(b, ctr);
                let k = split64(b, key);
                let r = threefry2x32(b, input, k);
                if wide {
                    (join64(b, r[0], r[1]), Ty::I64)
                } else {
                    (r[0], Ty::I32)
                }
            } else {
                // 32-bit words in pairs along the split dimension: output word t of counter j
                // lands at coordinate 2j + t there.
                let parts: Vec<(IndexExpr, i64)> = idx
                    .iter()
                    .enumerate()
                    .filter(|&(d, _)| d != split)
                    .map(|(d, e)| (e.clone(), half_strides[d]))
                    .collect();
                let others = em.b.let_(Op::Index(index::linear(&parts)));
                let at = em.b.let_(Op::Index(idx[split].clone()));
                let b = &mut em.b;
                let (pair, t) = shr_and(b, at, 1, 1);
                let hs = c64(b, half_strides[split]);
                let pair = b.binary(BinOp::Mul, Ty::I64, pair, hs);
                let lin = b.binary(BinOp::Add, Ty::I64, others, pair);
                let ctr = b.binary(BinOp::Add, Ty::I64, c1, lin);
                let input = split64(b, ctr);
                let k = split64(b, key);
                let r = threefry2x32(b, input, k);
                (pick(b, Ty::I32, &r, t), Ty::I32)
            };
            store_bits(&mut em.b, out_buf, addr.clone(), out_mem, word, word_ty, &name)
        };
        let splits = vec![Vec::new(); rank];
        self.emit_nest(&out_map, &splits, true, out_mem.bits(), &mut body)
    }

    /// `rng(a, b)` / `rng(p)` as the root of a computation whose last parameter is the
    /// generator state (`u64[2]`: key, counter). Returns how many Philox blocks the draw used,
    /// which the program then adds to the counter.
    pub(crate) fn emit_rng(&mut self, id: InstId) -> Result<i64, LowerError> {
        let inst = self.comp.inst(id);
        let name = inst.name.clone();
        let dist = inst.attr_word("distribution").unwrap_or("");
        let operands = inst.operands.clone();
        let state_param = self.comp.parameters().last().copied();
        let state = match (state_param, self.params.last()) {
            (Some(p), Some(state)) if !operands.contains(&p) && state.et == ElementType::U64 => state,
            _ => {
                return Err(LowerError::unsupported(
                    &name,
                    "rng without the program's generator state (inside a fusion)",
                ))
            }
        };
        let (state_buf, state_map) = (state.buf, state.map.clone());
        let out = &self.outputs[0];
        let (out_buf, out_map, out_mem, et) = (out.buf, out.map.clone(), out.mem, out.et);
        let dims = out_map.dims().to_vec();
        let mant = mantissa_bits(et);
        let words = draw_words(inst)?;
        let unsupported = || LowerError::unsupported(&name, "an rng operand that is not an array");
        let out_ty = types::reg(et, &name)?;
        let frame = self.fused_frame();
        let strides = row_major_strides(&dims);
        let unsigned = types::is_unsigned(et);
        let mut body = |em: &mut Emitter<'m>, idx: &[IndexExpr], addr: &IndexExpr| -> Result<(), LowerError> {
            let operand = |em: &mut Emitter<'m>, k: usize| -> Result<(ValueId, Ty), LowerError> {
                let o = operands[k];
                let oet = em.comp.inst(o).shape.as_array().map(|a| a.element_type).ok_or_else(unsupported)?;
                Ok((em.elem(&frame, o, &[])?, types::reg(oet, &name)?))
            };
            let key = em.load_word(state_buf, &state_map, 0);
            let start = em.load_word(state_buf, &state_map, 1);
            let parts: Vec<(IndexExpr, i64)> = idx.iter().cloned().zip(strides.iter().copied()).collect();
            let lin = em.b.let_(Op::Index(index::linear(&parts)));
            let zero = c64(&mut em.b, 0);
            let value = match dist {
                "rng_uniform" if et.is_float() => {
                    let (lo, lo_ty) = operand(em, 0)?;
                    let (hi, _) = operand(em, 1)?;
                    let b = &mut em.b;
                    let u = if mant > 32 {
                        // Two words per value, in one block: lanes 2(L%2), 2(L%2)+1 of block L/2.
                        let (block, pair) = shr_and(b, lin, 1, 1);
                        let r = philox_block(b, key, start, zero, block);
                        let w0 = pick(b, Ty::I32, &[r[0], r[2]], pair);
                        let w1 = pick(b, Ty::I32, &[r[1], r[3]], pair);
                        let bits = join64(b, w1, w0);
                        unit_f64(b, bits, 12, -52)
                    } else {
                        let (block, lane) = shr_and(b, lin, 2, 3);
                        let r = philox_block(b, key, start, zero, block);
                        let w = pick(b, Ty::I32, &r, lane);
                        let w = b.cast(CastOp::ZExt, Ty::I32, Ty::I64, w);
                        unit_f64(b, w, 32 - mant, -mant)
                    };
                    let lo64 = to_f64(b, lo, lo_ty);
                    let hi64 = to_f64(b, hi, lo_ty);
                    let range = b.binary(BinOp::Sub, Ty::F64, hi64, lo64);
                    let x = b.binary(BinOp::Mul, Ty::F64, u, range);
                    let x = b.binary(BinOp::Add, Ty::F64, x, lo64);
                    let x = from_f64(b, x, out_ty);
                    let x = scalar::round(b, et, x);
                    // Rounding can land on hi; the interval is half-open (as the interpreter).
                    let hi_r = from_f64(b, hi64, out_ty);
                    let lo_r = from_f64(b, lo64, out_ty);
                    let at_hi = b.cmp(CmpOp::FGe, out_ty, x, hi_r);
                    let nonempty = b.cmp(CmpOp::FGt, out_ty, hi_r, lo_r);
                    let clamp = b.binary(BinOp::And, Ty::Pred, at_hi, nonempty);
                    let below = next_below(b, out_ty, hi_r);
                    let below = b.binary(BinOp::FMax, out_ty, lo_r, below);
                    b.select(out_ty, clamp, below, x)
                }
                "rng_uniform" => {
                    let (lo, _) = operand(em, 0)?;
                    let (hi, _) = operand(em, 1)?;
                    let b = &mut em.b;
                    let (block, pair) = shr_and(b, lin, 1, 1);
                    let r = philox_block(b, key, start, zero, block);
                    let w0 = pick(b, Ty::I32, &[r[0], r[2]], pair);
                    let w1 = pick(b, Ty::I32, &[r[1], r[3]], pair);
                    let bits = join64(b, w1, w0);
                    let lo = widen(b, lo, out_ty, unsigned);
                    let hi = widen(b, hi, out_ty, unsigned);
                    let range = b.binary(BinOp::Sub, Ty::I64, hi, lo);
                    let empty = b.cmp(CmpOp::Eq, Ty::I64, range, zero);
                    let one = c64(b, 1);
                    let divisor = b.select(Ty::I64, empty, one, range);
                    let off = b.binary(BinOp::URem, Ty::I64, bits, divisor);
                    let off = b.select(Ty::I64, empty, zero, off);
                    let v = b.binary(BinOp::Add, Ty::I64, lo, off);
                    if out_ty == Ty::I64 {
                        v
                    } else {
                        b.cast(CastOp::Trunc, Ty::I64, out_ty, v)
                    }
                }
                "rng_normal" => {
                    let (mu, mu_ty) = operand(em, 0)?;
                    let (sigma, _) = operand(em, 1)?;
                    let b = &mut em.b;
                    // Element L is the sine (L even) or cosine of pair L/2.
                    let (p, parity) = shr_and(b, lin, 1, 1);
                    let (u0, u1) = if mant > 32 {
                        let r = philox_block(b, key, start, zero, p);
                        let b0 = join64(b, r[1], r[0]);
                        let b1 = join64(b, r[3], r[2]);
                        (unit_f64(b, b0, 12, -52), unit_f64(b, b1, 12, -52))
                    } else {
                        let (block, half) = shr_and(b, p, 1, 1);
                        let r = philox_block(b, key, start, zero, block);
                        let w0 = pick(b, Ty::I32, &[r[0], r[2]], half);
                        let w1 = pick(b, Ty::I32, &[r[1], r[3]], half);
                        let w0 = b.cast(CastOp::ZExt, Ty::I32, Ty::I64, w0);
                        let w1 = b.cast(CastOp::ZExt, Ty::I32, Ty::I64, w1);
                        (unit_f64(b, w0, 32 - mant, -mant), unit_f64(b, w1, 32 - mant, -mant))
                    };
                    let floor = scalar::float_const(b, Ty::F64, 1e-7);
                    let u0 = b.binary(BinOp::FMax, Ty::F64, u0, floor);
                    let ln = b.math(MathFn::Log, Ty::F64, vec![u0]);
                    let m2 = scalar::float_const(b, Ty::F64, -2.0);
                    let r = b.binary(BinOp::Mul, Ty::F64, m2, ln);
                    let r = b.unary(UnOp::Sqrt, Ty::F64, r);
                    let tau = scalar::float_const(b, Ty::F64, 2.0 * std::f64::consts::PI);
                    let t = b.binary(BinOp::Mul, Ty::F64, tau, u1);
                    let sin = b.math(MathFn::Sin, Ty::F64, vec![t]);
                    let cos = b.math(MathFn::Cos, Ty::F64, vec![t]);
                    let even = b.cmp(CmpOp::Eq, Ty::I64, parity, zero);
                    let z = b.select(Ty::F64, even, sin, cos);
                    let mu = to_f64(b, mu, mu_ty);
                    let sigma = to_f64(b, sigma, mu_ty);
                    let x = b.binary(BinOp::Mul, Ty::F64, sigma, r);
                    let x = b.binary(BinOp::Mul, Ty::F64, x, z);
                    let x = b.binary(BinOp::Add, Ty::F64, mu, x);
                    let x = from_f64(b, x, out_ty);
                    scalar::round(b, et, x)
                }
                _ => {
                    // `draw_words` admitted nothing else.
                    return Err(LowerError::unsupported(&name, format!("rng with distribution '{dist}'")));
                }
            };
            let m = types::to_mem(&mut em.b, et, value);
            em.b.store(out_buf, addr.clone(), m);
            Ok(())
        };
        let splits = vec![Vec::new(); dims.len()];
        self.emit_nest(&out_map, &splits, true, out_mem.bits(), &mut body)?;
        Ok((words + 3) / 4)
    }
}

/// Random mantissa bits a uniform float of `et` gets (as the interpreter's bits-to-float).
fn mantissa_bits(et: ElementType) -> i64 {
    match et {
        ElementType::F64 => 52,
        ElementType::F16 => 10,
        ElementType::BF16 => 7,
        _ => 23,
    }
}

/// How many 32-bit words an `rng` instruction draws from the stream, exactly as the
/// interpreter asks for them; the counter then moves by `ceil(words / 4)` blocks. (HLO's
/// parser and verifier admit only the uniform and normal distributions.)
pub fn draw_words(inst: &Instruction) -> Result<i64, LowerError> {
    let shape = inst.shape.as_array().filter(|a| a.is_static());
    let Some(shape) = shape else {
        return Err(LowerError::unsupported(&inst.name, format!("rng producing {}", inst.shape)));
    };
    let et = shape.element_type;
    let n: i64 = shape.dims.iter().product();
    let dist = inst.attr_word("distribution").unwrap_or("");
    let wide = mantissa_bits(et) > 32;
    Ok(match (dist, inst.operands.len()) {
        ("rng_uniform", 2) if et.is_float() => {
            if wide {
                2 * n
            } else {
                n
            }
        }
        ("rng_uniform", 2) if et.is_integral() => 2 * n,
        ("rng_normal", 2) if et.is_float() => {
            let u = 2 * ((n + 1) / 2);
            if wide {
                2 * u
            } else {
                u
            }
        }
        _ => {
            return Err(LowerError::unsupported(
                &inst.name,
                format!(
                    "rng with distribution '{dist}', {} operands and result type {}",
                    inst.operands.len(),
                    et.name()
                ),
            ))
        }
    })
}

/// `(bits >> shift) * 2^scale_exp` as an `F64` (bits an `I64`, the shifted value below 2^53).
fn unit_f64(b: &mut KernelBuilder, bits: ValueId, shift: i64, scale_exp: i64) -> ValueId {
    let s = c64(b, shift);
    let m = b.binary(BinOp::LShr, Ty::I64, bits, s);
    let f = b.cast(CastOp::SIToFP, Ty::I64, Ty::F64, m);
    let k = scalar::float_const(b, Ty::F64, (scale_exp as f64).exp2());
    b.binary(BinOp::Mul, Ty::F64, f, k)
}

/// A scalar operand (a float or integer register value) as an `F64`.
fn to_f64(b: &mut KernelBuilder, v: ValueId, ty: Ty) -> ValueId {
    match ty {
        Ty::F64 => v,
        Ty::F32 => b.cast(CastOp::FPExt, Ty::F32, Ty::F64, v),
        Ty::Pred => b.cast(CastOp::UIToFP, Ty::Pred, Ty::F64, v),
        t => b.cast(CastOp::SIToFP, t, Ty::F64, v),
    }
}

fn from_f64(b: &mut KernelBuilder, v: ValueId, ty: Ty) -> ValueId {
    if ty == Ty::F32 {
        b.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, v)
    } else {
        v
    }
}

/// An integer register value as an `I64`, extended by the element type's signedness.
fn widen(b: &mut KernelBuilder, v: ValueId, ty: Ty, unsigned: bool) -> ValueId {
    if ty == Ty::I64 {
        v
    } else if unsigned {
        b.cast(CastOp::ZExt, ty, Ty::I64, v)
    } else {
        b.cast(CastOp::SExt, ty, Ty::I64, v)
    }
}

/// The neighbouring float below a positive `x`, above a non-positive one (as the
/// interpreter's `next_below`, which steps the bits).
fn next_below(b: &mut KernelBuilder, ty: Ty, x: ValueId) -> ValueId {
    let ity = if ty == Ty::F32 { Ty::I32 } else { Ty::I64 };
    let bits = b.cast(CastOp::Bitcast, ty, ity, x);
    let one = scalar::int_const(b, ity, 1);
    let down = b.binary(BinOp::Sub, ity, bits, one);
    let up = b.binary(BinOp::Add, ity, bits, one);
    let zero = scalar::float_const(b, ty, 0.0);
    let positive = b.cmp(CmpOp::FGt, ty, x, zero);
    let r = b.select(ity, positive, down, up);
    b.cast(CastOp::Bitcast, ity, ty, r)
}

/// One `u64` element of the generator state buffer.
fn state_mem() -> MemType {
    MemType::Scalar(Ty::I64)
}

/// Sets the `rng` generator state to (key = `seed`, counter = 0): the first launch of every
/// run of a program that draws, so equal seeds repeat runs.
pub fn state_init_kernel(name: &str, seed: u64) -> Kernel {
    let mut b = KernelBuilder::new(name, 1);
    let state = b.buffer("rng_state", state_mem(), STATE_WORDS, true);
    let key = c64(&mut b, seed as i64);
    let zero = c64(&mut b, 0);
    b.store(state, IndexExpr::constant(0), key);
    b.store(state, IndexExpr::constant(1), zero);
    b.finish()
}

/// Adds `delta` to the generator state's counter (after a draw used that many blocks).
pub fn state_advance_kernel(name: &str, delta: i64) -> Kernel {
    let mut b = KernelBuilder::new(name, 1);
    let state = b.buffer("rng_state", state_mem(), STATE_WORDS, true);
    let counter = b.load(state, IndexExpr::constant(1));
    let d = c64(&mut b, delta);
    let next = b.binary(BinOp::Add, Ty::I64, counter, d);
    b.store(state, IndexExpr::constant(1), next);
    b.finish()
}

/// `rng-get-and-update-state`: writes (key, counter) into `out` (a `u64[2]` laid out by
/// `map`), then adds `delta` to the counter. Buffers: the state, then `out`.
pub fn get_and_update_state_kernel(name: &str, map: &LayoutMap, delta: i64) -> Result<Kernel, LowerError> {
    if map.element_type() != ElementType::U64 || map.dims() != [2] {
        return Err(LowerError::unsupported(name, "rng-get-and-update-state producing other than u64[2]"));
    }
    let mut b = KernelBuilder::new(name, 1);
    let state = b.buffer("rng_state", state_mem(), STATE_WORDS, true);
    let out = b.buffer("out", types::mem_type(map, name)?, map.physical_element_count(), true);
    let key = b.load(state, IndexExpr::constant(0));
    let counter = b.load(state, IndexExpr::constant(1));
    for (i, v) in [key, counter].into_iter().enumerate() {
        let at = map.offset(&[i as i64]).map_err(|e| LowerError::invalid(name, e.to_string()))?;
        b.store(out, IndexExpr::constant(at), v);
    }
    let d = c64(&mut b, delta);
    let next = b.binary(BinOp::Add, Ty::I64, counter, d);
    b.store(state, IndexExpr::constant(1), next);
    Ok(b.finish())
}
