//! Index algebra for the lowering (DESIGN.md section 5): sums, scalings, divisions and
//! remainders of kernel [`IndexExpr`]s, simplified with the bounds of the loop variables and
//! index values they read, so layout div/mod that the loop structure makes trivial disappear.
//!
//! Every function here assumes the expressions it divides are non-negative when evaluated
//! (operand indices of in-bounds elements always are). A division or remainder the rules
//! cannot fold is handed to a `materialize` callback, which defines the dividend once as an
//! `Op::Index` value; the result then reads that value through a div/mod term.

use std::collections::HashMap;

use crate::kernel::{IndexExpr, IndexSrc, Term, ValueId, VarId};

/// Inclusive value ranges of the variables and index values an expression may read.
#[derive(Clone, Debug, Default)]
pub struct Bounds {
    vars: HashMap<VarId, (i64, i64)>,
    values: HashMap<ValueId, (i64, i64)>,
}

impl Bounds {
    pub fn set_var(&mut self, v: VarId, lo: i64, hi: i64) {
        self.vars.insert(v, (lo, hi));
    }
    pub fn set_value(&mut self, v: ValueId, lo: i64, hi: i64) {
        self.values.insert(v, (lo, hi));
    }

    fn src(&self, s: IndexSrc) -> (i64, i64) {
        let r = match s {
            IndexSrc::Var(v) => self.vars.get(&v),
            IndexSrc::Value(v) => self.values.get(&v),
        };
        // An unknown source is only non-negative (the callers' precondition).
        r.copied().unwrap_or((0, i64::MAX / 4))
    }

    pub fn term_range(&self, t: &Term) -> (i64, i64) {
        let (lo, hi) = self.src(t.src);
        let (mut lo, mut hi) = (lo.max(0) / t.div, hi.max(0) / t.div);
        if let Some(m) = t.modulo {
            if hi >= m || lo / m != hi / m {
                lo = 0;
                hi = m - 1;
            } else {
                lo %= m;
                hi %= m;
            }
        }
        let (a, b) = (lo.saturating_mul(t.scale), hi.saturating_mul(t.scale));
        (a.min(b), a.max(b))
    }

    /// The inclusive range of values `e` takes.
    pub fn range(&self, e: &IndexExpr) -> (i64, i64) {
        e.terms.iter().fold((e.offset, e.offset), |(lo, hi), t| {
            let (a, b) = self.term_range(t);
            (lo.saturating_add(a), hi.saturating_add(b))
        })
    }
}

/// Puts `terms` in normal form: equal (source, div, modulo) merged, zero scales dropped,
/// `(x/a % m)*a*s + (x/(a*m))*a*m*s` folded back into `(x/a)*a*s`, in a canonical order.
fn normalize(mut e: IndexExpr) -> IndexExpr {
    loop {
        let mut merged: Vec<Term> = Vec::with_capacity(e.terms.len());
        for t in e.terms.drain(..) {
            if t.scale == 0 {
                continue;
            }
            match merged.iter_mut().find(|m| m.src == t.src && m.div == t.div && m.modulo == t.modulo) {
                Some(m) => m.scale += t.scale,
                None => merged.push(t),
            }
        }
        merged.retain(|t| t.scale != 0);
        // Digit recombination: low digit ((x/a)%m)*s and high digit (x/(a*m)...)*s*m.
        let mut changed = false;
        'outer: for i in 0..merged.len() {
            let lo = merged[i];
            let Some(m) = lo.modulo else { continue };
            for j in 0..merged.len() {
                let hi = merged[j];
                if i == j || hi.src != lo.src || Some(hi.div) != lo.div.checked_mul(m) {
                    continue;
                }
                if hi.scale != lo.scale.saturating_mul(m) {
                    continue;
                }
                // hi = ((x/(a*m)) % M) * s*m combines with lo into ((x/a) % (M*m)) * s.
                let modulo = match hi.modulo {
                    None => None,
                    Some(big) => match big.checked_mul(m) {
                        Some(v) => Some(v),
                        None => continue,
                    },
                };
                let new = Term { src: lo.src, div: lo.div, modulo, scale: lo.scale };
                let (a, b) = (i.max(j), i.min(j));
                merged.remove(a);
                merged.remove(b);
                merged.push(new);
                changed = true;
                break 'outer;
            }
        }
        e.terms = merged;
        if !changed {
            break;
        }
    }
    e.terms.sort_by_key(|t| (t.src, t.div, t.modulo, t.scale));
    e
}

