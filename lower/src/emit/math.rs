//! f32 transcendental functions, written once against [`MathOps`].
//!
//! Every function here is a straight-line sequence of elementary IEEE-754 binary32 and i32
//! operations (`sin_wide` and `cos_wide`, for code outside loops, also binary64 ones): no
//! loops, per-lane decisions through `select`, and one kind of data-dependent choice,
//! [`MathOps::choose`] between two routines for one value (sin, cos and tan reduce moderate
//! arguments by Cody-Waite and the rest by Payne-Hanek), which kernels run as the fast routine
//! plus a branch to the slow one taken when any lane needs it. That lets
//! the same definition be replayed by each backend tier (LLVM vectorises it to AVX-512,
//! Cranelift emits 128-bit SIMD) and by the kernel interpreter ([`Eval`]), so all tiers
//! compute bit-identical results and the accuracy proven by the ulp tests holds for every
//! tier. A product fuses into a sum only through [`MathOps::mul_add`], which a kernel for
//! an FMA target emits as one `Op::Fma` and any other kernel as a product and a sum; the ulp
//! tests measure both forms. Error-free products are built from 12-bit splits, exact either
//! way. Subnormals are never flushed, so inputs/outputs at the range edges are handled by
//! explicit scaling rather than relying on the hardware.

