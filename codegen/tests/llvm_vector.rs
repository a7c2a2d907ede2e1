//! The LLVM tier's explicit vector loops (`codegen/src/llvm/vector.rs`) against the kernel
//! interpreter, bit for bit, where their code differs from the scalar translation: saturating
//! float-to-int conversions (spelled out for vectors) on every float and integer type, at and
//! around every edge of every range; predicate bytes loaded and stored as vectors; strided
//! loads read lane by lane. And the hints the tier gives LLVM's own loop vectorizer.

mod llvm_common;

use tessera_codegen::CpuTarget;
use tessera_lower::kernel::{CastOp, CmpOp, IndexExpr, Kernel, KernelBuilder, MemType, Tail, Ty, UnOp};

/// `out[i] = op(in[i])` over `n` elements in a loop of vector width 16 with a peeled tail.
fn cast_kernel(op: CastOp, from: Ty, to: Ty, n: i64) -> Kernel {
    let mut b = KernelBuilder::new(format!("cast_{op:?}_{from:?}_{to:?}").to_lowercase(), 1);
    let input = b.buffer("in", MemType::Scalar(from), n, false);
    let out = b.buffer("out", MemType::Scalar(to), n, true);
    let v = b.begin_loop(0, n);
    let x = b.load(input, IndexExpr::var(v, 1));
    let y = b.cast(op, from, to, x);
    b.store(out, IndexExpr::var(v, 1), y);
    b.end_loop_vectorized(16, Tail::Peel);
    b.finish()
}

/// Every power of two's neighbourhood from 2^-1 to 2^64 on both signs, and the specials.
fn edges() -> Vec<f64> {
    let mut v = vec![0.0, -0.0, f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MAX, f64::MIN];
    for e in -1..=65 {
        let p = 2f64.powi(e);
        for x in [p, p - 1.0, p + 1.0, p - 0.5, p * (1.0 - f64::EPSILON), p * (1.0 + f64::EPSILON)] {
            v.push(x);
            v.push(-x);
        }
    }
    v
}

#[test]
fn saturating_casts_match_the_interpreter_on_every_edge() {
    let values = edges();
    let n = values.len() as i64;
    for from in [Ty::F32, Ty::F64] {
        let bytes: Vec<u8> = match from {
            Ty::F32 => values.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
            _ => values.iter().flat_map(|&x| x.to_le_bytes()).collect(),
        };
        for to in [Ty::I8, Ty::I16, Ty::I32, Ty::I64] {
            for op in [CastOp::FPToSISat, CastOp::FPToUISat] {
                let k = cast_kernel(op, from, to, n);
                let mut bufs = vec![bytes.clone(), vec![0x5a; (n as usize) * (to.bits() as usize / 8)]];
                llvm_common::run(&k, &mut bufs);
            }
        }
    }
}

/// The module's IR before optimization, as the tier translated `kernel`.
fn translated_ir(kernel: &Kernel) -> String {
    let dir = std::env::temp_dir().join(format!("tessera-llvm-vector-{}-{}", std::process::id(), kernel.name));
    std::fs::create_dir_all(&dir).unwrap();
    tessera_codegen::llvm::compile_dumping(std::slice::from_ref(kernel), &CpuTarget::from_env(), Some(&dir))
        .unwrap_or_else(|e| panic!("{e}"));
    let ir = std::fs::read_to_string(dir.join("llvm.ll")).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    ir
}

/// Rows of `n` elements, one per grid index: `isnan[i] = x[i] != x[i]`,
/// `notp[i] = !p[i]` (p a predicate buffer holding any bytes), in loops of width 16.
fn predicate_kernel(rows: i64, n: i64) -> Kernel {
    let mut b = KernelBuilder::new("predicates", rows);
    let g = b.grid_var();
    let x = b.buffer("x", MemType::Scalar(Ty::F32), rows * n, false);
    let p = b.buffer("p", MemType::Pred, rows * n, false);
    let isnan = b.buffer("isnan", MemType::Pred, rows * n, true);
    let notp = b.buffer("notp", MemType::Pred, rows * n, true);
    let at = |v| {
        let mut index = IndexExpr::var(g, n);
        index.terms.extend(IndexExpr::var(v, 1).terms);
        index
    };
    let v = b.begin_loop(0, n);
    let xv = b.load(x, at(v));
    let nan = b.cmp(CmpOp::FNe, Ty::F32, xv, xv);
    b.store(isnan, at(v), nan);
    let pv = b.load(p, at(v));
    let not = b.unary(UnOp::Not, Ty::Pred, pv);
    b.store(notp, at(v), not);
    b.end_loop_vectorized(16, Tail::Peel);
    b.finish()
}

