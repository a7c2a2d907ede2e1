//! Constant literals in HLO text: `true`, `-42`, `3.14`, `nan(0x1)`, `(1, 2)` for complex
//! numbers, nested braces for arrays and parentheses for tuples; and XLA's one-line printing of
//! them (`{ { 1, 2 }, { 3, 4 } }`, `/*i0=..*/` index comments from rank 4 on, floats with the
//! fewest digits that round-trip).

use super::cursor::{Cursor, ParseResult};
use crate::element_type::ElementType;
use crate::literal::Literal;
use crate::shape::Shape;

/// The largest `{...}` (elided) constant accepted, in elements.
const MAX_ELIDED_ELEMENTS: i64 = 1 << 28;

/// Parses a literal of `shape` (the text between `constant(` and `)`).
pub fn parse_literal(c: &mut Cursor<'_>, shape: &Shape) -> ParseResult<Literal> {
    match shape {
        Shape::Tuple(elems) => {
            c.expect("(")?;
            let mut out = Vec::with_capacity(elems.len());
            for (i, e) in elems.iter().enumerate() {
                if i > 0 {
                    c.expect(",")?;
                }
                out.push(parse_literal(c, e)?);
            }
            c.expect(")")?;
            Ok(Literal::tuple(out))
        }
        Shape::Token => {
            // The printer writes a token literal as `token` (as XLA's does); accept it back,
            // and the empty form too.
            let mut probe = c.clone();
            if probe.word() == Some("token") {
                *c = probe;
            }
            Literal::zeros(Shape::Token).map_err(|e| c.error(e.to_string()))
        }
        Shape::Opaque => Err(c.error("opaque shapes have no literal values")),
        Shape::Array(a) => {
            let elided = elided_follows(c);
            // Listed elements take at least a character each, so the text bounds the size; an
            // elided constant gets a fixed cap instead of an allocation that could abort.
            let count = a.element_count().unwrap_or(i64::MAX);
            let limit = if elided { MAX_ELIDED_ELEMENTS } else { c.rest().len() as i64 + 1 };
            if count > limit {
                return Err(c.error(format!("constant of shape {shape} has more elements than its text can hold")));
            }
            let mut lit = Literal::zeros(shape.clone()).map_err(|e| c.error(e.to_string()))?;
            let ty = a.element_type;
            if a.dims.is_empty() {
                let bits = parse_scalar(c, ty)?;
                lit.set_bits(0, bits);
                return Ok(lit);
            }
            // `{...}` stands for a constant whose values were elided when printing.
            if elided {
                c.expect("{")?;
                c.expect("...")?;
                c.expect("}")?;
                return Ok(lit);
            }
            let mut values = Vec::new();
            parse_dense(c, ty, &a.dims, 0, 0, &mut values)?;
            for (i, bits) in values.into_iter().enumerate() {
                lit.set_bits(i, bits);
            }
            Ok(lit)
        }
    }
}

fn elided_follows(c: &mut Cursor<'_>) -> bool {
    let mut probe = c.clone();
    probe.eat("{") && probe.eat("...")
}

/// Parses `{...}` for dimension `depth` of an array of dimensions `dims`; `index` is this
/// block's position inside its parent (for the error message).
fn parse_dense(
    c: &mut Cursor<'_>,
    ty: ElementType,
    dims: &[i64],
    depth: usize,
    index: usize,
    out: &mut Vec<u128>,
) -> ParseResult<()> {
    let rank = dims.len();
    if !c.looking_at("{") {
        let found = c.describe_next();
        if found == "'}'" {
            return Err(c.error("unexpected '}' token"));
        }
        return Err(c.error(format!("expects nested array in rank {rank}, but sees {depth}")));
    }
    c.expect("{")?;
    let mut count = 0usize;
    if !c.looking_at("}") {
        loop {
            if depth + 1 < rank {
                if !c.looking_at("{") {
                    return Err(c.error(format!("expects nested array in rank {rank}, but sees {}", depth + 1)));
                }
                parse_dense(c, ty, dims, depth + 1, count, out)?;
            } else {
                if c.looking_at("{") {
                    return Err(c.error(format!("expects nested array in rank {rank}, but sees larger")));
                }
                out.push(parse_scalar(c, ty)?);
            }
            count += 1;
            if !c.eat(",") {
                break;
            }
        }
    }
    let expected = usize::try_from(dims[depth]).unwrap_or(0);
    if count != expected {
        return Err(c.error(format!("expects {expected} elements in the [{index}]th element, but sees {count}")));
    }
    if !c.looking_at("}") {
        let found = c.describe_next();
        return Err(c.error(format!("expects '}}' at the end of the literal's dimension {depth}, found {found}")));
    }
    c.expect("}")?;
    Ok(())
}