/// The operations an approximation may use. F: f32 value, I: i32 value, P: per-lane predicate,
/// D: f64 value.
/// Semantics are exactly the IEEE-754 binary32 ops with round-to-nearest-even (no fast-math,
/// subnormals NOT flushed; `mul_add` fused or not as the implementation says), and wrapping
/// two's complement i32 integer ops.
#[allow(clippy::wrong_self_convention)]
pub trait MathOps {
    type F: Copy;
    type I: Copy;
    type P: Copy;
    fn f(&mut self, x: f32) -> Self::F; // constant
    fn i(&mut self, x: i32) -> Self::I; // constant
    fn add(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn sub(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn mul(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// a*b + c: one rounding where the implementation fuses (FMA targets), else a rounded
    /// product and a rounded sum. Used only where either is accurate enough.
    fn mul_add(&mut self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    fn div(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn sqrt(&mut self, a: Self::F) -> Self::F;
    fn neg(&mut self, a: Self::F) -> Self::F; // sign flip
    fn abs(&mut self, a: Self::F) -> Self::F; // clear sign bit
    fn floor(&mut self, a: Self::F) -> Self::F;
    fn round_even(&mut self, a: Self::F) -> Self::F; // round half to even
    fn trunc(&mut self, a: Self::F) -> Self::F;
    fn max(&mut self, a: Self::F, b: Self::F) -> Self::F; // NaN-propagating, -0 < +0
    fn min(&mut self, a: Self::F, b: Self::F) -> Self::F; // NaN-propagating, -0 < +0
    fn lt(&mut self, a: Self::F, b: Self::F) -> Self::P; // ordered (false if NaN)
    fn le(&mut self, a: Self::F, b: Self::F) -> Self::P;
    fn gt(&mut self, a: Self::F, b: Self::F) -> Self::P;
    fn ge(&mut self, a: Self::F, b: Self::F) -> Self::P;
    fn eq(&mut self, a: Self::F, b: Self::F) -> Self::P;
    fn ne(&mut self, a: Self::F, b: Self::F) -> Self::P; // unordered (true if NaN)
    fn select(&mut self, p: Self::P, a: Self::F, b: Self::F) -> Self::F;
    fn select_i(&mut self, p: Self::P, a: Self::I, b: Self::I) -> Self::I;
    fn and_p(&mut self, a: Self::P, b: Self::P) -> Self::P;
    fn or_p(&mut self, a: Self::P, b: Self::P) -> Self::P;
    fn not_p(&mut self, a: Self::P) -> Self::P;
    fn to_bits(&mut self, a: Self::F) -> Self::I; // bitcast
    fn from_bits(&mut self, a: Self::I) -> Self::F; // bitcast
    fn to_int(&mut self, a: Self::F) -> Self::I; // truncate toward zero, saturating, NaN -> 0
    fn to_float(&mut self, a: Self::I) -> Self::F; // signed i32 -> f32, round to nearest
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn iand(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn ixor(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn shl(&mut self, a: Self::I, bits: u32) -> Self::I; // by a constant < 32
    fn shr_arith(&mut self, a: Self::I, bits: u32) -> Self::I;
    fn shr_logic(&mut self, a: Self::I, bits: u32) -> Self::I;
    fn ilt(&mut self, a: Self::I, b: Self::I) -> Self::P; // signed
    fn ieq(&mut self, a: Self::I, b: Self::I) -> Self::P;
    /// `p ? fast(self) : slow(self)` lane by lane, for values two routines compute, each pure
    /// and defined (if meaningless) for every input. The one data-dependent choice a sequence
    /// may make: an implementation may run the slow routine only where some lane needs it
    /// (kernels run it under `Op::AnyLane`), with the same result as running both.
    fn choose<const N: usize>(
        &mut self,
        p: Self::P,
        fast: impl FnOnce(&mut Self) -> [Self::F; N],
        slow: impl FnOnce(&mut Self) -> [Self::F; N],
    ) -> [Self::F; N]
    where
        Self: Sized;

    // binary64 companions, for routines that reach an f32 result through f64 where a short
    // dependent chain matters more than lanes (`sin_wide`, `cos_wide`).
    type D: Copy;
    fn d(&mut self, x: f64) -> Self::D; // constant
    fn widen(&mut self, a: Self::F) -> Self::D; // exact
    fn narrow(&mut self, a: Self::D) -> Self::F; // round to nearest even
    fn dmul(&mut self, a: Self::D, b: Self::D) -> Self::D;
    fn dmul_add(&mut self, a: Self::D, b: Self::D, c: Self::D) -> Self::D; // fused as `mul_add`
    fn dround_even(&mut self, a: Self::D) -> Self::D;
    fn dto_int(&mut self, a: Self::D) -> Self::I; // toward zero, saturating, NaN -> 0
}

/// Scalar reference implementation: the interpreter runs the generated sequence through this.
/// `fma` says how [`MathOps::mul_add`] computes, as the kernel's
/// [`crate::kernel::KernelBuilder::fused_multiply_add`] does.
#[derive(Clone, Copy, Debug, Default)]
pub struct Eval {
    pub fma: bool,
}

impl MathOps for Eval {
    type F = f32;
    type I = i32;
    type P = bool;
    fn f(&mut self, x: f32) -> f32 {
        x
    }
    fn i(&mut self, x: i32) -> i32 {
        x
    }
    fn add(&mut self, a: f32, b: f32) -> f32 {
        a + b
    }
    fn sub(&mut self, a: f32, b: f32) -> f32 {
        a - b
    }
    fn mul(&mut self, a: f32, b: f32) -> f32 {
        a * b
    }
    fn mul_add(&mut self, a: f32, b: f32, c: f32) -> f32 {
        if self.fma {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
    fn div(&mut self, a: f32, b: f32) -> f32 {
        a / b
    }
    fn sqrt(&mut self, a: f32) -> f32 {
        a.sqrt()
    }
    fn neg(&mut self, a: f32) -> f32 {
        -a
    }
    fn abs(&mut self, a: f32) -> f32 {
        a.abs()
    }
    fn floor(&mut self, a: f32) -> f32 {
        a.floor()
    }
    fn round_even(&mut self, a: f32) -> f32 {
        a.round_ties_even()
    }
    fn trunc(&mut self, a: f32) -> f32 {
        a.trunc()
    }
    fn max(&mut self, a: f32, b: f32) -> f32 {
        // f32::max ignores NaN and does not order the zeros; the documented op does both.
        if a.is_nan() || b.is_nan() {
            a + b
        } else if a == b {
            f32::from_bits(a.to_bits() & b.to_bits())
        } else if a > b {
            a
        } else {
            b
        }
    }
    fn min(&mut self, a: f32, b: f32) -> f32 {
        if a.is_nan() || b.is_nan() {
            a + b
        } else if a == b {
            f32::from_bits(a.to_bits() | b.to_bits())
        } else if a < b {
            a
        } else {
            b
        }
    }
    fn lt(&mut self, a: f32, b: f32) -> bool {
        a < b
    }
    fn le(&mut self, a: f32, b: f32) -> bool {
        a <= b
    }
    fn gt(&mut self, a: f32, b: f32) -> bool {
        a > b
    }
    fn ge(&mut self, a: f32, b: f32) -> bool {
        a >= b
    }
    fn eq(&mut self, a: f32, b: f32) -> bool {
        a == b
    }
    fn ne(&mut self, a: f32, b: f32) -> bool {
        a != b
    }
    fn select(&mut self, p: bool, a: f32, b: f32) -> f32 {
        if p {
            a
        } else {
            b
        }
    }
    fn select_i(&mut self, p: bool, a: i32, b: i32) -> i32 {
        if p {
            a
        } else {
            b
        }
    }
    fn and_p(&mut self, a: bool, b: bool) -> bool {
        a & b
    }
    fn or_p(&mut self, a: bool, b: bool) -> bool {
        a | b
    }
    fn not_p(&mut self, a: bool) -> bool {
        !a
    }
    fn to_bits(&mut self, a: f32) -> i32 {
        a.to_bits() as i32
    }
    fn from_bits(&mut self, a: i32) -> f32 {
        f32::from_bits(a as u32)
    }
    fn to_int(&mut self, a: f32) -> i32 {
        a as i32
    }
    fn to_float(&mut self, a: i32) -> f32 {
        a as f32
    }
    fn iadd(&mut self, a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }
    fn isub(&mut self, a: i32, b: i32) -> i32 {
        a.wrapping_sub(b)
    }
    fn iand(&mut self, a: i32, b: i32) -> i32 {
        a & b
    }
    fn ior(&mut self, a: i32, b: i32) -> i32 {
        a | b
    }
    fn ixor(&mut self, a: i32, b: i32) -> i32 {
        a ^ b
    }
    fn shl(&mut self, a: i32, bits: u32) -> i32 {
        a << bits
    }
    fn shr_arith(&mut self, a: i32, bits: u32) -> i32 {
        a >> bits
    }
    fn shr_logic(&mut self, a: i32, bits: u32) -> i32 {
        ((a as u32) >> bits) as i32
    }
    fn ilt(&mut self, a: i32, b: i32) -> bool {
        a < b
    }
    fn ieq(&mut self, a: i32, b: i32) -> bool {
        a == b
    }
    fn choose<const N: usize>(
        &mut self,
        p: bool,
        fast: impl FnOnce(&mut Self) -> [f32; N],
        slow: impl FnOnce(&mut Self) -> [f32; N],
    ) -> [f32; N] {
        if p {
            fast(self)
        } else {
            slow(self)
        }
    }
    type D = f64;
    fn d(&mut self, x: f64) -> f64 {
        x
    }
    fn widen(&mut self, a: f32) -> f64 {
        f64::from(a)
    }
    fn narrow(&mut self, a: f64) -> f32 {
        a as f32
    }
    fn dmul(&mut self, a: f64, b: f64) -> f64 {
        a * b
    }
    fn dmul_add(&mut self, a: f64, b: f64, c: f64) -> f64 {
        if self.fma {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
    fn dround_even(&mut self, a: f64) -> f64 {
        a.round_ties_even()
    }
    fn dto_int(&mut self, a: f64) -> i32 {
        a as i32
    }
}

// ---------------------------------------------------------------------------------------------
// Shared pieces.

const INF: f32 = f32::INFINITY;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split so that `k * LN2_HI` is exact for |k| < 2^9 (LN2_HI has 15 significant bits),
/// making the Cody-Waite reduction `x - k*ln2` exact up to the tiny `k * LN2_LO` term.
const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
const LN2_LO: f32 = 1.428_606_8e-6;

/// Horner evaluation of `c[0] + x*(c[1] + x*(...))`; the loop is over compile-time constants.
fn horner<M: MathOps>(m: &mut M, x: M::F, c: &[f32]) -> M::F {
    let mut acc = m.f(c[c.len() - 1]);
    for &ci in c[..c.len() - 1].iter().rev() {
        let k = m.f(ci);
        acc = m.mul_add(acc, x, k);
    }
    acc
}

/// Keeps the top 12 significant bits, so products of two such values are exact in f32
/// (the no-FMA replacement for an error-free product).
fn trunc12<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let b = m.to_bits(x);
    let mask = m.i(0xffff_f000u32 as i32);
    let b = m.iand(b, mask);
    m.from_bits(b)
}

/// 2^n as f32 for n in [-126, 127].
fn pow2i<M: MathOps>(m: &mut M, n: M::I) -> M::F {
    let bias = m.i(127);
    let e = m.iadd(n, bias);
    let e = m.shl(e, 23);
    m.from_bits(e)
}

/// p * 2^n for p in [0.5, 2) (or NaN) and n in [-252, 254], with a single rounding: gradual
/// underflow, and large n overflows to inf cleanly.
///
/// Results below 2^-126 are assembled from their bits ([`scale2_tiny`]) rather than produced
/// by a multiply: x86 cores take a microcode assist of a hundred cycles or more for every
/// float operation whose result is subnormal or underflows to zero, which made `exp` over
/// masked scores (e^-inf) or wide-ranging logits 8-14x slower than over ordinary inputs. When
/// every lane's n keeps the result normal (the usual case) only the plain product runs.
fn scale2<M: MathOps>(m: &mut M, p: M::F, n: M::I) -> M::F {
    let min = m.i(-126);
    let normal = m.ilt(min, n);
    // Kernels run the fast routine on every lane, so it must not underflow either: the lanes
    // it would get wrong scale by 2^-125 instead, and take the tiny routine's result.
    let floor = m.i(-125);
    let nf = m.select_i(normal, n, floor);
    let [r] = m.choose(normal, |m| [scale2_plain(m, p, nf)], |m| [scale2_tiny(m, p, n)]);
    r
}

/// [`scale2`] for any lane, without an operation whose result is subnormal (or zero by
/// underflow): where p * 2^n < 2^-126, t = p * 2^(n+149) is exact and below 2^23, and adding
/// 2^23 rounds it to the integer that is the result's bit pattern (half to even, the one
/// rounding the product would make); other lanes take the plain product.
fn scale2_tiny<M: MathOps>(m: &mut M, p: M::F, n: M::I) -> M::F {
    let lim = m.i(-125);
    let low = m.ilt(n, lim);
    let bias = m.i(149);
    let zero = m.i(0);
    let shifted = m.iadd(n, bias);
    let ns = m.select_i(low, shifted, zero);
    let s = pow2i(m, ns);
    let t = m.mul(p, s);
    let magic = m.f(8_388_608.0);
    let below = m.lt(t, magic);
    let tiny = m.and_p(low, below);
    let u = m.add(t, magic);
    let ub = m.to_bits(u);
    let mb = m.i(8_388_608.0f32.to_bits() as i32);
    let rb = m.isub(ub, mb);
    let r_tiny = m.from_bits(rb);
    let nn = m.select_i(tiny, zero, n);
    let r = scale2_plain(m, p, nn);
    m.select(tiny, r_tiny, r)
}

/// p * 2^n by two multiplies: splitting 2^n into two normal factors keeps the first product
/// exact, so the second rounds once.
fn scale2_plain<M: MathOps>(m: &mut M, p: M::F, n: M::I) -> M::F {
    let n1 = m.shr_arith(n, 1);
    let n2 = m.isub(n, n1);
    let s1 = pow2i(m, n1);
    let s2 = pow2i(m, n2);
    let t = m.mul(p, s1);
    m.mul(t, s2)
}

/// (nh + nl) / (dh + dl) for head + tail operands (|tail| << |head|) with one final rounding:
/// the quotient's remainder nh - q dh is formed exactly (Dekker), so neither the operands'
/// roundings nor the division's survive.
fn div_df<M: MathOps>(m: &mut M, nh: M::F, nl: M::F, dh: M::F, dl: M::F) -> M::F {
    let (q, t) = div_df2(m, nh, nl, dh, dl);
    m.add(q, t)
}

/// [`div_df`] returned unevaluated as quotient + correction.
fn div_df2<M: MathOps>(m: &mut M, nh: M::F, nl: M::F, dh: M::F, dl: M::F) -> (M::F, M::F) {
    let q = m.div(nh, dh);
    let qh = trunc12(m, q);
    let ql = m.sub(q, qh);
    let dhh = trunc12(m, dh);
    let dhl = m.sub(dh, dhh);
    let p = m.mul(q, dh);
    let t = m.mul(qh, dhh);
    let e = m.sub(t, p);
    let t = m.mul(qh, dhl);
    let e = m.add(e, t);
    let t = m.mul(ql, dhh);
    let e = m.add(e, t);
    let t = m.mul(ql, dhl);
    let e = m.add(e, t);
    let rem = m.sub(nh, p);
    let rem = m.sub(rem, e);
    let t = m.mul(q, dl);
    let t = m.sub(nl, t);
    let t = m.add(rem, t);
    let t = m.div(t, dh);
    (q, t)
}

/// e^r = 1 + r + r^2 P(r) on |r| <= ln2/2 (fitted, relative error 2^-28.3).
const EXP_P: [f32; 5] = [4.999_999_4e-1, 1.666_652_1e-1, 4.166_826_6e-2, 8.368_676e-3, 1.382_074_3e-3];

/// Cody-Waite reduction x = k ln2 + r and e^r = 1 + r + r^2 P(r), returned unevaluated as
/// (head, tail, k) with e^x ~ (head + tail) 2^k (k an integer). Keeping 1 + r_hi exact
/// (Fast2Sum) and the rest in the tail removes the rounding of r itself, which would otherwise
/// cost up to half an ulp.
fn exp_core<M: MathOps>(m: &mut M, x: M::F) -> (M::F, M::F, M::I) {
    exp_core2(m, x, None)
}

/// [`exp_core`] of x + xl, for an argument carried as an unevaluated sum (|xl| << ulp(x)).
fn exp_core2<M: MathOps>(m: &mut M, x: M::F, xl: Option<M::F>) -> (M::F, M::F, M::I) {
    let l2e = m.f(LOG2E);
    let t = m.mul(x, l2e);
    let (k, ki) = round_magic(m, t);
    let hi = m.f(LN2_HI);
    let lo = m.f(LN2_LO);
    let a = m.mul(k, hi);
    let rh = m.sub(x, a);
    let mut kl = m.mul(k, lo);
    if let Some(xl) = xl {
        kl = m.sub(kl, xl);
    }
    let r = m.sub(rh, kl);
    let z = m.mul(r, r);
    let p = horner(m, r, &EXP_P);
    let p = m.mul(p, z);
    let tail = m.sub(p, kl);
    let one = m.f(1.0);
    let head = m.add(one, rh);
    let t = m.sub(head, one);
    let e1 = m.sub(rh, t);
    let tail = m.add(tail, e1);
    (head, tail, ki)
}

/// 1.5 * 2^23: adding it to |t| < 2^22 rounds t to an integer (half to even) in the low
/// mantissa bits, where subtracting its bit pattern reads the integer back.
const MAGIC: f32 = 12_582_912.0;

/// round_even(t) as a float and as an i32, for |t| < 2^22, by the magic-number addition: three
/// adds instead of a rounding and a saturating conversion, which are a long sequence in
/// Cranelift's vector code.
fn round_magic<M: MathOps>(m: &mut M, t: M::F) -> (M::F, M::I) {
    let mg = m.f(MAGIC);
    let km = m.add(t, mg);
    let k = m.sub(km, mg);
    let kb = m.to_bits(km);
    let mb = m.i(MAGIC.to_bits() as i32);
    let ki = m.isub(kb, mb);
    (k, ki)
}

/// e^x = p 2^k for a finite x in [-104, 89] (NaN flows through p): the Cody-Waite reduction and
/// p = 1 + (r + r^2 P(r)) rounded plainly, within about 0.9 ulp of e^r. Cheaper than
/// [`exp_core`]'s head and tail where a function's other roundings leave room.
fn exp_lean<M: MathOps>(m: &mut M, x: M::F) -> (M::F, M::I) {
    let l2e = m.f(LOG2E);
    let t = m.mul(x, l2e);
    let (k, ki) = round_magic(m, t);
    // k ln2_hi is exact, so fused or not the first step is x - k ln2_hi exactly.
    let nhi = m.f(-LN2_HI);
    let nlo = m.f(-LN2_LO);
    let r = m.mul_add(k, nhi, x);
    let r = m.mul_add(k, nlo, r);
    let z = m.mul(r, r);
    let p = horner(m, r, &EXP_P);
    let p = m.mul_add(p, z, r);
    let one = m.f(1.0);
    let p = m.add(one, p);
    (p, ki)
}

/// e^x over the whole range, including overflow and gradual underflow.
fn exp_full<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    // On [-86.6, 88] (the usual case) k lies in [-125, 127], so 2^k is one normal factor and
    // p 2^k one exact multiply. Outside it the result is subnormal, zero, near overflow or inf,
    // which only the edge routine computes: two factors keep 2^k encodable up to inf, and
    // scale2_tiny assembles subnormals from their bits without a microcode assist per lane.
    // Kernels run the normal routine on every lane, so its argument is clamped into the range
    // (no subnormal products there); a lane whose clamp moved it, or a NaN, takes the edge
    // routine's result (or, beyond that routine's own clamps, its constant result). The clamps
    // are compare-selects, which vector code does in one min or max each.
    let hi = m.f(88.0);
    let lo = m.f(-86.6);
    let big = m.gt(x, hi);
    let xn = m.select(big, hi, x);
    let tiny = m.lt(xn, lo);
    let xn = m.select(tiny, lo, xn);
    let edge = m.ne(xn, x);
    let normal = m.not_p(edge);
    let (p, ki) = exp_lean(m, xn);
    let s = pow2i(m, ki);
    let r = m.mul(p, s);
    let [r] = m.choose(
        normal,
        |_| [r],
        |m| {
            // Beyond the edge routine's own clamps its result is a constant, selected here
            // without running it: a masked logit (`where(mask, s, -inf)` before a softmax)
            // lies there, and vectors holding one would otherwise all run it.
            let top = m.f(EXP_TOP);
            let bottom = m.f(EXP_BOTTOM);
            let above = m.gt(x, top);
            let below = m.lt(x, bottom);
            let inf = m.f(EXP_ABOVE);
            let r = m.select(above, inf, r);
            let zero = m.f(EXP_BELOW);
            let r = m.select(below, zero, r);
            let far = m.or_p(above, below);
            m.choose(far, |_| [r], |m| [exp_edge(m, x)])
        },
    );
    r
}

/// Where [`exp_edge`] clamps its argument: beyond `EXP_TOP` e^x is inf, below `EXP_BOTTOM` it
/// rounds to 0, and clamping keeps k in what the scalings encode.
const EXP_TOP: f32 = 89.0;
const EXP_BOTTOM: f32 = -104.0;
/// `exp_edge(EXP_TOP)` and `exp_edge(EXP_BOTTOM)`, its result for every argument beyond them
/// (checked by `exp_far_edges_are_constants`).
const EXP_ABOVE: f32 = INF;
const EXP_BELOW: f32 = 0.0;

/// e^x for any x (NaN included) with subnormal, zero and infinite results exact: the routine
/// for arguments outside the normal routine's range.
fn exp_edge<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let top = m.f(EXP_TOP);
    let above = m.gt(x, top);
    let xt = m.select(above, top, x);
    let bottom = m.f(EXP_BOTTOM);
    let below = m.lt(xt, bottom);
    let xt = m.select(below, bottom, xt);
    let (p, ki) = exp_lean(m, xt);
    scale2_tiny(m, p, ki)
}

/// e^x: overflows to inf above ~88.72 and underflows gradually down to 2^-149.
pub fn exp<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    exp_full(m, x)
}

/// e^a / 2 for 0 <= a <= 90 as head + tail. Halving inside the exponent keeps cosh/sinh finite
/// for a in (88.72, 89.41], where e^a itself overflows.
fn half_exp<M: MathOps>(m: &mut M, a: M::F) -> (M::F, M::F) {
    let (h, t, ki) = exp_core(m, a);
    let one = m.i(1);
    let n = m.isub(ki, one);
    let n1 = m.shr_arith(n, 1);
    let n2 = m.isub(n, n1);
    let s1 = pow2i(m, n1);
    let s2 = pow2i(m, n2);
    // Renormalise first: near the overflow edge h alone may round up to 2 while h + t does not.
    let p = m.add(h, t);
    let pd = m.sub(p, h);
    let pl = m.sub(t, pd);
    let ch = m.mul(p, s1);
    let ch = m.mul(ch, s2);
    let ct = m.mul(pl, s1);
    let ct = m.mul(ct, s2);
    (ch, ct)
}

/// cosh(x); finite up to |x| ~ 89.4 although e^|x| overflows earlier.
pub fn cosh<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    // cosh = E + 1/(4E), E = e^|x|/2; above 90 it overflows anyway (min propagates NaN).
    let ax = m.abs(x);
    let cap = m.f(90.0);
    let a = m.min(ax, cap);
    let (ch, ct) = half_exp(m, a);
    let p = m.add(ch, ct);
    let q = m.f(0.25);
    let d = m.div(q, p);
    let t = m.add(ct, d);
    m.add(ch, t)
}

/// sinh(x) = x + x^3 P(x^2) on |x| < 1 (fitted, relative error 2^-31.6).
const SINH_P: [f32; 4] = [1.666_666_7e-1, 8.333_310_5e-3, 1.984_289_6e-4, 2.782_213_2e-6];

/// sinh(x); finite up to |x| ~ 89.4 although e^|x| overflows earlier.
pub fn sinh<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    // Below 1, E - 1/(4E) cancels (and loses -0), so a polynomial takes over.
    let ax = m.abs(x);
    let z = m.mul(x, x);
    let p = horner(m, z, &SINH_P);
    let x3 = m.mul(x, z);
    let p = m.mul(x3, p);
    let small = m.add(x, p);
    let cap = m.f(90.0);
    let a = m.min(ax, cap);
    let (ch, ct) = half_exp(m, a);
    let p = m.add(ch, ct);
    let q = m.f(0.25);
    let d = m.div(q, p);
    let t = m.sub(ct, d);
    let l = m.add(ch, t);
    let zero = m.f(0.0);
    let neg = m.lt(x, zero);
    let nl = m.neg(l);
    let l = m.select(neg, nl, l);
    let one = m.f(1.0);
    let is_small = m.lt(ax, one);
    m.select(is_small, small, l)
}

/// musl/FreeBSD logf kernel: log(1+f) - f + f^2/2 = s(hfsq + R(s^2)), s = f/(2+f).
const LG1: f32 = 0.666_666_6; // 0xaaaaaa.0p-24
const LG2: f32 = 0.400_009_72; // 0xccce13.0p-25
const LG3: f32 = 0.284_987_87; // 0x91e9ee.0p-25
const LG4: f32 = 0.242_790_79; // 0xf89e26.0p-26

/// log of a positive normal finite `u`, with `c` an extra additive low-order correction.
fn log_core<M: MathOps>(m: &mut M, u: M::F, kadj: Option<M::F>, c: Option<M::F>) -> M::F {
    // Shift the mantissa range to [sqrt(2)/2, sqrt(2)) so |f| <= 0.414 and s stays small.
    let ix = m.to_bits(u);
    let off = m.i(0x3f80_0000 - 0x3f35_04f3);
    let ix = m.iadd(ix, off);
    let k = m.shr_arith(ix, 23);
    let bias = m.i(0x7f);
    let k = m.isub(k, bias);
    let mm = m.i(0x007f_ffff);
    let ix = m.iand(ix, mm);
    let base = m.i(0x3f35_04f3);
    let ix = m.iadd(ix, base);
    let xm = m.from_bits(ix);
    let one = m.f(1.0);
    let f = m.sub(xm, one);
    let two = m.f(2.0);
    let d = m.add(two, f);
    let s = m.div(f, d);
    let z = m.mul(s, s);
    let w = m.mul(z, z);
    let lg4 = m.f(LG4);
    let t1 = m.mul(w, lg4);
    let lg2 = m.f(LG2);
    let t1 = m.add(t1, lg2);
    let t1 = m.mul(w, t1);
    let lg3 = m.f(LG3);
    let t2 = m.mul(w, lg3);
    let lg1 = m.f(LG1);
    let t2 = m.add(t2, lg1);
    let t2 = m.mul(z, t2);
    let r = m.add(t2, t1);
    let half = m.f(0.5);
    let hf = m.mul(half, f);
    let hfsq = m.mul(hf, f);
    let mut dk = m.to_float(k);
    if let Some(a) = kadj {
        dk = m.sub(dk, a);
    }
    let a = m.add(hfsq, r);
    let a = m.mul(s, a);
    let l2lo = m.f(LN2_LO);
    let mut b = m.mul(dk, l2lo);
    if let Some(c) = c {
        b = m.add(b, c);
    }
    let a = m.add(a, b);
    let a = m.sub(a, hfsq);
    let a = m.add(a, f);
    let l2hi = m.f(LN2_HI);
    let b = m.mul(dk, l2hi);
    m.add(a, b)
}

/// Maps log's special inputs: +inf and NaN pass through, 0 -> -inf, negative -> NaN.
fn log_specials<M: MathOps>(m: &mut M, u: M::F, r: M::F) -> M::F {
    let inf = m.f(INF);
    let fin = m.lt(u, inf);
    let r = m.select(fin, r, u);
    let zero = m.f(0.0);
    let z = m.eq(u, zero);
    let ninf = m.f(-INF);
    let r = m.select(z, ninf, r);
    let neg = m.lt(u, zero);
    let nan = m.f(f32::NAN);
    m.select(neg, nan, r)
}

/// Natural log, including subnormal inputs.
pub fn log<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    // Subnormals have no implicit bit; scaling by 2^23 makes them normal for the bit tricks.
    let tiny = m.f(f32::MIN_POSITIVE);
    let sub = m.lt(x, tiny);
    let sc = m.f(8388608.0);
    let xs = m.mul(x, sc);
    let u = m.select(sub, xs, x);
    let a23 = m.f(23.0);
    let z = m.f(0.0);
    let kadj = m.select(sub, a23, z);
    let r = log_core(m, u, Some(kadj), None);
    log_specials(m, x, r)
}

/// tanh(x) = x + x^3 P(x^2) on |x| < 0.625 (fitted minimax, relative error 2^-27.7).
const TANH_P: [f32; 5] = [-3.333_328e-1, 1.333_140_9e-1, -5.373_691_8e-2, 2.062_983_6e-2, -5.694_468e-3];
const TANH_SPLIT: f32 = 0.625;

/// tanh(x), odd, tanh(-0) = -0.
pub fn tanh<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    // tanh(|x|), then x's sign bit: the oddness (and -0, and NaN staying NaN) for two bit ops.
    let ax = m.abs(x);
    // Small |x|: odd polynomial, keeps relative accuracy down to subnormals.
    let z = m.mul(ax, ax);
    let p = horner(m, z, &TANH_P);
    let x3 = m.mul(ax, z);
    let small = m.mul_add(x3, p, ax);
    // Large |x|: 1 - 2/(e^{2|x|}+1); above the split the result is >= 0.55 so the
    // subtraction from 1 loses nothing. Past 10 the result rounds to 1 anyway. e's, e+1's and
    // the quotient's roundings reach the result scaled by 2/(e+1) <= 0.45, so plain f32 steps
    // stay within 1.34 ulp (every input checked by math_ulp's full sweep).
    let two = m.f(2.0);
    let a = m.mul(ax, two);
    let cap = m.f(20.0);
    let over = m.gt(a, cap);
    let a = m.select(over, cap, a);
    let (p, ki) = exp_lean(m, a);
    // e = p 2^k by adding k to p's exponent field: p is near 1 and k <= 29, so e stays normal.
    let pb = m.to_bits(p);
    let kb = m.shl(ki, 23);
    let eb = m.iadd(pb, kb);
    let e = m.from_bits(eb);
    let one = m.f(1.0);
    let d = m.add(e, one);
    let q = m.div(two, d);
    let l = m.sub(one, q);
    // NaN fails the compare and takes the polynomial, which keeps it NaN (the exponent-field
    // addition above may not).
    let split = m.f(TANH_SPLIT);
    let is_large = m.ge(ax, split);
    let r = m.select(is_large, l, small);
    let rb = m.to_bits(r);
    let xb = m.to_bits(x);
    let sign = m.i(i32::MIN);
    let sb = m.iand(xb, sign);
    let rb = m.ior(rb, sb);
    m.from_bits(rb)
}

/// 1/(1+e^-x), accurate in relative terms also where it underflows.
pub fn logistic<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    // e = e^{-|x|} <= 1 never overflows. For x < 0 the result is e/(1+e), whose relative
    // error stays small even when it underflows (1 - 1/(1+e) would cancel catastrophically).
    // e's rounding and 1+e's can each cost up to ~1 ulp of the quotient when the binades line
    // up badly, so both are kept as tails and enter a first-order correction of the quotient.
    let ax = m.abs(x);
    let nx = m.neg(ax);
    let lo = m.f(-104.0);
    let below = m.lt(nx, lo);
    let nx = m.select(below, lo, nx);
    let (h, t, ki) = exp_core(m, nx);
    let p = m.add(h, t);
    let pd = m.sub(p, h);
    let pl = m.sub(t, pd);
    let n1 = m.shr_arith(ki, 1);
    let n2 = m.isub(ki, n1);
    let s1 = pow2i(m, n1);
    let s2 = pow2i(m, n2);
    let e = m.mul(p, s1);
    let e = m.mul(e, s2);
    let el = m.mul(pl, s1);
    let el = m.mul(el, s2);
    let one = m.f(1.0);
    let d = m.add(one, e);
    let dd = m.sub(d, one);
    let dl = m.sub(e, dd);
    let zero = m.f(0.0);
    let neg = m.lt(x, zero);
    let n = m.select(neg, e, one);
    let nl = m.select(neg, el, zero);
    // (n + nl) / (d + dl) = q + (nl - q dl) / d to first order, with q = n/d.
    let q = m.div(n, d);
    let inv = m.div(one, d);
    let c = m.mul(q, dl);
    let c = m.sub(nl, c);
    let c = m.mul(c, inv);
    m.add(q, c)
}

/// expm1(r) = r + r^2/2 + r^3 P(r) on |r| <= ln2/2 (fitted, relative error 2^-31).
const EXPM1_P: [f32; 5] = [1.666_666_6e-1, 4.166_649_3e-2, 8.333_545e-3, 1.393_232_1e-3, 1.976_245_3e-4];

/// e^x - 1 with full relative accuracy near 0.
pub fn expm1<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    // Below -30 the result is -1 after rounding; above 89 it overflows.
    let lo = m.f(-30.0);
    let hi = m.f(89.0);
    let xc = m.max(x, lo);
    let xc = m.min(xc, hi);
    let l2e = m.f(LOG2E);
    let t = m.mul(xc, l2e);
    let k = m.round_even(t);
    let l2hi = m.f(LN2_HI);
    let l2lo = m.f(LN2_LO);
    let a = m.mul(k, l2hi);
    let rh = m.sub(xc, a);
    let kl = m.mul(k, l2lo);
    let r = m.sub(rh, kl);
    // em = expm1(r) = rh + tail with r = rh - kl; the tail collects everything small.
    let z = m.mul(r, r);
    let p = horner(m, r, &EXPM1_P);
    let p = m.mul(p, r);
    let half = m.f(0.5);
    let p = m.add(p, half);
    let p = m.mul(p, z);
    let tail = m.sub(p, kl);
    // expm1(x) = (2^k - 1) + 2^k rh + 2^k tail. The first two sum exactly with Fast2Sum
    // (|2^k - 1| >= |2^k rh| for every k), which avoids the cancellation of (1+em)2^k - 1
    // and the rounding of r. For k > 64 split 2^k = 2^k1 2^k2 so neither factor overflows.
    let c64 = m.f(64.0);
    let k1 = m.min(k, c64);
    let k2 = m.sub(k, k1);
    let k1i = m.to_int(k1);
    let k2i = m.to_int(k2);
    let s1 = pow2i(m, k1i);
    let s2 = pow2i(m, k2i);
    let one = m.f(1.0);
    let a = m.sub(s1, one);
    // 2^k - 1 itself rounds for k > 24; its error (s1 - a) - 1 is exact and goes in the tail.
    let ae = m.sub(s1, a);
    let ae = m.sub(ae, one);
    let b = m.mul(rh, s1);
    let sum = m.add(a, b);
    let t = m.sub(sum, a);
    let err = m.sub(b, t);
    let err = m.add(err, ae);
    let tl = m.mul(tail, s1);
    let err = m.add(err, tl);
    let y = m.add(sum, err);
    let y = m.mul(y, s2);
    // The reduction's zero terms would turn -0 into +0.
    let zero = m.f(0.0);
    let isz = m.eq(x, zero);
    m.select(isz, x, y)
}

/// ln(1+x) with full relative accuracy near 0.
pub fn log1p<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let one = m.f(1.0);
    // c is the exact rounding error of 1+x, so log1p(x) = log(u) + c/u + O(c^2).
    let (u, c) = two_sum(m, one, x);
    let c = m.div(c, u);
    let r = log_core(m, u, None, Some(c));
    let r = log_specials(m, u, r);
    // Below 2^-24 log1p(x) rounds to x; this also keeps -0 and subnormals exact.
    let ax = m.abs(x);
    let tiny = m.f(5.960_464_5e-8);
    let is_tiny = m.lt(ax, tiny);
    m.select(is_tiny, x, r)
}

