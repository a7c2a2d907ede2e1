//! Vector loops: innermost loops with a vector width become f32x4 / i32x4 / f64x2 loops plus a
//! scalar tail when their body allows it. Checked against the interpreter bit for bit (through
//! `common::run`) on hand-written kernels and on seeded random vectorizable bodies (which the
//! LLVM tier runs too), and through the Cranelift IR for which loops get vectors.

mod common;
mod llvm_common;

use common::*;
use tessera_lower::kernel::*;
use tessera_testkit::Rng;

fn clif(kernel: &Kernel) -> String {
    tessera_codegen::cranelift::clif(kernel).unwrap()
}

fn has_vectors(kernel: &Kernel) -> bool {
    let text = clif(kernel);
    text.contains("f32x4") || text.contains("i32x4") || text.contains("f64x2")
}

fn t(src: IndexSrc, scale: i64) -> Term {
    Term { src, div: 1, modulo: None, scale }
}

/// `y[g, i] = a * x[g, i] + y[g, i]` over `i in start..end`, `a` a broadcast load per row.
fn saxpy(ty: Ty, rows: i64, start: i64, end: i64, width: u32) -> Kernel {
    let cols = end + 1;
    let mut k = KernelBuilder::new("saxpy", rows);
    let a = k.buffer("a", MemType::Scalar(ty), rows, false);
    let x = k.buffer("x", MemType::Scalar(ty), rows * cols, false);
    let y = k.buffer("y", MemType::Scalar(ty), rows * cols, true);
    let g = k.grid_var();
    let i = k.begin_loop(start, end);
    let av = k.load(a, IndexExpr::var(g, 1));
    let row = |v: VarId| IndexExpr { terms: vec![t(IndexSrc::Var(g), cols), t(IndexSrc::Var(v), 1)], offset: 0 };
    let xv = k.load(x, row(i));
    let yv = k.load(y, row(i));
    let p = k.binary(BinOp::Mul, ty, av, xv);
    let s = k.binary(BinOp::Add, ty, p, yv);
    k.store(y, row(i), s);
    k.end_loop_vectorized(width, if (end - start) % i64::from(width) == 0 { Tail::None } else { Tail::Peel });
    k.finish()
}