/// A scanned number token.
enum Number {
    Int(i128),
    Float(f64),
    /// `nan` / `-nan`, with an optional `(0x..)` payload.
    Nan {
        negative: bool,
        payload: Option<u64>,
    },
}

fn scan_number(c: &mut Cursor<'_>) -> ParseResult<Number> {
    c.skip_trivia();
    let start = c.pos();
    let rest = c.rest();
    let negative = rest.starts_with('-');
    let body = if negative || rest.starts_with('+') { &rest[1..] } else { rest };
    let sign_len = rest.len() - body.len();
    if body.starts_with("nan") {
        c.set_pos(start + sign_len + 3);
        let mut payload = None;
        if c.rest().starts_with("(0x") {
            let digits: String = c.rest()[3..].chars().take_while(|ch| ch.is_ascii_hexdigit()).collect();
            let value = u64::from_str_radix(&digits, 16)
                .map_err(|_| c.error_at(start, format!("invalid NaN payload '{digits}'")))?;
            c.set_pos(c.pos() + 3 + digits.len());
            c.expect(")")?;
            payload = Some(value);
        }
        return Ok(Number::Nan { negative, payload });
    }
    if body.starts_with("inf") {
        c.set_pos(start + sign_len + 3);
        return Ok(Number::Float(if negative { f64::NEG_INFINITY } else { f64::INFINITY }));
    }
    let bytes = body.as_bytes();
    let mut end = 0;
    let mut is_float = false;
    while end < bytes.len() && bytes[end].is_ascii_digit() {
        end += 1;
    }
    if end < bytes.len() && bytes[end] == b'.' {
        is_float = true;
        end += 1;
        while end < bytes.len() && bytes[end].is_ascii_digit() {
            end += 1;
        }
    }
    if end > 0 && end < bytes.len() && (bytes[end] == b'e' || bytes[end] == b'E') {
        let mut e = end + 1;
        if e < bytes.len() && (bytes[e] == b'+' || bytes[e] == b'-') {
            e += 1;
        }
        if e < bytes.len() && bytes[e].is_ascii_digit() {
            while e < bytes.len() && bytes[e].is_ascii_digit() {
                e += 1;
            }
            is_float = true;
            end = e;
        }
    }
    let digits_present = bytes[..end].iter().any(u8::is_ascii_digit);
    if !digits_present {
        let found = c.describe_next();
        return Err(c.error(format!("expects a number literal, found {found}")));
    }
    let text = &rest[..sign_len + end];
    let number = if is_float {
        Number::Float(text.parse::<f64>().map_err(|_| c.error_at(start, format!("invalid number '{text}'")))?)
    } else {
        match text.parse::<i128>() {
            Ok(v) => Number::Int(v),
            Err(_) => return Err(c.error_at(start, format!("integer {text} is out of range"))),
        }
    };
    c.set_pos(start + sign_len + end);
    Ok(number)
}

