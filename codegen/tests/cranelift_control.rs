//! Loops, locals, branches, runtime calls, grid splitting and several kernels in one module.

mod common;

use common::*;
use tessera_lower::kernel::*;

/// `c[i, j] = sum_k a[i, k] * b[k, j]` (f32, row-major), with the grid over rows `i`.
fn matmul(m: i64, n: i64, kk: i64) -> Kernel {
    let mut k = KernelBuilder::new("matmul", m);
    let a = k.buffer("a", MemType::Scalar(Ty::F32), m * kk, false);
    let b = k.buffer("b", MemType::Scalar(Ty::F32), kk * n, false);
    let c = k.buffer("c", MemType::Scalar(Ty::F32), m * n, true);
    let i = k.grid_var();
    let j = k.begin_loop(0, n);
    let zero = k.constant(Const::F32(0));
    let acc = k.local(Ty::F32, zero);
    let l = k.begin_loop(0, kk);
    let x = k.load(a, IndexExpr { terms: vec![var_term(i, kk), var_term(l, 1)], offset: 0 });
    let y = k.load(b, IndexExpr { terms: vec![var_term(l, n), var_term(j, 1)], offset: 0 });
    let p = k.binary(BinOp::Mul, Ty::F32, x, y);
    let s = k.get_local(acc);
    let s = k.binary(BinOp::Add, Ty::F32, s, p);
    k.set_local(acc, s);
    k.end_loop();
    let s = k.get_local(acc);
    k.store(c, IndexExpr { terms: vec![var_term(i, n), var_term(j, 1)], offset: 0 }, s);
    k.end_loop();
    k.finish()
}

fn var_term(v: VarId, scale: i64) -> Term {
    Term { src: IndexSrc::Var(v), div: 1, modulo: None, scale }
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn matmul_ref(a: &[f32], b: &[f32], m: usize, n: usize, kk: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f32;
            for l in 0..kk {
                s += a[i * kk + l] * b[l * n + j];
            }
            c[i * n + j] = s;
        }
    }
    c
}

#[test]
fn nested_loops_with_an_accumulator() {
    let (m, n, kk) = (7usize, 5usize, 9usize);
    let a: Vec<f32> = (0..m * kk).map(|i| (i as f32 * 0.37).sin()).collect();
    let b: Vec<f32> = (0..kk * n).map(|i| (i as f32 * 0.91).cos()).collect();
    let mut bufs = vec![f32s(&a), f32s(&b), vec![0; m * n * 4]];
    run(&matmul(m as i64, n as i64, kk as i64), &mut bufs);
    assert_eq!(to_f32s(&bufs[2]), matmul_ref(&a, &b, m, n, kk));
}

#[test]
fn grid_sub_ranges_run_only_their_indices() {
    let (m, n, kk) = (10usize, 3usize, 4usize);
    let a: Vec<f32> = (0..m * kk).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..kk * n).map(|i| 1.0 - i as f32).collect();
    let kernel = matmul(m as i64, n as i64, kk as i64);
    let compiled = compile(std::slice::from_ref(&kernel));
    let mut bufs = vec![f32s(&a), f32s(&b), f32s(&vec![-7.0; m * n])];
    call(&compiled, 0, &mut bufs, 2, 5);
    let expect = matmul_ref(&a, &b, m, n, kk);
    let got = to_f32s(&bufs[2]);
    for i in 0..m {
        for j in 0..n {
            let e = if (2..5).contains(&i) { expect[i * n + j] } else { -7.0 };
            assert_eq!(got[i * n + j], e, "row {i} col {j}");
        }
    }
    // The rest of the grid in two more pieces, and an empty and a reversed range.
    call(&compiled, 0, &mut bufs, 0, 2);
    call(&compiled, 0, &mut bufs, 5, 10);
    call(&compiled, 0, &mut bufs, 3, 3);
    call(&compiled, 0, &mut bufs, 9, 1);
    assert_eq!(to_f32s(&bufs[2]), expect);
}