fn float_data(ty: Ty, n: usize, seed: u64) -> Vec<u8> {
    let specials = samples(ty);
    let v: Vec<u64> = (0..n as u64)
        .map(|i| {
            let h = (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed;
            if h.is_multiple_of(5) {
                specials[(h / 5 % specials.len() as u64) as usize]
            } else {
                let x = ((h >> 20) % 20001) as f64 / 1000.0 - 10.0;
                if ty == Ty::F32 {
                    u64::from((x as f32).to_bits())
                } else if ty == Ty::F64 {
                    x.to_bits()
                } else {
                    h >> 7
                }
            }
        })
        .collect();
    encode(ty, &v)
}

#[test]
fn saxpy_vectorizes_with_and_without_tails() {
    for ty in [Ty::F32, Ty::F64, Ty::I32] {
        for (start, end) in [(0, 16), (0, 19), (3, 10), (1, 2), (0, 3), (5, 5)] {
            let rows = 3;
            let kernel = saxpy(ty, rows, start, end, 8);
            let lanes = if ty == Ty::F64 { 2 } else { 4 };
            assert_eq!(has_vectors(&kernel), end - start >= lanes, "{ty:?} {start}..{end}");
            let n = (rows * (end + 1)) as usize;
            let mut bufs = vec![float_data(ty, rows as usize, 1), float_data(ty, n, 2), float_data(ty, n, 3)];
            run(&kernel, &mut bufs);
        }
    }
}

#[test]
fn loops_that_are_not_eligible_stay_scalar_and_correct() {
    // 16-bit loads at stride 2 (only 32- and 64-bit lanes are gathered), a width below the
    // lane count, and an i64 body.
    let n = 12i64;
    let mut k = KernelBuilder::new("strided", 1);
    let x = k.buffer("x", MemType::Scalar(Ty::I16), 2 * n, false);
    let y = k.buffer("y", MemType::Scalar(Ty::I16), n, true);
    let i = k.begin_loop(0, n);
    let v = k.load(x, IndexExpr::var(i, 2));
    k.store(y, IndexExpr::var(i, 1), v);
    k.end_loop_vectorized(4, Tail::None);
    let strided = k.finish();
    assert!(!has_vectors(&strided));
    let mut bufs = vec![(0..2 * n as u16).flat_map(|h| (h * 3).to_le_bytes()).collect(), vec![0; n as usize * 2]];
    run(&strided, &mut bufs);
    assert_eq!(&bufs[1][2..4], &6u16.to_le_bytes(), "y[1] is x[2]");

    let narrow = saxpy(Ty::F32, 1, 0, 12, 2);
    assert!(!has_vectors(&narrow), "width 2 does not allow 4 f32 lanes");
    let mut bufs = vec![float_data(Ty::F32, 1, 5), float_data(Ty::F32, 13, 6), float_data(Ty::F32, 13, 7)];
    run(&narrow, &mut bufs);
    assert!(has_vectors(&saxpy(Ty::F64, 1, 0, 12, 2)), "width 2 allows 2 f64 lanes");

    let wide_ints = saxpy(Ty::I64, 2, 0, 9, 4);
    assert!(!has_vectors(&wide_ints));
    let mut bufs = vec![float_data(Ty::I64, 2, 8), float_data(Ty::I64, 20, 9), float_data(Ty::I64, 20, 10)];
    run(&wide_ints, &mut bufs);
}

/// A random vectorizable loop body from `seed`: contiguous and broadcast loads of one
/// element type, every op with a vector form, comparisons feeding selects and mask logic,
/// 32-bit int<->float casts, uniform subexpressions, per-lane choices under a branch on
/// `AnyLane` (`MathOps::choose`'s shape), and contiguous stores.
fn random_vector_kernel(seed: u64) -> Kernel {
    let mut r = Rng::new(seed);
    let base = *r.pick(&[Ty::F32, Ty::I32, Ty::F64]);
    let rows = 1 + r.below(3) as i64;
    let start = r.below(4) as i64;
    let trip = r.below(30) as i64;
    let width = *r.pick(&[4u32, 8, 16]);
    let cols = start + trip + 2;
    let mut k = KernelBuilder::new(format!("vec_{seed}"), rows);
    // 32-bit loops also read the other 32-bit type, so casts and bitcasts meet loads.
    let other = match base {
        Ty::F32 => Ty::I32,
        Ty::I32 => Ty::F32,
        _ => Ty::F64,
    };
    let ins: Vec<(BufId, Ty)> = (0..3)
        .map(|j| {
            let ty = if j == 2 { other } else { base };
            (k.buffer(format!("in{j}"), MemType::Scalar(ty), rows * cols, false), ty)
        })
        .collect();
    let scalars = k.buffer("s", MemType::Scalar(base), rows, false);
    let outs: Vec<(BufId, Ty)> = [base, other]
        .iter()
        .enumerate()
        .map(|(j, &ty)| (k.buffer(format!("out{j}"), MemType::Scalar(ty), rows * cols, true), ty))
        .collect();
    let g = k.grid_var();
    let i = k.begin_loop(start, start + trip);
    let shift = r.below(2) as i64;
    let at =
        |v: VarId, off: i64| IndexExpr { terms: vec![t(IndexSrc::Var(g), cols), t(IndexSrc::Var(v), 1)], offset: off };
    let mut pool: Vec<(ValueId, Ty)> = Vec::new();
    for &(buf, ty) in &ins {
        pool.push((k.load(buf, at(i, shift)), ty));
    }
    let bcast = k.load(scalars, IndexExpr::var(g, 1));
    pool.push((bcast, base));
    let c = match base {
        Ty::F32 => Const::F32(1.5f32.to_bits()),
        Ty::F64 => Const::F64((-0.75f64).to_bits()),
        _ => Const::Int { ty: Ty::I32, bits: 3 },
    };
    let cv = k.constant(c);
    pool.push((cv, base));
    // A uniform subexpression (no loop variable): stays scalar inside the vector loop.
    let u = k.binary(BinOp::Add, base, bcast, cv);
    pool.push((u, base));
    let mut preds: Vec<ValueId> = Vec::new();
    for _ in 0..(3 + r.below(10)) {
        let ty = if r.below(4) == 0 { other } else { base };
        let of: Vec<ValueId> = pool.iter().filter(|p| p.1 == ty).map(|p| p.0).collect();
        if of.is_empty() {
            continue;
        }
        let a = of[r.below(of.len() as u64) as usize];
        let b = of[r.below(of.len() as u64) as usize];
        let v = match r.below(7) {
            0 if ty.is_float() => {
                let op =
                    *r.pick(&[UnOp::Neg, UnOp::Abs, UnOp::Sqrt, UnOp::Floor, UnOp::Ceil, UnOp::Trunc, UnOp::RoundEven]);
                k.unary(op, ty, a)
            }
            0 => k.unary(*r.pick(&[UnOp::Neg, UnOp::Abs, UnOp::Not]), ty, a),
            1 if ty.is_float() && r.below(3) == 0 => {
                // Math functions run once per lane inside the vector loop.
                let func =
                    *r.pick(&[MathFn::Exp, MathFn::Tanh, MathFn::Log1p, MathFn::Atan2, MathFn::Pow, MathFn::Fmod]);
                let args = if func.arity() == 2 { vec![a, b] } else { vec![a] };
                k.math(func, ty, args)
            }
            1 | 2 if ty.is_float() => k.binary(
                *r.pick(&[BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::FDiv, BinOp::FMax, BinOp::FMin]),
                ty,
                a,
                b,
            ),
            1 | 2 => {
                use BinOp::*;
                k.binary(*r.pick(&[Add, Sub, Mul, And, Or, Xor, SMax, SMin, UMax, UMin]), ty, a, b)
            }
            3 => {
                use CmpOp::*;
                let op = if ty.is_float() {
                    *r.pick(&[FEq, FNe, FLt, FLe, FGt, FGe])
                } else {
                    *r.pick(&[Eq, Ne, Slt, Sle, Sgt, Sge, Ult, Ule, Ugt, Uge])
                };
                let p = k.cmp(op, ty, a, b);
                let p = if preds.is_empty() || r.below(2) == 0 {
                    p
                } else {
                    let q = preds[r.below(preds.len() as u64) as usize];
                    let m = k.binary(*r.pick(&[BinOp::And, BinOp::Or, BinOp::Xor]), Ty::Pred, p, q);
                    if r.below(3) == 0 {
                        k.unary(UnOp::Not, Ty::Pred, m)
                    } else {
                        m
                    }
                };
                preds.push(p);
                continue;
            }
            4 if !preds.is_empty() => {
                let p = preds[r.below(preds.len() as u64) as usize];
                k.select(ty, p, a, b)
            }
            5 if ty != Ty::F64 => {
                let (to, op) = match (ty, r.below(2)) {
                    (Ty::F32, 0) => (Ty::I32, CastOp::Bitcast),
                    (Ty::F32, _) => (Ty::I32, CastOp::FPToSISat),
                    (_, 0) => (Ty::F32, CastOp::Bitcast),
                    _ => (Ty::F32, CastOp::SIToFP),
                };
                let v = k.cast(op, ty, to, a);
                pool.push((v, to));
                continue;
            }
            6 if !preds.is_empty() => {
                // `a`, or where `p` holds a value computed under a branch that a vector loop
                // takes when any lane needs it.
                let p = preds[r.below(preds.len() as u64) as usize];
                let local = k.local(ty, a);
                let any = k.let_(Op::AnyLane { a: p });
                k.begin_if(any);
                let x = if ty.is_float() { k.binary(BinOp::Mul, ty, a, b) } else { k.binary(BinOp::Xor, ty, a, b) };
                let x = k.select(ty, p, x, a);
                k.set_local(local, x);
                k.end_if();
                k.get_local(local)
            }
            _ => continue,
        };
        pool.push((v, ty));
    }
    for &(buf, ty) in &outs {
        let last = pool.iter().rev().find(|p| p.1 == ty).map(|p| p.0);
        if let Some(v) = last {
            k.store(buf, at(i, 1), v);
        }
    }
    k.end_loop_vectorized(width, if trip % i64::from(width) == 0 { Tail::None } else { Tail::Peel });
    k.finish()
}

#[test]
fn random_vectorizable_bodies_match_the_interpreter() {
    let mut vectorized = 0;
    for seed in 0..400u64 {
        let kernel = random_vector_kernel(seed);
        let Stmt::Loop(l) = &kernel.body[0] else { unreachable!() };
        let lanes = if matches!(kernel.buffers[0].mem, MemType::Scalar(Ty::F64)) { 2 } else { 4 };
        let vector = has_vectors(&kernel);
        assert_eq!(vector, l.end - l.start >= lanes, "seed {seed}:\n{kernel}\n{}", clif(&kernel));
        vectorized += usize::from(vector);
        let mut bufs: Vec<Vec<u8>> = kernel
            .buffers
            .iter()
            .enumerate()
            .map(|(j, b)| {
                let MemType::Scalar(ty) = b.mem else { unreachable!() };
                float_data(ty, b.len as usize, seed * 7 + j as u64)
            })
            .collect();
        llvm_common::run(&kernel, &mut bufs.clone());
        run(&kernel, &mut bufs);
    }
    assert!(vectorized > 250, "only {vectorized} of 400 got vector loops");
}

#[test]
fn uniform_calls_locals_and_writable_loads_in_vector_loops() {
    // out[g, i] = x[g, i] * pow(0.9, t + 1) + acc + w[g] where acc is a local from outside the
    // loop and w a buffer the kernel also writes (so its load stays in the loop).
    let (rows, cols) = (3i64, 11i64);
    let mut k = KernelBuilder::new("adam_like", rows);
    let x = k.buffer("x", MemType::Scalar(Ty::F32), rows * cols, false);
    let tb = k.buffer("t", MemType::Scalar(Ty::I32), 1, false);
    let w = k.buffer("w", MemType::Scalar(Ty::F32), rows, true);
    let out = k.buffer("out", MemType::Scalar(Ty::F32), rows * cols, true);
    let g = k.grid_var();
    let half = k.constant(Const::F32(0.5f32.to_bits()));
    let acc = k.local(Ty::F32, half);
    let i = k.begin_loop(0, cols);
    let at = IndexExpr { terms: vec![t(IndexSrc::Var(g), cols), t(IndexSrc::Var(i), 1)], offset: 0 };
    let xv = k.load(x, at.clone());
    let tv = k.load(tb, IndexExpr::constant(0));
    let one = k.constant(Const::Int { ty: Ty::I32, bits: 1 });
    let t1 = k.binary(BinOp::Add, Ty::I32, tv, one);
    let tf = k.cast(CastOp::SIToFP, Ty::I32, Ty::F32, t1);
    let base = k.constant(Const::F32(0.9f32.to_bits()));
    let p = k.math(MathFn::Pow, Ty::F32, vec![base, tf]);
    let a = k.get_local(acc);
    let wv = k.load(w, IndexExpr::var(g, 1));
    let s = k.binary(BinOp::Add, Ty::F32, a, wv);
    let m = k.binary(BinOp::Mul, Ty::F32, xv, p);
    let r = k.binary(BinOp::Add, Ty::F32, m, s);
    k.store(out, at, r);
    k.end_loop_vectorized(8, Tail::Peel);
    let kernel = k.finish();
    assert!(has_vectors(&kernel));
    let mut bufs = vec![
        float_data(Ty::F32, (rows * cols) as usize, 11),
        encode(Ty::I32, &[6]),
        float_data(Ty::F32, rows as usize, 12),
        vec![0; (rows * cols) as usize * 4],
    ];
    run(&kernel, &mut bufs);
}

/// `out[g, i] = bf16(x * y + x)` over `i in start..end` (bf16 bits widened by a 16-bit shift,
/// narrowed by truncation), plus `sum[g] += x * y` as a 16-lane reduction when `reduce`; `y`
/// is a buffer the kernel writes when `y_written` (which keeps the halves apart).
fn bf16_rows(rows: i64, start: i64, end: i64, width: u32, reduce: bool, y_written: bool) -> Kernel {
    let cols = end + 1;
    let mut k = KernelBuilder::new("bf16_rows", rows);
    let x = k.buffer("x", MemType::Scalar(Ty::I16), rows * cols, false);
    let y = k.buffer("y", MemType::Scalar(Ty::I16), rows * cols, y_written);
    let out = k.buffer("out", MemType::Scalar(Ty::I16), rows * cols, true);
    let sum = k.buffer("sum", MemType::Scalar(Ty::F32), rows, true);
    let g = k.grid_var();
    let zero = k.constant(Const::F32(0));
    let acc = k.local(Ty::F32, zero);
    let i = k.begin_loop(start, end);
    let at = IndexExpr { terms: vec![t(IndexSrc::Var(g), cols), t(IndexSrc::Var(i), 1)], offset: 0 };
    let sixteen = k.constant(Const::Int { ty: Ty::I32, bits: 16 });
    let widen = |k: &mut KernelBuilder, buf| {
        let h = k.load(buf, at.clone());
        let w = k.cast(CastOp::ZExt, Ty::I16, Ty::I32, h);
        let s = k.binary(BinOp::Shl, Ty::I32, w, sixteen);
        k.cast(CastOp::Bitcast, Ty::I32, Ty::F32, s)
    };
    let xv = widen(&mut k, x);
    let yv = widen(&mut k, y);
    let p = k.binary(BinOp::Mul, Ty::F32, xv, yv);
    if reduce {
        let a = k.get_local(acc);
        let s = k.binary(BinOp::Add, Ty::F32, a, p);
        k.set_local(acc, s);
    }
    let r = k.binary(BinOp::Add, Ty::F32, p, xv);
    let bits = k.cast(CastOp::Bitcast, Ty::F32, Ty::I32, r);
    let hi = k.binary(BinOp::LShr, Ty::I32, bits, sixteen);
    let h = k.cast(CastOp::Trunc, Ty::I32, Ty::I16, hi);
    k.store(out, at, h);
    let tail = if (end - start) % i64::from(width) == 0 { Tail::None } else { Tail::Peel };
    if reduce {
        k.end_loop_reducing(width, tail, vec![Reduction { local: acc, op: BinOp::Add, ty: Ty::F32 }]);
    } else {
        k.end_loop_vectorized(width, tail);
    }
    let total = k.get_local(acc);
    k.store(sum, IndexExpr::var(g, 1), total);
    k.finish()
}

#[test]
fn sixteen_bit_loops_run_as_halves_sharing_their_loads_and_stores() {
    // Trip counts with no remainder, a remainder of four lanes or more (one unpaired vector
    // iteration) and less (the scalar tail), and too short to pair; elementwise loops and lane
    // reductions; and a loop reading a buffer it writes, which stays unpaired.
    for (start, end) in [(0, 8), (0, 16), (0, 12), (0, 13), (1, 20), (0, 7), (0, 4), (3, 35)] {
        for reduce in [false, true] {
            for y_written in [false, true] {
                let rows = 3;
                let width = if reduce { 16 } else { 8 };
                let kernel = bf16_rows(rows, start, end, width, reduce, y_written);
                let text = clif(&kernel);
                let trip = end - start;
                let paired = !y_written && if reduce { trip >= 16 } else { trip >= 8 };
                assert_eq!(text.contains("uwiden_low"), paired, "{start}..{end} reduce {reduce}:\n{text}");
                // A paired bf16 widening is one interleave with zeros, not a shift.
                if paired {
                    assert!(text.contains("shuffle"), "{start}..{end} reduce {reduce}:\n{text}");
                }
                let n = (rows * (end + 1)) as usize;
                let mut bufs = vec![
                    float_data(Ty::I16, n, 21),
                    float_data(Ty::I16, n, 22),
                    vec![0; 2 * n],
                    vec![0; 4 * rows as usize],
                ];
                llvm_common::run(&kernel, &mut bufs.clone());
                run(&kernel, &mut bufs);
            }
        }
    }
}

/// `acc[g, i] += f64(x[g, i])` over `i in 0..cols`, then `out[g, i] = f32(acc[g, i] * 0.5)`:
/// f32 values beside f64 ones, as a column reduction's accumulators and a convolution's
/// sums have them.
fn widening_rows(rows: i64, cols: i64, width: u32) -> Kernel {
    let mut k = KernelBuilder::new("widening", rows);
    let x = k.buffer("x", MemType::Scalar(Ty::F32), rows * cols, false);
    let acc = k.buffer("acc", MemType::Scalar(Ty::F64), rows * cols, true);
    let out = k.buffer("out", MemType::Scalar(Ty::F32), rows * cols, true);
    let g = k.grid_var();
    let at = |v: VarId| IndexExpr { terms: vec![t(IndexSrc::Var(g), cols), t(IndexSrc::Var(v), 1)], offset: 0 };
    let tail = if cols % i64::from(width) == 0 { Tail::None } else { Tail::Peel };
    let i = k.begin_loop(0, cols);
    let a = k.load(acc, at(i));
    let xv = k.load(x, at(i));
    let wide = k.cast(CastOp::FPExt, Ty::F32, Ty::F64, xv);
    let s = k.binary(BinOp::Add, Ty::F64, a, wide);
    k.store(acc, at(i), s);
    k.end_loop_vectorized(width, tail);
    let j = k.begin_loop(0, cols);
    let a = k.load(acc, at(j));
    let half = k.constant(Const::F64(0.5f64.to_bits()));
    let h = k.binary(BinOp::Mul, Ty::F64, a, half);
    let narrow = k.cast(CastOp::FPTrunc, Ty::F64, Ty::F32, h);
    k.store(out, at(j), narrow);
    k.end_loop_vectorized(width, tail);
    k.finish()
}

#[test]
fn f32_beside_f64_runs_two_lanes_at_a_time() {
    for cols in [2, 3, 8, 9, 17] {
        let rows = 3;
        let kernel = widening_rows(rows, cols, 8);
        let text = clif(&kernel);
        assert!(text.contains("fvpromote_low") && text.contains("fvdemote"), "{cols} columns:\n{text}");
        let n = (rows * cols) as usize;
        let mut bufs = vec![float_data(Ty::F32, n, 31), float_data(Ty::F64, n, 32), vec![0; 4 * n]];
        llvm_common::run(&kernel, &mut bufs.clone());
        run(&kernel, &mut bufs);
    }
    // A compare of f32 values beside f64 ones keeps the loop scalar (its mask would not fit).
    let mut k = KernelBuilder::new("mixed_compare", 1);
    let x = k.buffer("x", MemType::Scalar(Ty::F32), 8, false);
    let out = k.buffer("out", MemType::Scalar(Ty::F64), 8, true);
    let i = k.begin_loop(0, 8);
    let xv = k.load(x, IndexExpr::var(i, 1));
    let zero = k.constant(Const::F32(0));
    let pos = k.cmp(CmpOp::FLt, Ty::F32, zero, xv);
    let wide = k.cast(CastOp::FPExt, Ty::F32, Ty::F64, xv);
    let none = k.constant(Const::F64(0));
    let v = k.select(Ty::F64, pos, wide, none);
    k.store(out, IndexExpr::var(i, 1), v);
    k.end_loop_vectorized(8, Tail::None);
    let kernel = k.finish();
    assert!(!has_vectors(&kernel), "{}", clif(&kernel));
    let mut bufs = vec![float_data(Ty::F32, 8, 33), vec![0; 64]];
    run(&kernel, &mut bufs);
}

/// `out[i] = op(a[i], b[i])` for every pair of special values (zeros of both signs,
/// infinities, NaNs with payloads, quiet and signaling), in a vector loop; and a lane-reduced
/// maximum and minimum of rows that mix the same values. On x86-64 the tier computes FMax and
/// FMin as `maxps`/`minps` both ways round, so these are the pairs where those instructions
/// differ from IEEE maximum/minimum: the results must be the interpreter's bit for bit, zeros'
/// signs and NaN payloads (the first NaN operand, quieted) included.
#[test]
fn vector_fmax_fmin_give_the_interpreters_bits_on_zeros_and_nans() {
    for ty in [Ty::F32, Ty::F64] {
        let mut specials = samples(ty);
        specials.extend(match ty {
            Ty::F32 => vec![0x7fc0_0abc, 0xffc0_0123, 0x7f80_0005],
            _ => vec![0x7ff8_0000_0000_0abc, 0xfff8_0000_0000_0123, 0x7ff0_0000_0000_0005],
        });
        let pairs: Vec<(u64, u64)> = specials.iter().flat_map(|&a| specials.iter().map(move |&b| (a, b))).collect();
        let n = pairs.len() as i64;
        for op in [BinOp::FMax, BinOp::FMin] {
            let mut k = KernelBuilder::new("fmaxmin", 1);
            let a = k.buffer("a", MemType::Scalar(ty), n, false);
            let b = k.buffer("b", MemType::Scalar(ty), n, false);
            let out = k.buffer("out", MemType::Scalar(ty), n, true);
            let i = k.begin_loop(0, n);
            let x = k.load(a, IndexExpr::var(i, 1));
            let y = k.load(b, IndexExpr::var(i, 1));
            let r = k.binary(op, ty, x, y);
            k.store(out, IndexExpr::var(i, 1), r);
            k.end_loop_vectorized(8, if n % 8 == 0 { Tail::None } else { Tail::Peel });
            let kernel = k.finish();
            assert!(has_vectors(&kernel), "{}", clif(&kernel));
            let bufs = vec![
                encode(ty, &pairs.iter().map(|p| p.0).collect::<Vec<_>>()),
                encode(ty, &pairs.iter().map(|p| p.1).collect::<Vec<_>>()),
                vec![0xcc; pairs.len() * bytes(ty)],
            ];
            assert_same_bits(&kernel, bufs, &format!("{op:?} {ty:?}"));
        }

        // Rows of eight: a NaN first, last or nowhere, zeros of both signs in either order.
        let rows: Vec<Vec<u64>> = specials
            .iter()
            .flat_map(|&s| {
                let z = |v: f64| if ty == Ty::F32 { u64::from((v as f32).to_bits()) } else { v.to_bits() };
                [
                    vec![s, z(-0.0), z(0.0), z(-0.0), z(-1.0), z(0.0), z(-0.0), z(-2.0)],
                    vec![z(-0.0), z(-3.0), z(0.0), z(-0.0), z(0.0), z(-0.0), z(-1.0), s],
                    vec![z(0.0), z(-0.0), s, z(-0.0), z(0.0), s, z(-0.0), z(0.0)],
                ]
            })
            .collect();
        let (count, cols) = (rows.len() as i64, 8);
        for op in [BinOp::FMax, BinOp::FMin] {
            let mut k = KernelBuilder::new("reduce_fmaxmin", count);
            let x = k.buffer("x", MemType::Scalar(ty), count * cols, false);
            let out = k.buffer("out", MemType::Scalar(ty), count, true);
            let g = k.grid_var();
            // Every lane starts from the row's first element (maximum and minimum are idempotent).
            let first = k.load(x, IndexExpr { terms: vec![t(IndexSrc::Var(g), cols)], offset: 0 });
            let acc = k.local(ty, first);
            let i = k.begin_loop(0, cols);
            let at = IndexExpr { terms: vec![t(IndexSrc::Var(g), cols), t(IndexSrc::Var(i), 1)], offset: 0 };
            let v = k.load(x, at);
            let cur = k.get_local(acc);
            let r = k.binary(op, ty, cur, v);
            k.set_local(acc, r);
            k.end_loop_reducing(8, Tail::None, vec![Reduction { local: acc, op, ty }]);
            let total = k.get_local(acc);
            k.store(out, IndexExpr::var(g, 1), total);
            let kernel = k.finish();
            assert!(has_vectors(&kernel), "{}", clif(&kernel));
            let bufs = vec![encode(ty, &rows.concat()), vec![0xcc; rows.len() * bytes(ty)]];
            assert_same_bits(&kernel, bufs, &format!("reduced {op:?} {ty:?}"));
        }
    }
}

/// Runs `kernel` on the tier and on the interpreter and requires identical bytes (NaN payloads
/// included, where `common::run` lets NaNs differ).
fn assert_same_bits(kernel: &Kernel, mut bufs: Vec<Vec<u8>>, what: &str) {
    let compiled = compile(std::slice::from_ref(kernel));
    let mut expect = bufs.clone();
    call(&compiled, 0, &mut bufs, 0, kernel.grid.extent);
    let mut refs: Vec<&mut [u8]> = expect.iter_mut().map(|b| b.as_mut_slice()).collect();
    run_kernel(kernel, &mut refs).unwrap();
    let out = bufs.len() - 1;
    assert!(bufs[out] == expect[out], "{what}: the tier's bits differ from the interpreter's");
}

/// The loop variable as a value narrowed to I32 (an iota's lanes: argmax's positions, a causal
/// mask's columns) runs in i32x4 lanes, in plain loops and in lane reductions' copies, tails
/// included; the I64 index read any other way keeps the loop scalar. Bit for bit against the
/// interpreter.
#[test]
fn index_lanes_narrowed_to_i32() {
    for (cols, width) in [(16, 8), (19, 8), (37, 16), (70, 16)] {
        let rows = 3;
        // out[g, i] = x[g, i] > 0 ? i : -1, and first[g] = the smallest such i (smin lanes).
        let mut k = KernelBuilder::new("iota_lanes", rows);
        let x = k.buffer("x", MemType::Scalar(Ty::F32), rows * cols, false);
        let out = k.buffer("out", MemType::Scalar(Ty::I32), rows * cols, true);
        let first = k.buffer("first", MemType::Scalar(Ty::I32), rows, true);
        let g = k.grid_var();
        let none = k.constant(Const::Int { ty: Ty::I32, bits: i64::from(i32::MAX) });
        let minus = k.constant(Const::Int { ty: Ty::I32, bits: -1 });
        let zero = k.constant(Const::F32(0));
        let acc = k.local(Ty::I32, none);
        let i = k.begin_loop(0, cols);
        let at = IndexExpr { terms: vec![t(IndexSrc::Var(g), cols), t(IndexSrc::Var(i), 1)], offset: 0 };
        let xv = k.load(x, at.clone());
        let wide = k.let_(Op::Index(IndexExpr::var(i, 1)));
        let pos = k.cast(CastOp::Trunc, Ty::I64, Ty::I32, wide);
        let positive = k.cmp(CmpOp::FLt, Ty::F32, zero, xv);
        let marked = k.select(Ty::I32, positive, pos, minus);
        k.store(out, at, marked);
        let candidate = k.select(Ty::I32, positive, pos, none);
        let so_far = k.get_local(acc);
        let m = k.binary(BinOp::SMin, Ty::I32, so_far, candidate);
        k.set_local(acc, m);
        let tail = if cols % i64::from(width) == 0 { Tail::None } else { Tail::Peel };
        k.end_loop_reducing(width, tail, vec![Reduction { local: acc, op: BinOp::SMin, ty: Ty::I32 }]);
        let total = k.get_local(acc);
        k.store(first, IndexExpr::var(g, 1), total);
        let kernel = k.finish();
        assert!(clif(&kernel).contains("i32x4"), "{cols} columns:\n{}", clif(&kernel));
        let n = (rows * cols) as usize;
        let mut bufs = vec![float_data(Ty::F32, n, 51), vec![0; 4 * n], vec![0; 4 * rows as usize]];
        llvm_common::run(&kernel, &mut bufs.clone());
        run(&kernel, &mut bufs);
    }
    // The I64 index stored as it is: no 64-bit lanes here, so the loop stays scalar.
    let mut k = KernelBuilder::new("wide_index", 1);
    let out = k.buffer("out", MemType::Scalar(Ty::I64), 16, true);
    let i = k.begin_loop(0, 16);
    let wide = k.let_(Op::Index(IndexExpr::var(i, 1)));
    k.store(out, IndexExpr::var(i, 1), wide);
    k.end_loop_vectorized(8, Tail::None);
    let kernel = k.finish();
    assert!(!has_vectors(&kernel), "{}", clif(&kernel));
    let mut bufs = vec![vec![0; 128]];
    run(&kernel, &mut bufs);
}

/// `out[2(g*n + v)] = x*x` and `out[2(g*n + v) + 1] = -x` for `x = in[g*n + v]`: a complex
/// result's parts, each store's lanes two elements apart, written lane by lane from vectors.
#[test]
fn strided_stores_keep_the_vector_loop() {
    let (rows, n) = (3, 37);
    let mut b = KernelBuilder::new("interleaved", rows);
    let g = b.grid_var();
    let input = b.buffer("in", MemType::Scalar(Ty::F32), rows * n, false);
    let out = b.buffer("out", MemType::Scalar(Ty::F32), rows * n * 2, true);
    let v = b.begin_loop(0, n);
    let x = b.load(input, IndexExpr { terms: vec![t(IndexSrc::Var(g), n), t(IndexSrc::Var(v), 1)], offset: 0 });
    let square = b.binary(BinOp::Mul, Ty::F32, x, x);
    let minus = b.unary(UnOp::Neg, Ty::F32, x);
    let re = IndexExpr { terms: vec![t(IndexSrc::Var(g), 2 * n), t(IndexSrc::Var(v), 2)], offset: 0 };
    b.store(out, re.clone(), square);
    b.store(out, IndexExpr { offset: 1, ..re }, minus);
    b.end_loop_vectorized(16, Tail::Peel);
    let k = b.finish();
    assert!(has_vectors(&k), "{}", clif(&k));
    let input: Vec<u8> = (0..rows * n).flat_map(|i| (i as f32 * 0.25 - 3.0).to_le_bytes()).collect();
    let mut bufs = vec![input, vec![0x5a; (rows * n * 8) as usize]];
    run(&k, &mut bufs);
    let at = |i: usize| f32::from_le_bytes(bufs[1][4 * i..4 * i + 4].try_into().unwrap());
    assert_eq!((at(80), at(81)), (49.0, -7.0));
}

/// A transpose reads its input a row apart per lane: the loop stays a vector loop, its loads
/// gathered lane by lane, and every element lands where the scalar loop would put it.
#[test]
fn strided_loads_keep_the_vector_loop() {
    let (rows, cols) = (7, 13);
    let mut b = KernelBuilder::new("transpose", cols);
    let g = b.grid_var();
    let input = b.buffer("in", MemType::Scalar(Ty::F32), rows * cols, false);
    let out = b.buffer("out", MemType::Scalar(Ty::F32), rows * cols, true);
    let v = b.begin_loop(0, rows);
    let x = b.load(input, IndexExpr { terms: vec![t(IndexSrc::Var(g), 1), t(IndexSrc::Var(v), cols)], offset: 0 });
    let y = b.binary(BinOp::Add, Ty::F32, x, x);
    b.store(out, IndexExpr { terms: vec![t(IndexSrc::Var(g), rows), t(IndexSrc::Var(v), 1)], offset: 0 }, y);
    b.end_loop_vectorized(16, Tail::Peel);
    let k = b.finish();
    assert!(has_vectors(&k), "{}", clif(&k));
    let input: Vec<u8> = (0..rows * cols).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut bufs = vec![input, vec![0x5a; (rows * cols * 4) as usize]];
    run(&k, &mut bufs);
    for c in 0..cols {
        for r in 0..rows {
            let i = (c * rows + r) as usize;
            let got = f32::from_le_bytes(bufs[1][4 * i..4 * i + 4].try_into().unwrap());
            assert_eq!(got, 2.0 * (r * cols + c) as f32, "out[{c}][{r}]");
        }
    }
}

/// Predicate bytes in memory: a loaded mask selects, a compare's mask is stored, four lanes
/// at a time with a scalar tail, as the interpreter does it.
#[test]
fn predicate_loads_and_stores_keep_the_vector_loop() {
    let n = 19;
    let mut b = KernelBuilder::new("masks", 1);
    let mask = b.buffer("mask", MemType::Pred, n, false);
    let x = b.buffer("x", MemType::Scalar(Ty::F32), n, false);
    let picked = b.buffer("picked", MemType::Scalar(Ty::F32), n, true);
    let positive = b.buffer("positive", MemType::Pred, n, true);
    let i = b.begin_loop(0, n);
    let m = b.load(mask, IndexExpr::var(i, 1));
    let v = b.load(x, IndexExpr::var(i, 1));
    let zero = b.constant(Const::F32(0));
    let r = b.select(Ty::F32, m, v, zero);
    b.store(picked, IndexExpr::var(i, 1), r);
    let p = b.cmp(CmpOp::FGt, Ty::F32, v, zero);
    b.store(positive, IndexExpr::var(i, 1), p);
    b.end_loop_vectorized(8, Tail::Peel);
    let k = b.finish();
    assert!(has_vectors(&k), "{}", clif(&k));
    let masks: Vec<u8> = (0..n).map(|i| [2, 0, 1][i as usize % 3]).collect();
    let xs: Vec<u8> = (0..n).flat_map(|i| (i as f32 - 9.5).to_le_bytes()).collect();
    let mut bufs = vec![masks, xs, vec![0x5a; n as usize * 4], vec![0x5a; n as usize]];
    run(&k, &mut bufs);
    assert_eq!(bufs[3], (0..n).map(|i| u8::from(i >= 10)).collect::<Vec<u8>>());
    assert_eq!(f32::from_le_bytes(bufs[2][4..8].try_into().unwrap()), 0.0, "masked out");
    assert_eq!(f32::from_le_bytes(bufs[2][8..12].try_into().unwrap()), -7.5, "kept");
}

/// 8- and 16-bit integers in vector loops (zero-extended 32-bit lanes): loads, stores, a
/// select, extensions, a wrapping truncation and the conversions to and from f32, saturating
/// ones at every edge (NaN, infinities, just inside and outside each range, -0.5), four lanes
/// at a time with a scalar tail, as the interpreter computes them.
#[test]
fn narrow_integers_keep_the_vector_loop() {
    let floats: Vec<f32> = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        -0.5,
        0.5,
        3.7,
        -3.7,
        127.4,
        127.6,
        128.0,
        -128.9,
        -129.0,
        255.5,
        256.0,
        1e10,
        -1e10,
        32767.9,
        32768.0,
        -32769.0,
        65535.5,
        65536.0,
        -1.0,
    ];
    let n = floats.len() as i64;
    let mut b = KernelBuilder::new("narrow_ints", 1);
    let bytes_in = b.buffer("bytes", MemType::Scalar(Ty::I8), n, false);
    let x = b.buffer("x", MemType::Scalar(Ty::F32), n, false);
    let outs: Vec<(&str, Ty)> = vec![
        ("s8", Ty::I8),
        ("u8", Ty::I8),
        ("s16", Ty::I16),
        ("u16", Ty::I16),
        ("from_s8", Ty::F32),
        ("from_u8", Ty::F32),
        ("sext_plus_100", Ty::I8),
        ("zext", Ty::I32),
        ("picked", Ty::I8),
        ("from_s16", Ty::F32),
    ];
    let o: Vec<BufId> = outs.iter().map(|(name, ty)| b.buffer(*name, MemType::Scalar(*ty), n, true)).collect();
    let i = b.begin_loop(0, n);
    let at = IndexExpr::var(i, 1);
    let byte = b.load(bytes_in, at.clone());
    let v = b.load(x, at.clone());
    let s8 = b.cast(CastOp::FPToSISat, Ty::F32, Ty::I8, v);
    let u8v = b.cast(CastOp::FPToUISat, Ty::F32, Ty::I8, v);
    let s16 = b.cast(CastOp::FPToSISat, Ty::F32, Ty::I16, v);
    let u16v = b.cast(CastOp::FPToUISat, Ty::F32, Ty::I16, v);
    let from_s8 = b.cast(CastOp::SIToFP, Ty::I8, Ty::F32, byte);
    let from_u8 = b.cast(CastOp::UIToFP, Ty::I8, Ty::F32, byte);
    let wide = b.cast(CastOp::SExt, Ty::I8, Ty::I32, byte);
    let hundred = b.constant(Const::Int { ty: Ty::I32, bits: 100 });
    let sum = b.binary(BinOp::Add, Ty::I32, wide, hundred);
    let wrapped = b.cast(CastOp::Trunc, Ty::I32, Ty::I8, sum);
    let zext = b.cast(CastOp::ZExt, Ty::I8, Ty::I32, byte);
    let zero = b.constant(Const::F32(0));
    let positive = b.cmp(CmpOp::FGt, Ty::F32, v, zero);
    let picked = b.select(Ty::I8, positive, s8, byte);
    let from_s16 = b.cast(CastOp::SIToFP, Ty::I16, Ty::F32, s16);
    for (buf, value) in o.iter().zip([s8, u8v, s16, u16v, from_s8, from_u8, wrapped, zext, picked, from_s16]) {
        b.store(*buf, at.clone(), value);
    }
    b.end_loop_vectorized(8, Tail::Peel);
    let k = b.finish();
    let text = clif(&k);
    assert!(text.contains("uwiden_low") && text.contains("unarrow"), "{text}");
    let bytes: Vec<u8> = (0..n).map(|i| [0x80, 0x7f, 0xff, 0x00, 0x9c, 0x01, 0xc8][i as usize % 7]).collect();
    let xs: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
    let mut bufs = vec![bytes, xs];
    bufs.extend(outs.iter().map(|(_, ty)| vec![0x5a; n as usize * bytes_of(*ty)]));
    run(&k, &mut bufs);
    // Spot checks of the saturating conversions, so the interpreter is held to them too.
    let s8_out = &bufs[2];
    assert_eq!(s8_out[..4], [0, 127, 0x80, 0], "NaN, inf, -inf, -0");
    assert_eq!(s8_out[8..13], [127, 127, 127, 0x80, 0x80], "127.4 127.6 128 -128.9 -129");
    let u8_out = &bufs[3];
    assert_eq!(u8_out[..5], [0, 255, 0, 0, 0], "NaN, inf, -inf, -0, -0.5");
    assert_eq!(u8_out[13..15], [255, 255], "255.5 256");
    let from_s8 = f32::from_le_bytes(bufs[6][..4].try_into().unwrap());
    assert_eq!(from_s8, -128.0);
    let wrapped = &bufs[8];
    assert_eq!(wrapped[..3], [(-128i32 + 100) as u8, (127 + 100) as u8, 99], "wraps");
}