/// Parses one element of type `ty` and returns its raw bits.
pub fn parse_scalar(c: &mut Cursor<'_>, ty: ElementType) -> ParseResult<u128> {
    c.skip_trivia();
    let start = c.pos();
    let out_of_range = |c: &Cursor<'_>, text: &str| {
        c.error_at(start, format!("value {text} is out of range for literal's primitive type {}", ty_upper(ty)))
    };
    match ty {
        ElementType::Pred => {
            if c.eat("true") {
                return Ok(1);
            }
            if c.eat("false") {
                return Ok(0);
            }
            match scan_number(c)? {
                Number::Int(0) => Ok(0),
                Number::Int(1) => Ok(1),
                _ => Err(c.error_at(start, "expects true, false, 0 or 1 for a pred literal")),
            }
        }
        t if t.is_integral() => {
            let v = match scan_number(c)? {
                Number::Int(v) => v,
                _ => return Err(c.error_at(start, format!("expects an integer literal for type {t}"))),
            };
            let width = t.bit_width();
            let (lo, hi) = if t.is_signed_integral() {
                (-(1i128 << (width - 1)), (1i128 << (width - 1)) - 1)
            } else {
                (0, (1i128 << width) - 1)
            };
            // XLA reads `u64[] constant(-1)` as all ones; other negative unsigned values are errors.
            let v = if t == ElementType::U64 && v < 0 && v >= i64::MIN as i128 { v + (1i128 << 64) } else { v };
            if v < lo || v > hi {
                let text = &c.src()[start..c.pos()];
                return Err(out_of_range(c, text));
            }
            Ok((v as u128) & mask(width))
        }
        t if t.is_complex() => {
            let component = t.complex_component().unwrap_or(ElementType::F32);
            c.expect("(")?;
            let re = parse_scalar(c, component)?;
            c.expect(",")?;
            let im = parse_scalar(c, component)?;
            c.expect(")")?;
            let half = component.bit_width();
            Ok(re | (im << half))
        }
        t if t.is_float() => {
            let number = scan_number(c)?;
            let text = c.src()[start..c.pos()].to_string();
            match number {
                Number::Nan { negative, payload } => {
                    nan_bits(t, negative, payload).map_err(|m| c.error_at(start, format!("{text}: {m}")))
                }
                Number::Int(v) => {
                    // An integer loses the sign of `-0`, which a float keeps (and prints back).
                    let value = if v == 0 && text.starts_with('-') { -0.0 } else { v as f64 };
                    encode_float(t, value).ok_or_else(|| out_of_range(c, &text))
                }
                Number::Float(v) => {
                    let literal_inf = text.trim_start_matches(['-', '+']).starts_with("inf");
                    if v.is_infinite() && !literal_inf {
                        return Err(out_of_range(c, &text));
                    }
                    encode_float(t, v).ok_or_else(|| out_of_range(c, &text))
                }
            }
        }
        t => Err(c.error_at(start, format!("type {t} has no literal values"))),
    }
}

fn ty_upper(ty: ElementType) -> String {
    ty.name().to_ascii_uppercase()
}

fn mask(width: u32) -> u128 {
    if width >= 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    }
}

/// How a small float type spends its special encodings.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Special {
    /// IEEE style: all-ones exponent is infinity (zero mantissa) or NaN.
    Ieee,
    /// `fn`: no infinities; only the all-ones pattern (either sign) is NaN.
    Fn,
    /// `fnuz`: no infinities, no negative zero; NaN is the negative-zero pattern.
    Fnuz,
    /// `f8e8m0fnu`: exponent only, unsigned; all ones is NaN.
    E8m0,
    /// `f4e2m1fn`: no infinities and no NaN.
    NoNan,
}

struct Format {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    special: Special,
}

fn format_of(ty: ElementType) -> Option<Format> {
    use ElementType::*;
    let (exp_bits, man_bits) = ty.float_format()?;
    let (bias, special) = match ty {
        F16 | BF16 | F32 | F64 | F8E5M2 | F8E4M3 | F8E3M4 => ((1 << (exp_bits - 1)) - 1, Special::Ieee),
        F8E4M3FN => (7, Special::Fn),
        F8E4M3FNUZ => (8, Special::Fnuz),
        F8E4M3B11FNUZ => (11, Special::Fnuz),
        F8E5M2FNUZ => (16, Special::Fnuz),
        F8E8M0FNU => (127, Special::E8m0),
        F4E2M1FN => (1, Special::NoNan),
        _ => return None,
    };
    Some(Format { exp_bits, man_bits, bias, special })
}

