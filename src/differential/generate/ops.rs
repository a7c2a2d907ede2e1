//! The op families the generator draws from. Each takes its operands from the pool (or makes
//! them), computes the result's shape and facts, and returns `None` when the draw is not
//! admitted (`facts.rs`) or does not fit; the caller then simply draws again.

use tessera_hlo::ElementType;

use super::facts::{self, Facts, Kind};
use super::{elements, kind, list, shape_text, ArgDist, Gen, MAX_ELEMENTS};

const FLOAT_UNARY: &[&str] = &[
    "negate",
    "abs",
    "exponential",
    "exponential-minus-one",
    "log",
    "log-plus-one",
    "sqrt",
    "rsqrt",
    "cbrt",
    "sine",
    "cosine",
    "tan",
    "tanh",
    "logistic",
    "erf",
    "floor",
    "ceil",
    "round-nearest-afz",
    "round-nearest-even",
    "sign",
];
const INT_UNARY: &[&str] = &["negate", "abs", "not", "popcnt", "count-leading-zeros", "sign"];
const FLOAT_BINARY: &[&str] =
    &["add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder", "power", "atan2"];
const INT_BINARY: &[&str] = &[
    "add",
    "subtract",
    "multiply",
    "divide",
    "remainder",
    "maximum",
    "minimum",
    "and",
    "or",
    "xor",
    "shift-left",
    "shift-right-logical",
    "shift-right-arithmetic",
];
const PRED_BINARY: &[&str] = &["and", "or", "xor"];
const DIRECTIONS: &[&str] = &["EQ", "NE", "LT", "LE", "GT", "GE"];

impl Gen {
    /// One random op; `Some` with the new value when one was added.
    pub(super) fn random_op(&mut self) -> Option<usize> {
        const WEIGHTS: &[u32] =
            &[14, 18, 8, 3, 6, 3, 6, 5, 5, 5, 4, 4, 4, 3, 7, 3, 5, 3, 3, 3, 3, 3, 3, 2, 2, 3, 2, 4, 3, 4, 2, 2, 2, 2];
        match self.rng.weighted(WEIGHTS) {
            0 => self.unary(),
            1 => self.binary(),
            2 => self.compare_select(),
            3 => self.clamp(),
            4 => self.convert(),
            5 => self.bitcast_convert(),
            6 => self.broadcast(),
            7 => self.transpose(),
            8 => self.reshape(),
            9 => self.slice(),
            10 => self.pad(),
            11 => self.concatenate(),
            12 => self.reverse(),
            13 => self.copy(),
            14 => self.reduce(),
            15 => self.arg_reduce(),
            16 => self.dot(),
            17 => self.dynamic_slice(),
            18 => self.dynamic_update_slice(),
            19 => self.gather(),
            20 => self.scatter(),
            21 => self.reduce_window(),
            22 => self.convolution(),
            23 => self.while_loop(),
            24 => self.conditional(),
            25 => self.sort(),
            26 => self.topk(),
            27 => self.row_pattern(),
            28 => self.widened_bf16(),
            29 => self.simplifiable(),
            30 => self.column_siblings(),
            31 => self.crossed_siblings(),
            32 => self.windowed_rows(),
            33 => self.padded_long_rows(),
            _ => None,
        }
    }

    fn name(&self, v: usize) -> String {
        self.vals[v].name.clone()
    }

    fn unary(&mut self) -> Option<usize> {
        let a = self.any_value();
        let (ty, k, f) = (self.vals[a].ty, kind(self.vals[a].ty), self.vals[a].facts);
        // Every generated float is finite, noisy or not, so is-finite is exact either way.
        if matches!(k, Kind::Float(_)) && self.rng.chance(0.05) {
            let dims = self.vals[a].dims.clone();
            let r =
                self.push_op(ElementType::Pred, dims, Facts::exact(0.0, 1.0), format!("is-finite({})", self.name(a)));
            self.used(&[a]);
            return Some(r);
        }
        let ops: &[&str] = match k {
            Kind::Float(_) => FLOAT_UNARY,
            Kind::Signed(_) => INT_UNARY,
            Kind::Unsigned(_) => &["not", "popcnt", "count-leading-zeros"],
            Kind::Pred => &["not"],
        };
        for _ in 0..4 {
            let op = *self.rng.pick(ops);
            if let Some(facts) = facts::unary(op, k, f) {
                let r = self.push_op(ty, self.vals[a].dims.clone(), facts, format!("{op}({})", self.name(a)));
                self.used(&[a]);
                return Some(r);
            }
        }
        None
    }

    fn binary(&mut self) -> Option<usize> {
        let a = self.any_value();
        let (ty, dims) = (self.vals[a].ty, self.vals[a].dims.clone());
        let b = self.like(ty, &dims);
        let (a, b) = if self.rng.chance(0.5) { (a, b) } else { (b, a) };
        let k = kind(ty);
        let ops: &[&str] = match k {
            Kind::Float(_) => FLOAT_BINARY,
            Kind::Signed(_) | Kind::Unsigned(_) => INT_BINARY,
            Kind::Pred => PRED_BINARY,
        };
        for _ in 0..4 {
            let op = *self.rng.pick(ops);
            if let Some(facts) = facts::binary(op, k, self.vals[a].facts, self.vals[b].facts) {
                let r = self.push_op(ty, dims, facts, format!("{op}({}, {})", self.name(a), self.name(b)));
                self.used(&[a, b]);
                return Some(r);
            }
        }
        None
    }

    fn compare_select(&mut self) -> Option<usize> {
        let a = self.any_value();
        let (ty, dims) = (self.vals[a].ty, self.vals[a].dims.clone());
        let b = self.like(ty, &dims);
        facts::compare(self.vals[a].facts, self.vals[b].facts)?;
        let dir = *self.rng.pick(DIRECTIONS);
        let total = if ty.is_float() && self.rng.chance(0.15) { ", type=TOTALORDER" } else { "" };
        let p = self.push_op(
            ElementType::Pred,
            dims.clone(),
            Facts::exact(0.0, 1.0),
            format!("compare({}, {}), direction={dir}{total}", self.name(a), self.name(b)),
        );
        self.used(&[a, b]);
        if self.rng.chance(0.2) {
            return Some(p);
        }
        // The selected values may be of any type with these dims.
        let (x, y) = if self.rng.chance(0.5) {
            (a, b)
        } else {
            let x = self.pick(|v| v.dims == dims && v.ty != ElementType::Pred).unwrap_or(a);
            let y = self.like(self.vals[x].ty, &dims);
            (x, y)
        };
        let facts = self.vals[x].facts.join(&self.vals[y].facts);
        let r = self.push_op(
            self.vals[x].ty,
            dims,
            facts,
            format!("select({}, {}, {})", self.name(p), self.name(x), self.name(y)),
        );
        self.used(&[p, x, y]);
        Some(r)
    }

    fn clamp(&mut self) -> Option<usize> {
        let x = self.pick(|v| v.ty != ElementType::Pred)?;
        let (ty, dims) = (self.vals[x].ty, self.vals[x].dims.clone());
        // Bounds are scalars (broadcast by clamp itself) or full arrays.
        let bound = |g: &mut Gen| if g.rng.chance(0.5) { g.splat(ty, &[]) } else { g.like(ty, &dims) };
        let lo = bound(self);
        let hi = bound(self);
        let (l, h, a) = (self.vals[lo].facts, self.vals[hi].facts, self.vals[x].facts);
        let facts =
            Facts { lo: a.lo.max(l.lo).min(h.lo), hi: a.hi.max(l.hi).min(h.hi), exact: a.exact && l.exact && h.exact };
        let r = self.push_op(ty, dims, facts, format!("clamp({}, {}, {})", self.name(lo), self.name(x), self.name(hi)));
        self.used(&[lo, x, hi]);
        Some(r)
    }