#[test]
fn predicate_bytes_load_and_store_as_vectors() {
    let (rows, n) = (3, 40);
    let k = predicate_kernel(rows, n);
    let ir = translated_ir(&k);
    assert!(ir.contains("load <16 x i8>") && ir.contains("store <16 x i8>"), "predicate bytes as vectors:\n{ir}");
    let len = (rows * n) as usize;
    let x: Vec<u8> = (0..len)
        .flat_map(|i| {
            match i % 5 {
                0 => f32::NAN,
                1 => -f32::NAN,
                2 => f32::INFINITY,
                3 => -0.0,
                _ => i as f32,
            }
            .to_le_bytes()
        })
        .collect();
    // Any non-zero byte is true.
    let p: Vec<u8> = (0..len).map(|i| [0u8, 1, 2, 255][i % 4]).collect();
    let mut bufs = vec![x, p, vec![0x5a; len], vec![0x5a; len]];
    llvm_common::run(&k, &mut bufs);
    assert_eq!(bufs[2][..5], [1, 1, 0, 0, 0]);
    assert_eq!(bufs[3][..4], [1, 0, 0, 0]);
}

/// `out[g*stride + v] = in[g*stride + v] + 1` over `rows` grid indices, the inner loop scalar
/// (no vector width), so LLVM unrolls it fully and sees the grid loop innermost.
fn rows_kernel(rows: i64, stride: i64) -> Kernel {
    let mut b = KernelBuilder::new(format!("rows_{stride}"), rows);
    let g = b.grid_var();
    let n = 8;
    let len = (rows - 1) * stride + n;
    let input = b.buffer("in", MemType::Scalar(Ty::F32), len, false);
    let out = b.buffer("out", MemType::Scalar(Ty::F32), len, true);
    let one = b.constant(tessera_lower::kernel::Const::F32(1f32.to_bits()));
    let v = b.begin_loop(0, n);
    let mut index = IndexExpr::var(g, stride);
    index.terms.extend(IndexExpr::var(v, 1).terms);
    let x = b.load(input, index.clone());
    let y = b.binary(tessera_lower::kernel::BinOp::Add, Ty::F32, x, one);
    b.store(out, index, y);
    b.end_loop();
    b.finish()
}

#[test]
fn llvm_vectorizes_no_grid_loop_that_strides_through_memory() {
    const HINT: &str = "llvm.loop.vectorize.enable";
    // Rows 40 floats apart: a vectorized grid loop would gather and scatter every element.
    let strided = translated_ir(&rows_kernel(32, 40));
    assert!(strided.contains(HINT), "the strided grid loop is marked:\n{strided}");
    // Row g starts at element g: along the grid, every access steps by one element.
    let contiguous = translated_ir(&rows_kernel(32, 1));
    assert!(!contiguous.contains(HINT), "the contiguous grid loop is left to LLVM:\n{contiguous}");
    for stride in [40, 1] {
        let k = rows_kernel(32, stride);
        let len = k.buffers[0].len as usize;
        let input: Vec<u8> = (0..len).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect();
        let mut bufs = vec![input, vec![0; len * 4]];
        llvm_common::run(&k, &mut bufs);
    }
}

/// `out[g*n + v] = in[v*stride + g]`, `n` per row in a loop of width 16 with a peeled tail: a
/// transpose's column read `stride` elements apart.
fn column_kernel(rows: i64, n: i64, stride: i64) -> Kernel {
    let mut b = KernelBuilder::new(format!("column_{stride}"), rows);
    let g = b.grid_var();
    let input = b.buffer("in", MemType::Scalar(Ty::F32), n * stride, false);
    let out = b.buffer("out", MemType::Scalar(Ty::F32), rows * n, true);
    let v = b.begin_loop(0, n);
    let mut from = IndexExpr::var(v, stride);
    from.terms.extend(IndexExpr::var(g, 1).terms);
    let x = b.load(input, from);
    let mut to = IndexExpr::var(g, n);
    to.terms.extend(IndexExpr::var(v, 1).terms);
    b.store(out, to, x);
    b.end_loop_vectorized(16, Tail::Peel);
    b.finish()
}

