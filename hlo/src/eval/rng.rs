//! Random numbers: `rng-bit-generator` bit-exact with XLA (ThreeFry2x32-20 and Philox4x32-10
//! laid out as XLA's rng_bit_generator expander and prng library lay them out), and the
//! stateful `rng` op (uniform, normal, Bernoulli) drawn from a Philox stream seeded by
//! [`super::EvalOptions::rng_seed`].

use super::value::{round_float, wrap_int};
use super::{result_array, Arr, Buf, EvalError, Value};
use crate::element_type::ElementType;
use crate::ir::{AttrList, Instruction, RandomAlgorithm};
use crate::shape::Shape;

const THREEFRY_ROTATIONS: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];

/// ThreeFry2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
pub(crate) fn threefry2x32(input: [u32; 2], key: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], 0x1BD1_1BDA ^ key[0] ^ key[1]];
    let mut x = [input[0].wrapping_add(ks[0]), input[1].wrapping_add(ks[1])];
    for block in 0..5usize {
        let rot = if block % 2 == 0 { &THREEFRY_ROTATIONS[..4] } else { &THREEFRY_ROTATIONS[4..] };
        for &r in rot {
            x[0] = x[0].wrapping_add(x[1]);
            x[1] = x[1].rotate_left(r) ^ x[0];
        }
        // Key injection after every four rounds, with the block number added to the second word.
        x[0] = x[0].wrapping_add(ks[(block + 1) % 3]);
        x[1] = x[1].wrapping_add(ks[(block + 2) % 3]).wrapping_add(block as u32 + 1);
    }
    x
}

/// Philox4x32 with 10 rounds (same paper).
pub(crate) fn philox4x32(mut x: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for _ in 0..10 {
        let p0 = u64::from(x[0]) * 0xD251_1F53;
        let p1 = u64::from(x[2]) * 0xCD9E_8D57;
        x = [(p1 >> 32) as u32 ^ x[1] ^ key[0], p1 as u32, (p0 >> 32) as u32 ^ x[3] ^ key[1], p0 as u32];
        key = [key[0].wrapping_add(0x9E37_79B9), key[1].wrapping_add(0xBB67_AE85)];
    }
    x
}

fn split64(x: u64) -> [u32; 2] {
    [x as u32, (x >> 32) as u32]
}

/// `n` 32-bit (or, when `wide`, 64-bit) words from Philox on the 128-bit counter
/// (low, high), in XLA's order: counter + i yields words 4i..4i+3 (2i..2i+1 when wide).
/// Returns the words and the advanced counter.
fn philox_words(key: u64, counter: (u64, u64), n: usize, wide: bool) -> (Vec<u64>, (u64, u64)) {
    let words32 = if wide { 2 * n } else { n };
    let blocks = words32.div_ceil(4) as u64;
    let key = split64(key);
    let add = |c: (u64, u64), d: u64| -> (u64, u64) {
        let lo = c.0.wrapping_add(d);
        (lo, if lo < c.0 { c.1.wrapping_add(1) } else { c.1 })
    };
    let mut out = Vec::with_capacity(n + 4);
    for i in 0..blocks {
        let c = add(counter, i);
        let (a, b) = (split64(c.0), split64(c.1));
        let r = philox4x32([a[0], a[1], b[0], b[1]], key);
        if wide {
            out.push(u64::from(r[0]) | (u64::from(r[1]) << 32));
            out.push(u64::from(r[2]) | (u64::from(r[3]) << 32));
        } else {
            out.extend(r.iter().map(|&w| u64::from(w)));
        }
    }
    out.truncate(n);
    (out, add(counter, blocks))
}

/// XLA's choice of the dimension ThreeFry's two output words are interleaved along: the first
/// even-sized dimension, else the first largest one.
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

