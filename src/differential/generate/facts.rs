//! What the generator knows about a value: bounds on every element and whether every backend
//! must compute it bit for bit. Each op is admitted only where its result stays meaningful
//! to compare:
//!
//! - Floats stay finite and at most [`MAX_MAG`] in magnitude, and never meet a singularity
//!   (log of a non-positive value, a denominator near zero), so no NaN or infinity appears
//!   and a NaN's payload never matters.
//! - A value is *exact* when every backend must produce the same bits: integer and predicate
//!   arithmetic, data movement, and the IEEE-correctly-rounded float ops (add, subtract,
//!   multiply, divide, sqrt, max, min, converts). f16/bf16 arithmetic in f32 then rounded is
//!   exact too: f32 has more than twice their precision plus two bits, so the double rounding
//!   is innocuous. Transcendentals (libm vs. the interpreter's f64 then rounded), float sums
//!   (the order of a reduction or GEMM) and everything computed from them are *noisy*:
//!   within a few ulps.
//! - A noisy value only feeds continuous ops, whose result moves as little as their input
//!   does, and stays within [`NOISY_MAG`]: a compare, floor, convert to an integer or
//!   bitcast of a value that is only ulp-accurate could flip and differ for no bug.

/// Largest magnitude a float value may reach (f16's maximum is 65504).
pub const MAX_MAG: f64 = 1e4;

/// Largest magnitude of a noisy f32/f64 value, so absolute errors stay within a few ulps of
/// this (the comparison's tolerance is scaled to it: `compare.rs`).
pub const NOISY_MAG: f64 = 64.0;

/// The same for f16 and bf16, whose ulps are far larger.
pub const NOISY_MAG_HALF: f64 = 4.0;

