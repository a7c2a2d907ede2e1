//! How many bytes one launch of a kernel loads and stores: the thread pool's measure of
//! whether splitting a launch pays. The buffers' sizes overstate it for kernels that read a
//! slice of a large buffer (a scan step's dynamic slice of the whole sequence), which made
//! such launches pay a fork and join for a few hundred elements.

use super::{Kernel, Op, Stmt};

impl Kernel {
    /// Bytes the kernel's loads and stores move over the whole grid, counting every access
    /// (repeated reads included: they are work too), both arms of every branch; `None` when
    /// it calls the runtime (GEMM, convolution, FFT), whose traffic the IR does not show.
    pub fn traffic_bytes(&self) -> Option<u64> {
        let bits = body_bits(&self.body, u64::try_from(self.grid.extent.max(0)).ok()?)?;
        Some(bits.div_ceil(8))
    }
}

fn body_bits(body: &[Stmt], times: u64) -> Option<u64> {
    let mut total = 0u64;
    for s in body {
        let bits = match s {
            Stmt::Let(_, Op::Load { mem, .. }) | Stmt::Store { mem, .. } => times.saturating_mul(u64::from(mem.bits())),
            Stmt::Loop(l) => body_bits(&l.body, times.saturating_mul(u64::try_from(l.end - l.start).unwrap_or(0)))?,
            Stmt::If { then_body, else_body, .. } => {
                body_bits(then_body, times)?.saturating_add(body_bits(else_body, times)?)
            }
            Stmt::Call { .. } => return None,
            Stmt::Let(..) | Stmt::DeclLocal { .. } | Stmt::SetLocal { .. } => 0,
        };
        total = total.saturating_add(bits);
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use crate::kernel::*;

    #[test]
    fn loads_and_stores_times_their_trip_counts() {
        // 10 grid indices x a loop of 4: one f32 load, one f64 load and one f32 store each.
        let mut b = KernelBuilder::new("k", 10);
        let x = b.buffer("x", MemType::Scalar(Ty::F32), 1 << 20, false);
        let y = b.buffer("y", MemType::Scalar(Ty::F64), 40, false);
        let out = b.buffer("out", MemType::Scalar(Ty::F32), 40, true);
        let i = b.begin_loop(0, 4);
        let g = b.grid_var();
        let idx = crate::emit::index::add(&IndexExpr::var(g, 4), &IndexExpr::var(i, 1));
        let v = b.load(x, idx.clone());
        let _w = b.load(y, idx.clone());
        b.store(out, idx, v);
        b.end_loop();
        let kernel = b.finish();
        assert_eq!(kernel.traffic_bytes(), Some(40 * (4 + 8 + 4)));
        let mut c = KernelBuilder::new("c", 1);
        let buf = c.buffer("x", MemType::Scalar(Ty::F32), 4, true);
        c.call("tessera_rt_gemm_f32", vec![CallArg::Ptr { buf, index: IndexExpr::constant(0) }]);
        assert_eq!(c.finish().traffic_bytes(), None);
    }
}