/// Decodes the bits of a float element to f64 (exactly: every type here fits in f64).
pub fn decode_float(ty: ElementType, bits: u128) -> f64 {
    match ty {
        ElementType::F64 => return f64::from_bits(bits as u64),
        ElementType::F32 => return f32::from_bits(bits as u32) as f64,
        ElementType::F16 => return half::f16::from_bits(bits as u16).to_f64(),
        ElementType::BF16 => return half::bf16::from_bits(bits as u16).to_f64(),
        _ => {}
    }
    let Some(f) = format_of(ty) else { return f64::NAN };
    let width = ty.bit_width();
    let bits = bits & mask(width);
    if f.special == Special::E8m0 {
        if bits == 0xff {
            return f64::NAN;
        }
        return 2f64.powi(bits as i32 - f.bias);
    }
    let sign = (bits >> (width - 1)) & 1 == 1;
    let exp = ((bits >> f.man_bits) & mask(f.exp_bits)) as i32;
    let man = (bits & mask(f.man_bits)) as f64;
    let max_exp = (1 << f.exp_bits) - 1;
    let magnitude = match f.special {
        Special::Ieee if exp == max_exp => {
            if man == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        }
        Special::Fn if exp == max_exp && man as u128 == mask(f.man_bits) => f64::NAN,
        Special::Fnuz if sign && exp == 0 && man == 0.0 => return f64::NAN,
        _ => {
            let scale = 2f64.powi(-(f.man_bits as i32));
            if exp == 0 {
                man * scale * 2f64.powi(1 - f.bias)
            } else {
                (1.0 + man * scale) * 2f64.powi(exp - f.bias)
            }
        }
    };
    if sign {
        -magnitude
    } else {
        magnitude
    }
}

/// Encodes a finite or infinite f64 into the type, rounding to nearest even. `None` when the
/// value lies beyond the type's largest finite value (XLA rejects such constants).
pub fn encode_float(ty: ElementType, v: f64) -> Option<u128> {
    // Like XLA: a finite value is out of range when converting it gives an infinity (or, for
    // types without infinities, when it lies past the rounding boundary above the maximum).
    let overflow = |converted_inf: bool| v.is_finite() && converted_inf;
    match ty {
        ElementType::F64 => return Some(v.to_bits() as u128),
        ElementType::F32 => {
            let x = v as f32;
            return (!overflow(x.is_infinite())).then_some(x.to_bits() as u128);
        }
        ElementType::F16 => {
            let x = half::f16::from_f64(v);
            return (!overflow(x.is_infinite())).then_some(x.to_bits() as u128);
        }
        ElementType::BF16 => {
            let x = half::bf16::from_f64(v);
            return (!overflow(x.is_infinite())).then_some(x.to_bits() as u128);
        }
        _ => {}
    }
    let f = format_of(ty)?;
    let width = ty.bit_width();
    if v.is_infinite() {
        if f.special == Special::Ieee {
            let inf = mask(f.exp_bits) << f.man_bits;
            let sign = if v < 0.0 { 1u128 << (width - 1) } else { 0 };
            return Some(inf | sign);
        }
        return None;
    }
    // Small types: pick the nearest finite encoding by exhaustive search (at most 256),
    // ties to the even encoding.
    let mut best: Option<(u128, f64)> = None;
    let (mut max, mut below_max) = (0f64, 0f64);
    for bits in 0..(1u128 << width) {
        let d = decode_float(ty, bits);
        if !d.is_finite() {
            continue;
        }
        if d > max {
            below_max = max;
            max = d;
        } else if d > below_max && d < max {
            below_max = d;
        }
        let err = (d - v).abs();
        let better = match best {
            None => true,
            Some((b, e)) => {
                err < e
                    || (err == e && bits & 1 == 0 && b & 1 == 1)
                    || (err == e && d == 0.0 && v.is_sign_negative() == d.is_sign_negative())
            }
        };
        if better {
            best = Some((bits, err));
        }
    }
    if v.abs() >= max + (max - below_max) / 2.0 && v.abs() > max {
        return None;
    }
    best.map(|(b, _)| b)
}