#[test]
fn branches_and_locals_in_loops() {
    // out[g] = sum over i in 0..g of (i odd ? i * 3 : -i), with an early-declared local set in
    // both branches and a loop whose range is empty (start == end) for g = 0.
    let n = 12i64;
    let mut k = KernelBuilder::new("branches", n);
    let out = k.buffer("out", MemType::Scalar(Ty::I64), n, true);
    let g = k.grid_var();
    let zero = k.constant(Const::Int { ty: Ty::I64, bits: 0 });
    let acc = k.local(Ty::I64, zero);
    // The loop bound is the grid index, which the IR expresses by looping to n and guarding.
    let i = k.begin_loop(0, n);
    let iv = k.let_(Op::Index(IndexExpr::var(i, 1)));
    let gv = k.let_(Op::Index(IndexExpr::var(g, 1)));
    let inside = k.cmp(CmpOp::Slt, Ty::I64, iv, gv);
    k.if_else(
        inside,
        |k| {
            let one = k.constant(Const::Int { ty: Ty::I64, bits: 1 });
            let odd = k.binary(BinOp::And, Ty::I64, iv, one);
            let odd = k.cast(CastOp::Trunc, Ty::I64, Ty::Pred, odd);
            let s = k.get_local(acc);
            k.if_else(
                odd,
                |k| {
                    let three = k.constant(Const::Int { ty: Ty::I64, bits: 3 });
                    let t = k.binary(BinOp::Mul, Ty::I64, iv, three);
                    let s = k.binary(BinOp::Add, Ty::I64, s, t);
                    k.set_local(acc, s);
                },
                |k| {
                    let s = k.binary(BinOp::Sub, Ty::I64, s, iv);
                    k.set_local(acc, s);
                },
            );
        },
        |_| {},
    );
    k.end_loop();
    k.begin_loop(5, 5);
    let bad = k.constant(Const::Int { ty: Ty::I64, bits: 999 });
    k.set_local(acc, bad);
    k.end_loop();
    let s = k.get_local(acc);
    k.store(out, IndexExpr::var(g, 1), s);
    let mut bufs = vec![vec![0; n as usize * 8]];
    run(&k.finish(), &mut bufs);
    let got = decode(Ty::I64, &bufs[0]);
    for g in 0..n {
        let e: i64 = (0..g).map(|i| if i % 2 == 1 { i * 3 } else { -i }).sum();
        assert_eq!(got[g as usize] as i64, e, "g {g}");
    }
}

#[test]
fn several_kernels_in_one_module() {
    let mut kernels = Vec::new();
    for (name, c) in [("exp", 3i64), ("fill_b", -4)] {
        // Named like a runtime symbol on purpose: kernel names never clash with symbols.
        let mut k = KernelBuilder::new(name, 4);
        let out = k.buffer("out", MemType::Scalar(Ty::I32), 4, true);
        let g = k.grid_var();
        let v = k.let_(Op::Index(IndexExpr { terms: vec![var_term(g, c)], offset: 1 }));
        let v = k.cast(CastOp::Trunc, Ty::I64, Ty::I32, v);
        k.store(out, IndexExpr::var(g, 1), v);
        kernels.push(k.finish());
    }
    let compiled = compile(&kernels);
    assert_eq!(compiled.functions.len(), 2);
    for (i, c) in [3i64, -4].iter().enumerate() {
        let mut bufs = vec![vec![0; 16]];
        call(&compiled, i, &mut bufs, 0, 4);
        let got: Vec<i64> = decode(Ty::I32, &bufs[0]).iter().map(|&v| sext(Ty::I32, v)).collect();
        assert_eq!(got, (0..4).map(|g| 1 + g * c).collect::<Vec<_>>());
    }
    // The code outlives the module's owner only as long as the owner: dropping it is fine.
    drop(compiled);
}

#[test]
fn compiled_code_is_send_and_sync_and_runs_on_other_threads() {
    let kernel = matmul(4, 4, 4);
    let compiled = std::sync::Arc::new(compile(std::slice::from_ref(&kernel)));
    let a: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let compiled = compiled.clone();
            let a = a.clone();
            std::thread::spawn(move || {
                let mut bufs = vec![f32s(&a), f32s(&a), vec![0; 64]];
                call(&compiled, 0, &mut bufs, t * 2, t * 2 + 2);
                to_f32s(&bufs[2])
            })
        })
        .collect();
    let expect = matmul_ref(&a, &a, 4, 4, 4);
    for (t, h) in handles.into_iter().enumerate() {
        let got = h.join().unwrap();
        assert_eq!(&got[t * 8..t * 8 + 8], &expect[t * 8..t * 8 + 8]);
    }
}