pub fn constant(c: i64) -> IndexExpr {
    IndexExpr::constant(c)
}

pub fn var(v: VarId) -> IndexExpr {
    IndexExpr::var(v, 1)
}

pub fn value(v: ValueId) -> IndexExpr {
    IndexExpr { terms: vec![Term { src: IndexSrc::Value(v), div: 1, modulo: None, scale: 1 }], offset: 0 }
}

pub fn add(a: &IndexExpr, b: &IndexExpr) -> IndexExpr {
    let mut terms = a.terms.clone();
    terms.extend(b.terms.iter().copied());
    normalize(IndexExpr { terms, offset: a.offset + b.offset })
}

pub fn add_const(a: &IndexExpr, c: i64) -> IndexExpr {
    IndexExpr { terms: a.terms.clone(), offset: a.offset + c }
}

pub fn scale(a: &IndexExpr, c: i64) -> IndexExpr {
    if c == 0 {
        return constant(0);
    }
    let terms = a.terms.iter().map(|t| Term { scale: t.scale * c, ..*t }).collect();
    IndexExpr { terms, offset: a.offset * c }
}

/// `sum(a_i * c_i)` for expressions and constant weights.
pub fn linear(parts: &[(IndexExpr, i64)]) -> IndexExpr {
    parts.iter().fold(constant(0), |acc, (e, c)| add(&acc, &scale(e, *c)))
}

/// Splits `e` into the part whose terms and offset are multiples of `d` (divided by `d`) and
/// the rest.
fn split_multiples(e: &IndexExpr, d: i64) -> (IndexExpr, IndexExpr) {
    let mut high = IndexExpr { terms: Vec::new(), offset: e.offset.div_euclid(d) };
    let mut low = IndexExpr { terms: Vec::new(), offset: e.offset.rem_euclid(d) };
    for t in &e.terms {
        if t.scale % d == 0 {
            high.terms.push(Term { scale: t.scale / d, ..*t });
        } else {
            low.terms.push(*t);
        }
    }
    (high, low)
}

/// `((src/div) % modulo) / d` for one positive-scale-1 term, when it stays one term.
fn div_term(t: &Term, d: i64, bounds: &Bounds) -> Option<IndexExpr> {
    let (_, hi) = bounds.term_range(&Term { scale: 1, ..*t });
    if hi < d {
        return Some(constant(0));
    }
    let div = t.div.checked_mul(d)?;
    let modulo = match t.modulo {
        None => None,
        Some(m) if m % d == 0 => Some(m / d),
        Some(_) => return None,
    };
    Some(IndexExpr { terms: vec![Term { src: t.src, div, modulo, scale: 1 }], offset: 0 })
}

/// `((src/div) % modulo) % m` for one scale-1 term, when it stays one term.
fn rem_term(t: &Term, m: i64, bounds: &Bounds) -> Option<IndexExpr> {
    let (_, hi) = bounds.term_range(&Term { scale: 1, ..*t });
    if hi < m {
        return Some(IndexExpr { terms: vec![Term { scale: 1, ..*t }], offset: 0 });
    }
    match t.modulo {
        Some(old) if old % m != 0 => None,
        _ => Some(IndexExpr { terms: vec![Term { src: t.src, div: t.div, modulo: Some(m), scale: 1 }], offset: 0 }),
    }
}

