//! The interpreter's `tessera_rt_conv_f32`/`_f64`: the runtime convolution's contract, run
//! directly (output point by output point, kernel position by position) with f64 sums.
//!
//! Contract: `conv(desc, lhs, rhs, out)`, four element pointers. `desc` points at i64s: a
//! header of [`CONV_DESC_HEADER`](super::super::CONV_DESC_HEADER) entries — spatial rank N, input batch, input batch stride, input
//! feature stride, kernel input features (one group), kernel input-feature stride, output
//! features (all groups), kernel output-feature stride, output batch, output batch stride,
//! output feature stride, feature group count, batch group count — then N records of
//! [`CONV_DESC_PER_DIM`](super::super::CONV_DESC_PER_DIM) entries — input size, input stride, kernel size, kernel stride, output
//! size, output stride, window stride, low padding, base (lhs) dilation, window (rhs)
//! dilation, reversal (0/1). Strides are in elements. Every logical output element is
//! overwritten with XLA's convolution of the operands (grouping as `hlo::eval` defines it).

use super::super::{CONV_DESC_HEADER as DESC_HEADER, CONV_DESC_PER_DIM as DESC_PER_DIM};
use super::Fault;

/// One spatial dimension of a descriptor.
pub(crate) struct Dim {
    pub in_size: i64,
    pub in_stride: i64,
    pub k_size: i64,
    pub k_stride: i64,
    pub out_size: i64,
    pub out_stride: i64,
    pub stride: i64,
    pub pad_low: i64,
    pub lhs_dil: i64,
    pub rhs_dil: i64,
    pub reverse: bool,
}

/// A checked descriptor.
pub(crate) struct Desc {
    pub batch: i64,
    pub in_batch_stride: i64,
    pub in_feature_stride: i64,
    pub group_in: i64,
    pub k_in_stride: i64,
    pub out_features: i64,
    pub k_out_stride: i64,
    pub out_batch: i64,
    pub out_batch_stride: i64,
    pub out_feature_stride: i64,
    pub fgc: i64,
    pub bgc: i64,
    pub dims: Vec<Dim>,
}

/// The number of i64 entries a descriptor of spatial rank `n` has.
pub(crate) fn desc_len(n: i64) -> Option<usize> {
    let n = usize::try_from(n).ok().filter(|&n| n <= 64)?;
    Some(DESC_HEADER + n * DESC_PER_DIM)
}

/// Reads a descriptor and checks its sizes and groups are consistent.
pub(crate) fn parse(d: &[i64]) -> Result<Desc, String> {
    let n = *d.first().ok_or("empty descriptor")?;
    let len = desc_len(n).ok_or_else(|| format!("spatial rank {n}"))?;
    if d.len() < len {
        return Err(format!("descriptor of rank {n} needs {len} entries, {} given", d.len()));
    }
    let dims: Vec<Dim> = d[DESC_HEADER..len]
        .chunks_exact(DESC_PER_DIM)
        .map(|r| Dim {
            in_size: r[0],
            in_stride: r[1],
            k_size: r[2],
            k_stride: r[3],
            out_size: r[4],
            out_stride: r[5],
            stride: r[6],
            pad_low: r[7],
            lhs_dil: r[8],
            rhs_dil: r[9],
            reverse: r[10] != 0,
        })
        .collect();
    let desc = Desc {
        batch: d[1],
        in_batch_stride: d[2],
        in_feature_stride: d[3],
        group_in: d[4],
        k_in_stride: d[5],
        out_features: d[6],
        k_out_stride: d[7],
        out_batch: d[8],
        out_batch_stride: d[9],
        out_feature_stride: d[10],
        fgc: d[11],
        bgc: d[12],
        dims,
    };
    let lim = 1i64 << 40;
    let small = |x: i64| (0..lim).contains(&x);
    let groups = desc.fgc.checked_mul(desc.bgc).ok_or("group counts overflow")?;
    if !(small(desc.batch) && small(desc.group_in) && small(desc.out_features) && small(desc.out_batch))
        || desc.fgc < 1
        || desc.bgc < 1
        || groups > lim
        || desc.out_features % groups != 0
        || desc.batch % desc.bgc != 0
        || desc.out_batch != desc.batch / desc.bgc
    {
        return Err("inconsistent batch, feature or group sizes".into());
    }
    for (s, x) in desc.dims.iter().enumerate() {
        let window = [x.stride, x.lhs_dil, x.rhs_dil].iter().all(|&v| (1..=1 << 30).contains(&v));
        if !(small(x.in_size) && small(x.k_size) && small(x.out_size)) || !window || x.pad_low.abs() > 1 << 30 {
            return Err(format!("spatial dimension {s} has sizes or a window out of range"));
        }
    }
    Ok(desc)
}