#[test]
fn strided_loads_a_cache_line_apart_fill_vectors_lane_by_lane() {
    let (rows, n) = (24, 40);
    // 24 floats (96 bytes) apart: each lane a load of its own into a vector.
    let k = column_kernel(rows, n, rows);
    let ir = translated_ir(&k);
    assert!(ir.contains("insertelement <16 x float>") && ir.contains("store <16 x float>"), "lanes:\n{ir}");
    let x: Vec<u8> = (0..n * rows).flat_map(|i| (i as f32 * 0.5 - 7.0).to_le_bytes()).collect();
    let mut bufs = vec![x, vec![0x5a; (rows * n * 4) as usize]];
    llvm_common::run(&k, &mut bufs);
    // out[g][v] = in[v][g]: row 1 starts with in[0][1], in[1][1].
    let at = |i: usize| f32::from_le_bytes(bufs[1][4 * i..4 * i + 4].try_into().unwrap());
    assert_eq!((at(n as usize), at(n as usize + 1)), (1.0 * 0.5 - 7.0, (rows + 1) as f32 * 0.5 - 7.0));
    // Two floats apart, lanes share cache lines: left to LLVM's interleaved accesses.
    let ir = translated_ir(&column_kernel(2, n, 2));
    assert!(!ir.contains("store <16 x float>"), "a stride of two stays a scalar loop:\n{ir}");
}

/// `out[2(g*n + v)] = x*x` and `out[2(g*n + v) + 1] = -x` for `x = in[g*n + v]`: a complex
/// result's real and imaginary parts, each store's lanes two elements apart.
fn interleaved_kernel(rows: i64, n: i64) -> Kernel {
    let mut b = KernelBuilder::new("interleaved", rows);
    let g = b.grid_var();
    let input = b.buffer("in", MemType::Scalar(Ty::F32), rows * n, false);
    let out = b.buffer("out", MemType::Scalar(Ty::F32), rows * n * 2, true);
    let v = b.begin_loop(0, n);
    let mut at = IndexExpr::var(g, n);
    at.terms.extend(IndexExpr::var(v, 1).terms);
    let x = b.load(input, at);
    let square = b.binary(tessera_lower::kernel::BinOp::Mul, Ty::F32, x, x);
    let minus = b.unary(UnOp::Neg, Ty::F32, x);
    let mut re = IndexExpr::var(g, 2 * n);
    re.terms.extend(IndexExpr::var(v, 2).terms);
    let mut im = re.clone();
    im.offset += 1;
    b.store(out, re, square);
    b.store(out, im, minus);
    b.end_loop_vectorized(16, Tail::Peel);
    b.finish()
}

/// Strided stores keep the loop's vector form, each lane stored on its own, with the
/// interpreter's results, tail included; LLVM's loop vectorizer would otherwise take such a
/// loop and run every branch in it for every lane.
#[test]
fn strided_stores_write_vectors_lane_by_lane() {
    let (rows, n) = (3, 37);
    let k = interleaved_kernel(rows, n);
    let ir = translated_ir(&k);
    assert!(ir.contains("fmul <16 x float>") && ir.contains("extractelement <16 x float>"), "lanes:\n{ir}");
    let input: Vec<u8> = (0..rows * n).flat_map(|i| (i as f32 * 0.25 - 3.0).to_le_bytes()).collect();
    let mut bufs = vec![input, vec![0x5a; (rows * n * 8) as usize]];
    llvm_common::run(&k, &mut bufs);
    let at = |i: usize| f32::from_le_bytes(bufs[1][4 * i..4 * i + 4].try_into().unwrap());
    // Element 40 of the input (row 1, column 3) is 7.0.
    assert_eq!((at(80), at(81)), (49.0, -7.0));
}

/// `out[v] = in[i] * 2` for `v` in `3..n`, `i = index v - 3` a value of the loop: how a
/// concatenate's operand is read once index-set splitting has given it its own loop.
fn index_value_kernel(n: i64) -> Kernel {
    let mut b = KernelBuilder::new("index_value", 1);
    let input = b.buffer("in", MemType::Scalar(Ty::F32), n, false);
    let out = b.buffer("out", MemType::Scalar(Ty::F32), n, true);
    let two = b.constant(tessera_lower::kernel::Const::F32(2f32.to_bits()));
    let v = b.begin_loop(3, n);
    let mut shifted = IndexExpr::var(v, 1);
    shifted.offset = -3;
    let i = b.let_(tessera_lower::kernel::Op::Index(shifted));
    let through = IndexExpr {
        terms: vec![tessera_lower::kernel::Term {
            src: tessera_lower::kernel::IndexSrc::Value(i),
            div: 1,
            modulo: None,
            scale: 1,
        }],
        offset: 0,
    };
    let x = b.load(input, through);
    let y = b.binary(tessera_lower::kernel::BinOp::Mul, Ty::F32, x, two);
    b.store(out, IndexExpr::var(v, 1), y);
    b.end_loop_vectorized(16, Tail::Peel);
    b.finish()
}