/// Bits of a NaN of type `ty`, validating a requested payload.
fn nan_bits(ty: ElementType, negative: bool, payload: Option<u64>) -> Result<u128, String> {
    let width = ty.bit_width();
    let sign = if negative { 1u128 << (width - 1) } else { 0 };
    let payload_bits = nan_payload_bits(ty);
    if let Some(p) = payload {
        if payload_bits == 0 || p == 0 || (p as u128) > mask(payload_bits) {
            return Err(format!(
                "tries to set NaN payload 0x{p:x}, which does not fit the {} NaN payload bits of {}",
                payload_bits,
                ty_upper(ty)
            ));
        }
    }
    let Some(f) = format_of(ty) else { return Err(format!("type {ty} has no NaN")) };
    match f.special {
        Special::Ieee => {
            let exp = mask(f.exp_bits) << f.man_bits;
            let man = payload.map_or(1u128 << (f.man_bits - 1), |p| p as u128);
            Ok(sign | exp | man)
        }
        Special::Fn => Ok(sign | mask(width - 1)),
        Special::Fnuz => Ok(1u128 << (width - 1)),
        Special::E8m0 => Ok(0xff),
        Special::NoNan => Err(format!("type {} has no NaN", ty_upper(ty))),
    }
}

/// Mantissa bits a NaN payload may use (0 when the type has a single NaN).
fn nan_payload_bits(ty: ElementType) -> u32 {
    match format_of(ty) {
        Some(f) if f.special == Special::Ieee => f.man_bits,
        _ => 0,
    }
}

/// `printf("%.{precision}g")` for finite values.
pub fn format_g(v: f64, precision: usize) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let p = precision.max(1);
    let sci = format!("{:.*e}", p - 1, v);
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if exponent < -4 || exponent >= p as i32 {
        let mantissa = strip_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (p as i32 - 1 - exponent).max(0) as usize;
        strip_zeros(&format!("{v:.decimals$}")).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// XLA's `RoundTripFpToString`: the fewest of a few fixed precisions that round-trips, plus a
/// `(0x..)` NaN payload when it is not the default quiet NaN.
pub fn format_float(ty: ElementType, bits: u128) -> String {
    let v = decode_float(ty, bits);
    let mut s = match ty {
        ElementType::F32 => {
            let x = f32::from_bits(bits as u32);
            let short = format_g(x as f64, 6);
            if short.parse::<f32>().ok() == Some(x) || x.is_nan() {
                short
            } else {
                format_g(x as f64, 9)
            }
        }
        ElementType::F64 => {
            let short = format_g(v, 15);
            if short.parse::<f64>().ok() == Some(v) || v.is_nan() {
                short
            } else {
                format_g(v, 17)
            }
        }
        _ => format_g(v, max_digits10(ty)),
    };
    if v.is_nan() {
        // The sign of a NaN lives in the sign bit, which `decode_float` may not carry over.
        let width = ty.bit_width();
        let negative = match format_of(ty).map(|f| f.special) {
            Some(Special::Fnuz) => true,
            Some(Special::E8m0) => false,
            _ => (bits >> (width - 1)) & 1 == 1,
        };
        s = if negative { "-nan" } else { "nan" }.to_string();
        let payload_bits = nan_payload_bits(ty);
        if payload_bits > 0 {
            let payload = bits & mask(payload_bits);
            if payload != 1u128 << (payload_bits - 1) {
                s.push_str(&format!("(0x{payload:x})"));
            }
        }
    }
    s
}

/// `std::numeric_limits<T>::max_digits10` of the small float types.
fn max_digits10(ty: ElementType) -> usize {
    match ty.float_format() {
        Some((_, man)) => {
            let digits = (man + 1) as f64;
            (digits * std::f64::consts::LOG10_2 + 1.0).ceil() as usize
        }
        None => 9,
    }
}

/// One element as XLA prints it (pred as `true`/`false`).
pub fn format_element(ty: ElementType, bits: u128) -> String {
    match ty {
        ElementType::Pred => if bits & 1 == 1 { "true" } else { "false" }.to_string(),
        t if t.is_signed_integral() => {
            let width = t.bit_width();
            let shift = 128 - width;
            (((bits << shift) as i128) >> shift).to_string()
        }
        t if t.is_unsigned_integral() => (bits & mask(t.bit_width())).to_string(),
        t if t.is_complex() => {
            let component = t.complex_component().unwrap_or(ElementType::F32);
            let half = component.bit_width();
            let re = bits & mask(half);
            let im = bits >> half;
            format!("({}, {})", format_float(component, re), format_float(component, im))
        }
        t if t.is_float() => format_float(t, bits),
        _ => String::new(),
    }
}

/// Prints a literal the way an HLO constant shows it: on one line, without its shape.
pub fn literal_to_string(lit: &Literal) -> String {
    let mut out = String::new();
    print_literal(lit, &mut out);
    out
}

fn print_literal(lit: &Literal, out: &mut String) {
    match lit.shape() {
        Shape::Tuple(_) => {
            out.push_str("( ");
            for (i, e) in lit.tuple_elements().unwrap_or(&[]).iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                print_literal(e, out);
            }
            out.push_str(" )");
        }
        Shape::Token => out.push_str("token"),
        Shape::Opaque => {}
        Shape::Array(a) => {
            let ty = a.element_type;
            let rank = a.dims.len();
            if rank == 0 {
                out.push_str(&format_element(ty, lit.get_bits(0).unwrap_or(0)));
                return;
            }
            let mut next = 0usize;
            let mut indices = Vec::with_capacity(rank);
            print_dense(lit, ty, &a.dims, &mut indices, &mut next, out);
        }
    }
}