/// erf(x) = x + x Q(x^2) on |x| < 0.921875 (fitted, relative error 2^-30).
const ERF_SMALL: [f32; 7] =
    [1.283_791_7e-1, -3.761_263e-1, 1.128_362_6e-1, -2.685_572_4e-2, 5.192_359e-3, -8.048_883e-4, 7.991_272e-5];
/// log(erfc(x)) + x^2 = G(x) on [0.921875, 4] (fitted; error <= 0.03 ulp of the final erf).
const ERF_G: [f32; 7] =
    [-2.099_116_4e-4, -1.127_615_5, 3.627_142_3e-1, -1.038_389_1e-1, 2.218_140_1e-2, -3.031_601_7e-3, 1.947_346_2e-4];
const ERF_SPLIT: f32 = 0.921_875;

/// The error function.
pub fn erf<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let ax = m.abs(x);
    let z = m.mul(x, x);
    let q = horner(m, z, &ERF_SMALL);
    let q = m.mul(x, q);
    let small = m.add(x, q);
    // Large |x|: erf = 1 - exp(G(x) - x^2). Taking the exponent of a fitted log(erfc) keeps
    // the polynomial smooth; x^2's rounding error only scales erfc, which is <= 0.19 here.
    // Above 4 erfc < 2^-25, so erf rounds to exactly 1; clamping there also catches inf.
    let four = m.f(4.0);
    let a = m.min(ax, four);
    let g = horner(m, a, &ERF_G);
    // The exponent g - a^2 is formed exactly (a^2 from 12-bit halves, then 2Sum) and handed to
    // exp as head + tail: each rounding there would cost ~0.2 ulp of erf near the split.
    let ah = trunc12(m, a);
    let al = m.sub(a, ah);
    let zh = m.mul(ah, ah);
    let s = m.add(ah, a);
    let zl = m.mul(al, s);
    let eh = m.sub(g, zh);
    let bb = m.sub(eh, g);
    let t = m.sub(eh, bb);
    let t = m.sub(g, t);
    let t2 = m.add(zh, bb);
    let el = m.sub(t, t2);
    let el = m.sub(el, zl);
    let (h, t, ki) = exp_core2(m, eh, Some(el));
    let p = m.add(h, t);
    let sc = pow2i(m, ki);
    let e = m.mul(p, sc);
    let one = m.f(1.0);
    let l = m.sub(one, e);
    let zero = m.f(0.0);
    let neg = m.lt(x, zero);
    let nl = m.neg(l);
    let l = m.select(neg, nl, l);
    let split = m.f(ERF_SPLIT);
    let is_small = m.lt(ax, split);
    m.select(is_small, small, l)
}

