//! The LLVM tier's explicit vector loops (`codegen/src/llvm/vector.rs`) against the kernel
//! interpreter, bit for bit, where their code differs from the scalar translation: saturating
//! float-to-int conversions (spelled out for vectors) on every float and integer type, at and
//! around every edge of every range.

mod llvm_common;

use tessera_lower::kernel::{CastOp, IndexExpr, Kernel, KernelBuilder, MemType, Tail, Ty};

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