/// The largest magnitude a noisy value of a float type of `width` bits may reach.
pub fn noisy_mag(width: u32) -> f64 {
    if width <= 16 {
        NOISY_MAG_HALF
    } else {
        NOISY_MAG
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Facts {
    pub lo: f64,
    pub hi: f64,
    pub exact: bool,
}

/// The kind of element type an op sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A float type of this many bits.
    Float(u32),
    Signed(u32),
    Unsigned(u32),
    Pred,
}

impl Kind {
    /// The exact bounds of an integer kind (0 and 1 for predicates and floats).
    pub fn int_bounds(self) -> (i128, i128) {
        match self {
            Kind::Signed(w) => (-(1i128 << (w - 1)), (1i128 << (w - 1)) - 1),
            Kind::Unsigned(w) => (0, (1i128 << w) - 1),
            _ => (0, 1),
        }
    }

    pub fn bounds(self) -> (f64, f64) {
        match self {
            Kind::Float(_) => (-MAX_MAG, MAX_MAG),
            Kind::Signed(w) => (-(2f64.powi(w as i32 - 1)), 2f64.powi(w as i32 - 1) - 1.0),
            Kind::Unsigned(w) => (0.0, 2f64.powi(w as i32) - 1.0),
            Kind::Pred => (0.0, 1.0),
        }
    }
}

impl Facts {
    pub fn exact(lo: f64, hi: f64) -> Facts {
        Facts { lo, hi, exact: true }
    }

    pub fn full(kind: Kind) -> Facts {
        let (lo, hi) = kind.bounds();
        Facts::exact(lo, hi)
    }

    pub fn mag(&self) -> f64 {
        self.lo.abs().max(self.hi.abs())
    }

    pub fn join(&self, o: &Facts) -> Facts {
        Facts { lo: self.lo.min(o.lo), hi: self.hi.max(o.hi), exact: self.exact && o.exact }
    }

    /// Whether every element is at least `d` away from zero.
    fn away_from_zero(&self, d: f64) -> bool {
        self.lo >= d || self.hi <= -d
    }
}

/// The result of `lo..hi` under `kind`: integers out of range wrap, so anything is possible;
/// floats past [`MAX_MAG`] (or noisy ones past [`NOISY_MAG`]) are refused.
fn settle(kind: Kind, lo: f64, hi: f64, exact: bool) -> Option<Facts> {
    if !(lo.is_finite() && hi.is_finite()) || lo > hi {
        return None;
    }
    match kind {
        Kind::Float(w) => {
            let mag = lo.abs().max(hi.abs());
            let limit = if exact { MAX_MAG } else { noisy_mag(w) };
            (mag <= limit).then_some(Facts { lo, hi, exact })
        }
        _ => {
            let (tlo, thi) = kind.bounds();
            if lo < tlo || hi > thi {
                Some(Facts { lo: tlo, hi: thi, exact })
            } else {
                Some(Facts { lo, hi, exact })
            }
        }
    }
}

fn monotone(kind: Kind, a: Facts, exact: bool, f: impl Fn(f64) -> f64) -> Option<Facts> {
    let (x, y) = (f(a.lo), f(a.hi));
    settle(kind, x.min(y), x.max(y), exact)
}

fn corners(kind: Kind, a: Facts, b: Facts, exact: bool, f: impl Fn(f64, f64) -> f64) -> Option<Facts> {
    let v = [f(a.lo, b.lo), f(a.lo, b.hi), f(a.hi, b.lo), f(a.hi, b.hi)];
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    settle(kind, lo, hi, exact)
}

/// Float ops whose libm or f64-then-rounded results may differ in the last place.
fn is_noise_source(op: &str) -> bool {
    matches!(
        op,
        "exponential"
            | "exponential-minus-one"
            | "log"
            | "log-plus-one"
            | "rsqrt"
            | "cbrt"
            | "sine"
            | "cosine"
            | "tan"
            | "tanh"
            | "logistic"
            | "erf"
            | "power"
            | "atan2"
    )
}

/// Ops whose result jumps where the input moves by an ulp: only exact inputs.
fn is_discontinuous(op: &str) -> bool {
    matches!(
        op,
        "floor" | "ceil" | "round-nearest-afz" | "round-nearest-even" | "sign" | "remainder" | "atan2" | "is-finite"
    )
}

/// Facts of unary `op` on `a` in type `kind`, or `None` where the op is not admitted.
pub fn unary(op: &str, kind: Kind, a: Facts) -> Option<Facts> {
    if !a.exact && is_discontinuous(op) {
        return None;
    }
    let exact = a.exact && !(matches!(kind, Kind::Float(_)) && is_noise_source(op));
    // Singular ops keep a margin from their singularity, wider for noisy inputs.
    let margin = if a.exact { 1e-3 } else { 0.5 };
    match (kind, op) {
        (_, "negate") => match kind {
            Kind::Float(_) => monotone(kind, a, exact, |x| -x),
            Kind::Signed(_) if a.lo > kind.bounds().0 => settle(kind, -a.hi, -a.lo, exact),
            Kind::Signed(_) | Kind::Unsigned(_) => Some(Facts::full(kind)),
            Kind::Pred => None,
        },
        (_, "abs") => match kind {
            Kind::Pred => None,
            Kind::Unsigned(_) => Some(a),
            Kind::Signed(_) if a.lo <= kind.bounds().0 => Some(Facts::full(kind)),
            _ => {
                let lo = if a.lo <= 0.0 && a.hi >= 0.0 { 0.0 } else { a.lo.abs().min(a.hi.abs()) };
                settle(kind, lo, a.mag(), exact)
            }
        },
        (Kind::Pred, "not") => Some(a),
        (Kind::Signed(_), "not") => settle(kind, -a.hi - 1.0, -a.lo - 1.0, exact),
        (Kind::Unsigned(_), "not") => Some(Facts::full(kind)),
        (Kind::Signed(w) | Kind::Unsigned(w), "popcnt" | "count-leading-zeros") => Some(Facts::exact(0.0, w as f64)),
        (Kind::Signed(_) | Kind::Unsigned(_) | Kind::Float(_), "sign") => {
            settle(kind, a.lo.signum(), a.hi.signum(), exact)
        }
        (Kind::Float(_), _) => float_unary(op, kind, a, exact, margin),
        _ => None,
    }
}

fn float_unary(op: &str, k: Kind, a: Facts, exact: bool, margin: f64) -> Option<Facts> {
    match op {
        "exponential" if a.hi <= 8.0 => monotone(k, a, exact, f64::exp),
        "exponential-minus-one" if a.hi <= 8.0 => monotone(k, a, exact, f64::exp_m1),
        "log" if a.lo >= margin => monotone(k, a, exact, f64::ln),
        "log-plus-one" if a.lo >= margin - 1.0 => monotone(k, a, exact, f64::ln_1p),
        "sqrt" if a.lo >= 0.0 && (a.exact || a.lo >= margin) => monotone(k, a, exact, f64::sqrt),
        "rsqrt" if a.lo >= margin.max(1e-2) => monotone(k, a, exact, |x| 1.0 / x.sqrt()),
        "cbrt" => monotone(k, a, exact, f64::cbrt),
        "sine" | "cosine" => settle(k, -1.0, 1.0, exact),
        "tan" if a.mag() <= 1.3 => monotone(k, a, exact, f64::tan),
        "tanh" => monotone(k, a, exact, f64::tanh),
        "logistic" => monotone(k, a, exact, |x| 1.0 / (1.0 + (-x).exp())),
        "erf" => settle(k, -1.0, 1.0, exact),
        "floor" => monotone(k, a, exact, f64::floor),
        "ceil" => monotone(k, a, exact, f64::ceil),
        "round-nearest-afz" | "round-nearest-even" => monotone(k, a, exact, f64::round),
        _ => None,
    }
}

/// Facts of binary `op` on `a` and `b` in type `kind`, or `None` where it is not admitted.
pub fn binary(op: &str, kind: Kind, a: Facts, b: Facts) -> Option<Facts> {
    let both_exact = a.exact && b.exact;
    if !both_exact && is_discontinuous(op) {
        return None;
    }
    let exact = both_exact && !(matches!(kind, Kind::Float(_)) && is_noise_source(op));
    let margin = if both_exact { 0.25 } else { 0.5 };
    match (kind, op) {
        (_, "add") if kind != Kind::Pred => settle(kind, a.lo + b.lo, a.hi + b.hi, exact),
        (_, "subtract") if kind != Kind::Pred => settle(kind, a.lo - b.hi, a.hi - b.lo, exact),
        (_, "multiply") if kind != Kind::Pred => corners(kind, a, b, exact, |x, y| x * y),
        (_, "maximum") => settle(kind, a.lo.max(b.lo), a.hi.max(b.hi), exact),
        (_, "minimum") => settle(kind, a.lo.min(b.lo), a.hi.min(b.hi), exact),
        (Kind::Float(_), "divide") if b.away_from_zero(margin) => corners(kind, a, b, exact, |x, y| x / y),
        (Kind::Float(_), "remainder") if b.away_from_zero(margin) => {
            let m = a.mag().min(b.mag());
            settle(kind, if a.lo < 0.0 { -m } else { 0.0 }, if a.hi > 0.0 { m } else { 0.0 }, exact)
        }
        (Kind::Float(_), "power") if a.lo >= margin && b.mag() <= 3.0 => corners(kind, a, b, exact, f64::powf),
        (Kind::Float(_), "atan2") => settle(kind, -std::f64::consts::PI, std::f64::consts::PI, exact),
        // x/0 is -1 (or all ones unsigned), INT_MIN/-1 wraps: anything within |x| and -1.
        (Kind::Signed(_), "divide" | "remainder") => {
            let m = a.mag();
            settle(kind, (-m).min(-1.0), m, exact)
        }
        (Kind::Unsigned(_), "divide") => Some(Facts::full(kind)),
        (Kind::Unsigned(_), "remainder") => settle(kind, 0.0, a.hi, exact),
        (Kind::Pred, "and" | "or" | "xor") => Some(Facts::exact(0.0, 1.0)),
        (Kind::Signed(_) | Kind::Unsigned(_), "and" | "or" | "xor") => {
            if a.lo >= 0.0 && b.lo >= 0.0 {
                let top = a.hi.max(b.hi).max(1.0);
                let ones = 2f64.powi(top.log2().floor() as i32 + 1) - 1.0;
                settle(kind, 0.0, ones, exact)
            } else {
                Some(Facts::full(kind))
            }
        }
        (Kind::Signed(_) | Kind::Unsigned(_), "shift-left" | "shift-right-logical" | "shift-right-arithmetic") => {
            Some(Facts::full(kind))
        }
        _ => None,
    }
}

/// Facts of a compare: exact operands only (a predicate cannot be "nearly" true).
pub fn compare(a: Facts, b: Facts) -> Option<Facts> {
    (a.exact && b.exact).then(|| Facts::exact(0.0, 1.0))
}

/// Facts of converting `a` from `from` to `to`.
pub fn convert(from: Kind, to: Kind, a: Facts) -> Option<Facts> {
    match (from, to) {
        // A noisy value widened keeps its narrow type's noise, which the wide type's
        // tolerance does not allow for.
        (Kind::Float(w), Kind::Float(v)) if !a.exact && v > w => None,
        (Kind::Float(_), Kind::Float(_)) => settle(to, a.lo, a.hi, a.exact),
        // Truncation toward zero is discontinuous; out-of-range values saturate.
        (Kind::Float(_), Kind::Pred) => a.exact.then(|| Facts::exact(0.0, 1.0)),
        (Kind::Float(_), _) => {
            if !a.exact {
                return None;
            }
            let (tlo, thi) = to.bounds();
            Some(Facts::exact(a.lo.trunc().clamp(tlo, thi), a.hi.trunc().clamp(tlo, thi)))
        }
        (_, Kind::Float(_)) => settle(to, a.lo, a.hi, a.exact),
        (_, Kind::Pred) => Some(Facts::exact(0.0, 1.0)),
        _ => settle(to, a.lo, a.hi, a.exact),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noisy_values_feed_only_continuous_ops() {
        let x = Facts::exact(-1.0, 1.0);
        let e = unary("exponential", Kind::Float(32), x).unwrap();
        assert!(!e.exact && (e.lo - (-1f64).exp()).abs() < 1e-12);
        assert!(unary("floor", Kind::Float(32), e).is_none());
        assert!(compare(e, x).is_none());
        assert!(convert(Kind::Float(32), Kind::Signed(32), e).is_none());
        assert!(convert(Kind::Float(32), Kind::Float(64), e).is_none());
        assert!(convert(Kind::Float(32), Kind::Float(16), e).is_some());
        assert!(binary("add", Kind::Float(32), e, x).is_some_and(|f| !f.exact));
        assert!(unary("floor", Kind::Float(32), x).is_some_and(|f| f.exact));
    }

    #[test]
    fn singularities_and_overflow_are_refused() {
        let x = Facts::exact(-1.0, 1.0);
        assert!(unary("log", Kind::Float(32), x).is_none());
        assert!(binary("divide", Kind::Float(32), x, x).is_none());
        assert!(binary("divide", Kind::Float(32), x, Facts::exact(0.5, 2.0)).is_some());
        let big = Facts::exact(-5e3, 5e3);
        assert!(binary("multiply", Kind::Float(32), big, big).is_none());
        assert!(unary("exponential", Kind::Float(32), Facts::exact(0.0, 9.0)).is_none());
    }

    #[test]
    fn integers_wrap_to_their_full_range() {
        let s8 = Kind::Signed(8);
        let f = binary("multiply", s8, Facts::exact(-100.0, 100.0), Facts::exact(-100.0, 100.0)).unwrap();
        assert_eq!((f.lo, f.hi), (-128.0, 127.0));
        let g = binary("add", s8, Facts::exact(-8.0, 7.0), Facts::exact(-8.0, 7.0)).unwrap();
        assert_eq!((g.lo, g.hi), (-16.0, 14.0));
        assert_eq!(unary("negate", s8, Facts::full(s8)).unwrap(), Facts::full(s8));
    }
}