/// Real cube root (odd: cbrt(-8) = -2).
pub fn cbrt<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let ax = m.abs(x);
    // Scale into [2^-102, 2^104] by 2^(+-24): the initial guess needs normal inputs and the
    // exact residual below needs y^3 to neither overflow nor underflow.
    let small = m.f(1e-30);
    let big = m.f(1e30);
    let is_small = m.lt(ax, small);
    let is_big = m.gt(ax, big);
    let one = m.f(1.0);
    let up = m.f(16777216.0);
    let dn = m.f(5.960_464_5e-8);
    let sin = m.select(is_small, up, one);
    let sin = m.select(is_big, dn, sin);
    let c256 = m.f(256.0);
    let c256i = m.f(0.003_906_25);
    let sout = m.select(is_small, c256i, one);
    let sout = m.select(is_big, c256, sout);
    let a = m.mul(ax, sin);
    // Kahan's bit trick (bits/3 + B1): ~5 correct bits. bits/3 goes through f32 since there
    // is no integer division; the rounding there is far below the guess error.
    let b = m.to_bits(a);
    let bf = m.to_float(b);
    let third = m.f(1.0 / 3.0);
    let bf = m.mul(bf, third);
    let bi = m.to_int(bf);
    let b1 = m.i(709_958_130);
    let bi = m.iadd(bi, b1);
    let y = m.from_bits(bi);
    // One Newton step: ~10 bits.
    let y2 = m.mul(y, y);
    let q = m.div(a, y2);
    let yy = m.add(y, y);
    let y = m.add(yy, q);
    let y = m.mul(y, third);
    // Round to 8 significant bits so y^3 (24 bits) and a - y^3 (Sterbenz) are exact; then
    // cbrt(a) = y (1+d)^(1/3) with d = (a - y^3)/y^3, |d| < 0.016, via a short series.
    let yb = m.to_bits(y);
    let rnd = m.i(0x8000);
    let yb = m.iadd(yb, rnd);
    let msk = m.i(0xffff_0000u32 as i32);
    let yb = m.iand(yb, msk);
    let y = m.from_bits(yb);
    let y2 = m.mul(y, y);
    let y3 = m.mul(y2, y);
    let r = m.sub(a, y3);
    let d = m.div(r, y3);
    let s = horner(m, d, &[1.0 / 3.0, -1.0 / 9.0, 5.0 / 81.0, -10.0 / 243.0]);
    let s = m.mul(s, d);
    let s = m.mul(y, s);
    let y = m.add(y, s);
    let y = m.mul(y, sout);
    let zero = m.f(0.0);
    let neg = m.lt(x, zero);
    let ny = m.neg(y);
    let y = m.select(neg, ny, y);
    // 0, inf and NaN map to themselves.
    let inf = m.f(INF);
    let fin = m.lt(ax, inf);
    let nz = m.gt(ax, zero);
    let ok = m.and_p(fin, nz);
    m.select(ok, y, x)
}