/// Lowest and highest element offsets of an operand: `(size, stride)` per dimension.
fn span(dims: &[(i64, i64)]) -> Option<(i128, i128)> {
    if dims.iter().any(|&(n, _)| n == 0) {
        return None;
    }
    let (mut lo, mut hi) = (0i128, 0i128);
    for &(n, s) in dims {
        let e = i128::from(n - 1) * i128::from(s);
        lo += e.min(0);
        hi += e.max(0);
    }
    Some((lo, hi))
}

impl Desc {
    /// `(size, stride)` of every dimension of input, kernel and output.
    pub(crate) fn operand_dims(&self) -> [Vec<(i64, i64)>; 3] {
        let mut l = vec![(self.batch, self.in_batch_stride), (self.group_in * self.fgc, self.in_feature_stride)];
        let mut r = vec![(self.group_in, self.k_in_stride), (self.out_features, self.k_out_stride)];
        let mut o = vec![(self.out_batch, self.out_batch_stride), (self.out_features, self.out_feature_stride)];
        for x in &self.dims {
            l.push((x.in_size, x.in_stride));
            r.push((x.k_size, x.k_stride));
            o.push((x.out_size, x.out_stride));
        }
        [l, r, o]
    }
}

/// Checks each operand's elements lie inside its buffer: `(base, len)` per operand.
pub(crate) fn check_spans(desc: &Desc, at: [(i64, i64); 3]) -> Result<(), String> {
    for (w, (dims, (base, len))) in desc.operand_dims().iter().zip(at).enumerate() {
        if let Some((lo, hi)) = span(dims) {
            let (lo, hi) = (lo + i128::from(base), hi + i128::from(base));
            if lo < 0 || hi >= i128::from(len) {
                let which = ["the input", "the kernel", "the output"][w];
                return Err(format!("{which} spans elements {lo}..={hi} of a buffer with {len} elements"));
            }
        }
    }
    Ok(())
}

/// The convolution on element accessors: `lhs(i)`/`rhs(i)` read element offsets (relative to
/// the argument pointers), `out(i, x)` writes one.
pub(crate) fn run(desc: &Desc, lhs: &dyn Fn(i64) -> f64, rhs: &dyn Fn(i64) -> f64, out: &mut dyn FnMut(i64, f64)) {
    let groups = desc.fgc * desc.bgc;
    let kg = desc.out_features / groups;
    let n = desc.dims.len();
    let points: i64 = desc.dims.iter().map(|x| x.out_size).product::<i64>() * desc.out_batch;
    let taps: i64 = desc.dims.iter().map(|x| x.k_size).product();
    let mut os = vec![0i64; n];
    let mut kr = vec![0i64; n];
    for p in 0..points {
        let mut rest = p;
        for s in (0..n).rev() {
            os[s] = rest % desc.dims[s].out_size;
            rest /= desc.dims[s].out_size;
        }
        let ob = rest;
        let out_base =
            ob * desc.out_batch_stride + os.iter().zip(&desc.dims).map(|(&o, x)| o * x.out_stride).sum::<i64>();
        for of in 0..desc.out_features {
            let grp = of / kg;
            let (b, f0) =
                if desc.fgc > 1 { (ob, grp * desc.group_in) } else { (grp * (desc.batch / desc.bgc) + ob, 0) };
            let mut acc = 0.0f64;
            for t in 0..taps {
                let mut rest = t;
                for s in (0..n).rev() {
                    kr[s] = rest % desc.dims[s].k_size;
                    rest /= desc.dims[s].k_size;
                }
                let mut in_off = b * desc.in_batch_stride;
                let mut k_off = of * desc.k_out_stride;
                let mut valid = true;
                for (s, x) in desc.dims.iter().enumerate() {
                    let tap = if x.reverse { x.k_size - 1 - kr[s] } else { kr[s] };
                    let pos = os[s] * x.stride - x.pad_low + tap * x.rhs_dil;
                    if pos < 0 || pos % x.lhs_dil != 0 || pos / x.lhs_dil >= x.in_size {
                        valid = false;
                        break;
                    }
                    in_off += pos / x.lhs_dil * x.in_stride;
                    k_off += kr[s] * x.k_stride;
                }
                if !valid {
                    continue;
                }
                for i in 0..desc.group_in {
                    acc += lhs(in_off + (f0 + i) * desc.in_feature_stride) * rhs(k_off + i * desc.k_in_stride);
                }
            }
            out(out_base + of * desc.out_feature_stride, acc);
        }
    }
}

/// A descriptor's entries from the bytes of an i64 buffer starting at element `base`.
pub(crate) fn read_desc(bytes: &[u8], base: i64, len: i64) -> Result<Vec<i64>, Fault> {
    let call = |m: String| Fault::Call(format!("tessera_rt_conv: {m}"));
    let first = usize::try_from(base)
        .ok()
        .filter(|&b| (b as i64) < len)
        .ok_or_else(|| call("descriptor out of its buffer".into()))?;
    let avail = (len as usize - first).min(desc_len(64).unwrap_or(0));
    Ok((first..first + avail)
        .map(|i| i64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8])))
        .collect())
}
