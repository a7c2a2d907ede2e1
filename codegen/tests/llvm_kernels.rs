//! Whole kernels: nested loops with div/mod indices, locals carried through loops, branches,
//! data-dependent indices, several kernels per module, the code owner, and the errors the
//! tier reports instead of compiling a kernel it cannot.

#[path = "llvm_common/mod.rs"]
mod common;

use tessera_codegen::CodegenError;
use tessera_lower::kernel::*;

fn i32s(v: impl IntoIterator<Item = i32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn term(src: IndexSrc, div: i64, modulo: Option<i64>, scale: i64) -> Term {
    Term { src, div, modulo, scale }
}

/// A row-major [12, 10] array copied into a [3, 2] tiling of 4x5 tiles read back through a
/// flat loop: the source index splits the flat position with / and %.
#[test]
fn div_mod_indices_untile() {
    let (rows, cols, tr, tc) = (12i64, 10i64, 4i64, 5i64);
    let n = rows * cols;
    let mut b = KernelBuilder::new("untile", 1);
    let tiled = b.buffer("tiled", MemType::Scalar(Ty::I32), n, false);
    let out = b.buffer("out", MemType::Scalar(Ty::I32), n, true);
    let i = b.begin_loop(0, n);
    // Logical (r, c) = (i / cols, i % cols); tiled offset = ((r/tr)*(cols/tc) + c/tc)*tr*tc + (r%tr)*tc + c%tc.
    let v = IndexSrc::Var(i);
    let idx = IndexExpr {
        terms: vec![
            term(v, cols * tr, None, (cols / tc) * tr * tc),
            term(v, tc, Some(cols / tc), tr * tc),
            term(v, cols, Some(tr), tc),
            term(v, 1, Some(tc), 1),
        ],
        offset: 0,
    };
    let x = b.load(tiled, idx);
    b.store(out, IndexExpr::var(i, 1), x);
    b.end_loop_vectorized(8, Tail::None);
    let kernel = b.finish();
    let mut tiled_data = vec![0i32; n as usize];
    for r in 0..rows {
        for c in 0..cols {
            let off = ((r / tr) * (cols / tc) + c / tc) * tr * tc + (r % tr) * tc + c % tc;
            tiled_data[off as usize] = (r * 100 + c) as i32;
        }
    }
    let mut bufs = vec![i32s(tiled_data), vec![0; 4 * n as usize]];
    common::run(&kernel, &mut bufs);
    let want = i32s((0..rows).flat_map(|r| (0..cols).map(move |c| (r * 100 + c) as i32)));
    assert_eq!(bufs[1], want);
}

/// Row sums and row maxima of a [6, 50] f32 matrix with locals declared per row, a grid over
/// rows and an `if` that only stores positive sums (others store -1).
#[test]
fn locals_reductions_and_branches() {
    let (rows, cols) = (6i64, 50i64);
    let mut b = KernelBuilder::new("rowsum", rows);
    let g = b.grid_var();
    let m = b.buffer("m", MemType::Scalar(Ty::F32), rows * cols, false);
    let sums = b.buffer("sums", MemType::Scalar(Ty::F32), rows, true);
    let maxes = b.buffer("maxes", MemType::Scalar(Ty::F32), rows, true);
    let zero = b.constant(Const::F32(0.0f32.to_bits()));
    let ninf = b.constant(Const::F32(f32::NEG_INFINITY.to_bits()));
    let acc = b.local(Ty::F32, zero);
    let mx = b.local(Ty::F32, ninf);
    let j = b.begin_loop(0, cols);
    let x = b.load(
        m,
        IndexExpr { terms: vec![term(IndexSrc::Var(g), 1, None, cols), term(IndexSrc::Var(j), 1, None, 1)], offset: 0 },
    );
    let a = b.get_local(acc);
    let s = b.binary(BinOp::Add, Ty::F32, a, x);
    b.set_local(acc, s);
    let c = b.get_local(mx);
    let y = b.binary(BinOp::FMax, Ty::F32, c, x);
    b.set_local(mx, y);
    b.end_loop();
    let total = b.get_local(acc);
    let positive = b.cmp(CmpOp::FGt, Ty::F32, total, zero);
    b.if_else(
        positive,
        |b| b.store(sums, IndexExpr::var(g, 1), total),
        |b| {
            let minus = b.constant(Const::F32((-1.0f32).to_bits()));
            b.store(sums, IndexExpr::var(g, 1), minus);
        },
    );
    let top = b.get_local(mx);
    b.store(maxes, IndexExpr::var(g, 1), top);
    let kernel = b.finish();
    let data: Vec<f32> =
        (0..rows * cols).map(|k| ((k * 37 % 101) as f32 - 50.0 - (k / cols) as f32 * 3.0) / 8.0).collect();
    let mut bufs = vec![f32s(data.clone()), vec![0; 4 * rows as usize], vec![0; 4 * rows as usize]];
    common::run(&kernel, &mut bufs);
    for r in 0..rows as usize {
        let row = &data[r * cols as usize..(r + 1) * cols as usize];
        let sum = row.iter().fold(0.0f32, |a, x| a + x);
        let want_sum = if sum > 0.0 { sum } else { -1.0 };
        let got_sum = f32::from_le_bytes(bufs[1][4 * r..4 * r + 4].try_into().unwrap());
        let got_max = f32::from_le_bytes(bufs[2][4 * r..4 * r + 4].try_into().unwrap());
        assert_eq!(got_sum.to_bits(), want_sum.to_bits(), "row {r}: in-order f32 sum");
        assert_eq!(got_max, row.iter().fold(f32::NEG_INFINITY, |a, x| a.max(*x)), "row {r}");
    }
}

/// A gather: `out[i] = table[(idx[i] / 2) % 7]` with data-dependent index sources.
#[test]
fn data_dependent_indices() {
    let n = 40i64;
    let mut b = KernelBuilder::new("gather", 1);
    let idx = b.buffer("idx", MemType::Scalar(Ty::I64), n, false);
    let table = b.buffer("table", MemType::Scalar(Ty::I16), 7, false);
    let out = b.buffer("out", MemType::Scalar(Ty::I16), n, true);
    let i = b.begin_loop(0, n);
    let k = b.load(idx, IndexExpr::var(i, 1));
    let x = b.load(table, IndexExpr { terms: vec![term(IndexSrc::Value(k), 2, Some(7), 1)], offset: 0 });
    b.store(out, IndexExpr::var(i, 1), x);
    b.end_loop();
    let kernel = b.finish();
    let indices: Vec<i64> = (0..n).map(|k| k * k * 13 + 5).collect();
    let tab: Vec<i16> = vec![-7, 300, 12, -32768, 32767, 0, 99];
    let mut bufs = vec![
        indices.iter().flat_map(|x| x.to_le_bytes()).collect(),
        tab.iter().flat_map(|x| x.to_le_bytes()).collect(),
        vec![0; 2 * n as usize],
    ];
    common::run(&kernel, &mut bufs);
    let want: Vec<u8> = indices.iter().flat_map(|k| tab[((k / 2) % 7) as usize].to_le_bytes()).collect();
    assert_eq!(bufs[2], want);
}

/// `iota`: an `Index` value of a nested loop nest, stored as i64.
#[test]
fn index_values() {
    let mut b = KernelBuilder::new("iota", 3);
    let g = b.grid_var();
    let out = b.buffer("out", MemType::Scalar(Ty::I64), 3 * 4 * 5, true);
    let i = b.begin_loop(0, 4);
    let j = b.begin_loop(0, 5);
    let at = IndexExpr {
        terms: vec![
            term(IndexSrc::Var(g), 1, None, 20),
            term(IndexSrc::Var(i), 1, None, 5),
            term(IndexSrc::Var(j), 1, None, 1),
        ],
        offset: 0,
    };
    // g*1000 + i*10 + j - 3
    let v = b.let_(Op::Index(IndexExpr {
        terms: vec![
            term(IndexSrc::Var(g), 1, None, 1000),
            term(IndexSrc::Var(i), 1, None, 10),
            term(IndexSrc::Var(j), 1, None, 1),
        ],
        offset: -3,
    }));
    b.store(out, at, v);
    b.end_loop();
    b.end_loop();
    let mut bufs = vec![vec![0; 8 * 60]];
    common::run(&b.finish(), &mut bufs);
    let want: Vec<u8> = (0..3i64)
        .flat_map(|g| (0..4i64).flat_map(move |i| (0..5i64).map(move |j| g * 1000 + i * 10 + j - 3)))
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(bufs[0], want);
}

fn copy_kernel(name: &str, scale: i32) -> Kernel {
    let mut b = KernelBuilder::new(name, 1);
    let src = b.buffer("in", MemType::Scalar(Ty::I32), 16, false);
    let dst = b.buffer("out", MemType::Scalar(Ty::I32), 16, true);
    let i = b.begin_loop(0, 16);
    let x = b.load(src, IndexExpr::var(i, 1));
    let k = b.constant(Const::Int { ty: Ty::I32, bits: i64::from(scale) });
    let y = b.binary(BinOp::Mul, Ty::I32, x, k);
    b.store(dst, IndexExpr::var(i, 1), y);
    b.end_loop();
    b.finish()
}

/// Several kernels in one module, each reached through its own pointer; the code stays valid
/// in another thread after the owner moved there, and dropping it there is fine.
#[test]
fn several_kernels_and_a_movable_owner() {
    let kernels = vec![copy_kernel("times2", 2), copy_kernel("times3", 3), copy_kernel("times_minus1", -1)];
    let compiled = common::compile(&kernels);
    assert_eq!(compiled.functions.len(), 3);
    let input = i32s(0..16);
    let handle = std::thread::spawn(move || {
        for (f, scale) in compiled.functions.iter().zip([2, 3, -1]) {
            let mut bufs = vec![input.clone(), vec![0; 64]];
            common::call(*f, &mut bufs, &[(0, 1)]);
            assert_eq!(bufs[1], i32s((0..16).map(|x| x * scale)));
        }
        drop(compiled);
    });
    handle.join().expect("thread");
}

/// Compiles from several threads at once (LLVM is set up once, each compile has its own
/// context).
#[test]
fn concurrent_compiles() {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let compiled = common::compile(&[copy_kernel(&format!("k{t}"), t + 1)]);
                let mut bufs = vec![i32s(0..16), vec![0; 64]];
                common::call(compiled.functions[0], &mut bufs, &[(0, 1)]);
                assert_eq!(bufs[1], i32s((0..16).map(|x| x * (t + 1))));
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
}

fn unsupported(kernels: &[Kernel]) -> String {
    match tessera_codegen::llvm::compile(kernels) {
        Err(CodegenError::Unsupported { tier, what, .. }) => {
            assert_eq!(tier, "llvm");
            what
        }
        Err(e) => panic!("expected Unsupported, got {e}"),
        Ok(_) => panic!("compiled a kernel the tier must refuse"),
    }
}

#[test]
fn calls_outside_the_runtime_table_are_refused() {
    let mut b = KernelBuilder::new("calls", 1);
    let buf = b.buffer("x", MemType::Scalar(Ty::F32), 4, true);
    b.call("system", vec![CallArg::Ptr { buf, index: IndexExpr::constant(0) }, CallArg::I64(3)]);
    let what = unsupported(&[b.finish()]);
    assert!(what.contains("'system'") && what.contains("runtime symbol"), "{what}");
}

#[test]
fn bad_kernels_are_errors_not_panics() {
    // A value used as the wrong type.
    let mut b = KernelBuilder::new("types", 1);
    let x = b.constant(Const::Int { ty: Ty::I32, bits: 1 });
    b.unary(UnOp::Sqrt, Ty::I32, x);
    assert!(unsupported(&[b.finish()]).contains("does not verify"));
    // A value out of scope.
    let mut b = KernelBuilder::new("scope", 1);
    let out = b.buffer("o", MemType::Scalar(Ty::I32), 1, true);
    b.begin_loop(0, 2);
    let inner = b.constant(Const::Int { ty: Ty::I32, bits: 1 });
    b.end_loop();
    b.store(out, IndexExpr::constant(0), inner);
    assert!(unsupported(&[b.finish()]).contains("does not verify"));
    // Two kernels with one name.
    let what = unsupported(&[copy_kernel("same", 1), copy_kernel("same", 2)]);
    assert!(what.contains("already taken"), "{what}");
}

#[test]
fn kernels_named_like_runtime_symbols_compile() {
    // Kernel symbols are namespaced, so a kernel named `expf` neither clashes with the runtime's
    // `expf` nor captures its calls.
    let compiled = common::compile(&[copy_kernel("expf", 3)]);
    let mut bufs = vec![i32s(0..16), vec![0; 64]];
    common::call(compiled.functions[0], &mut bufs, &[(0, 1)]);
    assert_eq!(bufs[1], i32s((0..16).map(|x| x * 3)));
}

#[test]
fn an_empty_kernel_list_compiles() {
    let compiled = common::compile(&[]);
    assert!(compiled.functions.is_empty());
}
