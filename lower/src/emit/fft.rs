//! fft (FFT, IFFT, RFFT, IRFFT over the last one to three dimensions) as one kernel: each grid
//! index is one batch element, which gathers its operand into private scratch laid out
//! row-major over the `fft_length` box, calls the runtime's transform on it
//! ([`crate::kernel::fft_call`]), and scatters the result into the output's layout.
//!
//! A runtime call rather than emitted loops: a fast transform of any length needs planning
//! (mixed radices, Bluestein or Rader for large primes), which the runtime gets from a
//! maintained FFT library; emitted loops would be an O(n^2) DFT. AOT links the runtime
//! statically, so the call resolves there too. An f32 or c64 transform runs in f32
//! (`tessera_rt_fft_f32`), as XLA:CPU's does: in f64 it did twice the work on twice the
//! scratch (a row-wise rfft of an f32[1024,4096] 6.4 -> 3.7 ms on LLVM with the runtime's
//! real-row transforms, XLA:CPU 3.0); an f64 or c128 one runs in f64.

use tessera_hlo::ir::{AttrList, FftType};
use tessera_hlo::InstId;

use super::complex::{narrow, widen};
use super::{index, types, Emitter};
use crate::kernel::fft_call::{self, FftKind};
use crate::kernel::{CallArg, IndexExpr, MemType, Ty};
use crate::LowerError;