#[test]
fn runtime_calls() {
    // A call with value and pointer arguments to a runtime symbol (its result is unused by
    // Stmt::Call): it links and runs, and values computed around it survive the call.
    let mut k = KernelBuilder::new("calls", 3);
    let a = k.buffer("a", MemType::Scalar(Ty::F64), 3, true);
    let g = k.grid_var();
    let x = k.load(a, IndexExpr::var(g, 1));
    k.call("cbrt", vec![CallArg::Value(x)]);
    let y = k.binary(BinOp::Mul, Ty::F64, x, x);
    k.store(a, IndexExpr::var(g, 1), y);
    let mut bufs = vec![encode(Ty::F64, &[2.0f64.to_bits(), 3.0f64.to_bits(), (-1.5f64).to_bits()])];
    // The interpreter knows only the GEMM calls, so this runs on the tier alone.
    let compiled = compile(&[k.finish()]);
    call(&compiled, 0, &mut bufs, 0, 3);
    assert_eq!(decode(Ty::F64, &bufs[0]), vec![4.0f64.to_bits(), 9.0f64.to_bits(), 2.25f64.to_bits()]);

    let mut k = KernelBuilder::new("unknown", 1);
    let a = k.buffer("a", MemType::Scalar(Ty::F64), 3, true);
    k.call("system", vec![CallArg::Ptr { buf: a, index: IndexExpr::constant(1) }, CallArg::I64(4)]);
    let e = compile_err(&k.finish());
    assert!(matches!(&e, tessera_codegen::CodegenError::Unsupported { what, .. } if what.contains("'system'")), "{e}");

    let mut k = KernelBuilder::new("two_signatures", 1);
    let a = k.buffer("a", MemType::Scalar(Ty::F64), 3, true);
    let x = k.load(a, IndexExpr::constant(0));
    k.call("cbrt", vec![CallArg::Value(x)]);
    k.call("cbrt", vec![CallArg::I64(1)]);
    let e = compile_err(&k.finish());
    assert!(
        matches!(&e, tessera_codegen::CodegenError::Backend { message, .. } if message.contains("signature")),
        "{e}"
    );
}

#[test]
fn values_are_scoped_to_their_statement_list() {
    let mut k = KernelBuilder::new("scope", 1);
    let a = k.buffer("a", MemType::Scalar(Ty::I32), 1, true);
    let l = k.begin_loop(0, 2);
    let inner = k.let_(Op::Index(IndexExpr::var(l, 1)));
    k.end_loop();
    let t = k.cast(CastOp::Trunc, Ty::I64, Ty::I32, inner);
    k.store(a, IndexExpr::constant(0), t);
    let e = compile_err(&k.finish());
    assert!(
        matches!(&e, tessera_codegen::CodegenError::Backend { message, .. } if message.contains("not defined")),
        "{e}"
    );

    let mut k = KernelBuilder::new("loop_var_scope", 1);
    let a = k.buffer("a", MemType::Scalar(Ty::I32), 4, true);
    let l = k.begin_loop(0, 2);
    k.end_loop();
    let z = k.constant(Const::Int { ty: Ty::I32, bits: 0 });
    k.store(a, IndexExpr::var(l, 1), z);
    let e = compile_err(&k.finish());
    assert!(
        matches!(&e, tessera_codegen::CodegenError::Backend { message, .. } if message.contains("outside its loop")),
        "{e}"
    );
}

#[test]
fn hoisted_index_parts_are_right_in_deep_nests() {
    // out[((i*4 + j) * 3 + l)] = a[l * 20 + (j % 2) * 5 + (i / 2) + v] where v is a value loaded
    // before the loops: terms over every level, so every loop hoists something.
    let (ni, nj, nl) = (5i64, 4i64, 3i64);
    let mut k = KernelBuilder::new("deep", 1);
    let a = k.buffer("a", MemType::Scalar(Ty::I16), 200, false);
    let off = k.buffer("off", MemType::Scalar(Ty::I64), 1, false);
    let out = k.buffer("out", MemType::Scalar(Ty::I16), ni * nj * nl, true);
    let v = k.load(off, IndexExpr::constant(0));
    let i = k.begin_loop(0, ni);
    let j = k.begin_loop(0, nj);
    let l = k.begin_loop(0, nl);
    let x = k.load(
        a,
        IndexExpr {
            terms: vec![
                var_term(l, 20),
                Term { src: IndexSrc::Var(j), div: 1, modulo: Some(2), scale: 5 },
                Term { src: IndexSrc::Var(i), div: 2, modulo: None, scale: 1 },
                Term { src: IndexSrc::Value(v), div: 1, modulo: None, scale: 1 },
            ],
            offset: 1,
        },
    );
    k.store(out, IndexExpr { terms: vec![var_term(i, nj * nl), var_term(j, nl), var_term(l, 1)], offset: 0 }, x);
    k.end_loop();
    k.end_loop();
    k.end_loop();
    let input: Vec<u64> = (0..200).map(|x| x * 3 + 1).collect();
    let mut bufs = vec![encode(Ty::I16, &input), encode(Ty::I64, &[7]), vec![0; (ni * nj * nl) as usize * 2]];
    run(&k.finish(), &mut bufs);
    let got = decode(Ty::I16, &bufs[2]);
    for i in 0..ni {
        for j in 0..nj {
            for l in 0..nl {
                let at = (l * 20 + (j % 2) * 5 + i / 2 + 7 + 1) as usize;
                assert_eq!(got[((i * nj + j) * nl + l) as usize], input[at], "({i}, {j}, {l})");
            }
        }
    }
}