fn bytes_of(ty: Ty) -> usize {
    match ty {
        Ty::I8 => 1,
        Ty::I16 => 2,
        Ty::I32 | Ty::F32 => 4,
        _ => 8,
    }
}

/// A floor division, a remainder by a constant and shifts by per-element amounts: the loop
/// keeps its vector form, the divisions and varying shifts running lane by lane (guarded as
/// the lowering guards them), with the interpreter's results on zero divisors, MIN / -1 and
/// every shift amount.
#[test]
fn integer_division_and_varying_shifts_keep_the_vector_loop() {
    let mut xs: Vec<i32> = vec![i32::MIN, i32::MAX, -1, 0, 1, 7, -7, 100, -100, 13, -13, 1 << 30];
    let mut ys: Vec<i32> = vec![-1, 0, 3, -3, 0, 2, -2, 31, 32, 33, -1, 7];
    for i in 0..37 {
        xs.push(i * 977 - 18_000);
        ys.push(i % 11 - 5);
    }
    let n = xs.len() as i64;
    let mut b = KernelBuilder::new("int_div", 1);
    let xb = b.buffer("x", MemType::Scalar(Ty::I32), n, false);
    let yb = b.buffer("y", MemType::Scalar(Ty::I32), n, false);
    let names = ["sdiv", "srem", "udiv", "urem", "rem13", "shl", "ashr", "lshr"];
    let outs: Vec<BufId> = names.iter().map(|name| b.buffer(*name, MemType::Scalar(Ty::I32), n, true)).collect();
    let i = b.begin_loop(0, n);
    let at = IndexExpr::var(i, 1);
    let x = b.load(xb, at.clone());
    let y = b.load(yb, at.clone());
    let int = |b: &mut KernelBuilder, v: i64| b.constant(Const::Int { ty: Ty::I32, bits: v });
    let (zero, one, m1, min) = (int(&mut b, 0), int(&mut b, 1), int(&mut b, -1), int(&mut b, i64::from(i32::MIN)));
    // The lowering's guards: a zero divisor, or -1 under MIN, becomes 1.
    let y_zero = b.cmp(CmpOp::Eq, Ty::I32, y, zero);
    let x_min = b.cmp(CmpOp::Eq, Ty::I32, x, min);
    let y_m1 = b.cmp(CmpOp::Eq, Ty::I32, y, m1);
    let overflow = b.binary(BinOp::And, Ty::Pred, x_min, y_m1);
    let bad = b.binary(BinOp::Or, Ty::Pred, y_zero, overflow);
    let signed = b.select(Ty::I32, bad, one, y);
    let unsigned = b.select(Ty::I32, y_zero, one, y);
    let thirteen = int(&mut b, 13);
    let mask = int(&mut b, 31);
    let amount = b.binary(BinOp::And, Ty::I32, y, mask);
    let values = [
        b.binary(BinOp::SDiv, Ty::I32, x, signed),
        b.binary(BinOp::SRem, Ty::I32, x, signed),
        b.binary(BinOp::UDiv, Ty::I32, x, unsigned),
        b.binary(BinOp::URem, Ty::I32, x, unsigned),
        b.binary(BinOp::SRem, Ty::I32, x, thirteen),
        b.binary(BinOp::Shl, Ty::I32, x, amount),
        b.binary(BinOp::AShr, Ty::I32, x, amount),
        b.binary(BinOp::LShr, Ty::I32, x, amount),
    ];
    for (buf, v) in outs.iter().zip(values) {
        b.store(*buf, at.clone(), v);
    }
    b.end_loop_vectorized(8, Tail::Peel);
    let k = b.finish();
    let text = clif(&k);
    assert!(text.contains("load.i32x4") && text.contains("extractlane") && text.contains(" = sdiv "), "{text}");
    let bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut bufs = vec![bytes(&xs), bytes(&ys)];
    bufs.extend(names.iter().map(|_| vec![0x5a; n as usize * 4]));
    run(&k, &mut bufs);
    let word = |buf: &[u8], at: usize| i32::from_le_bytes(buf[4 * at..4 * at + 4].try_into().unwrap());
    // Spot checks, so the interpreter is held to them too: MIN / -1 and 1 / 0 divide by 1.
    assert_eq!(word(&bufs[2], 0), i32::MIN);
    assert_eq!(word(&bufs[2], 4), 1);
    assert_eq!(word(&bufs[3], 2), -1 % 3);
    assert_eq!(word(&bufs[6], 8), -100 % 13);
    assert_eq!(word(&bufs[7], 5), 7 << 2);
}