/// `floor(e / d)` for a non-negative `e` and `d >= 1`.
pub fn div(e: &IndexExpr, d: i64, bounds: &Bounds, materialize: &mut dyn FnMut(&IndexExpr) -> ValueId) -> IndexExpr {
    if d == 1 {
        return e.clone();
    }
    let (lo, hi) = bounds.range(e);
    if lo >= 0 && lo / d == hi / d {
        return constant(lo / d);
    }
    let (high, low) = split_multiples(e, d);
    let (llo, lhi) = bounds.range(&low);
    if llo >= 0 && llo / d == lhi / d {
        return add_const(&high, llo / d);
    }
    // One term with a scale dividing `d`: (t*s)/d = t/(d/s).
    if llo >= 0 && low.offset == 0 && low.terms.len() == 1 {
        let t = low.terms[0];
        if t.scale > 0 && d % t.scale == 0 {
            if let Some(q) = div_term(&t, d / t.scale, bounds) {
                return add(&high, &q);
            }
        }
    }
    // A coarse part of multiples of some `q` dividing `d` plus a fine part in [0, q): the fine
    // part never carries the sum past a multiple of `q`, so e/d = (coarse/q)/(d/q). A row of
    // whole trailing dimensions in a reshape: (r*2048 + j)/65536 = r/32 for j < 2048, where
    // the quotient would otherwise read the row's own index `j`.
    if llo >= 0 {
        let mut scales: Vec<i64> = low.terms.iter().map(|t| t.scale).filter(|&s| s > 1 && d % s == 0).collect();
        scales.sort_unstable_by(|a, b| b.cmp(a));
        scales.dedup();
        for q in scales {
            let (coarse, fine) = split_multiples(e, q);
            let (flo, fhi) = bounds.range(&fine);
            if flo >= 0 && fhi < q {
                return div(&coarse, d / q, bounds, materialize);
            }
        }
    }
    let v = materialize(if llo >= 0 { &low } else { e });
    let q = IndexExpr { terms: vec![Term { src: IndexSrc::Value(v), div: d, modulo: None, scale: 1 }], offset: 0 };
    if llo >= 0 {
        add(&high, &q)
    } else {
        q
    }
}

/// `e mod m` for a non-negative `e` and `m >= 1`.
pub fn rem(e: &IndexExpr, m: i64, bounds: &Bounds, materialize: &mut dyn FnMut(&IndexExpr) -> ValueId) -> IndexExpr {
    if m == 1 {
        return constant(0);
    }
    let (lo, hi) = bounds.range(e);
    if lo >= 0 && hi < m {
        return e.clone();
    }
    let (_, low) = split_multiples(e, m);
    let (llo, lhi) = bounds.range(&low);
    if llo >= 0 && llo / m == lhi / m {
        return add_const(&low, -(llo / m) * m);
    }
    if llo >= 0 && low.offset == 0 && low.terms.len() == 1 {
        let t = low.terms[0];
        if t.scale > 0 && m % t.scale == 0 {
            if let Some(r) = rem_term(&t, m / t.scale, bounds) {
                return scale(&r, t.scale);
            }
        }
    }
    let v = materialize(if llo >= 0 { &low } else { e });
    IndexExpr { terms: vec![Term { src: IndexSrc::Value(v), div: 1, modulo: Some(m), scale: 1 }], offset: 0 }
}