fn print_dense(
    lit: &Literal,
    ty: ElementType,
    all_dims: &[i64],
    indices: &mut Vec<i64>,
    next: &mut usize,
    out: &mut String,
) {
    let rank = all_dims.len();
    let dims = &all_dims[indices.len()..];
    if dims.is_empty() {
        let bits = lit.get_bits(*next).unwrap_or(0);
        *next += 1;
        // Predicates inside arrays print as 0/1 to keep them dense, as XLA does.
        if ty == ElementType::Pred {
            out.push(if bits & 1 == 1 { '1' } else { '0' });
        } else {
            out.push_str(&format_element(ty, bits));
        }
        return;
    }
    let open = if rank == 1 {
        "{".to_string()
    } else if dims.len() == 1 {
        if dims[0] <= 1 { "{" } else { "{ " }.to_string()
    } else if rank > 3 && !indices.is_empty() {
        let value = indices[indices.len() - 1];
        format!("{{ /*i{}={}*/{}", indices.len() - 1, value, if dims[0] > 0 { " " } else { "" })
    } else {
        "{ ".to_string()
    };
    out.push_str(&open);
    for i in 0..dims[0] {
        indices.push(i);
        print_dense(lit, ty, all_dims, indices, next, out);
        indices.pop();
        if i < dims[0] - 1 {
            out.push_str(", ");
        }
    }
    let close = if rank == 1 {
        "}"
    } else if dims.len() == 1 {
        if dims[0] <= 1 {
            "}"
        } else {
            " }"
        }
    } else {
        " }"
    };
    out.push_str(close);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_g() {
        assert_eq!(format_g(2.5, 6), "2.5");
        assert_eq!(format_g(12345.0, 6), "12345");
        assert_eq!(format_g(3.40282e38, 6), "3.40282e+38");
        assert_eq!(format_g(0.0001, 6), "0.0001");
        assert_eq!(format_g(0.00001, 6), "1e-05");
        assert_eq!(format_g(1e6, 6), "1e+06");
    }

    #[test]
    fn floats_round_trip() {
        assert_eq!(format_float(ElementType::F32, (0.1f32).to_bits() as u128), "0.1");
        assert_eq!(format_float(ElementType::F32, (1.0f32 / 3.0).to_bits() as u128), "0.333333343");
        let bits = encode_float(ElementType::F8E4M3FN, 7.0).unwrap();
        assert_eq!(format_float(ElementType::F8E4M3FN, bits), "7");
        assert_eq!(encode_float(ElementType::F16, -65520.0), None);
        assert_eq!(format_float(ElementType::F32, 0x7f80_0001), "nan(0x1)");
        assert_eq!(format_float(ElementType::F32, 0xffc0_0000), "-nan");
    }
}