/// A load through an index value reads the value's expression (`index_forwarding`), so the
/// loop is an explicit vector loop: read through the value itself, each lane's address varied
/// and the loop fell to LLVM's own vectorizer, which runs every branch of a math routine for
/// every lane (a concatenate of `sin` and `cos` ran at a tenth of this speed).
#[test]
fn loads_through_index_values_are_vector_loads() {
    let n = 100;
    let k = index_value_kernel(n);
    let ir = translated_ir(&k);
    assert!(ir.contains("load <16 x float>"), "the load is a vector load:\n{ir}");
    let input: Vec<u8> = (0..n).flat_map(|i| (i as f32 - 7.5).to_le_bytes()).collect();
    let mut bufs = vec![input, vec![0x5a; n as usize * 4]];
    llvm_common::run(&k, &mut bufs);
}

/// `out[g*n + v] = y` with `x = rev[g*n + n-1-v] + pairs[g*2n + 2v]` and `y = x * 3` where any
/// lane of the vector has `x > 1` (a uniform branch, as a math routine's rare path), else
/// `x`; with `branch` false, `y = x`.
fn close_lanes_kernel(rows: i64, n: i64, branch: bool) -> Kernel {
    use tessera_lower::kernel::{BinOp, Const, Op};
    let mut b = KernelBuilder::new(format!("close_lanes_{branch}"), rows);
    let g = b.grid_var();
    let rev = b.buffer("rev", MemType::Scalar(Ty::F32), rows * n, false);
    let pairs = b.buffer("pairs", MemType::Scalar(Ty::F32), rows * 2 * n, false);
    let out = b.buffer("out", MemType::Scalar(Ty::F32), rows * n, true);
    let one = b.constant(Const::F32(1f32.to_bits()));
    let three = b.constant(Const::F32(3f32.to_bits()));
    let at = |scale_g: i64, v, scale_v: i64, offset: i64| {
        let mut index = IndexExpr::var(g, scale_g);
        index.terms.extend(IndexExpr::var(v, scale_v).terms);
        index.offset = offset;
        index
    };
    let v = b.begin_loop(0, n);
    let r = b.load(rev, at(n, v, -1, n - 1));
    let p = b.load(pairs, at(2 * n, v, 2, 0));
    let x = b.binary(BinOp::Add, Ty::F32, r, p);
    let y = b.local(Ty::F32, x);
    if branch {
        let big = b.cmp(CmpOp::FGt, Ty::F32, x, one);
        let any = b.let_(Op::AnyLane { a: big });
        b.begin_if(any);
        let scaled = b.binary(BinOp::Mul, Ty::F32, x, three);
        let picked = b.select(Ty::F32, big, scaled, x);
        b.set_local(y, picked);
        b.end_if();
    }
    let yv = b.get_local(y);
    b.store(out, at(n, v, 1, 0), yv);
    b.end_loop_vectorized(16, Tail::Peel);
    b.finish()
}

/// A load reading its lanes in reverse, or two elements apart, in a loop with a uniform
/// branch is one load spanning the lanes and a shuffle, so the loop keeps its branch; without
/// a branch such loads stay with LLVM's own vectorizer, which shares one wide load among
/// interleaved accesses.
#[test]
fn close_and_reversed_lanes_in_a_branching_loop_are_shuffled() {
    let (rows, n) = (3, 45);
    let branching = translated_ir(&close_lanes_kernel(rows, n, true));
    assert!(
        branching.contains("%span = load <16 x float>") && branching.contains("i32 15, i32 14"),
        "the reversed load spans its lanes:\n{branching}"
    );
    assert!(branching.contains("= load <31 x float>"), "the paired load spans its lanes:\n{branching}");
    let plain = translated_ir(&close_lanes_kernel(rows, n, false));
    assert!(!plain.contains("span"), "without a branch the loop is left to LLVM:\n{plain}");
    for branch in [true, false] {
        let k = close_lanes_kernel(rows, n, branch);
        let rev: Vec<u8> = (0..rows * n).flat_map(|i| ((i % 7) as f32 * 0.25 - 0.5).to_le_bytes()).collect();
        let pairs: Vec<u8> = (0..rows * 2 * n).flat_map(|i| ((i % 5) as f32 * -0.125).to_le_bytes()).collect();
        let mut bufs = vec![rev, pairs, vec![0x5a; (rows * n) as usize * 4]];
        llvm_common::run(&k, &mut bufs);
    }
}