/// A window of three along the contiguous dimension, read through index values as
/// `emit/window.rs` writes it (`%a = index v - 1`, `load x[%a]`): the loads are contiguous in
/// the loop variable, so the loop keeps its vector form, on the interpreter's bits. The loop
/// before it, a concatenate's second operand as the lowering writes it (`%c = index w - 11`),
/// reads through an index value of another offset: each loop keeps its own addresses.
#[test]
fn loads_through_index_values_keep_the_vector_loop() {
    let n = 39i64;
    let rows = 3i64;
    let mut b = KernelBuilder::new("window_max", rows);
    let x = b.buffer("x", MemType::Scalar(Ty::F32), rows * n, false);
    let y = b.buffer("y", MemType::Scalar(Ty::F32), rows * n, true);
    let z = b.buffer("z", MemType::Scalar(Ty::F32), rows * n, true);
    let g = b.grid_var();
    let w = b.begin_loop(11, n);
    let shifted = b.let_(Op::Index(IndexExpr { terms: vec![t(IndexSrc::Var(w), 1)], offset: -11 }));
    let row = |src: IndexSrc| IndexExpr { terms: vec![t(IndexSrc::Var(g), n), t(src, 1)], offset: 0 };
    let moved = b.load(x, row(IndexSrc::Value(shifted)));
    b.store(z, row(IndexSrc::Var(w)), moved);
    b.end_loop_vectorized(8, Tail::Peel);
    let v = b.begin_loop(1, n - 1);
    let at = |offset: i64| IndexExpr { terms: vec![t(IndexSrc::Var(g), n), t(IndexSrc::Var(v), 1)], offset };
    let before = b.let_(Op::Index(at(-1)));
    let after = b.let_(Op::Index(at(1)));
    let through = |value: ValueId| IndexExpr { terms: vec![t(IndexSrc::Value(value), 1)], offset: 0 };
    let x0 = b.load(x, through(before));
    let x1 = b.load(x, at(0));
    let x2 = b.load(x, through(after));
    let m = b.binary(BinOp::FMax, Ty::F32, x0, x1);
    let m = b.binary(BinOp::FMax, Ty::F32, m, x2);
    b.store(y, at(0), m);
    b.end_loop_vectorized(8, Tail::Peel);
    let k = b.finish();
    assert!(has_vectors(&k), "{}", clif(&k));
    let mut bufs = vec![float_data(Ty::F32, (rows * n) as usize, 17), vec![0x5a; (rows * n * 4) as usize]];
    bufs.push(vec![0x5a; (rows * n * 4) as usize]);
    run(&k, &mut bufs);
}

