//! Op families with index operands, windows and control flow: gather, scatter,
//! reduce-window, convolution, while (a counted loop) and conditional.

use tessera_hlo::ElementType;

use super::facts::{self, Facts, Kind};
use super::{elements, kind, list, shape_text, Gen, MAX_ELEMENTS};

/// `AxB` text of a window attribute field.
fn xs(v: &[i64]) -> String {
    v.iter().map(i64::to_string).collect::<Vec<_>>().join("x")
}

/// Output size of a window over `d` elements (XLA's formula), if at least one.
fn window_out(d: i64, size: i64, stride: i64, lo: i64, hi: i64, base: i64, dil: i64) -> Option<i64> {
    let padded = (d - 1) * base + 1 + lo + hi;
    let eff = (size - 1) * dil + 1;
    (padded >= eff).then(|| (padded - eff) / stride + 1)
}

impl Gen {
    /// Index vectors `[n, m]` into `m` operand dimensions, values sometimes out of range
    /// (gather clamps them, scatter skips such updates).
    fn index_param(&mut self, n: i64, bound: i64, m: usize) -> usize {
        let ty = *self.rng.pick(&[ElementType::S32, ElementType::S32, ElementType::S64]);
        let number = self.params_len();
        let dist = super::ArgDist::Int { lo: -2, hi: bound + 1 };
        let p = self.param_with(ty, vec![n, m as i64], dist, Facts::exact(-2.0, (bound + 1) as f64), number);
        self.used(&[p]);
        p
    }