/// atan(t) = t + t^3 P(t^2) on |t| <= 0.5625 > tan(1/2) (fitted, relative error 2^-33.6).
const ATAN_P: [f32; 7] =
    [-3.333_333e-1, 1.999_984e-1, -1.428_129e-1, 1.105_258_9e-1, -8.667_414e-2, 5.928_629_3e-2, -2.416_681_5e-2];
/// pi/4 with 22 significant bits so n*PIO4_HI is exact for n <= 4.
const PIO4_HI: f32 = f32::from_bits(0x3f49_0fd8);
const PIO4_LO: f32 = 1.569_582_4e-7;

/// atan2(y, x) in [-pi, pi] with the C99 signed-zero and infinity cases.
pub fn atan2<M: MathOps>(m: &mut M, y: M::F, x: M::F) -> M::F {
    let ax = m.abs(x);
    let ay = m.abs(y);
    let mx = m.max(ax, ay);
    let mn = m.min(ax, ay);
    // An infinite mx is the ratio 0/1, or 1/1 (the 45-degree ray) if both are infinite.
    let inf = m.f(INF);
    let mxinf = m.eq(mx, inf);
    let binf = m.eq(mn, inf);
    let one = m.f(1.0);
    let zero = m.f(0.0);
    let v = m.select(binf, one, zero);
    let mn = m.select(mxinf, v, mn);
    let mx = m.select(mxinf, one, mx);
    // Keep mn + mx finite, and keep the exact-remainder products below out of the subnormals.
    let big = m.f(1.267_650_6e30);
    let isbig = m.gt(mx, big);
    let small = m.f(8.673_617e-19); // 2^-60
    let issmall = m.lt(mx, small);
    let up = m.f(1.844_674_4e19); // 2^64
    let sc = m.select(issmall, up, one);
    let sdn = m.f(0.0625);
    let sc = m.select(isbig, sdn, sc);
    let mn = m.mul(mn, sc);
    let mx = m.mul(mx, sc);
    // Ratio a = mn/mx in [0,1]. Above tan(1/2) use atan(a) = pi/4 + atan((a-1)/(a+1)):
    // there mx - mn is exact (Sterbenz) and the result is >= 1/2, so the one rounded
    // denominator costs well under an ulp.
    // Scaling mn (not mx) keeps the test meaningful for subnormal pairs.
    let tc = m.f(1.0 / 0.546_302_5);
    let lim = m.mul(mn, tc);
    let p1 = m.gt(lim, mx);
    let dmn = m.sub(mn, mx);
    let smn = m.add(mn, mx);
    let num = m.select(p1, dmn, mn);
    let den = m.select(p1, smn, mx);
    // mn + mx's rounding error (Fast2Sum, mx >= mn).
    let t = m.sub(smn, mx);
    let sl = m.sub(mn, t);
    let dl = m.select(p1, sl, zero);
    // 0/0 (both zero) must give t = 0.
    let dmin = m.f(f32::from_bits(1));
    let den = m.max(den, dmin);
    // t = th + tl exactly enough that t's own rounding (up to 0.8 ulp of the result where t
    // sits low in its binade and atan(t) high in its) does not reach the result.
    let (th, tl) = div_df2(m, num, zero, den, dl);
    let z = m.mul(th, th);
    // Below 2^-26 atan(t) rounds to t anyway, and mn may be subnormal there (inexact remainder).
    let zsmall = m.f(2.220_446e-16); // 2^-52
    let tiny = m.lt(z, zsmall);
    let tl = m.select(tiny, zero, tl);
    let p = horner(m, z, &ATAN_P);
    let t3 = m.mul(th, z);
    let p = m.mul(t3, p);
    // atan(th + tl) = th + th^3 P + tl/(1 + th^2) + ...
    let w = m.sub(one, z);
    let w = m.mul(tl, w);
    let at_l = m.add(p, w);
    // result = n*pi/4 + sgn*atan(t), n in 0..4, assembled from the octant flags.
    let nf = m.select(p1, one, zero);
    let swap = m.gt(ay, ax);
    let two = m.f(2.0);
    let n2 = m.sub(two, nf);
    let nf = m.select(swap, n2, nf);
    let mone = m.f(-1.0);
    let sgn = m.select(swap, mone, one);
    let xb = m.to_bits(x);
    let izero = m.i(0);
    let xneg = m.ilt(xb, izero);
    let four = m.f(4.0);
    let n4 = m.sub(four, nf);
    let nf = m.select(xneg, n4, nf);
    let nsgn = m.neg(sgn);
    let sgn = m.select(xneg, nsgn, sgn);
    let ah = m.mul(sgn, th);
    let al = m.mul(sgn, at_l);
    let phi = m.f(PIO4_HI);
    let plo = m.f(PIO4_LO);
    let bh = m.mul(nf, phi);
    let bl = m.mul(nf, plo);
    let r = m.add(bl, al);
    let r = m.add(ah, r);
    let r = m.add(bh, r);
    let yb = m.to_bits(y);
    let yneg = m.ilt(yb, izero);
    let nr = m.neg(r);
    m.select(yneg, nr, r)
}

/// ln2 with 12 significant bits (exact products with exponents) and the rest.
const LN2_H12: f32 = f32::from_bits(0x3f31_7000);
const LN2_L12: f32 = 3.194_618_3e-5;