/// Table lookups by computed positions (jnp.searchsorted's probes, jnp.interp's knots): a
/// 32-bit index widened to I64, clamped, summed, narrowed back, and loads through it of f32,
/// bf16 bits, predicates and a table walked along the loop too. Each lane's 64-bit value is
/// a scalar and each gathered lane its own load, and the rest of the loop keeps its vectors
/// (it ran as a scalar loop, 2.4x slower on a searchsorted); bit for bit against the
/// interpreter, tails included.
#[test]
fn loads_through_wide_values_are_gathered_lane_by_lane() {
    let table_len = 64i64;
    for (n, width) in [(16i64, 8u32), (45, 16)] {
        let rows = 3i64;
        let mut b = KernelBuilder::new("lookup", rows);
        let idx = b.buffer("idx", MemType::Scalar(Ty::I32), rows * n, false);
        let table = b.buffer("table", MemType::Scalar(Ty::F32), table_len, false);
        let walked = b.buffer("walked", MemType::Scalar(Ty::F32), table_len + n, false);
        let bits = b.buffer("bits", MemType::Scalar(Ty::I16), table_len, false);
        let flags = b.buffer("flags", MemType::Pred, table_len, false);
        let out_h = b.buffer("out_h", MemType::Scalar(Ty::I16), rows * n, true);
        let hit = b.buffer("hit", MemType::Pred, rows * n, true);
        let out_i = b.buffer("out_i", MemType::Scalar(Ty::I32), rows * n, true);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), rows * n, true);
        let g = b.grid_var();
        let last = b.constant(Const::Int { ty: Ty::I64, bits: table_len - 1 });
        let v = b.begin_loop(0, n);
        let at = IndexExpr { terms: vec![t(IndexSrc::Var(g), n), t(IndexSrc::Var(v), 1)], offset: 0 };
        let raw = b.load(idx, at.clone());
        let unsigned = b.cast(CastOp::ZExt, Ty::I32, Ty::I64, raw);
        let clamped = b.binary(BinOp::UMin, Ty::I64, unsigned, last);
        let through = |value: ValueId, extra: Vec<Term>| IndexExpr {
            terms: [vec![t(IndexSrc::Value(value), 1)], extra].concat(),
            offset: 0,
        };
        let x = b.load(table, through(clamped, Vec::new()));
        let x2 = b.load(walked, through(clamped, vec![t(IndexSrc::Var(v), 1)]));
        let h = b.load(bits, through(clamped, Vec::new()));
        b.store(out_h, at.clone(), h);
        let f = b.load(flags, through(clamped, Vec::new()));
        b.store(hit, at.clone(), f);
        let signed = b.cast(CastOp::SExt, Ty::I32, Ty::I64, raw);
        let sum = b.binary(BinOp::Add, Ty::I64, signed, clamped);
        let narrowed = b.cast(CastOp::Trunc, Ty::I64, Ty::I32, sum);
        b.store(out_i, at.clone(), narrowed);
        let y = b.binary(BinOp::Add, Ty::F32, x, x2);
        b.store(out, at, y);
        b.end_loop_vectorized(width, if n % i64::from(width) == 0 { Tail::None } else { Tail::Peel });
        let kernel = b.finish();
        let text = clif(&kernel);
        assert!(text.contains("f32x4") && text.contains("uload16.i32"), "{n} columns:\n{text}");
        let len = (rows * n) as usize;
        // Positions past the table's end (up to 80) take the clamp; negative ones too, read
        // unsigned.
        let positions: Vec<i32> = (0..len).map(|i| if i % 11 == 5 { -3 } else { (i * 37 % 81) as i32 }).collect();
        let mut bufs = vec![
            positions.iter().flat_map(|p| p.to_le_bytes()).collect(),
            float_data(Ty::F32, table_len as usize, 3),
            float_data(Ty::F32, (table_len + n) as usize, 4),
            (0..table_len as u16).flat_map(|i| (i.wrapping_mul(40503) ^ 0x3f80).to_le_bytes()).collect(),
            (0..table_len as usize).map(|i| [0u8, 3, 0, 1, 255][i % 5]).collect(),
            vec![0x5a; len * 2],
            vec![0x5a; len],
            vec![0x5a; len * 4],
            vec![0x5a; len * 4],
        ];
        llvm_common::run(&kernel, &mut bufs.clone());
        run(&kernel, &mut bufs);
    }
}