/// ThreeFry words for `dims`: 64-bit words take both outputs of one counter; 32-bit words
/// take them in pairs along the split dimension (output word t of counter j lands at
/// coordinate 2j + t there). Returns the words and the advanced counter.
fn threefry_words(key: u64, counter: u64, dims: &[i64], wide: bool) -> (Vec<u64>, u64) {
    let key = split64(key);
    let n: usize = dims.iter().product::<i64>() as usize;
    let block = |c: u64| threefry2x32(split64(c), key);
    if wide {
        let out = (0..n as u64)
            .map(|i| {
                let r = block(counter.wrapping_add(i));
                u64::from(r[0]) | (u64::from(r[1]) << 32)
            })
            .collect();
        return (out, counter.wrapping_add(n as u64));
    }
    if dims.is_empty() {
        return (vec![u64::from(block(counter)[0])], counter.wrapping_add(1));
    }
    let s = split_dim(dims);
    let mut half = dims.to_vec();
    half[s] = (dims[s] + 1) / 2;
    let half_n: i64 = half.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0i64; dims.len()];
    for _ in 0..n {
        let mut lin = 0i64;
        for (d, &i) in idx.iter().enumerate() {
            let c = if d == s { i / 2 } else { i };
            lin = lin * half[d] + c;
        }
        let r = block(counter.wrapping_add(lin as u64));
        out.push(u64::from(r[(idx[s] % 2) as usize]));
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    (out, counter.wrapping_add(half_n as u64))
}

/// rng-bit-generator(state): (new state, random bits). The state is u64[2] for ThreeFry
/// (key, counter) and u64[2] or u64[3] for Philox (key, then the counter).
pub(crate) fn bit_generator(inst: &Instruction, ops: &[&Arr]) -> Result<Value, EvalError> {
    let [state] = ops else {
        return Err(EvalError::invalid(inst, "rng-bit-generator needs one state operand"));
    };
    let Shape::Tuple(parts) = &inst.shape else {
        return Err(EvalError::invalid(inst, "rng-bit-generator returns a (state, bits) tuple"));
    };
    let Some(Shape::Array(out)) = parts.get(1) else {
        return Err(EvalError::invalid(inst, "rng-bit-generator returns a (state, bits) tuple"));
    };
    let (ty, dims) = (out.element_type, out.dims.clone());
    if dims.iter().any(|&d| d < 0) {
        return Err(EvalError::invalid(inst, "dynamic shapes are not supported"));
    }
    let s = match (&state.buf, state.ty) {
        (Buf::Int(v), ElementType::U64) if v.len() >= 2 => v.iter().map(|&x| x as u64).collect::<Vec<_>>(),
        _ => {
            return Err(EvalError::Unsupported {
                opcode: format!("rng-bit-generator with state {}{:?} (only u64[2] or u64[3])", state.ty, state.dims),
            })
        }
    };
    let width = ty.bit_width();
    if !(ty.is_integral() || ty.is_float()) || ![8, 16, 32, 64].contains(&width) {
        return Err(EvalError::Unsupported { opcode: format!("rng-bit-generator producing {ty}") });
    }
    let wide = width == 64;
    let algorithm = match inst.attr_word("algorithm") {
        None => RandomAlgorithm::Default,
        Some(w) => {
            RandomAlgorithm::parse(w).ok_or_else(|| EvalError::invalid(inst, format!("unknown rng algorithm {w}")))?
        }
    };
    let n: usize = dims.iter().product::<i64>() as usize;
    let key = s[0];
    let (words, new_state) = match algorithm {
        RandomAlgorithm::ThreeFry => {
            let (w, c) = threefry_words(key, s[1], &dims, wide);
            let mut st = s.clone();
            st[1] = c;
            (w, st)
        }
        // XLA:CPU expands the default algorithm as Philox.
        RandomAlgorithm::Philox | RandomAlgorithm::Default => {
            if s.len() > 3 {
                return Err(EvalError::Unsupported { opcode: "rng-bit-generator with a state longer than 3".into() });
            }
            // With two words the counter is (state[1], state[0]); the key doubles as its high half.
            let counter = if s.len() >= 3 { (s[1], s[2]) } else { (s[1], s[0]) };
            let (w, c) = philox_words(key, counter, n, wide);
            let st = if s.len() >= 3 { vec![key, c.0, c.1] } else { vec![key, c.0] };
            (w, st)
        }
    };
    let bits: Vec<u64> = words.into_iter().map(|w| if width < 32 { w & ((1u64 << width) - 1) } else { w }).collect();
    let buf = if ty.is_float() {
        Buf::Float(bits.iter().map(|&b| super::value::float_from_bits(ty, b)).collect())
    } else {
        Buf::Int(bits.iter().map(|&b| wrap_int(ty, b as i64)).collect())
    };
    let state_out =
        Arr { ty: state.ty, dims: state.dims.clone(), buf: Buf::Int(new_state.iter().map(|&x| x as i64).collect()) };
    Ok(Value::Tuple(vec![Value::Arr(state_out), Value::Arr(Arr { ty, dims, buf })]))
}