/// `out[g*n + v] = table[i + (v / 3) % 2]` and `hit[g*n + v] = flags[i]` for
/// `i = sext(idx[g*n + v]) * 2`: a table lookup (a binary search's probe, an interpolation's
/// knots), whose index holds a value each lane loads for itself, beside a term of the loop
/// variable that divides and a uniform one; `%i` is also a varying `Op::Index`.
fn lookup_kernel(rows: i64, n: i64, table_len: i64) -> Kernel {
    use tessera_lower::kernel::{IndexSrc, Op, Term};
    let mut b = KernelBuilder::new("lookup", rows);
    let g = b.grid_var();
    let idx = b.buffer("idx", MemType::Scalar(Ty::I32), rows * n, false);
    let table = b.buffer("table", MemType::Scalar(Ty::F32), table_len, false);
    let flags = b.buffer("flags", MemType::Pred, table_len, false);
    let out = b.buffer("out", MemType::Scalar(Ty::F32), rows * n, true);
    let hit = b.buffer("hit", MemType::Pred, rows * n, true);
    let v = b.begin_loop(0, n);
    let mut at = IndexExpr::var(g, n);
    at.terms.extend(IndexExpr::var(v, 1).terms);
    let raw = b.load(idx, at.clone());
    let wide = b.cast(CastOp::SExt, Ty::I32, Ty::I64, raw);
    let doubled = b.let_(Op::Index(IndexExpr {
        terms: vec![Term { src: IndexSrc::Value(wide), div: 1, modulo: None, scale: 2 }],
        offset: 0,
    }));
    let through = |extra: Vec<Term>| IndexExpr {
        terms: [vec![Term { src: IndexSrc::Value(doubled), div: 1, modulo: None, scale: 1 }], extra].concat(),
        offset: 0,
    };
    let x = b.load(table, through(vec![Term { src: IndexSrc::Var(v), div: 3, modulo: Some(2), scale: 1 }]));
    b.store(out, at.clone(), x);
    let f = b.load(flags, through(Vec::new()));
    b.store(hit, at, f);
    b.end_loop_vectorized(16, Tail::Peel);
    b.finish()
}

/// Loads whose index holds a varying value are gathers, so the rest of the loop stays in
/// vectors: a jnp.searchsorted's probes ran as a scalar loop, 1.8x slower; the results are
/// the interpreter's, tail included.
#[test]
fn loads_through_varying_values_are_gathers() {
    let (rows, n, table_len) = (3, 45, 64);
    let k = lookup_kernel(rows, n, table_len);
    let ir = translated_ir(&k);
    assert!(
        ir.contains("@llvm.masked.gather.v16f32.v16p0") && ir.contains("@llvm.masked.gather.v16i8.v16p0"),
        "the lookups are gathers:\n{ir}"
    );
    let len = (rows * n) as usize;
    let idx: Vec<u8> = (0..len).flat_map(|i| ((i * 7 % 31) as i32).to_le_bytes()).collect();
    let table: Vec<u8> = (0..table_len).flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes()).collect();
    let flags: Vec<u8> = (0..table_len as usize).map(|i| [0u8, 3, 0, 1, 255][i % 5]).collect();
    let mut bufs = vec![idx, table, flags, vec![0x5a; len * 4], vec![0x5a; len]];
    llvm_common::run(&k, &mut bufs);
    // Row 0, column 4: idx 28, doubled 56, plus (4 / 3) % 2 = 1: table[57] = 25.5.
    assert_eq!(f32::from_le_bytes(bufs[3][16..20].try_into().unwrap()), 25.5);
    // flags[56] = [0, 3, 0, 1, 255][56 % 5 = 1], true.
    assert_eq!(bufs[4][4], 1);
}