/// True when some term divides or takes a remainder of something other than a value defined
/// outside `inner` (used by tests and by the nest builder's checks).
pub fn reads_var_with_divmod(e: &IndexExpr, inner: VarId) -> bool {
    e.terms.iter().any(|t| t.src == IndexSrc::Var(inner) && (t.div != 1 || t.modulo.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_materialize(e: &IndexExpr) -> ValueId {
        panic!("unexpected materialization of {e:?}")
    }

    fn setup() -> (Bounds, VarId, VarId) {
        let mut b = Bounds::default();
        let (a, c) = (VarId(1), VarId(2));
        b.set_var(a, 0, 99);
        b.set_var(c, 0, 7);
        (b, a, c)
    }

    #[test]
    fn div_of_digit_sum_is_the_high_digit() {
        let (b, a, c) = setup();
        let e = linear(&[(var(a), 8), (var(c), 1)]);
        assert_eq!(div(&e, 8, &b, &mut no_materialize), var(a));
        assert_eq!(rem(&e, 8, &b, &mut no_materialize), var(c));
    }

    #[test]
    fn mod_dropped_when_value_is_below_it() {
        let (b, _, c) = setup();
        assert_eq!(rem(&var(c), 8, &b, &mut no_materialize), var(c));
        assert_eq!(rem(&var(c), 100, &b, &mut no_materialize), var(c));
        assert_eq!(div(&var(c), 8, &b, &mut no_materialize), constant(0));
    }

    #[test]
    fn div_of_partial_multiple_keeps_a_div_term() {
        let (b, a, c) = setup();
        // (a*8 + c) / 4 = a*2 + c/4
        let e = linear(&[(var(a), 8), (var(c), 1)]);
        let got = div(&e, 4, &b, &mut no_materialize);
        let want = add(
            &scale(&var(a), 2),
            &IndexExpr { terms: vec![Term { src: IndexSrc::Var(c), div: 4, modulo: None, scale: 1 }], offset: 0 },
        );
        assert_eq!(got, want);
        // (a*8 + c) % 4 = c % 4
        let r = rem(&e, 4, &b, &mut no_materialize);
        assert_eq!(r.terms, vec![Term { src: IndexSrc::Var(c), div: 1, modulo: Some(4), scale: 1 }]);
    }

    #[test]
    fn nested_div_and_mod_compose() {
        let (b, a, _) = setup();
        let t = div(&var(a), 8, &b, &mut no_materialize);
        let tt = div(&t, 2, &b, &mut no_materialize);
        assert_eq!(tt.terms, vec![Term { src: IndexSrc::Var(a), div: 16, modulo: None, scale: 1 }]);
        let m = rem(&var(a), 16, &b, &mut no_materialize);
        let mm = rem(&m, 4, &b, &mut no_materialize);
        assert_eq!(mm.terms, vec![Term { src: IndexSrc::Var(a), div: 1, modulo: Some(4), scale: 1 }]);
    }

    #[test]
    fn digits_recombine() {
        let (b, a, _) = setup();
        // (a/8)*8 + a%8 = a
        let hi = scale(&div(&var(a), 8, &b, &mut no_materialize), 8);
        let lo = rem(&var(a), 8, &b, &mut no_materialize);
        assert_eq!(add(&hi, &lo), var(a));
    }

    #[test]
    fn offset_folds_into_quotient() {
        let (b, a, c) = setup();
        // (a*8 + c + 16) / 8 = a + 2 and % 8 = c
        let e = add_const(&linear(&[(var(a), 8), (var(c), 1)]), 16);
        assert_eq!(div(&e, 8, &b, &mut no_materialize), add_const(&var(a), 2));
        assert_eq!(rem(&e, 8, &b, &mut no_materialize), var(c));
    }

    #[test]
    fn fine_part_below_a_dividing_scale_drops_out_of_the_quotient() {
        let mut b = Bounds::default();
        let (g, r, j) = (VarId(1), VarId(2), VarId(3));
        b.set_var(g, 0, 15);
        b.set_var(r, 0, 15);
        b.set_var(j, 0, 2047);
        // (g*32768 + r*2048 + j) / 65536 = g/2: r*2048 + j < 32768.
        let e = linear(&[(var(g), 32768), (var(r), 2048), (var(j), 1)]);
        let want = IndexExpr { terms: vec![Term { src: IndexSrc::Var(g), div: 2, modulo: None, scale: 1 }], offset: 0 };
        assert_eq!(div(&e, 65536, &b, &mut no_materialize), want);
        // (r*2048 + j) / 4096 = r/2, and with j reaching past 2048 nothing drops out.
        let e = linear(&[(var(r), 2048), (var(j), 1)]);
        let want = IndexExpr { terms: vec![Term { src: IndexSrc::Var(r), div: 2, modulo: None, scale: 1 }], offset: 0 };
        assert_eq!(div(&e, 4096, &b, &mut no_materialize), want);
        b.set_var(j, 0, 2048);
        let mut seen = 0;
        div(&e, 4096, &b, &mut |_: &IndexExpr| {
            seen += 1;
            ValueId(7)
        });
        assert_eq!(seen, 1);
    }

    #[test]
    fn unfoldable_division_materializes_the_sum_once() {
        let (b, a, c) = setup();
        let e = linear(&[(var(a), 3), (var(c), 1)]);
        let mut seen = Vec::new();
        let got = div(&e, 8, &b, &mut |x: &IndexExpr| {
            seen.push(x.clone());
            ValueId(7)
        });
        assert_eq!(seen, vec![e]);
        assert_eq!(got.terms, vec![Term { src: IndexSrc::Value(ValueId(7)), div: 8, modulo: None, scale: 1 }]);
    }
}
