//! How many bytes one launch of a kernel loads and stores: in all, the thread pool's measure of
//! whether splitting a launch pays, and per buffer, which outputs the LLVM tier streams. The
//! buffers' sizes overstate it for kernels that read a slice of a large buffer (a scan step's
//! dynamic slice of the whole sequence), which made such launches pay a fork and join for a
//! few hundred elements.

use super::{CallArg, Kernel, Op, Stmt};

/// What one launch over the whole grid does with one buffer, by the IR's accesses: every
/// iteration of every loop, both arms of every branch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferTraffic {
    pub loaded_bits: u64,
    pub stored_bits: u64,
    /// Passed to a runtime call (GEMM, convolution, FFT), whose accesses the IR does not show.
    pub called: bool,
}

impl Kernel {
    /// Bytes the kernel's loads and stores move over the whole grid, counting every access
    /// (repeated reads included: they are work too), both arms of every branch; `None` when
    /// it calls the runtime (GEMM, convolution, FFT), whose traffic the IR does not show.
    pub fn traffic_bytes(&self) -> Option<u64> {
        let mut buffers = vec![BufferTraffic::default(); self.buffers.len()];
        if tally(&self.body, u64::try_from(self.grid.extent.max(0)).ok()?, &mut buffers) {
            return None;
        }
        let bits = buffers.iter().fold(0u64, |t, b| t.saturating_add(b.loaded_bits).saturating_add(b.stored_bits));
        Some(bits.div_ceil(8))
    }

    /// [`BufferTraffic`] of each buffer, in the kernel's buffer order.
    pub fn buffer_traffic(&self) -> Vec<BufferTraffic> {
        let mut buffers = vec![BufferTraffic::default(); self.buffers.len()];
        tally(&self.body, u64::try_from(self.grid.extent.max(0)).unwrap_or(0), &mut buffers);
        buffers
    }
}

/// Adds `body`'s accesses, run `times` times, to `buffers`; whether it calls the runtime.
fn tally(body: &[Stmt], times: u64, buffers: &mut [BufferTraffic]) -> bool {
    let mut calls = false;
    for s in body {
        match s {
            Stmt::Let(_, Op::Load { buf, mem, .. }) => {
                if let Some(b) = buffers.get_mut(buf.0 as usize) {
                    b.loaded_bits = b.loaded_bits.saturating_add(times.saturating_mul(u64::from(mem.bits())));
                }
            }
            Stmt::Store { buf, mem, .. } => {
                if let Some(b) = buffers.get_mut(buf.0 as usize) {
                    b.stored_bits = b.stored_bits.saturating_add(times.saturating_mul(u64::from(mem.bits())));
                }
            }
            Stmt::Loop(l) => {
                let trips = times.saturating_mul(u64::try_from(l.end - l.start).unwrap_or(0));
                calls |= tally(&l.body, trips, buffers);
            }
            Stmt::If { then_body, else_body, .. } => {
                calls |= tally(then_body, times, buffers);
                calls |= tally(else_body, times, buffers);
            }
            Stmt::Call { args, .. } => {
                calls = true;
                for a in args {
                    if let CallArg::Ptr { buf, .. } = a {
                        if let Some(b) = buffers.get_mut(buf.0 as usize) {
                            b.called = true;
                        }
                    }
                }
            }
            Stmt::Let(..) | Stmt::DeclLocal { .. } | Stmt::SetLocal { .. } => {}
        }
    }
    calls
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
        let bits = |loaded: u64, stored: u64| BufferTraffic { loaded_bits: loaded, stored_bits: stored, called: false };
        assert_eq!(kernel.buffer_traffic(), vec![bits(40 * 32, 0), bits(40 * 64, 0), bits(0, 40 * 32)]);
        let mut c = KernelBuilder::new("c", 1);
        let buf = c.buffer("x", MemType::Scalar(Ty::F32), 4, true);
        c.call("tessera_rt_gemm_f32", vec![CallArg::Ptr { buf, index: IndexExpr::constant(0) }]);
        let c = c.finish();
        assert_eq!(c.traffic_bytes(), None);
        assert_eq!(c.buffer_traffic(), vec![BufferTraffic { called: true, ..Default::default() }]);
    }
}