    fn convert(&mut self) -> Option<usize> {
        let a = self.any_value();
        let to = self.random_type();
        if to == self.vals[a].ty {
            return None;
        }
        let facts = facts::convert(kind(self.vals[a].ty), kind(to), self.vals[a].facts)?;
        let r = self.push_op(to, self.vals[a].dims.clone(), facts, format!("convert({})", self.name(a)));
        self.used(&[a]);
        Some(r)
    }

    /// Reinterprets bits as an integer type of the same, a narrower (adding a minor
    /// dimension) or a wider width (dropping one). Never to floats: arbitrary bits are NaNs
    /// whose payloads no two backends need to agree on.
    fn bitcast_convert(&mut self) -> Option<usize> {
        let a = self.pick(|v| v.facts.exact && v.ty != ElementType::Pred)?;
        let (from, dims) = (self.vals[a].ty, self.vals[a].dims.clone());
        const INTS: &[ElementType] = &[
            ElementType::S8,
            ElementType::U8,
            ElementType::S16,
            ElementType::U16,
            ElementType::S32,
            ElementType::U32,
            ElementType::S64,
            ElementType::U64,
        ];
        let to = *self.rng.pick(INTS);
        let (wf, wt) = (i64::from(from.bit_width()), i64::from(to.bit_width()));
        let out_dims = if wf == wt {
            dims
        } else if wt < wf {
            let mut d = dims;
            d.push(wf / wt);
            d
        } else if dims.last() == Some(&(wt / wf)) {
            dims[..dims.len() - 1].to_vec()
        } else {
            return None;
        };
        if elements(&out_dims) > MAX_ELEMENTS || to == from {
            return None;
        }
        let r = self.push_op(to, out_dims, Facts::full(kind(to)), format!("bitcast-convert({})", self.name(a)));
        self.used(&[a]);
        Some(r)
    }

    fn broadcast(&mut self) -> Option<usize> {
        let a = self.pick(|v| v.dims.len() < 4)?;
        let (ty, dims) = (self.vals[a].ty, self.vals[a].dims.clone());
        let new = self.rng.range(1, (4 - dims.len() as i64).min(2)) as usize;
        let rank = dims.len() + new;
        let mut positions: Vec<usize> = (0..rank).collect();
        self.rng.shuffle(&mut positions);
        let mut kept: Vec<usize> = positions[..dims.len()].to_vec();
        kept.sort_unstable();
        let extra = self.random_dims(new);
        let mut out = Vec::with_capacity(rank);
        let (mut i, mut j) = (0, 0);
        for d in 0..rank {
            if kept.get(i) == Some(&d) {
                out.push(dims[i]);
                i += 1;
            } else {
                out.push(extra[j]);
                j += 1;
            }
        }
        if elements(&out) > MAX_ELEMENTS {
            return None;
        }
        let kept: Vec<i64> = kept.iter().map(|&d| d as i64).collect();
        let facts = self.vals[a].facts;
        let r = self.push_op(ty, out, facts, format!("broadcast({}), dimensions={{{}}}", self.name(a), list(&kept)));
        self.used(&[a]);
        Some(r)
    }

    fn transpose(&mut self) -> Option<usize> {
        let a = self.pick(|v| v.dims.len() >= 2)?;
        let dims = self.vals[a].dims.clone();
        let mut perm: Vec<i64> = (0..dims.len() as i64).collect();
        self.rng.shuffle(&mut perm);
        let out: Vec<i64> = perm.iter().map(|&p| dims[p as usize]).collect();
        let (ty, facts) = (self.vals[a].ty, self.vals[a].facts);
        let r = self.push_op(ty, out, facts, format!("transpose({}), dimensions={{{}}}", self.name(a), list(&perm)));
        self.used(&[a]);
        Some(r)
    }

    fn reshape(&mut self) -> Option<usize> {
        let a = self.any_value();
        let n = elements(&self.vals[a].dims);
        let mut factors = Vec::new();
        let mut m = n;
        let mut p = 2;
        while m > 1 {
            while m % p == 0 {
                factors.push(p);
                m /= p;
            }
            p += 1;
        }
        self.rng.shuffle(&mut factors);
        let rank = self.rng.range(if factors.is_empty() { 0 } else { 1 }, 4) as usize;
        let mut out = vec![1i64; rank];
        if rank > 0 {
            for f in factors {
                let i = self.rng.below(rank as u64) as usize;
                out[i] *= f;
            }
        }
        let (ty, facts) = (self.vals[a].ty, self.vals[a].facts);
        let r = self.push_op(ty, out, facts, format!("reshape({})", self.name(a)));
        self.used(&[a]);
        Some(r)
    }