    /// A gather of slices at `n` index vectors (like `jnp.take` and its generalizations):
    /// some indexed dimensions collapsed, the batch dimension anywhere among the offsets.
    pub(super) fn gather(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty())?;
        let (ty, dims, facts) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let rank = dims.len();
        let mut order: Vec<usize> = (0..rank).collect();
        self.rng.shuffle(&mut order);
        let m = self.rng.range(1, rank.min(2) as i64) as usize;
        let start_map: Vec<usize> = order[..m].to_vec();
        let collapsed: Vec<usize> = {
            let mut c: Vec<usize> = start_map.iter().copied().filter(|_| self.rng.chance(0.6)).collect();
            c.sort_unstable();
            c
        };
        let sizes: Vec<i64> =
            (0..rank).map(|d| if collapsed.contains(&d) { 1 } else { self.rng.range(1, dims[d]) }).collect();
        let n = self.rng.range(1, 6);
        let offsets = rank - collapsed.len();
        let out_rank = offsets + 1;
        let batch_at = self.rng.below(out_rank as u64) as usize;
        let offset_dims: Vec<i64> = (0..out_rank as i64).filter(|&d| d != batch_at as i64).collect();
        let kept: Vec<i64> = (0..rank).filter(|d| !collapsed.contains(d)).map(|d| sizes[d]).collect();
        let mut out = kept.clone();
        out.insert(batch_at, n);
        if elements(&out) > MAX_ELEMENTS {
            return None;
        }
        let bound = start_map.iter().map(|&d| dims[d]).max().unwrap_or(1);
        let idx = self.index_param(n, bound, m);
        let ints = |v: &[usize]| list(&v.iter().map(|&x| x as i64).collect::<Vec<_>>());
        let r = self.push_op(
            ty,
            out,
            facts,
            format!(
                "gather({}, {}), offset_dims={{{}}}, collapsed_slice_dims={{{}}}, start_index_map={{{}}}, \
                 index_vector_dim=1, slice_sizes={{{}}}",
                self.vals[a].name,
                self.vals[idx].name,
                list(&offset_dims),
                ints(&collapsed),
                ints(&start_map),
                list(&sizes)
            ),
        );
        self.used(&[a]);
        Some(r)
    }

    /// A scatter of `n` update windows combined by add, maximum or minimum (combiners for
    /// which duplicate indices leave no ordering question but float rounding).
    pub(super) fn scatter(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty() && v.ty != ElementType::Pred)?;
        let (ty, dims, fa) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let rank = dims.len();
        let mut order: Vec<usize> = (0..rank).collect();
        self.rng.shuffle(&mut order);
        let m = self.rng.range(1, rank.min(2) as i64) as usize;
        let to_operand: Vec<usize> = order[..m].to_vec();
        let mut inserted: Vec<usize> = to_operand.iter().copied().filter(|_| self.rng.chance(0.6)).collect();
        inserted.sort_unstable();
        let window: Vec<i64> =
            (0..rank).filter(|d| !inserted.contains(d)).map(|d| self.rng.range(1, dims[d])).collect();
        let n = self.rng.range(1, 5);
        let upd_rank = window.len() + 1;
        let scatter_at = self.rng.below(upd_rank as u64) as usize;
        let window_dims: Vec<i64> = (0..upd_rank as i64).filter(|&d| d != scatter_at as i64).collect();
        let mut upd_dims = window.clone();
        upd_dims.insert(scatter_at, n);
        let op = *self.rng.pick(&["add", "maximum", "minimum"]);
        let bound = to_operand.iter().map(|&d| dims[d]).max().unwrap_or(1);
        let idx = self.index_param(n, bound, m);
        let upd = self.like(ty, &upd_dims);
        let fu = self.vals[upd].facts;
        let facts = match (kind(ty), op) {
            (Kind::Float(w), "add") => {
                let m = fa.mag() + fu.mag() * n as f64;
                if m > facts::noisy_mag(w) {
                    return None;
                }
                Facts { lo: -m, hi: m, exact: false }
            }
            (k, "add") => {
                let (lo, hi) = (fa.lo + fu.lo.min(0.0) * n as f64, fa.hi + fu.hi.max(0.0) * n as f64);
                let (tlo, thi) = k.bounds();
                if lo >= tlo && hi <= thi {
                    Facts { lo, hi, exact: fa.exact && fu.exact }
                } else {
                    Facts::full(k)
                }
            }
            _ => fa.join(&fu),
        };
        let comp = self.reducer(op, ty);
        let ints = |v: &[usize]| list(&v.iter().map(|&x| x as i64).collect::<Vec<_>>());
        let r = self.push_op(
            ty,
            dims,
            facts,
            format!(
                "scatter({}, {}, {}), update_window_dims={{{}}}, inserted_window_dims={{{}}}, \
                 scatter_dims_to_operand_dims={{{}}}, index_vector_dim=1, to_apply={comp}",
                self.vals[a].name,
                self.vals[idx].name,
                self.vals[upd].name,
                list(&window_dims),
                ints(&inserted),
                ints(&to_operand)
            ),
        );
        self.used(&[a, upd]);
        Some(r)
    }

    /// A reduce-window: sizes, strides, padding and (for sums) base and window dilation.
    pub(super) fn reduce_window(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty() && v.ty != ElementType::Pred)?;
        let (ty, dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let k = kind(ty);
        let op = *self.rng.pick(&["add", "maximum", "minimum"]);
        let (mut size, mut stride, mut pad, mut base, mut dil, mut out) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for &d in &dims {
            let w = self.rng.range(1, d.min(3));
            let st = self.rng.range(1, 2);
            // Max and min pad less than a window and never dilate, so every window holds a
            // real element (an all-padding window would give the infinite init value).
            let (lo, hi, b, wd) = if op == "add" {
                let b = if self.rng.chance(0.15) { 2 } else { 1 };
                let wd = if self.rng.chance(0.15) { 2 } else { 1 };
                (self.rng.range(0, 1), self.rng.range(0, 1), b, wd)
            } else {
                (self.rng.range(0, w - 1), self.rng.range(0, w - 1), 1, 1)
            };
            out.push(window_out(d, w, st, lo, hi, b, wd)?);
            size.push(w);
            stride.push(st);
            pad.push(format!("{lo}_{hi}"));
            base.push(b);
            dil.push(wd);
        }
        let n: i64 = size.iter().product();
        let facts = match (k, op) {
            (Kind::Float(w), "add") => {
                let m = f.mag() * n as f64;
                if m > facts::noisy_mag(w) {
                    return None;
                }
                Facts { lo: f.lo.min(0.0) * n as f64, hi: f.hi.max(0.0) * n as f64, exact: false }
            }
            (_, "add") => {
                let (lo, hi) = (f.lo.min(0.0) * n as f64, f.hi.max(0.0) * n as f64);
                let (tlo, thi) = k.bounds();
                if lo >= tlo && hi <= thi {
                    Facts::exact(lo, hi)
                } else {
                    Facts::full(k)
                }
            }
            _ => f,
        };
        let init = match (k, op) {
            (_, "add") => "0".to_string(),
            (Kind::Float(_), "maximum") => "-inf".to_string(),
            (Kind::Float(_), _) => "inf".to_string(),
            (_, "maximum") => k.int_bounds().0.to_string(),
            _ => k.int_bounds().1.to_string(),
        };
        let init = self.constant(ty, &init);
        let comp = self.reducer(op, ty);
        let mut window = format!("size={} stride={} pad={}", xs(&size), xs(&stride), pad.join("x"));
        if base.iter().any(|&b| b != 1) {
            window.push_str(&format!(" lhs_dilate={}", xs(&base)));
        }
        if dil.iter().any(|&d| d != 1) {
            window.push_str(&format!(" rhs_dilate={}", xs(&dil)));
        }
        let r = self.push_op(
            ty,
            out,
            facts,
            format!("reduce-window({}, {init}), window={{{window}}}, to_apply={comp}", self.vals[a].name),
        );
        self.used(&[a]);
        Some(r)
    }

    /// A convolution with 1 or 2 spatial dimensions, every operand's dimensions in a random
    /// order (`dim_labels`), strides, padding, dilations and feature groups.
    pub(super) fn convolution(&mut self) -> Option<usize> {
        let ty = *self.rng.pick(&[
            ElementType::F32,
            ElementType::F32,
            ElementType::F64,
            ElementType::S32,
            ElementType::BF16,
        ]);
        let spatial = self.rng.range(1, 2) as usize;
        let groups = if self.rng.chance(0.2) { 2 } else { 1 };
        let (batch, ci, co) = (self.rng.range(1, 2), self.rng.range(1, 3), groups * self.rng.range(1, 2));
        let input: Vec<i64> = (0..spatial).map(|_| self.rng.range(1, 9)).collect();
        let (mut size, mut stride, mut pad, mut lhs_d, mut rhs_d, mut out_sp) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for &d in &input {
            let w = self.rng.range(1, 3);
            let st = self.rng.range(1, 2);
            let (lo, hi) = (self.rng.range(-1, 2), self.rng.range(-1, 2));
            let b = if self.rng.chance(0.15) { 2 } else { 1 };
            let wd = if self.rng.chance(0.15) { 2 } else { 1 };
            out_sp.push(window_out(d, w, st, lo, hi, b, wd)?);
            size.push(w);
            stride.push(st);
            pad.push(format!("{lo}_{hi}"));
            lhs_d.push(b);
            rhs_d.push(wd);
        }
        let labels = |g: &mut Gen, a: char, b: char| -> Vec<char> {
            let mut l: Vec<char> = vec![a, b];
            l.extend((0..spatial).map(|i| (b'0' + i as u8) as char));
            g.rng.shuffle(&mut l);
            l
        };
        let (lhs_l, rhs_l, out_l) = (labels(self, 'b', 'f'), labels(self, 'i', 'o'), labels(self, 'b', 'f'));
        let size_of = |l: char, b: i64, f: i64, sp: &[i64]| match l {
            'b' | 'i' => b,
            'f' | 'o' => f,
            c => sp[(c as u8 - b'0') as usize],
        };
        let lhs_dims: Vec<i64> = lhs_l.iter().map(|&l| size_of(l, batch, ci * groups, &input)).collect();
        let rhs_dims: Vec<i64> = rhs_l.iter().map(|&l| size_of(l, ci, co, &size)).collect();
        let out: Vec<i64> = out_l.iter().map(|&l| size_of(l, batch, co, &out_sp)).collect();
        if elements(&out) > MAX_ELEMENTS || elements(&lhs_dims) > MAX_ELEMENTS {
            return None;
        }
        let lhs = self.like(ty, &lhs_dims);
        let rhs = self.like(ty, &rhs_dims);
        let (fa, fb) = (self.vals[lhs].facts, self.vals[rhs].facts);
        let depth = ci * size.iter().product::<i64>();
        let m = fa.mag() * fb.mag() * depth as f64;
        let facts = match kind(ty) {
            Kind::Float(w) if m > facts::noisy_mag(w) => return None,
            Kind::Float(_) => Facts { lo: -m, hi: m, exact: false },
            k if m <= k.bounds().1 => Facts::exact(-m, m),
            k => Facts::full(k),
        };
        let mut window = format!("size={} stride={} pad={}", xs(&size), xs(&stride), pad.join("x"));
        if lhs_d.iter().any(|&b| b != 1) {
            window.push_str(&format!(" lhs_dilate={}", xs(&lhs_d)));
        }
        if rhs_d.iter().any(|&d| d != 1) {
            window.push_str(&format!(" rhs_dilate={}", xs(&rhs_d)));
        }
        let s = |l: &[char]| l.iter().collect::<String>();
        let groups_attr = if groups > 1 { format!(", feature_group_count={groups}") } else { String::new() };
        let r = self.push_op(
            ty,
            out,
            facts,
            format!(
                "convolution({}, {}), window={{{window}}}, dim_labels={}_{}->{}{groups_attr}",
                self.vals[lhs].name,
                self.vals[rhs].name,
                s(&lhs_l),
                s(&rhs_l),
                s(&out_l)
            ),
        );
        self.used(&[lhs, rhs]);
        Some(r)
    }

    /// A counted while loop carrying `(i, x)`: the body negates `x` (or, for integers, adds
    /// a loop-invariant value; or, as a scan does, writes `i` into row `i` of `x` with a
    /// dynamic-update-slice, which updates the loop state in place) and increments `i` until it
    /// reaches a trip count of 0 to 4.
    pub(super) fn while_loop(&mut self) -> Option<usize> {
        let a = self.pick(|v| v.ty != ElementType::Pred)?;
        let (ty, dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let trips = self.rng.range(0, 4);
        let int = !ty.is_float();
        let step = self.rng.range(if ty.is_unsigned_integral() { 0 } else { -2 }, 2);
        let scan = !dims.is_empty() && dims[0] >= 1 && self.rng.chance(0.3);
        let facts = if scan {
            // Rows keep their values or become a row index (clamped below the row count).
            let (lo, hi) = (f.lo.min(0.0), f.hi.max(trips as f64));
            if int {
                Facts::exact(lo, hi)
            } else {
                Facts { lo, hi, exact: f.exact }
            }
        } else if int {
            let (lo, hi) = (f.lo + (step.min(0) * trips) as f64, f.hi + (step.max(0) * trips) as f64);
            let (tlo, thi) = kind(ty).bounds();
            if lo >= tlo && hi <= thi {
                Facts::exact(lo, hi)
            } else {
                Facts::full(kind(ty))
            }
        } else {
            Facts { lo: -f.mag(), hi: f.mag(), exact: f.exact }
        };
        let x = shape_text(ty, &dims, "");
        // Extra elements for the while simplifiers: the initial value again, passed through
        // so that the body's use of it is loop-invariant code to hoist, and a counter nobody
        // reads after the loop, a dead element.
        let extras = self.rng.chance(0.5);
        let state = if extras { format!("(s32[], {x}, {x}, s32[])") } else { format!("(s32[], {x})") };
        let t = ty.name();
        // A float body may clamp through a call whose parameters are declared last first, as
        // JAX prints `clip` (an interpreter once matched call operands to declaration order).
        let clip = !int && self.rng.chance(0.5);
        let key = format!("while_{t}_{}_{trips}_{step}_{int}_{clip}_{scan}_{extras}", list(&dims).replace(',', "x"));
        let clamp = if clip {
            self.computation(&format!("{key}_clip"), |c| {
                vec![
                    format!("{c}.hi = {t}[] parameter(2)"),
                    format!("{c}.lo = {t}[] parameter(1)"),
                    format!("{c}.x = {x} parameter(0)"),
                    format!("{c}.lob = {x} broadcast({c}.lo), dimensions={{}}"),
                    format!("{c}.hib = {x} broadcast({c}.hi), dimensions={{}}"),
                    format!("{c}.m = {x} maximum({c}.x, {c}.lob)"),
                    format!("ROOT {c}.r = {x} minimum({c}.hib, {c}.m)"),
                ]
            })
        } else {
            String::new()
        };
        let body = self.computation(&format!("{key}_body"), |c| {
            let mut l = vec![
                format!("{c}.s = {state} parameter(0)"),
                format!("{c}.i = s32[] get-tuple-element({c}.s), index=0"),
                format!("{c}.x = {x} get-tuple-element({c}.s), index=1"),
                format!("{c}.one = s32[] constant(1)"),
                format!("{c}.next = s32[] add({c}.i, {c}.one)"),
            ];
            if scan {
                let mut row = dims.clone();
                row[0] = 1;
                let row = shape_text(ty, &row, "");
                l.push(format!("{c}.fi = {t}[] convert({c}.i)"));
                l.push(format!("{c}.u = {row} broadcast({c}.fi), dimensions={{}}"));
                l.push(format!("{c}.z = s32[] constant(0)"));
                let starts: Vec<String> =
                    std::iter::once(format!("{c}.i")).chain((1..dims.len()).map(|_| format!("{c}.z"))).collect();
                l.push(format!("{c}.y = {x} dynamic-update-slice({c}.x, {c}.u, {})", starts.join(", ")));
            } else if int {
                l.push(format!("{c}.k = {t}[] constant({step})"));
                l.push(format!("{c}.kb = {x} broadcast({c}.k), dimensions={{}}"));
                l.push(format!("{c}.y = {x} add({c}.x, {c}.kb)"));
            } else if clip {
                l.push(format!("{c}.neg = {x} negate({c}.x)"));
                l.push(format!("{c}.lo = {t}[] constant(-0.5)"));
                l.push(format!("{c}.hi = {t}[] constant(0.75)"));
                l.push(format!("{c}.y = {x} call({c}.neg, {c}.lo, {c}.hi), to_apply={clamp}"));
            } else {
                l.push(format!("{c}.y = {x} negate({c}.x)"));
            }
            if !extras {
                l.push(format!("ROOT {c}.r = {state} tuple({c}.next, {c}.y)"));
                return l;
            }
            // max(y, min(y, v)) is y for any v without NaN, which the inputs have none of.
            l.push(format!("{c}.w = {x} get-tuple-element({c}.s), index=2"));
            l.push(format!("{c}.v = {x} negate({c}.w)"));
            l.push(format!("{c}.mn = {x} minimum({c}.y, {c}.v)"));
            l.push(format!("{c}.y2 = {x} maximum({c}.y, {c}.mn)"));
            l.push(format!("{c}.d = s32[] get-tuple-element({c}.s), index=3"));
            l.push(format!("{c}.d1 = s32[] add({c}.d, {c}.one)"));
            l.push(format!("ROOT {c}.r = {state} tuple({c}.next, {c}.y2, {c}.w, {c}.d1)"));
            l
        });
        let cond = self.computation(&format!("{key}_cond"), |c| {
            vec![
                format!("{c}.s = {state} parameter(0)"),
                format!("{c}.i = s32[] get-tuple-element({c}.s), index=0"),
                format!("{c}.n = s32[] constant({trips})"),
                format!("ROOT {c}.lt = pred[] compare({c}.i, {c}.n), direction=LT"),
            ]
        });
        let zero = self.constant(ElementType::S32, "0");
        let init = self.fresh("t");
        let a_name = &self.vals[a].name;
        let elements = if extras { format!("{zero}, {a_name}, {a_name}, {zero}") } else { format!("{zero}, {a_name}") };
        self.push_line(format!("{init} = {state} tuple({elements})"));
        let w = self.fresh("w");
        self.push_line(format!("{w} = {state} while({init}), condition={cond}, body={body}"));
        self.used(&[a]);
        Some(self.push_op(ty, dims, facts, format!("get-tuple-element({w}), index=1")))
    }

    /// A conditional on a compare (two branches) or on an s32 index, out-of-range values
    /// included (three branches; XLA runs the last).
    pub(super) fn conditional(&mut self) -> Option<usize> {
        let a = self.pick(|v| v.ty != ElementType::Pred)?;
        let (ty, dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let x = shape_text(ty, &dims, "");
        let ops: &[&str] = if ty.is_float() || kind(ty) != Kind::Pred && ty.is_signed_integral() {
            &["negate", "abs", "copy"]
        } else {
            &["not", "copy"]
        };
        let branch = |g: &mut Gen, op: &str| {
            g.computation(&format!("branch_{op}_{}_{}", ty.name(), list(&dims).replace(',', "x")), |c| {
                vec![format!("{c}.x = {x} parameter(0)"), format!("ROOT {c}.r = {x} {op}({c}.x)")]
            })
        };
        let facts = match kind(ty) {
            Kind::Unsigned(_) => Facts::full(kind(ty)),
            Kind::Signed(_) if f.lo <= kind(ty).bounds().0 => Facts::full(kind(ty)),
            _ => Facts { lo: -f.mag(), hi: f.mag(), exact: f.exact },
        };
        // Every branch takes its own operand: here all of them `a`.
        let (selector, attrs, branches) = if self.rng.chance(0.5) {
            // A constant index (in range or not) is what the conditional simplifier folds.
            let selector = if self.rng.chance(0.3) {
                let k = self.rng.range(-1, 3);
                self.constant(ElementType::S32, &k.to_string())
            } else {
                let s = self.int_param(ElementType::S32, -1, 3);
                self.used(&[s]);
                self.vals[s].name.clone()
            };
            let names: Vec<String> = (0..3).map(|i| branch(self, ops[i % ops.len()])).collect();
            (selector, format!("branch_computations={{{}}}", names.join(", ")), 3)
        } else {
            let p = self.pick(|v| v.ty == ElementType::Pred && v.dims.is_empty() && v.facts.exact);
            let p = match p {
                Some(p) => p,
                None => self.param(ElementType::Pred, vec![]),
            };
            self.used(&[p]);
            let (t, e) = (branch(self, ops[0]), branch(self, ops[ops.len() - 1]));
            (self.vals[p].name.clone(), format!("true_computation={t}, false_computation={e}"), 2)
        };
        let operands = vec![self.vals[a].name.clone(); branches].join(", ");
        let r = self.push_op(ty, dims, facts, format!("conditional({selector}, {operands}), {attrs}"));
        self.used(&[a]);
        Some(r)
    }
}

impl Gen {
    /// A stable sort along one dimension by exact keys, carrying up to two more operands of
    /// the same dimensions; the comparator is LT, GT or TOTALORDER on the keys.
    pub(super) fn sort(&mut self) -> Option<usize> {
        let keys = self.pick(|v| !v.dims.is_empty() && v.facts.exact)?;
        let (kty, dims) = (self.vals[keys].ty, self.vals[keys].dims.clone());
        let d = self.rng.below(dims.len() as u64) as usize;
        let mut ops = vec![keys];
        for _ in 0..self.rng.range(0, 2) {
            let other = self.pick(|v| v.dims == dims).unwrap_or(keys);
            ops.push(other);
        }
        let dir = *self.rng.pick(&["LT", "GT"]);
        let total = if kty.is_float() && self.rng.chance(0.3) { ", type=TOTALORDER" } else { "" };
        let types: Vec<ElementType> = ops.iter().map(|&o| self.vals[o].ty).collect();
        let key = format!(
            "sort_{dir}{}_{}",
            if total.is_empty() { "" } else { "T" },
            types.iter().map(|t| t.name()).collect::<Vec<_>>().join("_")
        );
        let cmp = self.computation(&key, |c| {
            let mut l = Vec::new();
            for (i, t) in types.iter().enumerate() {
                l.push(format!("{c}.a{i} = {}[] parameter({})", t.name(), 2 * i));
                l.push(format!("{c}.b{i} = {}[] parameter({})", t.name(), 2 * i + 1));
            }
            l.push(format!("ROOT {c}.r = pred[] compare({c}.a0, {c}.b0), direction={dir}{total}"));
            l
        });
        let names: Vec<String> = ops.iter().map(|&o| self.vals[o].name.clone()).collect();
        let attrs = format!("dimensions={{{d}}}, is_stable=true, to_apply={cmp}");
        self.used(&ops);
        if ops.len() == 1 {
            let f = self.vals[keys].facts;
            return Some(self.push_op(kty, dims, f, format!("sort({}), {attrs}", names[0])));
        }
        let shapes: Vec<String> = types.iter().map(|&t| shape_text(t, &dims, "")).collect();
        let t = self.fresh("t");
        self.push_line(format!("{t} = ({}) sort({}), {attrs}", shapes.join(", "), names.join(", ")));
        let mut last = None;
        for (i, &o) in ops.iter().enumerate() {
            let f = self.vals[o].facts;
            last = Some(self.push_op(types[i], dims.clone(), f, format!("get-tuple-element({t}), index={i}")));
        }
        last
    }

    /// `topk` of exact values along the last dimension: values and their s32 indices.
    pub(super) fn topk(&mut self) -> Option<usize> {
        let a = self.pick(|v| !v.dims.is_empty() && v.facts.exact && v.ty != ElementType::Pred)?;
        let (ty, mut dims, f) = (self.vals[a].ty, self.vals[a].dims.clone(), self.vals[a].facts);
        let last = *dims.last()?;
        let k = self.rng.range(1, last.min(5));
        let largest = self.rng.chance(0.7);
        *dims.last_mut()? = k;
        let t = self.fresh("t");
        self.push_line(format!(
            "{t} = ({}, {}) topk({}), k={k}, largest={largest}",
            shape_text(ty, &dims, ""),
            shape_text(ElementType::S32, &dims, ""),
            self.vals[a].name
        ));
        self.used(&[a]);
        let v = self.push_op(ty, dims.clone(), f, format!("get-tuple-element({t}), index=0"));
        let i = self.push_op(
            ElementType::S32,
            dims,
            Facts::exact(0.0, (last - 1) as f64),
            format!("get-tuple-element({t}), index=1"),
        );
        Some(if self.rng.chance(0.5) { v } else { i })
    }
}