/// ln(ax) for positive finite ax as an unevaluated head + tail (~2^-33 relative).
fn ln_df<M: MathOps>(m: &mut M, ax: M::F) -> (M::F, M::F) {
    let tiny = m.f(f32::MIN_POSITIVE);
    let sub = m.lt(ax, tiny);
    let sc = m.f(16777216.0);
    let axs = m.mul(ax, sc);
    let a = m.select(sub, axs, ax);
    let m24 = m.f(-24.0);
    let zero = m.f(0.0);
    let eadj = m.select(sub, m24, zero);
    // a = 2^e * mm with mm in [2^-9/16, 2^7/16).
    let ib = m.to_bits(a);
    let lb = m.i(0x3f2d_583f);
    let t = m.isub(ib, lb);
    let e = m.shr_arith(t, 23);
    let mant = m.i(0x007f_ffff);
    let t = m.iand(t, mant);
    let t = m.iadd(t, lb);
    let mm = m.from_bits(t);
    let ef = m.to_float(e);
    let ef = m.add(ef, eadj);
    // Second reduction around c = 2^(j/8), j in -4..3: ln(mm) = (j/8) ln2 + (ln(c) - (j/8) ln2)
    // + 2 atanh(s), s = (mm-c)/(mm+c), |s| <= 0.0217. The small |s| lets the s^3 tail be plain
    // f32, and c = 1 near mm = 1 keeps ln relatively accurate where it is tiny.
    let mut c = m.f(f32::from_bits(0x3f35_04f3));
    let mut lch = m.f(-0.5);
    let mut lcl = m.f(-1.711_427_1e-8);
    for &(thr, cj, hj, lj) in &[
        (0x3f3d_08a4u32, 0x3f45_672au32, -0.375f32, -5.233_334e-9f32),
        (0x3f4e_248c, 0x3f57_44fd, -0.25, 1.471_960_6e-8),
        (0x3f60_ccdf, 0x3f6a_c0c7, -0.125, 6.128_259_7e-9),
        (0x3f75_257d, 0x3f80_0000, 0.0, 0.0),
        (0x3f85_aac3, 0x3f8b_95c2, 0.125, 1.199_215_8e-8),
        (0x3f91_c3d3, 0x3f98_37f0, 0.25, -3.193_418e-8),
        (0x3f9e_f532, 0x3fa5_fed7, 0.375, 3.099_072_3e-8),
    ] {
        let th = m.f(f32::from_bits(thr));
        let p = m.ge(mm, th);
        let cc = m.f(f32::from_bits(cj));
        let hh = m.f(hj);
        let ll = m.f(lj);
        c = m.select(p, cc, c);
        lch = m.select(p, hh, lch);
        lcl = m.select(p, ll, lcl);
    }
    // mm - c is exact (Sterbenz); d = mm + c as hi + lo (Fast2Sum, exponent(c) >= exponent(mm)).
    let f = m.sub(mm, c);
    let dh = m.add(mm, c);
    let t = m.sub(dh, c);
    let dl = m.sub(mm, t);
    // s = f/d as sh (12 bits) + sl: sh*dh is formed exactly from 12-bit pieces.
    let s0 = m.div(f, dh);
    let sh = trunc12(m, s0);
    let dhh = trunc12(m, dh);
    let dhl = m.sub(dh, dhh);
    let p = m.mul(sh, dhh);
    let rem = m.sub(f, p);
    let p = m.mul(sh, dhl);
    let rem = m.sub(rem, p);
    let p = m.mul(sh, dl);
    let rem = m.sub(rem, p);
    let sl = m.div(rem, dh);
    // ln(a) = (e + j/8) ln2 + (ln(c) - j/8 ln2) + 2 atanh(s). (e + j/8) has <= 11 bits, so its
    // product with the 12-bit LN2_H12 is exact, as is 2 sh; everything else is a small tail.
    let s = m.add(sh, sl);
    let s2 = m.mul(s, s);
    let q = horner(m, s2, &[2.0 / 3.0, 2.0 / 5.0, 2.0 / 7.0]);
    let s3 = m.mul(s, s2);
    let q = m.mul(s3, q);
    let a0 = m.add(ef, lch);
    let l2h = m.f(LN2_H12);
    let l2l = m.f(LN2_L12);
    let ah = m.mul(a0, l2h);
    let al = m.mul(a0, l2l);
    let bh = m.add(sh, sh);
    // Fast2Sum: |ah| >= ln2/8 > |bh| unless ah = 0.
    let lh = m.add(ah, bh);
    let t = m.sub(lh, ah);
    let e1 = m.sub(bh, t);
    let ll = m.add(sl, sl);
    let ll = m.add(ll, q);
    let ll = m.add(ll, lcl);
    let ll = m.add(ll, al);
    let ll = m.add(ll, e1);
    (lh, ll)
}

/// x^y = exp(y ln|x|) with the C99 special cases. ln|x| is carried as a double-f32 because
/// y ln|x|, up to ~104 in magnitude where the result is finite, must be known to ~2^-26
/// absolute for the result to stay within an ulp.
pub fn pow<M: MathOps>(m: &mut M, x: M::F, y: M::F) -> M::F {
    let ax = m.abs(x);
    let zero = m.f(0.0);
    let (lh, ll) = ln_df(m, ax);
    // ln(0) = -inf and ln(inf) = inf make y*ln|x| produce the right 0/inf below.
    let inf = m.f(INF);
    let ninf = m.f(-INF);
    let isz = m.eq(ax, zero);
    let lh = m.select(isz, ninf, lh);
    let isinf = m.eq(ax, inf);
    let lh = m.select(isinf, inf, lh);
    // y * (lh + ll) as th + tl: Dekker product from 12-bit halves.
    let th = m.mul(y, lh);
    let yh = trunc12(m, y);
    let yl = m.sub(y, yh);
    let lhh = trunc12(m, lh);
    let lhl = m.sub(lh, lhh);
    let p = m.mul(yh, lhh);
    let err = m.sub(p, th);
    let p = m.mul(yh, lhl);
    let err = m.add(err, p);
    let p = m.mul(yl, lhh);
    let err = m.add(err, p);
    let p = m.mul(yl, lhl);
    let err = m.add(err, p);
    let p = m.mul(y, ll);
    let tl = m.add(err, p);
    // Out of range (or inf/NaN) th decides alone; the clamp keeps 2^k encodable in scale2.
    let ath = m.abs(th);
    let c200 = m.f(200.0);
    let inr = m.lt(ath, c200);
    let tl = m.select(inr, tl, zero);
    let c150 = m.f(150.0);
    let n150 = m.f(-150.0);
    let th = m.min(th, c150);
    let th = m.max(th, n150);
    let (h, t, ki) = exp_core2(m, th, Some(tl));
    let pz = m.add(h, t);
    let res = scale2(m, pz, ki);
    // NaN x must not be masked by the garbage log of its bit pattern.
    let nx = m.min(ax, zero);
    let res = m.add(res, nx);
    // Sign and domain: negative x needs integer y; odd y carries the sign.
    let ty = m.trunc(y);
    let yint = m.eq(ty, y);
    let half = m.f(0.5);
    let hy = m.mul(y, half);
    let thy = m.trunc(hy);
    let hfrac = m.ne(thy, hy);
    let yodd = m.and_p(yint, hfrac);
    let xb = m.to_bits(x);
    let izero = m.i(0);
    let xsign = m.ilt(xb, izero);
    let flip = m.and_p(xsign, yodd);
    let nres = m.neg(res);
    let res = m.select(flip, nres, res);
    let xn = m.lt(x, zero);
    let xfin = m.gt(x, ninf);
    let bad = m.and_p(xn, xfin);
    let ynot = m.not_p(yint);
    let bad = m.and_p(bad, ynot);
    let nan = m.f(f32::NAN);
    let res = m.select(bad, nan, res);
    // pow(x, +-0) = 1, pow(1, y) = 1, pow(-1, +-inf) = 1, even for NaN operands.
    let one = m.f(1.0);
    let y0 = m.eq(y, zero);
    let x1 = m.eq(x, one);
    let ax1 = m.eq(ax, one);
    let ay = m.abs(y);
    let yinf = m.eq(ay, inf);
    let m1 = m.and_p(ax1, yinf);
    let o = m.or_p(y0, x1);
    let o = m.or_p(o, m1);
    m.select(o, one, res)
}

// ---------------------------------------------------------------------------------------------
// sin / cos / tan.

/// 2/pi as 12-bit digits of its binary fraction: 2/pi = sum d[n] 2^(-12(n+1)).
const TWO_OVER_PI_D12: [u16; 17] =
    [2607, 2435, 1764, 3652, 338, 2556, 629, 2001, 3923, 1245, 3085, 2914, 2393, 2364, 1081, 65, 4069];
/// sin(r) = r + r^3 S(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2) on |r| <= pi/4 (fitted, relative
/// errors 2^-32.5 and 2^-37).
const SIN_S: [f32; 4] = [-1.666_666_7e-1, 8.333_379e-3, -1.985_309_2e-4, 2.833_072_8e-6];
const COS_C: [f32; 4] = [4.166_666_8e-2, -1.388_898e-3, 2.482_202_2e-5, -2.888_124_6e-7];
const PIO2: f32 = std::f32::consts::FRAC_PI_2;
const PIO2_LO: f32 = -4.371_139e-8;

/// Table piece i for block b: the 12-bit digit 2b+i of 2/pi, scaled by 2^(-12(i+1)).
const fn two_over_pi_piece(i: i32, b: i32) -> f32 {
    let n = 2 * b + i;
    if n < 0 {
        return 0.0;
    }
    let mut v = TWO_OVER_PI_D12[n as usize] as f32;
    let mut k = 0;
    while k <= i {
        v *= 1.0 / 4096.0;
        k += 1;
    }
    v
}

/// Rounds p to a multiple of 4 and returns the remainder in [-2, 2] (exact for any p).
fn red4<M: MathOps>(m: &mut M, p: M::F) -> M::F {
    let q = m.f(0.25);
    let t = m.mul(p, q);
    let t = m.round_even(t);
    let f = m.f(4.0);
    let t = m.mul(t, f);
    m.sub(p, t)
}

/// Rounds p to the grid of `magic`'s binade (magic = 1.5 * 2^(23+g) rounds to 2^g for |p| <
/// 2^(22+g)) and returns (rounded, remainder); both are exact.
fn split_at<M: MathOps>(m: &mut M, p: M::F, magic: f32) -> (M::F, M::F) {
    let c = m.f(magic);
    let t = m.add(p, c);
    let t = m.sub(t, c);
    let r = m.sub(p, t);
    (t, r)
}

const MAGIC_4: f32 = 50331648.0; // 1.5 * 2^25: grid 4 for |p| < 2^24
const MAGIC_C: f32 = 6.0; // 1.5 * 2^2: grid 2^-21 for |p| <= 2
const MAGIC_M: f32 = 2.861_023e-6; // 1.5 * 2^-19: grid 2^-42 for |p| < 2^-20

