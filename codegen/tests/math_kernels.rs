//! The inline math functions (`tessera_lower::emit::math`) as kernels: every function, emitted
//! as kernel IR in a vector loop and in a loopless body run once per grid index, gives bit for
//! bit what `math::Eval`
//! computes on plain f32, in the kernel interpreter and on both tiers, over special values and
//! a spread of bit patterns, with plain and with fused multiply-adds; and Cranelift runs the
//! loops as vectors (the math holds nothing that would keep a loop scalar).

mod common;
mod llvm_common;

use tessera_lower::emit::math::{self, Eval};
use tessera_lower::emit::math_ir::IrMath;
use tessera_lower::kernel::{run_kernel, IndexExpr, Kernel, KernelBuilder, MemType, Tail, Ty, ValueId};

type Emit = fn(&mut IrMath, &[ValueId]) -> ValueId;
type Reference = fn(&mut Eval, &[f32]) -> f32;

/// Every function: its name, its arity, how to emit it and how `Eval` computes it.
fn functions() -> Vec<(&'static str, usize, Emit, Reference)> {
    macro_rules! one {
        ($f:ident) => {
            (
                stringify!($f),
                1,
                (|m: &mut IrMath, a: &[ValueId]| math::$f(m, a[0])) as Emit,
                (|m: &mut Eval, a: &[f32]| math::$f(m, a[0])) as Reference,
            )
        };
    }
    macro_rules! two {
        ($f:ident) => {
            (
                stringify!($f),
                2,
                (|m: &mut IrMath, a: &[ValueId]| math::$f(m, a[0], a[1])) as Emit,
                (|m: &mut Eval, a: &[f32]| math::$f(m, a[0], a[1])) as Reference,
            )
        };
    }
    vec![
        one!(exp),
        one!(expm1),
        one!(log),
        one!(log1p),
        one!(tanh),
        one!(logistic),
        one!(erf),
        one!(cbrt),
        one!(sin),
        one!(cos),
        one!(tan),
        one!(sinh),
        one!(cosh),
        two!(pow),
        two!(atan2),
    ]
}

/// Special values, then bit patterns spread over the whole f32 range.
fn inputs(n: usize, salt: u32) -> Vec<f32> {
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        2.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::MAX,
        f32::MIN,
        88.72,
        -103.97,
        1e-8,
        std::f32::consts::PI,
        // sin, cos and tan: the closest f32 to a multiple of pi/2 below 2^16, and the edge
        // between their two reductions
        252.898_21,
        65_535.996,
        65_536.0,
        -65_536.0,
        // exp: subnormal results (its bit-assembling routine) and the bound between routines
        -86.6,
        -86.599_99,
        -87.336_55,
        -95.5,
        -103.28,
        // exp: the edge routine's clamps, beyond which the normal routine selects its constants
        -104.0,
        -104.000_01,
        89.0,
        89.000_01,
    ];
    // Whole vectors of moderate values, where the trig functions skip their slow reduction.
    v.extend((0..256).map(|i| (i as f32 - 128.0) * 0.73 + salt as f32 * 1e-3));
    // Whole vectors of ordinary and far-out values alone (a masked softmax's lanes), which exp
    // computes without its edge routine.
    let far = [-1e30, f32::NEG_INFINITY, -150.0, -104.5, 89.5, 1e4, 0.25, -3.0];
    v.extend((0..32).map(|i| far[i % far.len()] * (1.0 + salt as f32 * 1e-3)));
    let mut x: u32 = 0x9e37_79b9 ^ salt;
    while v.len() < n {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        v.push(f32::from_bits(x));
    }
    v
}

/// `out[i] = f(in0[i], ..)` over `n` elements: in one loop of vector width 16 (peeled tail), or
/// with no loop, one element per grid index.
fn kernel(name: &str, arity: usize, emit: Emit, n: i64, fma: bool, looped: bool) -> Kernel {
    let mut b = KernelBuilder::new(name, if looped { 1 } else { n });
    b.use_fused_multiply_add(fma);
    let ins: Vec<_> = (0..arity).map(|i| b.buffer(format!("in{i}"), MemType::Scalar(Ty::F32), n, false)).collect();
    let out = b.buffer("out", MemType::Scalar(Ty::F32), n, true);
    let v = if looped { b.begin_loop(0, n) } else { b.grid_var() };
    let args: Vec<ValueId> = ins.iter().map(|&buf| b.load(buf, IndexExpr::var(v, 1))).collect();
    let r = emit(&mut IrMath::new(&mut b), &args);
    b.store(out, IndexExpr::var(v, 1), r);
    if looped {
        b.end_loop_vectorized(16, Tail::Peel);
    }
    b.finish()
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn every_tier_computes_what_eval_computes() {
    // Not a multiple of 16: the vector loops' scalar tails run too.
    let n = 4099usize;
    let forms = [(false, true), (true, true), (false, false), (true, false)];
    for ((name, arity, emit, reference), (fma, looped)) in functions().into_iter().flat_map(|f| forms.map(|m| (f, m))) {
        let eval = Eval { fma };
        let args: Vec<Vec<f32>> = (0..arity).map(|i| inputs(n, i as u32 * 7919)).collect();
        let want: Vec<f32> = (0..n)
            .map(|i| {
                let a: Vec<f32> = args.iter().map(|col| col[i]).collect();
                reference(&mut { eval }, &a)
            })
            .collect();
        let k = kernel(&format!("math_{name}"), arity, emit, n as i64, fma, looped);
        assert!(fma || !k.to_string().contains("fma."), "{name}: a fused multiply-add in the plain form");
        // The trig functions branch to their slow reduction, exp and pow to their subnormal
        // results, in loops too.
        let branches = matches!(name, "sin" | "cos" | "tan" | "exp" | "pow");
        assert_eq!(k.to_string().contains("if %"), branches, "{name}: branches");
        let fresh = || -> Vec<Vec<u8>> {
            let mut bufs: Vec<Vec<u8>> =
                args.iter().map(|col| col.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
            bufs.push(vec![0xA5; n * 4]);
            bufs
        };
        let decode = |bytes: &[u8]| -> Vec<f32> {
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        };
        let mut interp = fresh();
        let mut views: Vec<&mut [u8]> = interp.iter_mut().map(|b| b.as_mut_slice()).collect();
        run_kernel(&k, &mut views).unwrap_or_else(|e| panic!("{name}: interpreter: {e}"));
        let mut cl = fresh();
        let compiled = common::compile(std::slice::from_ref(&k));
        common::call(&compiled, 0, &mut cl, 0, k.grid.extent);
        let mut ll = fresh();
        let compiled = llvm_common::compile(std::slice::from_ref(&k));
        llvm_common::call(compiled.functions[0], &mut ll, &[(0, k.grid.extent)]);
        for (tier, bufs) in [("interpreter", &interp), ("cranelift", &cl), ("llvm", &ll)] {
            let got = decode(&bufs[arity]);
            for i in 0..n {
                let a: Vec<f32> = args.iter().map(|col| col[i]).collect();
                assert!(
                    same(got[i], want[i]),
                    "{name}{a:?} on {tier} (fma {fma}, loop {looped}): {} but Eval gives {}",
                    got[i],
                    want[i]
                );
            }
        }
        if looped {
            let clif = tessera_codegen::cranelift::clif(&k).unwrap();
            assert!(clif.contains("f32x4"), "{name}: Cranelift did not vectorize the loop");
        }
    }
}