    fn slice(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty())?;
        let dims = self.vals[a].dims.clone();
        let mut out = Vec::new();
        let mut ranges = Vec::new();
        for &d in &dims {
            let start = self.rng.range(0, d - 1);
            let limit = self.rng.range(start + 1, d);
            let stride = if self.rng.chance(0.7) { 1 } else { self.rng.range(2, 3) };
            out.push((limit - start + stride - 1) / stride);
            ranges.push(if stride == 1 { format!("[{start}:{limit}]") } else { format!("[{start}:{limit}:{stride}]") });
        }
        let (ty, facts) = (self.vals[a].ty, self.vals[a].facts);
        let r = self.push_op(ty, out, facts, format!("slice({}), slice={{{}}}", self.name(a), ranges.join(", ")));
        self.used(&[a]);
        Some(r)
    }

    fn pad(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty())?;
        let (ty, dims) = (self.vals[a].ty, self.vals[a].dims.clone());
        let mut out = Vec::new();
        let mut config = Vec::new();
        for &d in &dims {
            let interior = if self.rng.chance(0.7) { 0 } else { self.rng.range(1, 2) };
            let (mut lo, mut hi) = (self.rng.range(-2, 3), self.rng.range(-2, 3));
            let dilated = d + (d - 1) * interior;
            if lo + hi + dilated < 1 {
                (lo, hi) = (0, 0);
            }
            out.push(lo + hi + dilated);
            config.push(if interior == 0 { format!("{lo}_{hi}") } else { format!("{lo}_{hi}_{interior}") });
        }
        if elements(&out) > MAX_ELEMENTS {
            return None;
        }
        let value = if self.rng.chance(0.7) { self.splat(ty, &[]) } else { self.param(ty, vec![]) };
        let facts = self.vals[a].facts.join(&self.vals[value].facts);
        let r = self.push_op(
            ty,
            out,
            facts,
            format!("pad({}, {}), padding={}", self.name(a), self.name(value), config.join("x")),
        );
        self.used(&[a, value]);
        Some(r)
    }

    fn concatenate(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty())?;
        let (ty, dims) = (self.vals[a].ty, self.vals[a].dims.clone());
        let k = self.rng.below(dims.len() as u64) as usize;
        let mut parts = vec![a];
        for _ in 0..self.rng.range(1, 2) {
            let mut d = dims.clone();
            d[k] = self.random_dims(1)[0];
            let other = match self.pick(|v| {
                v.ty == ty && v.dims.len() == dims.len() && (0..dims.len()).all(|i| i == k || v.dims[i] == dims[i])
            }) {
                Some(v) if self.rng.chance(0.6) => v,
                _ => self.like(ty, &d),
            };
            parts.push(other);
        }
        self.rng.shuffle(&mut parts);
        let mut out = dims;
        out[k] = parts.iter().map(|&p| self.vals[p].dims[k]).sum();
        if elements(&out) > MAX_ELEMENTS {
            return None;
        }
        let facts = parts.iter().skip(1).fold(self.vals[parts[0]].facts, |f, &p| f.join(&self.vals[p].facts));
        let names: Vec<String> = parts.iter().map(|&p| self.name(p)).collect();
        let r = self.push_op(ty, out, facts, format!("concatenate({}), dimensions={{{k}}}", names.join(", ")));
        self.used(&parts);
        Some(r)
    }

    /// A pad of a concatenate along rows of at least 128 elements (`coalesce::SHORT_ROW`,
    /// which shorter rows stay under): its row loop tests the column against constants before
    /// it reads, so `emit::split` runs it as consecutive loops (the padding on each side, each
    /// operand's columns), which other pads and concatenates, of short rows, do not exercise.
    fn padded_long_rows(&mut self) -> Option<usize> {
        let ty = *self.rng.pick(&[ElementType::F32, ElementType::F32, ElementType::S32, ElementType::BF16]);
        let rows = self.rng.range(1, 4);
        let (w1, w2) = (self.rng.range(60, 100), self.rng.range(60, 100));
        let a = self.like(ty, &[rows, w1]);
        let b = self.like(ty, &[rows, w2]);
        let (x, y) = if self.rng.chance(0.5) { (a, b) } else { (b, a) };
        let facts = self.vals[x].facts.join(&self.vals[y].facts);
        let joined = self.push_op(
            ty,
            vec![rows, w1 + w2],
            facts,
            format!("concatenate({}, {}), dimensions={{1}}", self.name(x), self.name(y)),
        );
        self.used(&[x, y]);
        let (top, bottom) = (self.rng.range(0, 2), self.rng.range(0, 2));
        let (left, right) = (self.rng.range(-2, 4), self.rng.range(-2, 4));
        let out = vec![rows + top + bottom, w1 + w2 + left + right];
        let value = self.splat(ty, &[]);
        let facts = self.vals[joined].facts.join(&self.vals[value].facts);
        let op = format!("pad({}, {}), padding={top}_{bottom}x{left}_{right}", self.name(joined), self.name(value));
        let r = self.push_op(ty, out, facts, op);
        self.used(&[joined, value]);
        Some(r)
    }

    fn reverse(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty())?;
        let rank = self.vals[a].dims.len();
        let rev: Vec<i64> = (0..rank as i64).filter(|_| self.rng.chance(0.5)).collect();
        let rev = if rev.is_empty() { vec![self.rng.below(rank as u64) as i64] } else { rev };
        let (ty, dims, facts) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let r = self.push_op(ty, dims, facts, format!("reverse({}), dimensions={{{}}}", self.name(a), list(&rev)));
        self.used(&[a]);
        Some(r)
    }

    /// A copy into a (usually) different layout: a physical relayout.
    fn copy(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty())?;
        let (ty, dims, facts) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let layout = self.random_layout(ty, &dims);
        let r = self.push_with_layout(ty, dims, facts, format!("copy({})", self.name(a)), &layout);
        self.used(&[a]);
        Some(r)
    }

    /// The scalar computation `op` on `ty` (a reducer).
    pub(super) fn reducer(&mut self, op: &str, ty: ElementType) -> String {
        let t = ty.name();
        self.computation(&format!("{op}_{t}"), |c| {
            vec![
                format!("{c}.x = {t}[] parameter(0)"),
                format!("{c}.y = {t}[] parameter(1)"),
                format!("ROOT {c}.r = {t}[] {op}({c}.x, {c}.y)"),
            ]
        })
    }

    fn reduce(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty())?;
        let (ty, dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let k = kind(ty);
        let op = *self.rng.pick(match k {
            Kind::Float(_) => &["add", "add", "maximum", "minimum"][..],
            Kind::Signed(_) | Kind::Unsigned(_) => &["add", "multiply", "maximum", "minimum", "and", "or", "xor"][..],
            Kind::Pred => &["and", "or"][..],
        });
        let mut reduced: Vec<i64> = (0..dims.len() as i64).filter(|_| self.rng.chance(0.4)).collect();
        if reduced.is_empty() {
            reduced.push(self.rng.below(dims.len() as u64) as i64);
        }
        let n: i64 = reduced.iter().map(|&d| dims[d as usize]).product();
        let out: Vec<i64> = (0..dims.len()).filter(|d| !reduced.contains(&(*d as i64))).map(|d| dims[d]).collect();
        let (lo, hi) = k.bounds();
        let facts = match (k, op) {
            (Kind::Float(w), "add") => {
                let (s_lo, s_hi) = (f.lo.min(0.0) * n as f64, f.hi.max(0.0) * n as f64);
                if s_lo.abs().max(s_hi.abs()) > facts::noisy_mag(w) {
                    return None;
                }
                Facts { lo: s_lo, hi: s_hi, exact: false }
            }
            (_, "add") if f.lo.min(0.0) * n as f64 >= lo && f.hi.max(0.0) * n as f64 <= hi => {
                Facts::exact(f.lo.min(0.0) * n as f64, f.hi.max(0.0) * n as f64)
            }
            (_, "maximum" | "minimum") => f,
            (Kind::Pred, _) => f,
            _ => Facts::full(k),
        };
        let init = match (k, op) {
            (Kind::Float(_), "add") => "0".to_string(),
            (Kind::Float(_), "maximum") => "-inf".to_string(),
            (Kind::Float(_), "minimum") => "inf".to_string(),
            (Kind::Pred, "and") => "true".to_string(),
            (Kind::Pred, _) => "false".to_string(),
            (_, "multiply") => "1".to_string(),
            (_, "maximum") => k.int_bounds().0.to_string(),
            (_, "minimum") => k.int_bounds().1.to_string(),
            (Kind::Signed(_), "and") => "-1".to_string(),
            (_, "and") => k.int_bounds().1.to_string(),
            _ => "0".to_string(),
        };
        let init = self.constant(ty, &init);
        let comp = self.reducer(op, ty);
        let r = self.push_op(
            ty,
            out,
            facts,
            format!("reduce({}, {init}), dimensions={{{}}}, to_apply={comp}", self.name(a), list(&reduced)),
        );
        self.used(&[a]);
        Some(r)
    }

    /// Softmax's and layer norm's shape: a float value minus the max (or the sum) of its
    /// trailing dimensions, broadcast back over them, which fusion turns into one row kernel
    /// evaluating the reduction once per row.
    fn row_pattern(&mut self) -> Option<usize> {
        let a = self.pick(|v| v.dims.len() >= 2 && matches!(kind(v.ty), Kind::Float(_)))?;
        let (ty, dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let Kind::Float(w) = kind(ty) else { return None };
        let kept = self.rng.range(1, dims.len() as i64 - 1) as usize;
        let n: i64 = dims[kept..].iter().product();
        if self.rng.chance(0.5) {
            return self.staged_row_pattern();
        }
        let (op, init, rf) = if self.rng.chance(0.5) {
            ("maximum", "-inf", f)
        } else {
            let (s_lo, s_hi) = (f.lo.min(0.0) * n as f64, f.hi.max(0.0) * n as f64);
            if s_lo.abs().max(s_hi.abs()) > facts::noisy_mag(w) {
                return None;
            }
            ("add", "0", Facts { lo: s_lo, hi: s_hi, exact: false })
        };
        let diff = facts::binary("subtract", kind(ty), f, rf)?;
        let (r, b) = self.reduce_rows(a, kept, op, init, rf);
        let out = self.push_op(ty, dims, diff, format!("subtract({}, {})", self.name(a), self.name(b)));
        self.used(&[a, r, b]);
        Some(out)
    }

    /// `op` over the rows of `a` (its dimensions from `kept` on, starting from the constant
    /// `init`), and that row value broadcast back over the rows, both with facts `rf`.
    fn reduce_rows(&mut self, a: usize, kept: usize, op: &str, init: &str, rf: Facts) -> (usize, usize) {
        let (ty, dims) = (self.vals[a].ty, self.vals[a].dims.clone());
        let init = self.constant(ty, init);
        let comp = self.reducer(op, ty);
        let reduced: Vec<i64> = (kept as i64..dims.len() as i64).collect();
        let r = self.push_op(
            ty,
            dims[..kept].to_vec(),
            rf,
            format!("reduce({}, {init}), dimensions={{{}}}, to_apply={comp}", self.name(a), list(&reduced)),
        );
        let leading: Vec<i64> = (0..kept as i64).collect();
        let b = self.push_op(ty, dims, rf, format!("broadcast({}), dimensions={{{}}}", self.name(r), list(&leading)));
        (r, b)
    }

    /// `e / sum(e)` over the rows of `e = exp(a)` (softmax without its max), `a` a new f32
    /// parameter with rows long enough for the lane form (`emit::reduce`): an expensive value a row reduction
    /// reads and its other user reads again, which fusion stages in the row kernel's output
    /// (`emit::staging`) when the kernel's root has its shape.
    fn staged_row_pattern(&mut self) -> Option<usize> {
        if self.rng.chance(0.5) {
            return self.staged_chain_pattern();
        }
        let ty = ElementType::F32;
        // Rows of 32 to 60 elements in [-2, 0] (softmax's `x - max` range): sums of their
        // exps stay within a noisy value's magnitude.
        let dims = vec![self.rng.range(2, 5), self.rng.range(32, 60)];
        let number = self.params_len();
        let dist = ArgDist::Uniform { lo: -2.0, hi: 0.0 };
        let a = self.param_with(ty, dims.clone(), dist, Facts::exact(-2.0, 0.0), number);
        let kept = 1;
        let f = self.vals[a].facts;
        let k = kind(ty);
        let Kind::Float(w) = k else { return None };
        let ef = facts::unary("exponential", k, f)?;
        let n: i64 = dims[kept..].iter().product();
        let sf = Facts { lo: ef.lo * n as f64, hi: ef.hi * n as f64, exact: false };
        if sf.hi > facts::noisy_mag(w) {
            return None;
        }
        let qf = facts::binary("divide", k, ef, sf)?;
        let e = self.push_op(ty, dims.clone(), ef, format!("exponential({})", self.name(a)));
        let (sum, b) = self.reduce_rows(e, kept, "add", "0", sf);
        let out = self.push_op(ty, dims, qf, format!("divide({}, {})", self.name(e), self.name(b)));
        self.used(&[a, e, sum, b]);
        Some(out)
    }

    /// Softmax with its max over scores scaled by a constant that is not a power of two (as
    /// attention's `s / sqrt(d)`), `a` a new f32 parameter; sometimes masked to -200 past the
    /// row's index plus half a row (a causal mask's shape), whose exps are 0 without `exp`'s
    /// edge routine. The scores (read by the max) and their exps (read by the sum) are both
    /// expensive, so the row kernel stages them in turn (`emit::staging`).
    fn staged_chain_pattern(&mut self) -> Option<usize> {
        let ty = ElementType::F32;
        let (rows, n) = (self.rng.range(2, 5), self.rng.range(32, 60));
        let dims = vec![rows, n];
        let number = self.params_len();
        let dist = ArgDist::Uniform { lo: -2.0, hi: 2.0 };
        let a = self.param_with(ty, dims.clone(), dist, Facts::exact(-2.0, 2.0), number);
        let three = self.constant(ty, "3");
        let threes =
            self.push_op(ty, dims.clone(), Facts::exact(3.0, 3.0), format!("broadcast({three}), dimensions={{}}"));
        let k = kind(ty);
        let sf = facts::binary("divide", k, self.vals[a].facts, Facts::exact(3.0, 3.0))?;
        let mut scores = self.push_op(ty, dims.clone(), sf, format!("divide({}, {})", self.name(a), self.name(threes)));
        let mut used = vec![a, threes, scores];
        let mut lo = sf.lo;
        if self.rng.chance(0.5) {
            let s32 = ElementType::S32;
            let row = self.push_op(
                s32,
                dims.clone(),
                Facts::exact(0.0, (rows - 1) as f64),
                "iota(), iota_dimension=0".into(),
            );
            let col =
                self.push_op(s32, dims.clone(), Facts::exact(0.0, (n - 1) as f64), "iota(), iota_dimension=1".into());
            let half = self.constant(s32, &(n / 2).to_string());
            let halves = self.push_op(
                s32,
                dims.clone(),
                Facts::exact((n / 2) as f64, (n / 2) as f64),
                format!("broadcast({half}), dimensions={{}}"),
            );
            let limit_f = Facts::exact((n / 2) as f64, (rows - 1 + n / 2) as f64);
            let limit =
                self.push_op(s32, dims.clone(), limit_f, format!("add({}, {})", self.name(row), self.name(halves)));
            let keep = self.push_op(
                ElementType::Pred,
                dims.clone(),
                Facts::exact(0.0, 1.0),
                format!("compare({}, {}), direction=LE", self.name(col), self.name(limit)),
            );
            let masked = self.constant(ty, "-200");
            let fill = self.push_op(
                ty,
                dims.clone(),
                Facts::exact(-200.0, -200.0),
                format!("broadcast({masked}), dimensions={{}}"),
            );
            lo = -200.0;
            let mf = Facts { lo, hi: sf.hi, exact: false };
            let select = format!("select({}, {}, {})", self.name(keep), self.name(scores), self.name(fill));
            let m = self.push_op(ty, dims.clone(), mf, select);
            used.extend([row, col, halves, limit, keep, fill, m]);
            scores = m;
        }
        let kept = 1;
        let rf = Facts { lo, hi: sf.hi, exact: false };
        let (max, mb) = self.reduce_rows(scores, kept, "maximum", "-inf", rf);
        let df = Facts { lo: lo - sf.hi, hi: 0.0, exact: false };
        let d = self.push_op(ty, dims.clone(), df, format!("subtract({}, {})", self.name(scores), self.name(mb)));
        let ef = facts::unary("exponential", k, df)?;
        let e = self.push_op(ty, dims.clone(), ef, format!("exponential({})", self.name(d)));
        // The row's max contributes exp(0) = 1, so every sum is at least 1.
        let sum_f = Facts { lo: 1.0, hi: ef.hi * n as f64, exact: false };
        let (sum, sb) = self.reduce_rows(e, kept, "add", "0", sum_f);
        let qf = facts::binary("divide", k, ef, sum_f)?;
        let out = self.push_op(ty, dims, qf, format!("divide({}, {})", self.name(e), self.name(sb)));
        used.extend([max, mb, d, e, sum, sb]);
        self.used(&used);
        Some(out)
    }

    /// Batch norm's statistics: the sums of `a` and of `a * a` over every dimension but the
    /// last, `a` a new f32 parameter, combined elementwise. With the last dimension contiguous
    /// they are column reductions of one input shape that read `a`, which multi-output fusion
    /// merges into one kernel; sometimes `a` is large enough (64K elements) for
    /// `tree_reduction` to split them into blocks of rows first. Half the time `a` is the sum
    /// of two parameters, left for other ops or the results to read: a loop kernel of its
    /// own, which multi-output fusion merges into the sums' sweep, writing it as it goes.
    /// Half the time a column maximum of `a` joins them: another reducer, accumulated in the
    /// same f32 lanes, so in the same sweep.
    fn column_siblings(&mut self) -> Option<usize> {
        let ty = ElementType::F32;
        // The large form's values are small, so their column sums stay within a noisy value's
        // magnitude.
        let (dims, bound) = if self.rng.chance(0.3) {
            (vec![8, 64, self.rng.range(128, 160)], 0.1)
        } else {
            (vec![self.rng.range(2, 5), self.rng.range(2, 4), self.rng.range(8, 40)], 1.0)
        };
        let sum_of_two = self.rng.chance(0.5);
        // A sum of two parameters keeps the bound of one.
        let bound = if sum_of_two { bound / 2.0 } else { bound };
        let dist = ArgDist::Uniform { lo: -bound, hi: bound };
        let number = self.params_len();
        let p = self.param_with(ty, dims.clone(), dist, Facts::exact(-bound, bound), number);
        let k = kind(ty);
        let a = if sum_of_two {
            let number = self.params_len();
            let q = self.param_with(ty, dims.clone(), dist, Facts::exact(-bound, bound), number);
            let f = facts::binary("add", k, self.vals[p].facts, self.vals[q].facts)?;
            self.used(&[p, q]);
            self.push_op(ty, dims.clone(), f, format!("add({}, {})", self.name(p), self.name(q)))
        } else {
            self.used(&[p]);
            p
        };
        let f = self.vals[a].facts;
        let sq = facts::binary("multiply", k, f, f)?;
        let n = (dims[0] * dims[1]) as f64;
        let sum_f = Facts { lo: f.lo.min(0.0) * n, hi: f.hi.max(0.0) * n, exact: false };
        let sq_sum_f = Facts { lo: sq.lo.min(0.0) * n, hi: sq.hi.max(0.0) * n, exact: false };
        let Kind::Float(w) = k else { return None };
        if [sum_f.lo, sum_f.hi, sq_sum_f.hi].iter().any(|v| v.abs() > facts::noisy_mag(w)) {
            return None;
        }
        let out_f = facts::binary("subtract", k, sq_sum_f, sum_f)?;
        let aa = self.push_op(ty, dims.clone(), sq, format!("multiply({}, {})", self.name(a), self.name(a)));
        let init = self.constant(ty, "0");
        let comp = self.reducer("add", ty);
        let column_sum = |g: &mut Gen, x: usize, facts: Facts| {
            let op = format!("reduce({}, {init}), dimensions={{0,1}}, to_apply={comp}", g.name(x));
            g.push_op(ty, vec![dims[2]], facts, op)
        };
        let s1 = column_sum(self, a, sum_f);
        let s2 = column_sum(self, aa, sq_sum_f);
        let out = self.push_op(ty, vec![dims[2]], out_f, format!("subtract({}, {})", self.name(s2), self.name(s1)));
        self.used(&[aa, s1, s2]);
        if !self.rng.chance(0.5) {
            return Some(out);
        }
        // A column maximum of the same input accumulates in f32 lanes like the short sums, so
        // it joins their sweep (multi-output fusion merges by accumulator type).
        let ninf = self.constant(ty, "-inf");
        let max = self.reducer("maximum", ty);
        let op = format!("reduce({}, {ninf}), dimensions={{0,1}}, to_apply={max}", self.name(a));
        let m = self.push_op(ty, vec![dims[2]], Facts { lo: f.lo, hi: f.hi, exact: f.exact }, op);
        let both = facts::binary("add", k, out_f, self.vals[m].facts)?;
        let joined = self.push_op(ty, vec![dims[2]], both, format!("add({}, {})", self.name(out), self.name(m)));
        self.used(&[out, m]);
        Some(joined)
    }

    /// Two pairs of sibling loop kernels that read each other's results: `a = exp(x)` and
    /// `d = x * c` read `x`, `c = exp(y)` and `b = a + y` read `y`, and the dot of `b` and `d`
    /// is the result (`x`, `y` new f32 parameters in [-1, 1]; `a` and `c` also feed row
    /// maxima, so each is a kernel of its own). Merged as two groups, {a, d} and {c, b}, each
    /// kernel would compute from the other's results: multi-output fusion must keep them
    /// apart (`multi_output_fusion::closes_cycle`).
    fn crossed_siblings(&mut self) -> Option<usize> {
        let ty = ElementType::F32;
        let k = kind(ty);
        let dims = vec![self.rng.range(2, 6), self.rng.range(2, 4)];
        let dist = ArgDist::Uniform { lo: -1.0, hi: 1.0 };
        let f = Facts::exact(-1.0, 1.0);
        let number = self.params_len();
        let x = self.param_with(ty, dims.clone(), dist, f, number);
        let number = self.params_len();
        let y = self.param_with(ty, dims.clone(), dist, f, number);
        // Every value's range first: a pattern refused halfway would leave its ops behind.
        let ef = facts::unary("exponential", k, f)?;
        let bf = facts::binary("add", k, ef, f)?;
        let df = facts::binary("multiply", k, f, ef)?;
        let sf = facts::binary("add", k, ef, ef)?;
        let m = bf.mag() * df.mag() * dims[1] as f64;
        let pf = Facts { lo: -m, hi: m, exact: false };
        let of = facts::binary("add", k, pf, sf)?;
        let a = self.push_op(ty, dims.clone(), ef, format!("exponential({})", self.name(x)));
        let c = self.push_op(ty, dims.clone(), ef, format!("exponential({})", self.name(y)));
        let b = self.push_op(ty, dims.clone(), bf, format!("add({}, {})", self.name(a), self.name(y)));
        let d = self.push_op(ty, dims.clone(), df, format!("multiply({}, {})", self.name(x), self.name(c)));
        let init = self.constant(ty, "-inf");
        let comp = self.reducer("maximum", ty);
        let maxima: Vec<usize> = [a, c]
            .into_iter()
            .map(|e| {
                let op = format!("reduce({}, {init}), dimensions={{1}}, to_apply={comp}", self.name(e));
                self.push_op(ty, vec![dims[0]], ef, op)
            })
            .collect();
        let s = self.push_op(ty, vec![dims[0]], sf, format!("add({}, {})", self.name(maxima[0]), self.name(maxima[1])));
        let square = vec![dims[0], dims[0]];
        let sb = self.push_op(ty, square.clone(), sf, format!("broadcast({}), dimensions={{0}}", self.name(s)));
        let dot =
            format!("dot({}, {}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}", self.name(b), self.name(d));
        let p = self.push_op(ty, square.clone(), pf, dot);
        let out = self.push_op(ty, square, of, format!("add({}, {})", self.name(p), self.name(sb)));
        self.used(&[x, y, a, c, b, d, maxima[0], maxima[1], s, sb, p]);
        Some(out)
    }

    /// A row maximum over a windowed sum along the row, through a multiply (a scaled moving
    /// sum's maximum, subtracted from it, as a softmax over a moving average begins), `x` a
    /// new f32 parameter in [-1, 1] whose rows are 16 to 40 long and the window 4 to half as
    /// long: fusion puts the window's loop inside each lane of the row kernel's reduction
    /// loop. (A window over the whole row, `jnp.cumsum`, would stay its own kernel's root.)
    fn windowed_rows(&mut self) -> Option<usize> {
        let ty = ElementType::F32;
        let k = kind(ty);
        let n = self.rng.range(16, 40);
        let w = self.rng.range(4, n / 2);
        let dims = vec![self.rng.range(2, 5), n];
        let dist = ArgDist::Uniform { lo: -1.0, hi: 1.0 };
        let number = self.params_len();
        let sum_f = Facts { lo: -(w as f64), hi: w as f64, exact: false };
        let hf = Facts::exact(0.5, 0.5);
        let yf = facts::binary("multiply", k, sum_f, hf)?;
        let diff = facts::binary("subtract", k, yf, yf)?;
        let x = self.param_with(ty, dims.clone(), dist, Facts::exact(-1.0, 1.0), number);
        let zero = self.constant(ty, "0");
        let add = self.reducer("add", ty);
        let cs = self.push_op(
            ty,
            dims.clone(),
            sum_f,
            format!(
                "reduce-window({}, {zero}), window={{size=1x{w} pad=0_0x{}_0}}, to_apply={add}",
                self.name(x),
                w - 1
            ),
        );
        let half = self.constant(ty, "0.5");
        let h = self.push_op(ty, dims.clone(), hf, format!("broadcast({half}), dimensions={{}}"));
        let y = self.push_op(ty, dims.clone(), yf, format!("multiply({}, {})", self.name(cs), self.name(h)));
        let (r, b) = self.reduce_rows(y, 1, "maximum", "-inf", yf);
        let out = self.push_op(ty, dims, diff, format!("subtract({}, {})", self.name(y), self.name(b)));
        self.used(&[x, cs, h, y, r, b]);
        Some(out)
    }

    /// What the simplifiers rewrite: an identity with a constant the folder computes
    /// (`x + (0 + 0)`, `x * (1 * 1)`), the same expression twice (CSE), a select on a constant
    /// predicate, a transpose of a transpose.
    fn simplifiable(&mut self) -> Option<usize> {
        let a = self.pick(|v| v.ty != ElementType::Pred)?;
        let (ty, dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let k = kind(ty);
        let t = ty.name();
        match self.rng.range(0, 6) {
            5 => {
                // An integer divided by a constant power of two (a remainder too, unsigned): the
                // simplifier's shifts and mask, where the interpreter divides.
                let a = self.pick(|v| matches!(kind(v.ty), Kind::Signed(w) | Kind::Unsigned(w) if w >= 4))?;
                let (ty, dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
                let k = kind(ty);
                let (Kind::Signed(w) | Kind::Unsigned(w)) = k else { return None };
                let unsigned = matches!(k, Kind::Unsigned(_));
                let op = if unsigned && self.rng.chance(0.5) { "remainder" } else { "divide" };
                let shift = self.rng.range(1, i64::from(w.min(8)) - 2);
                let v = 1u64 << shift;
                let c = self.constant(ty, &v.to_string());
                let b = self.push_op(
                    ty,
                    dims.clone(),
                    Facts::exact(v as f64, v as f64),
                    format!("broadcast({c}), dimensions={{}}"),
                );
                let rf = facts::binary(op, k, f, self.vals[b].facts)?;
                let r = self.push_op(ty, dims, rf, format!("{op}({}, {})", self.name(a), self.name(b)));
                self.used(&[a, b]);
                Some(r)
            }
            4 => self.split_and_joined(a),
            3 => {
                // select(not(p), x, y): the simplifier swaps the branches.
                let b = self.like(ty, &dims);
                facts::compare(f, self.vals[b].facts)?;
                let dir = *self.rng.pick(DIRECTIONS);
                let p = self.push_op(
                    ElementType::Pred,
                    dims.clone(),
                    Facts::exact(0.0, 1.0),
                    format!("compare({}, {}), direction={dir}", self.name(a), self.name(b)),
                );
                let np = self.push_op(
                    ElementType::Pred,
                    dims.clone(),
                    Facts::exact(0.0, 1.0),
                    format!("not({})", self.name(p)),
                );
                let facts = f.join(&self.vals[b].facts);
                let r = self.push_op(
                    ty,
                    dims,
                    facts,
                    format!("select({}, {}, {})", self.name(np), self.name(a), self.name(b)),
                );
                self.used(&[a, b, p, np]);
                Some(r)
            }
            0 => {
                let (op, unit) = *self.rng.pick(&[("add", "0"), ("subtract", "0"), ("multiply", "1")]);
                let c = self.constant(ty, unit);
                let folded = self.fresh("k");
                let inner = if op == "multiply" { "multiply" } else { "add" };
                self.push_line(format!("{folded} = {t}[] {inner}({c}, {c})"));
                let b = self.push_op(
                    ty,
                    dims.clone(),
                    Facts::exact(0.0, 1.0),
                    format!("broadcast({folded}), dimensions={{}}"),
                );
                let r = self.push_op(ty, dims, f, format!("{op}({}, {})", self.name(a), self.name(b)));
                self.used(&[a, b]);
                Some(r)
            }
            1 if matches!(k, Kind::Float(_) | Kind::Signed(_)) => {
                let x =
                    self.push_op(ty, dims.clone(), facts::unary("negate", k, f)?, format!("negate({})", self.name(a)));
                let y =
                    self.push_op(ty, dims.clone(), facts::unary("negate", k, f)?, format!("negate({})", self.name(a)));
                let r =
                    self.push_op(ty, dims, self.vals[x].facts, format!("maximum({}, {})", self.name(x), self.name(y)));
                self.used(&[a, x, y]);
                Some(r)
            }
            1 => None,
            _ if dims.len() >= 2 => {
                let b = self.like(ty, &dims);
                let truth = self.rng.chance(0.5);
                let p = self.constant(ElementType::Pred, if truth { "true" } else { "false" });
                let pb = self.push_op(
                    ElementType::Pred,
                    dims.clone(),
                    Facts::exact(0.0, 1.0),
                    format!("broadcast({p}), dimensions={{}}"),
                );
                let facts = if truth { f } else { self.vals[b].facts };
                let s = self.push_op(
                    ty,
                    dims.clone(),
                    facts,
                    format!("select({}, {}, {})", self.name(pb), self.name(a), self.name(b)),
                );
                let mut perm: Vec<i64> = (0..dims.len() as i64).collect();
                self.rng.shuffle(&mut perm);
                let mid: Vec<i64> = perm.iter().map(|&p| dims[p as usize]).collect();
                let t1 = self.push_op(
                    ty,
                    mid.clone(),
                    facts,
                    format!("transpose({}), dimensions={{{}}}", self.name(s), list(&perm)),
                );
                let mut back: Vec<i64> = (0..dims.len() as i64).collect();
                self.rng.shuffle(&mut back);
                let out: Vec<i64> = back.iter().map(|&p| mid[p as usize]).collect();
                let r = self.push_op(
                    ty,
                    out,
                    facts,
                    format!("transpose({}), dimensions={{{}}}", self.name(t1), list(&back)),
                );
                self.used(&[a, b, pb, s, t1]);
                Some(r)
            }
            _ => None,
        }
    }

    /// `a` split in two along a dimension and joined again (the simplifier merges slices that
    /// continue each other), padded and sliced back inside itself (a slice inside a pad's
    /// operand), or concatenated with another value and sliced back inside one part (a slice
    /// inside one operand of a concatenate).
    fn split_and_joined(&mut self, a: usize) -> Option<usize> {
        let (ty, dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let k = (0..dims.len()).find(|&d| dims[d] >= 2)?;
        let full = |d: usize, range: String| -> String {
            (0..dims.len())
                .map(|i| if i == d { range.clone() } else { format!("[0:{}]", dims[i]) })
                .collect::<Vec<_>>()
                .join(", ")
        };
        if self.rng.chance(0.5) {
            let m = self.rng.range(1, dims[k] - 1);
            let (mut lo, mut hi) = (dims.clone(), dims.clone());
            lo[k] = m;
            hi[k] = dims[k] - m;
            let l =
                self.push_op(ty, lo, f, format!("slice({}), slice={{{}}}", self.name(a), full(k, format!("[0:{m}]"))));
            let h = self.push_op(
                ty,
                hi,
                f,
                format!("slice({}), slice={{{}}}", self.name(a), full(k, format!("[{m}:{}]", dims[k]))),
            );
            let r = self.push_op(
                ty,
                dims,
                f,
                format!("concatenate({}, {}), dimensions={{{k}}}", self.name(l), self.name(h)),
            );
            self.used(&[a, l, h]);
            return Some(r);
        }
        if self.rng.chance(0.4) {
            // A window inside a pad's operand: the simplifier slices the operand instead.
            let (lo, hi) = (self.rng.range(1, 3), self.rng.range(0, 2));
            let zero = self.constant(ty, "0");
            let mut padded = dims.clone();
            padded[k] += lo + hi;
            let config: Vec<String> =
                (0..dims.len()).map(|i| if i == k { format!("{lo}_{hi}") } else { "0_0".to_string() }).collect();
            let facts = f.join(&Facts::exact(0.0, 0.0));
            let pd =
                self.push_op(ty, padded, facts, format!("pad({}, {zero}), padding={}", self.name(a), config.join("x")));
            let start = lo + self.rng.range(0, dims[k] - 1);
            let limit = self.rng.range(start + 1, lo + dims[k]);
            let mut out = dims.clone();
            out[k] = limit - start;
            let r = self.push_op(
                ty,
                out,
                f,
                format!("slice({}), slice={{{}}}", self.name(pd), full(k, format!("[{start}:{limit}]"))),
            );
            self.used(&[a, pd]);
            return Some(r);
        }
        let b = self.like(ty, &dims);
        let mut joined = dims.clone();
        joined[k] *= 2;
        let facts = f.join(&self.vals[b].facts);
        let c = self.push_op(
            ty,
            joined,
            facts,
            format!("concatenate({}, {}), dimensions={{{k}}}", self.name(a), self.name(b)),
        );
        // A window inside the second part.
        let start = dims[k] + self.rng.range(0, dims[k] - 1);
        let limit = self.rng.range(start + 1, 2 * dims[k]);
        let mut out = dims.clone();
        out[k] = limit - start;
        let r = self.push_op(
            ty,
            out,
            self.vals[b].facts,
            format!("slice({}), slice={{{}}}", self.name(c), full(k, format!("[{start}:{limit}]"))),
        );
        self.used(&[a, b, c]);
        Some(r)
    }

    /// A bf16 op read as f32 through an explicit convert: under the default excess precision
    /// the convert reads the op's unrounded f32 result, and every backend must agree on it.
    fn widened_bf16(&mut self) -> Option<usize> {
        let bf16 = ElementType::BF16;
        let a = match self.pick(|v| v.ty == bf16) {
            Some(a) => a,
            None => {
                let rank = self.random_rank();
                let dims = self.random_dims(rank);
                self.param(bf16, dims)
            }
        };
        let dims = self.vals[a].dims.clone();
        let b = self.like(bf16, &dims);
        let op = *self.rng.pick(&["add", "subtract", "multiply", "divide"]);
        let k = kind(bf16);
        let facts = facts::binary(op, k, self.vals[a].facts, self.vals[b].facts)?;
        let wide = facts::convert(k, kind(ElementType::F32), facts)?;
        let r = self.push_op(bf16, dims.clone(), facts, format!("{op}({}, {})", self.name(a), self.name(b)));
        let c = self.push_op(ElementType::F32, dims, wide, format!("convert({})", self.name(r)));
        self.used(&[a, b, r]);
        Some(c)
    }

    /// A variadic (value, index) reduce along one dimension: argmax or argmin with the
    /// lowest index winning ties, sometimes with JAX's clause that a NaN wins (its exact
    /// reducer, which the lowering runs in lanes when the indices alone are read), and then
    /// sometimes reading the indices alone, as `jnp.argmax` does.
    fn arg_reduce(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty() && v.ty != ElementType::Pred && v.facts.exact)?;
        let (ty, dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let d = self.rng.below(dims.len() as u64) as usize;
        let max = self.rng.chance(0.5);
        let jax = ty.is_float() && self.rng.chance(0.5);
        let t = ty.name();
        let dir = if max { "GT" } else { "LT" };
        let comp = self.computation(&format!("arg{dir}_{t}{}", if jax { "_jax" } else { "" }), |c| {
            let mut lines = vec![
                format!("{c}.av = {t}[] parameter(0)"),
                format!("{c}.ai = s32[] parameter(1)"),
                format!("{c}.bv = {t}[] parameter(2)"),
                format!("{c}.bi = s32[] parameter(3)"),
            ];
            if jax {
                lines.push(format!("{c}.gt = pred[] compare({c}.av, {c}.bv), direction={dir}"));
                lines.push(format!("{c}.nan = pred[] compare({c}.av, {c}.av), direction=NE"));
                lines.push(format!("{c}.better = pred[] or({c}.gt, {c}.nan)"));
            } else {
                lines.push(format!("{c}.better = pred[] compare({c}.av, {c}.bv), direction={dir}"));
            }
            lines.extend([
                format!("{c}.eq = pred[] compare({c}.av, {c}.bv), direction=EQ"),
                format!("{c}.lower = pred[] compare({c}.ai, {c}.bi), direction=LT"),
                format!("{c}.tie = pred[] and({c}.eq, {c}.lower)"),
                format!("{c}.take = pred[] or({c}.better, {c}.tie)"),
                format!("{c}.v = {t}[] select({c}.better, {c}.av, {c}.bv)"),
                format!("{c}.i = s32[] select({c}.take, {c}.ai, {c}.bi)"),
                format!("ROOT {c}.r = ({t}[], s32[]) tuple({c}.v, {c}.i)"),
            ]);
            lines
        });
        let index = self.push_op(
            ElementType::S32,
            dims.clone(),
            Facts::exact(0.0, (dims[d] - 1) as f64),
            format!("iota(), iota_dimension={d}"),
        );
        let init_v = match (kind(ty), max) {
            (Kind::Float(_), true) => "-inf".to_string(),
            (Kind::Float(_), false) => "inf".to_string(),
            (k, true) => k.int_bounds().0.to_string(),
            (k, false) => k.int_bounds().1.to_string(),
        };
        let init_v = self.constant(ty, &init_v);
        let init_i = self.constant(ElementType::S32, "0");
        let out: Vec<i64> = (0..dims.len()).filter(|&i| i != d).map(|i| dims[i]).collect();
        let tuple_name = self.fresh("t");
        self.lines.push(format!(
            "{tuple_name} = ({}, {}) reduce({}, {}, {init_v}, {init_i}), dimensions={{{d}}}, to_apply={comp}",
            shape_text(ty, &out, ""),
            shape_text(ElementType::S32, &out, ""),
            self.name(a),
            self.name(index)
        ));
        self.used(&[a, index]);
        let indices_alone = jax && self.rng.chance(0.5);
        let v = (!indices_alone)
            .then(|| self.push_op(ty, out.clone(), f, format!("get-tuple-element({tuple_name}), index=0")));
        let i = self.push_op(
            ElementType::S32,
            out,
            Facts::exact(0.0, (dims[d] - 1) as f64),
            format!("get-tuple-element({tuple_name}), index=1"),
        );
        // Either output may end up unused: both are results then.
        Some(match v {
            Some(v) if self.rng.chance(0.5) => v,
            _ => i,
        })
    }

    /// A dot with random batch, contracting and free dimensions; the right operand is built
    /// to fit (usually a new parameter).
    fn dot(&mut self) -> Option<usize> {
        let a = self.pick(|v| (1..=3).contains(&v.dims.len()) && v.ty != ElementType::Pred)?;
        let (ty, dims, fa) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let rank = dims.len();
        let mut roles: Vec<usize> = (0..rank).collect();
        self.rng.shuffle(&mut roles);
        let contracting = if rank >= 2 && self.rng.chance(0.2) { 2 } else { 1 };
        let batch = if rank > contracting && self.rng.chance(0.3) { 1 } else { 0 };
        let lhs_c: Vec<usize> = roles[..contracting].to_vec();
        let lhs_b: Vec<usize> = roles[contracting..contracting + batch].to_vec();
        let lhs_free: Vec<usize> = (0..rank).filter(|d| !lhs_c.contains(d) && !lhs_b.contains(d)).collect();
        let free_rank = self.rng.range(0, 2 - batch as i64) as usize;
        let rhs_free_dims = self.random_dims(free_rank);
        // rhs dims in a random order of its roles: batch, contracting, free.
        let mut rhs_roles: Vec<(char, usize)> = Vec::new();
        rhs_roles.extend((0..batch).map(|i| ('b', i)));
        rhs_roles.extend((0..contracting).map(|i| ('c', i)));
        rhs_roles.extend((0..rhs_free_dims.len()).map(|i| ('f', i)));
        self.rng.shuffle(&mut rhs_roles);
        let mut rhs_dims = Vec::new();
        let (mut rhs_b, mut rhs_c) = (vec![0; batch], vec![0; contracting]);
        for (pos, &(role, i)) in rhs_roles.iter().enumerate() {
            match role {
                'b' => {
                    rhs_b[i] = pos;
                    rhs_dims.push(dims[lhs_b[i]]);
                }
                'c' => {
                    rhs_c[i] = pos;
                    rhs_dims.push(dims[lhs_c[i]]);
                }
                _ => rhs_dims.push(rhs_free_dims[i]),
            }
        }
        let mut out: Vec<i64> = lhs_b.iter().map(|&d| dims[d]).collect();
        out.extend(lhs_free.iter().map(|&d| dims[d]));
        // The result lists the rhs free dimensions in rhs order.
        out.extend(rhs_roles.iter().filter(|(role, _)| *role == 'f').map(|&(_, i)| rhs_free_dims[i]));
        if elements(&out) > MAX_ELEMENTS || elements(&rhs_dims) > MAX_ELEMENTS {
            return None;
        }
        let b = self.like(ty, &rhs_dims);
        let fb = self.vals[b].facts;
        let depth: i64 = lhs_c.iter().map(|&d| dims[d]).product();
        let k = kind(ty);
        let facts = match k {
            Kind::Float(w) => {
                let m = fa.mag() * fb.mag() * depth as f64;
                if m > facts::noisy_mag(w) {
                    return None;
                }
                Facts { lo: -m, hi: m, exact: false }
            }
            _ => {
                let m = fa.mag() * fb.mag() * depth as f64;
                let (lo, hi) = k.bounds();
                let (l, h) = if fa.lo >= 0.0 && fb.lo >= 0.0 { (0.0, m) } else { (-m, m) };
                if l >= lo && h <= hi {
                    Facts::exact(l, h)
                } else {
                    Facts::full(k)
                }
            }
        };
        let ints = |xs: &[usize]| list(&xs.iter().map(|&x| x as i64).collect::<Vec<_>>());
        let mut attrs = String::new();
        if batch > 0 {
            attrs.push_str(&format!(", lhs_batch_dims={{{}}}", ints(&lhs_b)));
        }
        attrs.push_str(&format!(", lhs_contracting_dims={{{}}}", ints(&lhs_c)));
        if batch > 0 {
            attrs.push_str(&format!(", rhs_batch_dims={{{}}}", ints(&rhs_b)));
        }
        attrs.push_str(&format!(", rhs_contracting_dims={{{}}}", ints(&rhs_c)));
        let (nl, nr) = (lhs_free.len(), out.len() - batch - lhs_free.len());
        let r = self.push_op(ty, out.clone(), facts, format!("dot({}, {}){attrs}", self.name(a), self.name(b)));
        self.used(&[a, b]);
        if nl > 0 && nr > 0 && self.rng.chance(0.3) {
            // The free groups swapped, as a training step transposes a weight gradient: the
            // simplifier computes dot(b, a) instead. Or, with a batch dimension, the batch moved
            // last (attention's heads moved beside the sequence), which no rewrite folds: layout
            // assignment lays the dot out in the transpose's order.
            let rank = out.len();
            let perm: Vec<i64> = if batch > 0 && self.rng.chance(0.5) {
                (1..rank).chain(0..1).map(|x| x as i64).collect()
            } else {
                (0..batch).chain(batch + nl..batch + nl + nr).chain(batch..batch + nl).map(|x| x as i64).collect()
            };
            let tdims = perm.iter().map(|&p| out[p as usize]).collect();
            let t =
                self.push_op(ty, tdims, facts, format!("transpose({}), dimensions={{{}}}", self.name(r), list(&perm)));
            self.used(&[r]);
            return Some(t);
        }
        Some(r)
    }

    /// Start indices into `dims`, one scalar per dimension: constants or parameters of one
    /// integer type, sometimes out of range (XLA clamps them).
    fn start_indices(&mut self, dims: &[i64]) -> Vec<String> {
        let ty = *self.rng.pick(&[ElementType::S32, ElementType::S32, ElementType::S64, ElementType::U32]);
        let low = if ty == ElementType::U32 { 0 } else { -3 };
        dims.iter()
            .map(|&d| {
                if self.rng.chance(0.5) {
                    let p = self.int_param(ty, low, d + 2);
                    self.used(&[p]);
                    self.name(p)
                } else {
                    let v = self.rng.range(low, d + 1);
                    self.constant(ty, &v.to_string())
                }
            })
            .collect()
    }

    fn dynamic_slice(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty())?;
        let (ty, dims, facts) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let sizes: Vec<i64> = dims.iter().map(|&d| self.rng.range(1, d)).collect();
        let names = self.start_indices(&dims);
        let r = self.push_op(
            ty,
            sizes.clone(),
            facts,
            format!("dynamic-slice({}, {}), dynamic_slice_sizes={{{}}}", self.name(a), names.join(", "), list(&sizes)),
        );
        self.used(&[a]);
        Some(r)
    }

    fn dynamic_update_slice(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty())?;
        let (ty, dims) = (self.vals[a].ty, self.vals[a].dims.clone());
        let sizes: Vec<i64> = dims.iter().map(|&d| self.rng.range(1, d)).collect();
        let update = self.like(ty, &sizes);
        let names = self.start_indices(&dims);
        let facts = self.vals[a].facts.join(&self.vals[update].facts);
        let r = self.push_op(
            ty,
            dims,
            facts,
            format!("dynamic-update-slice({}, {}, {})", self.name(a), self.name(update), names.join(", ")),
        );
        self.used(&[a, update]);
        Some(r)
    }
}