/// Reduces |x| >= [`TRIG_SMALL`] to r = rh + rl in [-pi/4, pi/4] and the quadrant q (mod 4, as
/// f32) with |x| = q pi/2 + r.
///
/// Branch-free Payne-Hanek without integer multiply or tables: x' = |x| 2^-24b is multiplied by
/// a 108-bit window of 2/pi picked by select from 6 blocks b, so that x' has exponent 26..49;
/// then every dropped product of the window's head is a multiple of 4. x' and the window are
/// cut into 12-bit pieces so each partial product is exact. Products are reduced mod 4 and
/// split onto three fixed grids (2^-21, 2^-42, finer); the first two sums are exact, which
/// keeps the fraction to ~2^-58 absolute, far below what the closest f32 approaches to k pi/2 need.
fn trig_reduce<M: MathOps>(m: &mut M, ax: M::F) -> [M::F; 3] {
    let ib = m.to_bits(ax);
    let e = m.shr_arith(ib, 23);
    let ef = m.to_float(e);
    // b = floor((E - 25.5)/24) with E = biased exponent - 127, at least -1 as E >= 16 here (the
    // clamp keeps the lanes of smaller |x| that a vector runs through here harmless).
    let c = m.f(-152.5);
    let t = m.add(ef, c);
    let k24 = m.f(1.0 / 24.0);
    let t = m.mul(t, k24);
    let bf = m.floor(t);
    let bmin = m.f(-1.0);
    let bf = m.max(bf, bmin);
    let m24 = m.f(-24.0);
    let sh = m.mul(bf, m24);
    let shi = m.to_int(sh);
    let sc = pow2i(m, shi);
    let xp = m.mul(ax, sc);
    let xh = trunc12(m, xp);
    let xl = m.sub(xp, xh);
    let mut pred = Vec::with_capacity(5);
    for b in 0..=4 {
        let bc = m.f(b as f32);
        pred.push(m.ge(bf, bc));
    }
    let mut tau = Vec::with_capacity(9);
    for i in 0..9 {
        let mut v = m.f(two_over_pi_piece(i, -1));
        for (j, b) in (0..=4).enumerate() {
            let w = m.f(two_over_pi_piece(i, b));
            v = m.select(pred[j], w, v);
        }
        tau.push(v);
    }
    // Level L holds xh*tau[L] and xl*tau[L-1]: magnitude < 2^(50-12L), grid >= 2^(3-12L).
    let a = m.mul(xh, tau[1]);
    let a = red4(m, a);
    let b = m.mul(xl, tau[0]);
    let b = red4(m, b);
    let s = m.add(a, b);
    let a = m.mul(xh, tau[2]);
    let a = red4(m, a);
    let b = m.mul(xl, tau[1]);
    let b = red4(m, b);
    let s = m.add(s, a);
    let s = m.add(s, b);
    let (_, s) = split_at(m, s, MAGIC_4);
    // Level 3: coarse part to s (grid 2^-21), remainder (grid 2^-33) to the mid sum.
    let a = m.mul(xh, tau[3]);
    let (_, a) = split_at(m, a, MAGIC_4);
    let (ca, ra) = split_at(m, a, MAGIC_C);
    let b = m.mul(xl, tau[2]);
    let (_, b) = split_at(m, b, MAGIC_4);
    let (cb, rb) = split_at(m, b, MAGIC_C);
    let s = m.add(s, ca);
    let s = m.add(s, cb);
    let mm = m.add(ra, rb);
    // Level 4: coarse / mid (grid 2^-42) / fine.
    let (_, s) = split_at(m, s, MAGIC_4);
    let mut s = s;
    let mut mm = mm;
    let mut ff = None;
    for (l, red, coarse) in [(4usize, true, true), (5, false, true), (6, false, false), (7, false, false)] {
        for (xv, ti) in [(xh, l), (xl, l - 1)] {
            let mut p = m.mul(xv, tau[ti]);
            if red {
                p = split_at(m, p, MAGIC_4).1;
            }
            if coarse {
                let (c, r) = split_at(m, p, MAGIC_C);
                s = m.add(s, c);
                p = r;
            }
            let (mid, f) = split_at(m, p, MAGIC_M);
            mm = m.add(mm, mid);
            ff = Some(match ff {
                None => f,
                Some(acc) => m.add(acc, f),
            });
        }
    }
    let mut ff = ff.unwrap();
    for (xv, ti) in [(xh, 8usize), (xl, 7)] {
        let p = m.mul(xv, tau[ti]);
        ff = m.add(ff, p);
    }
    // |x| (2/pi) = q + fh + fl (mod 4).
    let q = m.round_even(s);
    let fc = m.sub(s, q);
    let (fh, fe) = two_sum(m, fc, mm);
    let fl = m.add(fe, ff);
    // r = (fh + fl) pi/2 via a Dekker product.
    let p = m.f(PIO2);
    let rh = m.mul(fh, p);
    let ph = m.f(f32::from_bits(PIO2.to_bits() & 0xffff_f000));
    let pl = m.f(PIO2 - f32::from_bits(PIO2.to_bits() & 0xffff_f000));
    let fhh = trunc12(m, fh);
    let fhl = m.sub(fh, fhh);
    let t = m.mul(fhh, ph);
    let err = m.sub(t, rh);
    let t = m.mul(fhh, pl);
    let err = m.add(err, t);
    let t = m.mul(fhl, ph);
    let err = m.add(err, t);
    let t = m.mul(fhl, pl);
    let err = m.add(err, t);
    let plo = m.f(PIO2_LO);
    let t = m.mul(fh, plo);
    let t2 = m.mul(fl, p);
    let t = m.add(t, t2);
    let rl = m.add(err, t);
    [rh, rl, q]
}

/// Below this |x| the quotient |x| 2/pi has at most 16 bits, so [`trig_reduce_small`]'s
/// products with 8-bit pieces of pi/2 are exact.
const TRIG_SMALL: f32 = 65536.0;

/// pi/2 to 128 bits: pi/2 = PIO2_BITS 2^-124 (truncated).
const PIO2_BITS: u128 = 0x1921fb54_442d1846_9898cc51_701b839a;

/// Piece i of pi/2: its 8 bits of weight 2^(-7-8i) .. 2^(-8i).
const fn pio2_piece(i: u32) -> f32 {
    let mut v = ((PIO2_BITS >> (117 - 8 * i)) & 0xff) as f32;
    let mut k = 0;
    while k < 7 + 8 * i {
        v *= 0.5;
        k += 1;
    }
    v
}

/// a + b as head + exact error (Knuth's two-sum: no ordering of |a| and |b| needed).
fn two_sum<M: MathOps>(m: &mut M, a: M::F, b: M::F) -> (M::F, M::F) {
    let s = m.add(a, b);
    let v = m.sub(s, a);
    let t = m.sub(s, v);
    let t = m.sub(a, t);
    let u = m.sub(b, v);
    let e = m.add(t, u);
    (s, e)
}

/// [`trig_reduce`]'s contract for |x| < [`TRIG_SMALL`], by Cody-Waite: q = the integer nearest
/// |x| 2/pi (16 bits at most) and r = |x| - q (c0 + c1 + ... + c9) with pi/2 cut into 8-bit
/// pieces c_i, so every product p_i = q c_i is exact.
///
/// |x| and p0..p2 lie on a grid that keeps their differences exact (|x| < 2^16), giving h. The
/// sum p3 + p4 + p5 is formed beside that chain as an error-free head and tail, and h minus its
/// head as an error-free difference; the tails and p6..p9 (below 2^-31) add up plainly. The
/// smallest |r| of an f32 below 2^16 is 2^-27.8 (x = 252.89821), and these roundings stay
/// near 2^-55, so r keeps about 27 bits relative to itself even there; the dependent chain
/// from |x| to r is 8 operations shorter than a cascade of error-free differences, which
/// matters where a loop feeds each result into the next call.
fn trig_reduce_small<M: MathOps>(m: &mut M, ax: M::F) -> [M::F; 3] {
    let k = m.f(std::f32::consts::FRAC_2_PI);
    let t = m.mul(ax, k);
    let q = m.round_even(t);
    let term = |m: &mut M, i: u32| {
        let c = m.f(-pio2_piece(i));
        m.mul(q, c)
    };
    let mut h = ax;
    for i in 0..3 {
        let p = term(m, i);
        h = m.add(h, p);
    }
    let p3 = term(m, 3);
    let p4 = term(m, 4);
    let (s, e1) = two_sum(m, p3, p4);
    let p5 = term(m, 5);
    let (s, e2) = two_sum(m, s, p5);
    let mut tail = term(m, 9);
    for i in (6..9).rev() {
        let p = term(m, i);
        tail = m.add(tail, p);
    }
    let e = m.add(e1, e2);
    let tail = m.add(tail, e);
    let (h, e3) = two_sum(m, h, s);
    let l = m.add(e3, tail);
    // |l| < 2^-29 < |h| (or h = 0): the ordered two-sum is exact.
    let rh = m.add(h, l);
    let t = m.sub(rh, h);
    let rl = m.sub(l, t);
    [rh, rl, q]
}

/// |x| = q pi/2 + rh + rl with |rh + rl| <= pi/4 (about), q an integer as f32 (mod 4 above
/// [`TRIG_SMALL`]), for every finite x: Cody-Waite below TRIG_SMALL, Payne-Hanek from there.
fn trig_reduce_any<M: MathOps>(m: &mut M, ax: M::F) -> (M::F, M::F, M::I) {
    let lim = m.f(TRIG_SMALL);
    let small = m.lt(ax, lim);
    let [rh, rl, q] = m.choose(small, |m| trig_reduce_small(m, ax), |m| trig_reduce(m, ax));
    let qi = m.to_int(q);
    (rh, rl, qi)
}

/// A value carried as an unevaluated sum head + tail.
type HeadTail<F> = (F, F);

/// sin and cos of r = rh + rl as (head, tail) pairs, normalised so |tail| <= ulp(head)/2.
fn sincos_poly<M: MathOps>(m: &mut M, rh: M::F, rl: M::F) -> (HeadTail<M::F>, HeadTail<M::F>) {
    let z = m.mul(rh, rh);
    let one = m.f(1.0);
    let half = m.f(0.5);
    let hz = m.mul(half, z);
    let ch = m.sub(one, hz);
    // sin(rh + rl) = rh + rh^3 S + rl cos(rh)
    let sp = horner(m, z, &SIN_S);
    let sp = m.mul(sp, z);
    let sp = m.mul(sp, rh);
    let rlc = m.mul(rl, ch);
    let st = m.add(rlc, sp);
    let sh = m.add(rh, st);
    let t = m.sub(sh, rh);
    let sl = m.sub(st, t);
    // cos(rh + rl) = (1 - z/2) + z^2 C - rl sin(rh); 1 - z/2's rounding error is exact.
    // rh^2's rounding error is up to 0.3 ulp of cos, so it is recovered exactly (Dekker).
    let rhh = trunc12(m, rh);
    let rhl = m.sub(rh, rhh);
    let t = m.mul(rhh, rhh);
    let zl = m.sub(t, z);
    let t = m.mul(rhh, rhl);
    let t = m.add(t, t);
    let zl = m.add(zl, t);
    let t = m.mul(rhl, rhl);
    let zl = m.add(zl, t);
    let hzl = m.mul(half, zl);
    let t = m.sub(one, ch);
    let ct = m.sub(t, hz);
    let ct = m.sub(ct, hzl);
    let cp = horner(m, z, &COS_C);
    let cp = m.mul(cp, z);
    let cp = m.mul(cp, z);
    let rr = m.mul(rl, rh);
    let cp = m.sub(cp, rr);
    let ct = m.add(ct, cp);
    let chh = m.add(ch, ct);
    let t = m.sub(chh, ch);
    let cl = m.sub(ct, t);
    ((sh, sl), (chh, cl))
}