impl<'m> Emitter<'m> {
    /// Emits the whole output of root fft `id` (whose operand is the kernel's parameter 0).
    pub(crate) fn emit_fft(&mut self, id: InstId) -> Result<(), LowerError> {
        let inst = self.comp.inst(id);
        let name = inst.name.clone();
        let operand =
            self.comp.inst(*inst.operands.first().ok_or_else(|| LowerError::invalid(&name, "fft without operand"))?);
        if operand.parameter_number() != Some(0) || self.params.len() != 1 {
            return Err(LowerError::unsupported(&name, "an fft fused with other ops"));
        }
        let kind = match inst.attr_word("fft_type").and_then(FftType::parse) {
            Some(FftType::Fft) => FftKind::Fft,
            Some(FftType::Ifft) => FftKind::Ifft,
            Some(FftType::Rfft) => FftKind::Rfft,
            Some(FftType::Irfft) => FftKind::Irfft,
            None => return Err(LowerError::invalid(&name, "fft without a valid fft_type")),
        };
        let lengths =
            inst.attr_ints("fft_length").ok_or_else(|| LowerError::invalid(&name, "fft without fft_length"))?;
        let in_dims = self.params[0].map.dims().to_vec();
        let out_dims = self.outputs[0].map.dims().to_vec();
        let (rank, k) = (in_dims.len(), lengths.len());
        if k == 0 || k > 3 || k > rank || out_dims.len() != rank || in_dims[..rank - k] != out_dims[..rank - k] {
            return Err(LowerError::invalid(&name, "fft_length must name one to three trailing dimensions"));
        }
        let first = rank - k;
        for (i, &len) in lengths.iter().enumerate() {
            let (want_in, want_out) = match kind {
                FftKind::Rfft if i == k - 1 => (len, len / 2 + 1),
                FftKind::Irfft if i == k - 1 => (len / 2 + 1, len),
                _ => (len, len),
            };
            if len < 0 || in_dims[first + i] != want_in || out_dims[first + i] != want_out {
                return Err(LowerError::invalid(&name, "fft_length does not match the operand and result shapes"));
            }
        }
        let (in_et, out_et) = (self.params[0].et, self.outputs[0].et);
        let complex_in = !matches!(kind, FftKind::Rfft);
        let complex_out = !matches!(kind, FftKind::Irfft);
        let (in_part, out_part) = (types::complex_part(in_et), types::complex_part(out_et));
        let in_ty = if complex_in { in_part.map(|p| p.1) } else { types::reg_ty(in_et).filter(|t| t.is_float()) };
        let out_ty = if complex_out { out_part.map(|p| p.1) } else { types::reg_ty(out_et).filter(|t| t.is_float()) };
        let (Some(in_ty), Some(out_ty)) = (in_ty, out_ty) else {
            return Err(LowerError::unsupported(&name, format!("an fft from {} to {}", in_et.name(), out_et.name())));
        };
        if types::is_half(in_et) || types::is_half(out_et) {
            return Err(LowerError::unsupported(&name, "an fft on half-precision floats"));
        }
        let mut n = [1i64; 3];
        n[3 - k..].copy_from_slice(lengths);
        let batch: i64 = in_dims[..first].iter().product();
        let box_len: i64 = n.iter().product();
        if batch == 0 || box_len == 0 {
            return Ok(());
        }
        let line = 2 * box_len;
        let single = in_ty == Ty::F32 && out_ty == Ty::F32;
        let (part, symbol) = if single { (Ty::F32, fft_call::SYMBOL_F32) } else { (Ty::F64, fft_call::SYMBOL) };
        let scratch = self.b.buffer("fft_scratch", MemType::Scalar(part), batch * line, true);

        self.grid_extent = batch;
        let g = self.b.grid_var();
        self.bounds.set_var(g, 0, batch - 1);
        let gv = index::var(g);
        let mut batch_idx = vec![IndexExpr::default(); first];
        let mut stride = 1;
        for d in (0..first).rev() {
            let q = self.idiv(&gv, stride);
            batch_idx[d] = self.irem(&q, in_dims[d]);
            stride *= in_dims[d];
        }
        let base = index::scale(&gv, line);
        // Row-major position in the fft_length box of a transform index (fewer than three
        // dimensions sit in its last ones).
        let slot = |t: &[IndexExpr]| {
            let mut parts = Vec::new();
            let mut s = 2;
            for (d, e) in t.iter().enumerate().rev() {
                parts.push((e.clone(), s));
                s *= n[3 - t.len() + d];
            }
            index::add(&base, &index::linear(&parts))
        };

        let (pbuf, pmap) = (self.params[0].buf, self.params[0].map.clone());
        let t = self.box_loops(&in_dims[first..]);
        let mut at = batch_idx.clone();
        at.extend(t.iter().cloned());
        let addr = self.layout_offset(&pmap, &at);
        let s = slot(&t);
        let (re, im) = if complex_in {
            let a = index::scale(&addr, 2);
            (self.b.load(pbuf, a.clone()), Some(self.b.load(pbuf, index::add_const(&a, 1))))
        } else {
            (self.b.load(pbuf, addr), None)
        };
        let to_part = |b: &mut crate::kernel::KernelBuilder, v| if single { v } else { widen(b, in_ty, v) };
        let re = to_part(&mut self.b, re);
        let im = match im {
            Some(v) => to_part(&mut self.b, v),
            None => super::scalar::float_const(&mut self.b, part, 0.0),
        };
        self.b.store(scratch, s.clone(), re);
        self.b.store(scratch, index::add_const(&s, 1), im);
        self.end_box_loops(&t);

        self.b.call(
            symbol,
            vec![
                CallArg::I64(kind as i64),
                CallArg::I64(n[0]),
                CallArg::I64(n[1]),
                CallArg::I64(n[2]),
                CallArg::Ptr { buf: scratch, index: base.clone() },
            ],
        );

        let (obuf, omap) = (self.outputs[0].buf, self.outputs[0].map.clone());
        let t = self.box_loops(&out_dims[first..]);
        let mut at = batch_idx;
        at.extend(t.iter().cloned());
        let addr = self.layout_offset(&omap, &at);
        let s = slot(&t);
        let from_part = |b: &mut crate::kernel::KernelBuilder, v| if single { v } else { narrow(b, out_ty, v) };
        let re = self.b.load(scratch, s.clone());
        let re = from_part(&mut self.b, re);
        if complex_out {
            let im = self.b.load(scratch, index::add_const(&s, 1));
            let im = from_part(&mut self.b, im);
            let a = index::scale(&addr, 2);
            self.b.store(obuf, a.clone(), re);
            self.b.store(obuf, index::add_const(&a, 1), im);
        } else {
            self.b.store(obuf, addr, re);
        }
        self.end_box_loops(&t);
        Ok(())
    }

    /// Opens a loop per extent above one (extents of one index 0), giving the index.
    fn box_loops(&mut self, extents: &[i64]) -> Vec<IndexExpr> {
        extents.iter().map(|&e| if e == 1 { index::constant(0) } else { index::var(self.open_loop(0, e)) }).collect()
    }

    fn end_box_loops(&mut self, t: &[IndexExpr]) {
        for e in t {
            if !e.terms.is_empty() {
                self.b.end_loop();
            }
        }
    }
}