/// The stream the `rng` op draws from: Philox keyed by the seed, with a counter that every
/// draw advances, so one evaluation's draws never repeat and equal seeds repeat evaluations.
pub(crate) struct RngStream {
    key: u64,
    counter: std::sync::atomic::AtomicU64,
}

impl RngStream {
    pub(crate) fn new(seed: u64) -> RngStream {
        RngStream { key: seed, counter: std::sync::atomic::AtomicU64::new(0) }
    }

    /// `n` fresh 32-bit words.
    fn words(&self, n: usize) -> Vec<u64> {
        let blocks = n.div_ceil(4) as u64;
        let start = self.counter.fetch_add(blocks, std::sync::atomic::Ordering::Relaxed);
        philox_words(self.key, (start, 0), n, false).0
    }
}

/// rng-get-and-update-state: the generator's (seed, counter) before advancing the counter by
/// `delta`.
pub(crate) fn get_and_update_state(inst: &Instruction, stream: &RngStream) -> Result<Value, EvalError> {
    let delta = inst.attr_int("delta").ok_or_else(|| EvalError::invalid(inst, "missing delta"))?;
    let before = stream.counter.fetch_add(delta as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(Value::Arr(Arr { ty: ElementType::U64, dims: vec![2], buf: Buf::Int(vec![stream.key as i64, before as i64]) }))
}

/// Uniform floats in [0, 1) with `mant` random mantissa bits, as XLA's bits-to-float does.
fn unit_floats(words: &[u64], mant: u32) -> Vec<f64> {
    words.iter().map(|&w| (w >> (32 - mant)) as f64 * (-(mant as f64)).exp2()).collect()
}

/// rng(a, b) uniform on [a, b), rng(mu, sigma) normal, rng(p) Bernoulli.
pub(crate) fn rng(inst: &Instruction, ops: &[&Arr], stream: &RngStream) -> Result<Arr, EvalError> {
    let (ty, dims) = result_array(inst)?;
    let n: usize = dims.iter().product::<i64>() as usize;
    let dist = inst.attr_word("distribution").unwrap_or("");
    let scalar = |a: &Arr| -> Result<f64, EvalError> {
        match &a.buf {
            Buf::Float(v) if v.len() == 1 => Ok(v[0]),
            Buf::Int(v) if v.len() == 1 => Ok(v[0] as f64),
            _ => Err(EvalError::invalid(inst, "rng parameters must be numeric scalars")),
        }
    };
    // f64 needs more than 32 random bits for its mantissa: use 52 from two words.
    let mant = match ty {
        ElementType::F64 => 52,
        ElementType::F16 => 10,
        ElementType::BF16 => 7,
        _ => 23,
    };
    let uniform = |count: usize| -> Vec<f64> {
        if mant > 32 {
            let w = stream.words(2 * count);
            w.chunks(2).map(|c| (((c[0] << 32) | c[1]) >> 12) as f64 * (-52f64).exp2()).collect()
        } else {
            unit_floats(&stream.words(count), mant)
        }
    };
    let buf = match (dist, ops) {
        ("rng_uniform", [a, b]) if ty.is_float() => {
            let (lo, hi) = (scalar(a)?, scalar(b)?);
            // Rounding can land exactly on hi; XLA's interval is half-open, so clamp below it.
            Buf::Float(
                uniform(n)
                    .into_iter()
                    .map(|u| {
                        let x = round_float(ty, u * (hi - lo) + lo);
                        if x >= hi && hi > lo {
                            lo.max(next_below(ty, hi))
                        } else {
                            x
                        }
                    })
                    .collect(),
            )
        }
        ("rng_uniform", [a, b]) if ty.is_integral() => {
            let (Buf::Int(lo), Buf::Int(hi)) = (&a.buf, &b.buf) else {
                return Err(EvalError::invalid(inst, "rng bounds must match the result type"));
            };
            let (lo, hi) = (lo.first().copied().unwrap_or(0), hi.first().copied().unwrap_or(0));
            let range = hi.wrapping_sub(lo) as u64;
            let w = stream.words(2 * n);
            Buf::Int(
                w.chunks(2)
                    .map(|c| {
                        let bits = (c[0] << 32) | c[1];
                        let off = if range == 0 { 0 } else { bits % range };
                        wrap_int(ty, lo.wrapping_add(off as i64))
                    })
                    .collect(),
            )
        }
        ("rng_normal", [mu, sigma]) if ty.is_float() => {
            let (mu, sigma) = (scalar(mu)?, scalar(sigma)?);
            let u = uniform(2 * n.div_ceil(2));
            let mut out = Vec::with_capacity(n + 1);
            for p in u.chunks(2) {
                // Box-Muller, keeping log away from 0 as XLA does.
                let r = (-2.0 * p[0].max(1e-7).ln()).sqrt();
                let t = 2.0 * std::f64::consts::PI * p[1];
                out.push(round_float(ty, mu + sigma * r * t.sin()));
                out.push(round_float(ty, mu + sigma * r * t.cos()));
            }
            out.truncate(n);
            Buf::Float(out)
        }
        ("rng_bernoulli", [p]) => {
            let p = scalar(p)?;
            let u = unit_floats(&stream.words(n), 23);
            let hits: Vec<bool> = u.into_iter().map(|u| u < p).collect();
            match ty {
                ElementType::Pred => Buf::Pred(hits),
                t if t.is_float() => Buf::Float(hits.into_iter().map(|h| f64::from(u8::from(h))).collect()),
                _ => Buf::Int(hits.into_iter().map(i64::from).collect()),
            }
        }
        _ => {
            return Err(EvalError::Unsupported {
                opcode: format!("rng with distribution '{dist}', {} operands and result type {ty}", ops.len()),
            })
        }
    };
    Ok(Arr { ty, dims, buf })
}

/// The largest value of `ty` below `x` (x finite and positive or negative, not the minimum).
fn next_below(ty: ElementType, x: f64) -> f64 {
    match ty {
        ElementType::F32 => {
            let f = x as f32;
            let b = f.to_bits();
            f64::from(if f > 0.0 { f32::from_bits(b - 1) } else { f32::from_bits(b + 1) })
        }
        _ => {
            let b = x.to_bits();
            let y = if x > 0.0 { f64::from_bits(b - 1) } else { f64::from_bits(b + 1) };
            round_float(ty, y).min(y)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threefry_known_answers() {
        // Random123's known-answer vectors for threefry2x32_20.
        assert_eq!(threefry2x32([0, 0], [0, 0]), [0x6b20_0159, 0x99ba_4efe]);
        assert_eq!(threefry2x32([u32::MAX, u32::MAX], [u32::MAX, u32::MAX]), [0x1cb9_96fc, 0xbb00_2be7]);
        assert_eq!(threefry2x32([0x243f_6a88, 0x85a3_08d3], [0x1319_8a2e, 0x0370_7344]), [0xc492_3a9c, 0x483d_f7a0]);
    }

    #[test]
    fn philox_known_answers() {
        // Random123's known-answer vectors for philox4x32_10.
        assert_eq!(philox4x32([0; 4], [0; 2]), [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
        assert_eq!(philox4x32([u32::MAX; 4], [u32::MAX; 2]), [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        assert_eq!(
            philox4x32([0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344], [0xa409_3822, 0x299f_31d0]),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }
}