fn odd_sign<M: MathOps>(m: &mut M, x: M::F, v: M::F) -> M::F {
    let xb = m.to_bits(x);
    let iz = m.i(0);
    let neg = m.ilt(xb, iz);
    let nv = m.neg(v);
    m.select(neg, nv, v)
}

fn quadrant_bit<M: MathOps>(m: &mut M, qi: M::I, bit: i32) -> M::P {
    let b = m.i(bit);
    let t = m.iand(qi, b);
    m.ieq(t, b)
}

/// sin(x), accurate for every finite f32 (full-range reduction).
pub fn sin<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let ax = m.abs(x);
    let (rh, rl, qi) = trig_reduce_any(m, ax);
    let ((s, _), (c, _)) = sincos_poly(m, rh, rl);
    let swap = quadrant_bit(m, qi, 1);
    let v = m.select(swap, c, s);
    let neg = quadrant_bit(m, qi, 2);
    let nv = m.neg(v);
    let v = m.select(neg, nv, v);
    odd_sign(m, x, v)
}

/// cos(x), accurate for every finite f32 (full-range reduction).
pub fn cos<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let ax = m.abs(x);
    let (rh, rl, qi) = trig_reduce_any(m, ax);
    let ((s, _), (c, _)) = sincos_poly(m, rh, rl);
    let swap = quadrant_bit(m, qi, 1);
    let v = m.select(swap, s, c);
    let one = m.i(1);
    let q1 = m.iadd(qi, one);
    let neg = quadrant_bit(m, q1, 2);
    let nv = m.neg(v);
    m.select(neg, nv, v)
}

/// tan(x), accurate for every finite f32 (full-range reduction).
pub fn tan<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let ax = m.abs(x);
    let (rh, rl, qi) = trig_reduce_any(m, ax);
    let ((sh, sl), (ch, cl)) = sincos_poly(m, rh, rl);
    // Odd quadrants give -cos/sin. The quotient of two head+tail values keeps the tails to
    // first order; without that tan would add the errors of sin, cos and the division.
    let swap = quadrant_bit(m, qi, 1);
    let nh = m.select(swap, ch, sh);
    let nl = m.select(swap, cl, sl);
    let dh = m.select(swap, sh, ch);
    let dl = m.select(swap, sl, cl);
    let r = div_df(m, nh, nl, dh, dl);
    let nr = m.neg(r);
    let r = m.select(swap, nr, r);
    odd_sign(m, x, r)
}

/// pi/2's leading 33 bits: q times it is exact in f64 for |q| < 2^20.
const WIDE_PIO2_HI: f64 = f64::from_bits(0x3ff9_21fb_5440_0000);
/// pi/2 - [`WIDE_PIO2_HI`], to f64 precision (pi/2 to about 86 bits in all).
const WIDE_PIO2_LO: f64 = f64::from_bits(0x3dd0_b461_1a62_6331);

/// sin(x) as [`sin`] defines it, through f64 below [`TRIG_SMALL`]: the reduction and a Taylor
/// polynomial in binary64 make a dependent chain about half as long as the f32 routine's
/// compensated one (which a scalar kernel, a while loop's step, waits on in full), at half the
/// lanes per vector, so the lowering takes it outside loops only. At most 0.502 ulp below
/// [`TRIG_SMALL`] (`tests/math_ulp.rs` holds it to 1); from there on, and for inf and NaN, it
/// is [`sin`].
pub fn sin_wide<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let ax = m.abs(x);
    let lim = m.f(TRIG_SMALL);
    let small = m.lt(ax, lim);
    let [v] = m.choose(small, |m| [trig_wide(m, ax, 0)], |m| [sin(m, ax)]);
    odd_sign(m, x, v)
}

/// cos(x) as [`cos`] defines it, through f64 below [`TRIG_SMALL`] ([`sin_wide`]).
pub fn cos_wide<M: MathOps>(m: &mut M, x: M::F) -> M::F {
    let ax = m.abs(x);
    let lim = m.f(TRIG_SMALL);
    let small = m.lt(ax, lim);
    let [v] = m.choose(small, |m| [trig_wide(m, ax, 1)], |m| [cos(m, ax)]);
    v
}

/// sin(ax + shift pi/2) for 0 <= ax < [`TRIG_SMALL`] in binary64: q = the integer nearest
/// ax 2/pi (at most 2^16), r = ax - q [`WIDE_PIO2_HI`] exactly (both lie on a grid of 2^-32
/// that holds their difference), less q [`WIDE_PIO2_LO`], so |r| <= pi/4 carries an absolute
/// error near 2^-70, against |r| >= 2^-27.8 for an f32 ax; then Taylor's sin to degree 11 and
/// cos to degree 10, within 2^-36 and 2^-32 relative on |r| <= pi/4, so the f32 rounding of
/// the result is all but exact.
fn trig_wide<M: MathOps>(m: &mut M, ax: M::F, shift: i32) -> M::F {
    let a = m.widen(ax);
    let k = m.d(std::f64::consts::FRAC_2_PI);
    let t = m.dmul(a, k);
    let q = m.dround_even(t);
    let hi = m.d(-WIDE_PIO2_HI);
    let r = m.dmul_add(q, hi, a);
    let lo = m.d(-WIDE_PIO2_LO);
    let r = m.dmul_add(q, lo, r);
    let z = m.dmul(r, r);
    let horner_d = |m: &mut M, c: &[f64]| {
        let mut acc = m.d(c[c.len() - 1]);
        for &ci in c[..c.len() - 1].iter().rev() {
            let k = m.d(ci);
            acc = m.dmul_add(acc, z, k);
        }
        acc
    };
    // 1/n! with alternating signs, n odd from 3 (sin) and even from 2 (cos).
    let sp = horner_d(m, &[-1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362_880.0, -1.0 / 39_916_800.0]);
    let rz = m.dmul(r, z);
    let s = m.dmul_add(rz, sp, r);
    let cp = horner_d(m, &[-0.5, 1.0 / 24.0, -1.0 / 720.0, 1.0 / 40_320.0, -1.0 / 3_628_800.0]);
    let one = m.d(1.0);
    let c = m.dmul_add(z, cp, one);
    let (s, c) = (m.narrow(s), m.narrow(c));
    let qi = m.dto_int(q);
    let by = m.i(shift);
    let qi = m.iadd(qi, by);
    let swap = quadrant_bit(m, qi, 1);
    let v = m.select(swap, c, s);
    let neg = quadrant_bit(m, qi, 2);
    let nv = m.neg(v);
    m.select(neg, nv, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiny-result routine rounds exactly as the plain product does (which the host computes
    /// with gradual underflow), on every exponent it can meet and mantissas across [0.5, 2),
    /// including the ties that decide half-to-even and the boundary into the normal range.
    #[test]
    fn tiny_scaling_matches_the_plain_product_bit_for_bit() {
        let mut e = Eval { fma: false };
        let mut ps: Vec<f32> = (0..20_000u32).map(|k| f32::from_bits(0x3f00_0000 + k * 839)).collect();
        ps.extend([0.5, 1.0, 1.5, 1.999_999_9, 0.500_000_06, 1.000_000_1, f32::from_bits(0x3f80_0001)]);
        for n in -252..=254 {
            for &p in &ps {
                let plain = scale2_plain(&mut e, p, n);
                let tiny = scale2_tiny(&mut e, p, n);
                let chosen = scale2(&mut e, p, n);
                assert_eq!(tiny.to_bits(), plain.to_bits(), "scale2_tiny({p:e}, {n})");
                assert_eq!(chosen.to_bits(), plain.to_bits(), "scale2({p:e}, {n})");
            }
        }
        assert!(scale2_tiny(&mut e, f32::NAN, -140).is_nan());
    }

    /// The edge routine's result beyond its clamps is the constant `exp` selects there without
    /// running it, with FMA or without.
    #[test]
    fn exp_far_edges_are_constants() {
        for fma in [false, true] {
            let mut e = Eval { fma };
            for x in [EXP_TOP, 89.000_01, 1e4, f32::MAX, INF] {
                assert_eq!(exp_edge(&mut e, x).to_bits(), EXP_ABOVE.to_bits(), "exp_edge({x:e})");
            }
            for x in [EXP_BOTTOM, -104.000_01, -1e30, f32::MIN, -INF] {
                assert_eq!(exp_edge(&mut e, x).to_bits(), EXP_BELOW.to_bits(), "exp_edge({x:e})");
            }
        }
    }

    /// `exp` gives the bits it gave when every lane clamped at -104 and scaled by the plain
    /// product, for every f32 from -120 to -80 (the tiny routine's whole range and the bound
    /// between the routines) and a sample of the rest.
    #[test]
    fn exp_with_the_tiny_routine_keeps_its_results() {
        fn plain_exp(m: &mut Eval, x: f32) -> f32 {
            let (lo, hi) = (m.f(-104.0), m.f(89.0));
            let x = if x < lo {
                lo
            } else if x > hi {
                hi
            } else {
                x
            };
            let (p, ki) = exp_lean(m, x);
            scale2_plain(m, p, ki)
        }
        for fma in [false, true] {
            let mut e = Eval { fma };
            let dense = (80.0f32.to_bits()..=120.0f32.to_bits()).map(|b| -f32::from_bits(b));
            let sample = (0..u32::MAX).step_by(4099).map(f32::from_bits);
            for x in dense.chain(sample) {
                let (got, want) = (exp(&mut e, x), plain_exp(&mut e, x));
                assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "exp({x:e})");
            }
        }
    }
}
