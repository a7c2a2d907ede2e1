//! Attribute values in HLO text, typed by attribute name: windows, convolution dimension
//! labels, slices, paddings, integer lists, enums, shapes, program shapes and aliasing lists.
//! Attributes no stage interprets (metadata, sharding, backend_config, ...) and values whose
//! form is not one of the typed ones are kept verbatim as [`AttrValue::Raw`], so printing
//! gives back exactly what was read.

use super::cursor::{Cursor, ParseResult};
use super::shape_text::parse_shape;
use crate::ir::{
    AttrValue, CompId, ConvDimensionNumbers, IoAlias, PaddingDim, ProgramShape, SliceRange, Window, WindowDim,
};
use crate::shape::Shape;

/// Attributes kept verbatim whatever their form.
const RAW_ATTRS: &[&str] = &[
    "metadata",
    "sharding",
    "backend_config",
    "frontend_attributes",
    "statistics",
    "origin",
    "domain",
    "output_to_operand_aliasing",
    "schedule",
    "literal",
    "debug_attributes",
    "origin_recovery_table",
    "original_value",
    "result_accuracy",
    "buffer_donor",
    "allow_spmd_sharding_propagation_to_parameters",
    "allow_spmd_sharding_propagation_to_output",
    "mesh",
];

/// Attributes naming one computation.
pub const COMPUTATION_ATTRS: &[&str] =
    &["to_apply", "calls", "condition", "body", "select", "scatter", "true_computation", "false_computation"];

/// Attributes naming one computation, which may also be written inline as `{ instructions }`.
pub fn is_computation_attr(name: &str) -> bool {
    COMPUTATION_ATTRS.contains(&name)
}

/// Attributes naming a list of computations.
pub const COMPUTATION_LIST_ATTRS: &[&str] = &["branch_computations", "called_computations"];

/// Where a computation reference has to be resolved once every computation is known.
pub struct CompRef {
    pub names: Vec<(String, usize)>,
    pub list: bool,
}

/// The parsed value, or a computation reference still to be resolved.
// Lives only until the caller takes it apart, so the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    Value(AttrValue),
    Computations(CompRef),
}

/// Where a raw attribute value starting at the cursor ends (the first `,` `)` or newline
/// outside brackets and strings; a `}` closing an enclosing list ends it too), and whether
/// every bracket and string it opens is closed (an unclosed value runs to the end of the text).
pub fn raw_value_span(c: &mut Cursor<'_>) -> (usize, bool) {
    c.skip_trivia();
    let src = c.src().as_bytes();
    let mut i = c.pos();
    let braced = src.get(i) == Some(&b'{');
    let mut depth = 0i64;
    while i < src.len() {
        match src[i] {
            b'"' => {
                i += 1;
                while i < src.len() && src[i] != b'"' {
                    if src[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                // An unterminated string would swallow the rest of the text, like an
                // unclosed bracket.
                if i >= src.len() {
                    return (src.len(), false);
                }
            }
            // A line comment ends a verbatim value: kept inside it, it would swallow whatever
            // the printer writes after the value. A block comment (`/*index=5*/`) delimits
            // itself, unless it is never closed.
            b'/' if src.get(i + 1) == Some(&b'/') => return (i, depth == 0),
            b'/' if src.get(i + 1) == Some(&b'*') => match c.src()[i + 2..].find("*/") {
                Some(n) => i += n + 3,
                None => return (src.len(), false),
            },
            b'{' | b'(' | b'[' => depth += 1,
            b'}' | b')' | b']' => {
                if depth == 0 {
                    return (i, true);
                }
                depth -= 1;
                if depth == 0 && braced && src[i] == b'}' {
                    // A braced value ends at its closing brace.
                    return (i + 1, true);
                }
            }
            b',' | b'\n' if depth == 0 => return (i, true),
            _ => {}
        }
        i += 1;
    }
    (src.len().min(i), depth == 0)
}

/// Parses the value of attribute `name` at the cursor (after `=`).
pub fn parse_attr_value(c: &mut Cursor<'_>, name: &str) -> ParseResult<Parsed> {
    c.skip_trivia();
    let start = c.pos();
    let (end, closed) = raw_value_span(c);
    // Values kept verbatim would otherwise swallow the rest of the text.
    let unclosed = || {
        c.error_at(
            start,
            format!("expects the value of attribute '{name}' to close its brackets, strings and comments"),
        )
    };
    let raw = c.src()[start..end].trim_end().to_string();
    if raw.is_empty() {
        return Err(c.error(format!("expects a value for attribute '{name}'")));
    }
    if RAW_ATTRS.contains(&name) {
        if !closed {
            return Err(unclosed());
        }
        c.set_pos(end);
        return Ok(Parsed::Value(AttrValue::Raw(raw)));
    }
    // A single-computation attribute in braces is an inline computation, which the caller
    // handles before this; so here it names exactly one computation.
    if COMPUTATION_LIST_ATTRS.contains(&name) {
        let names = c.list("{", "}", comp_name)?;
        return Ok(Parsed::Computations(CompRef { names, list: true }));
    }
    if COMPUTATION_ATTRS.contains(&name) {
        return Ok(Parsed::Computations(CompRef { names: vec![comp_name(c)?], list: false }));
    }
    let typed = match name {
        "window" => parse_window(c).map(AttrValue::Window),
        "dim_labels" => match parse_dim_labels(&raw) {
            Ok(d) => {
                c.set_pos(end);
                Ok(AttrValue::ConvDims(d))
            }
            // Custom calls may carry labels with unknown (`?`) dimensions.
            Err(_) if raw.contains('?') && closed => {
                c.set_pos(end);
                Ok(AttrValue::Raw(raw.clone()))
            }
            Err(m) => Err(c.error_at(start, m)),
        },
        "slice" => parse_slice(c).map(AttrValue::Slice),
        "padding" => parse_padding(c, &raw, end).map(AttrValue::Padding),
        "entry_computation_layout" => parse_program_shape(c).map(AttrValue::ProgramShape),
        "input_output_alias" => parse_io_aliases(c).map(AttrValue::IoAliases),
        "outfeed_shape" => parse_shape(c).map(AttrValue::Shape),
        "operand_layout_constraints" => c.list("{", "}", parse_shape).map(AttrValue::Shapes),
        "custom_call_target" | "async_execution_thread" => parse_string(c).map(AttrValue::Str),
        _ if !closed => return Err(unclosed()),
        _ => return Ok(Parsed::Value(parse_generic(c, &raw, end))),
    }?;
    Ok(Parsed::Value(typed))
}

fn comp_name(c: &mut Cursor<'_>) -> ParseResult<(String, usize)> {
    c.skip_trivia();
    let pos = c.pos();
    match c.word() {
        Some(w) => Ok((w.trim_start_matches('%').to_string(), pos)),
        None => {
            let found = c.describe_next();
            Err(c.error(format!("expects computation name, found {found}")))
        }
    }
}

/// Values whose type follows from their form: bools, integers, floats, strings, bare words,
/// integer lists and lists of them, word lists; anything else stays raw.
fn parse_generic(c: &mut Cursor<'_>, raw: &str, end: usize) -> AttrValue {
    let mut probe = c.clone();
    let value = generic_typed(&mut probe, raw);
    match value {
        Some(v) if probe.pos() <= end && probe.src()[probe.pos()..end].trim().is_empty() => {
            c.set_pos(end);
            v
        }
        _ => {
            c.set_pos(end);
            AttrValue::Raw(raw.to_string())
        }
    }
}

fn generic_typed(c: &mut Cursor<'_>, raw: &str) -> Option<AttrValue> {
    match raw {
        "true" => {
            c.eat("true");
            return Some(AttrValue::Bool(true));
        }
        "false" => {
            c.eat("false");
            return Some(AttrValue::Bool(false));
        }
        _ => {}
    }
    if raw.starts_with('"') {
        return parse_string(c).ok().map(AttrValue::Str);
    }
    if raw.starts_with('{') {
        if let Ok(v) = c.clone().list("{", "}", |c| c.int()) {
            c.list("{", "}", |c| c.int()).ok()?;
            return Some(AttrValue::Ints(v));
        }
        if let Ok(v) = c.clone().list("{", "}", |c| c.list("{", "}", |c| c.int())) {
            c.list("{", "}", |c| c.list("{", "}", |c| c.int())).ok()?;
            return Some(AttrValue::IntLists(v));
        }
        let words = c.list("{", "}", |c| c.word().map(str::to_string).ok_or_else(|| c.error("expects a word")));
        return words.ok().map(AttrValue::Enums);
    }
    if let Ok(v) = raw.parse::<i64>() {
        c.int().ok()?;
        return Some(AttrValue::Int(v));
    }
    if raw.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'e' | b'E' | b'+'))
        && raw.bytes().any(|b| b.is_ascii_digit())
    {
        let v = raw.parse::<f64>().ok()?;
        c.set_pos(c.pos() + raw.len());
        return Some(AttrValue::Float(v));
    }
    let word = c.word()?;
    (word == raw).then(|| AttrValue::Enum(word.to_string()))
}

/// A double-quoted string with C escapes.
pub fn parse_string(c: &mut Cursor<'_>) -> ParseResult<String> {
    c.skip_trivia();
    let start = c.pos();
    if !c.rest().starts_with('"') {
        let found = c.describe_next();
        return Err(c.error(format!("expects string, found {found}")));
    }
    let bytes = c.rest().as_bytes();
    let mut out = Vec::new();
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                c.set_pos(start + i + 1);
                return String::from_utf8(out).map_err(|_| c.error_at(start, "string is not valid UTF-8"));
            }
            b'\\' if i + 1 < bytes.len() => {
                i += 1;
                match bytes[i] {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'r' => out.push(b'\r'),
                    b'0'..=b'7' => {
                        let mut v = 0u32;
                        let mut n = 0;
                        while n < 3 && i < bytes.len() && (b'0'..=b'7').contains(&bytes[i]) {
                            v = v * 8 + (bytes[i] - b'0') as u32;
                            i += 1;
                            n += 1;
                        }
                        i -= 1;
                        out.push(v as u8);
                    }
                    other => out.push(other),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    Err(c.error_at(start, "unterminated string"))
}

/// C-style escaping as XLA's `CEscape` does it.
pub fn escape_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for b in s.bytes() {
        match b {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'"' => out.push_str("\\\""),
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ if b >= 0x80 => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    // Bytes >= 0x80 came from valid UTF-8; rebuild them as such.
    if s.is_ascii() {
        out
    } else {
        let mut rebuilt = String::with_capacity(out.len());
        for ch in s.chars() {
            match ch {
                '\n' => rebuilt.push_str("\\n"),
                '\r' => rebuilt.push_str("\\r"),
                '\t' => rebuilt.push_str("\\t"),
                '"' => rebuilt.push_str("\\\""),
                '\'' => rebuilt.push_str("\\'"),
                '\\' => rebuilt.push_str("\\\\"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => rebuilt.push_str(&format!("\\{:03o}", c as u32)),
                c => rebuilt.push(c),
            }
        }
        rebuilt
    }
}

fn parse_window(c: &mut Cursor<'_>) -> ParseResult<Window> {
    c.expect("{")?;
    let mut size = None;
    let mut stride = None;
    let mut pad = None;
    let mut lhs_dilate = None;
    let mut rhs_dilate = None;
    let mut reversal = None;
    while !c.eat("}") {
        c.skip_trivia();
        let pos = c.pos();
        let Some(field) = c.word() else {
            let found = c.describe_next();
            return Err(c.error(format!("expects window field or '}}', found {found}")));
        };
        c.expect("=")?;
        match field {
            "size" => size = Some(x_list(c, |c| c.int())?),
            "stride" => stride = Some(x_list(c, |c| c.int())?),
            "lhs_dilate" => lhs_dilate = Some(x_list(c, |c| c.int())?),
            "rhs_dilate" => rhs_dilate = Some(x_list(c, |c| c.int())?),
            "rhs_reversal" => reversal = Some(x_list(c, |c| c.int())?),
            "pad" => {
                pad = Some(x_list(c, |c| {
                    let lo = c.int()?;
                    if !c.rest().starts_with('_') {
                        return Err(c.error("expects padding_low and padding_high separated by '_'"));
                    }
                    c.expect("_")?;
                    let hi = c.int()?;
                    if c.rest().starts_with('_') {
                        return Err(c.error("expects padding_low and padding_high separated by '_'"));
                    }
                    Ok((lo, hi))
                })?)
            }
            other => return Err(c.error_at(pos, format!("unknown window field '{other}'"))),
        }
    }
    let Some(size) = size else {
        if stride.is_none() && pad.is_none() && lhs_dilate.is_none() && rhs_dilate.is_none() && reversal.is_none() {
            return Ok(Window::default());
        }
        return Err(c.error("window requires a size field"));
    };
    let rank = size.len();
    let check = |c: &Cursor<'_>, n: Option<usize>, what: &str| -> ParseResult<()> {
        match n {
            Some(n) if n != rank => {
                Err(c.error_at(c.pos(), format!("window {what} has {n} dimensions, size has {rank}")))
            }
            _ => Ok(()),
        }
    };
    check(c, stride.as_ref().map(Vec::len), "stride")?;
    check(c, pad.as_ref().map(Vec::len), "pad")?;
    check(c, lhs_dilate.as_ref().map(Vec::len), "lhs_dilate")?;
    check(c, rhs_dilate.as_ref().map(Vec::len), "rhs_dilate")?;
    check(c, reversal.as_ref().map(Vec::len), "rhs_reversal")?;
    let dims = (0..rank)
        .map(|i| WindowDim {
            size: size[i],
            stride: stride.as_ref().map_or(1, |v| v[i]),
            padding_low: pad.as_ref().map_or(0, |v| v[i].0),
            padding_high: pad.as_ref().map_or(0, |v| v[i].1),
            window_dilation: rhs_dilate.as_ref().map_or(1, |v| v[i]),
            base_dilation: lhs_dilate.as_ref().map_or(1, |v| v[i]),
            window_reversal: reversal.as_ref().is_some_and(|v| v[i] != 0),
        })
        .collect();
    Ok(Window { dims })
}

/// `3x3x1`: items separated by `x`. Integers are followed directly by the `x`, so the
/// separator is matched on the raw text.
fn x_list<T>(c: &mut Cursor<'_>, mut item: impl FnMut(&mut Cursor<'_>) -> ParseResult<T>) -> ParseResult<Vec<T>> {
    let mut out = vec![item(c)?];
    while c.rest().starts_with('x') {
        c.set_pos(c.pos() + 1);
        out.push(item(c)?);
    }
    Ok(out)
}

pub fn window_to_string(w: &Window) -> String {
    if w.dims.is_empty() {
        return "{}".to_string();
    }
    let join = |f: &dyn Fn(&WindowDim) -> String| w.dims.iter().map(f).collect::<Vec<_>>().join("x");
    let mut parts = vec![format!("size={}", join(&|d| d.size.to_string()))];
    if w.dims.iter().any(|d| d.stride != 1) {
        parts.push(format!("stride={}", join(&|d| d.stride.to_string())));
    }
    if w.dims.iter().any(|d| d.padding_low != 0 || d.padding_high != 0) {
        parts.push(format!("pad={}", join(&|d| format!("{}_{}", d.padding_low, d.padding_high))));
    }
    if w.dims.iter().any(|d| d.base_dilation != 1) {
        parts.push(format!("lhs_dilate={}", join(&|d| d.base_dilation.to_string())));
    }
    if w.dims.iter().any(|d| d.window_dilation != 1) {
        parts.push(format!("rhs_dilate={}", join(&|d| d.window_dilation.to_string())));
    }
    if w.dims.iter().any(|d| d.window_reversal) {
        parts.push(format!("rhs_reversal={}", join(&|d| if d.window_reversal { "1" } else { "0" }.to_string())));
    }
    format!("{{{}}}", parts.join(" "))
}

/// `b01f_01io->b01f`: one character per dimension; digits are spatial dimensions in order.
pub fn parse_dim_labels(text: &str) -> Result<ConvDimensionNumbers, String> {
    let (lhs, out) = text.split_once("->").ok_or("expects '->' in dim_labels")?;
    let (input, kernel) = lhs.split_once('_').ok_or("expects '_' in dim_labels")?;
    let roles = |labels: &str, a: char, b: char| -> Result<(i64, i64, Vec<i64>), String> {
        let mut first = None;
        let mut second = None;
        let mut spatial: Vec<(u32, i64)> = Vec::new();
        for (i, ch) in labels.chars().enumerate() {
            let i = i as i64;
            if ch == a && first.is_none() {
                first = Some(i);
            } else if ch == b && second.is_none() {
                second = Some(i);
            } else if let Some(d) = ch.to_digit(10) {
                if spatial.iter().any(|&(s, _)| s == d) {
                    return Err(format!("dim_labels '{labels}' expects unique dimension labels"));
                }
                spatial.push((d, i));
            } else {
                return Err(format!("dim_labels '{labels}' expects [0-9{a}{b}], found '{ch}'"));
            }
        }
        spatial.sort();
        if spatial.iter().enumerate().any(|(n, &(d, _))| d as usize != n) {
            return Err(format!("dim_labels '{labels}' expects spatial dimensions numbered from 0"));
        }
        let first = first.ok_or(format!("dim_labels '{labels}' lacks '{a}'"))?;
        let second = second.ok_or(format!("dim_labels '{labels}' lacks '{b}'"))?;
        Ok((first, second, spatial.into_iter().map(|(_, i)| i).collect()))
    };
    let (input_batch, input_feature, input_spatial) = roles(input, 'b', 'f')?;
    let (kernel_input_feature, kernel_output_feature, kernel_spatial) = roles(kernel, 'i', 'o')?;
    let (output_batch, output_feature, output_spatial) = roles(out, 'b', 'f')?;
    if input_spatial.len() != kernel_spatial.len() || input_spatial.len() != output_spatial.len() {
        return Err("dim_labels must have same number of spatial dimensions".to_string());
    }
    Ok(ConvDimensionNumbers {
        input_batch,
        input_feature,
        input_spatial,
        kernel_input_feature,
        kernel_output_feature,
        kernel_spatial,
        output_batch,
        output_feature,
        output_spatial,
    })
}

pub fn dim_labels_to_string(d: &ConvDimensionNumbers) -> String {
    let render = |n: usize, a: (i64, char), b: (i64, char), spatial: &[i64]| -> String {
        let mut chars = vec!['?'; n];
        let mut put = |i: i64, ch: char| {
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| chars.get_mut(i)) {
                *slot = ch;
            }
        };
        put(a.0, a.1);
        put(b.0, b.1);
        for (k, &s) in spatial.iter().enumerate() {
            put(s, char::from_digit(k as u32 % 10, 10).unwrap_or('?'));
        }
        chars.into_iter().collect()
    };
    let n = d.input_spatial.len() + 2;
    format!(
        "{}_{}->{}",
        render(n, (d.input_batch, 'b'), (d.input_feature, 'f'), &d.input_spatial),
        render(n, (d.kernel_input_feature, 'i'), (d.kernel_output_feature, 'o'), &d.kernel_spatial),
        render(n, (d.output_batch, 'b'), (d.output_feature, 'f'), &d.output_spatial),
    )
}

fn parse_slice(c: &mut Cursor<'_>) -> ParseResult<Vec<SliceRange>> {
    c.list("{", "}", |c| {
        c.expect("[")?;
        let start = c.int()?;
        c.expect(":")?;
        let limit = c.int()?;
        let stride = if c.eat(":") { c.int()? } else { 1 };
        c.expect("]")?;
        Ok(SliceRange { start, limit, stride })
    })
}

pub fn slice_to_string(s: &[SliceRange]) -> String {
    let strided = s.iter().any(|r| r.stride != 1);
    let parts: Vec<String> = s
        .iter()
        .map(|r| {
            if strided {
                format!("[{}:{}:{}]", r.start, r.limit, r.stride)
            } else {
                format!("[{}:{}]", r.start, r.limit)
            }
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn parse_padding(c: &mut Cursor<'_>, raw: &str, end: usize) -> ParseResult<Vec<PaddingDim>> {
    let start = c.pos();
    let mut out = Vec::new();
    for dim in raw.split('x') {
        let parts: Vec<&str> = dim.split('_').collect();
        let ints: Option<Vec<i64>> = parts.iter().map(|p| p.parse::<i64>().ok()).collect();
        match ints.as_deref() {
            Some([low, high]) => out.push(PaddingDim { low: *low, high: *high, interior: 0 }),
            Some([low, high, interior]) => out.push(PaddingDim { low: *low, high: *high, interior: *interior }),
            _ => {
                return Err(
                    c.error_at(start, format!("expects padding as low_high[_interior] per dimension, found '{dim}'"))
                )
            }
        }
    }
    c.set_pos(end);
    Ok(out)
}

pub fn padding_to_string(p: &[PaddingDim]) -> String {
    let interior = p.iter().any(|d| d.interior != 0);
    p.iter()
        .map(
            |d| {
                if interior {
                    format!("{}_{}_{}", d.low, d.high, d.interior)
                } else {
                    format!("{}_{}", d.low, d.high)
                }
            },
        )
        .collect::<Vec<_>>()
        .join("x")
}

fn parse_program_shape(c: &mut Cursor<'_>) -> ParseResult<ProgramShape> {
    c.expect("{")?;
    let parameters = c.list("(", ")", parse_shape)?;
    c.expect("->")?;
    let result = parse_shape(c)?;
    c.expect("}")?;
    Ok(ProgramShape { parameters, result })
}

pub fn program_shape_to_string(p: &ProgramShape) -> String {
    // The parameter list reads like a tuple, `/*index=N*/` marks included.
    let params = Shape::Tuple(p.parameters.clone()).to_string();
    format!("{{{params}->{}}}", p.result)
}

fn shape_index(c: &mut Cursor<'_>) -> ParseResult<Vec<i64>> {
    if !c.eat("{") {
        return Err(c.error("Expects '{' at the start of ShapeIndex"));
    }
    let mut out = Vec::new();
    if !c.looking_at("}") {
        loop {
            out.push(c.int()?);
            if !c.eat(",") {
                break;
            }
        }
    }
    if !c.eat("}") {
        return Err(c.error("Expects '}' at the end of ShapeIndex"));
    }
    Ok(out)
}

fn parse_io_aliases(c: &mut Cursor<'_>) -> ParseResult<Vec<IoAlias>> {
    c.expect("{")?;
    let mut out = Vec::new();
    if c.eat("}") {
        return Ok(out);
    }
    loop {
        let output_index = shape_index(c)?;
        c.expect(":")?;
        c.expect("(")?;
        let parameter = c.int()?;
        c.expect(",")?;
        let parameter_index = shape_index(c)?;
        let mut kind = None;
        if c.eat(",") {
            let pos = c.pos();
            match c.word() {
                Some(k @ ("may-alias" | "must-alias")) => kind = Some(k.to_string()),
                _ => return Err(c.error_at(pos, "Unexpected aliasing kind; expects may-alias or must-alias")),
            }
        }
        c.expect(")")?;
        out.push(IoAlias { output_index, parameter, parameter_index, kind });
        if c.eat("}") {
            return Ok(out);
        }
        if !c.eat(",") {
            return Err(c.error("Expects '}' at the end of aliasing description"));
        }
    }
}

fn index_text(i: &[i64]) -> String {
    format!("{{{}}}", i.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
}

pub fn io_aliases_to_string(a: &[IoAlias]) -> String {
    let parts: Vec<String> = a
        .iter()
        .map(|x| {
            let kind = x.kind.as_ref().map(|k| format!(", {k}")).unwrap_or_default();
            format!("{}: ({}, {}{})", index_text(&x.output_index), x.parameter, index_text(&x.parameter_index), kind)
        })
        .collect();
    format!("{{ {} }}", parts.join(", "))
}

/// `%.6g`, as XLA's `StrCat` prints a float attribute.
fn float_text(v: f64) -> String {
    super::literal_text::format_g(v, 6)
}

/// Prints an attribute value. `comp_name` gives a computation's printed name (with or
/// without `%`).
pub fn attr_value_to_string(v: &AttrValue, comp_name: &dyn Fn(CompId) -> String) -> String {
    let ints = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    match v {
        AttrValue::Bool(b) => b.to_string(),
        AttrValue::Int(i) => i.to_string(),
        AttrValue::Float(f) => float_text(*f),
        AttrValue::Str(s) => format!("\"{}\"", escape_string(s)),
        AttrValue::Enum(e) => e.clone(),
        AttrValue::Ints(v) => format!("{{{}}}", ints(v)),
        AttrValue::IntLists(v) => {
            format!("{{{}}}", v.iter().map(|l| format!("{{{}}}", ints(l))).collect::<Vec<_>>().join(","))
        }
        AttrValue::Enums(v) => format!("{{{}}}", v.join(",")),
        AttrValue::Shape(s) => s.to_string(),
        AttrValue::Shapes(s) => format!("{{{}}}", s.iter().map(Shape::to_string).collect::<Vec<_>>().join(", ")),
        AttrValue::Window(w) => window_to_string(w),
        AttrValue::ConvDims(d) => dim_labels_to_string(d),
        AttrValue::Slice(s) => slice_to_string(s),
        AttrValue::Padding(p) => padding_to_string(p),
        AttrValue::Computation(id) => comp_name(*id),
        AttrValue::Computations(ids) => {
            format!("{{{}}}", ids.iter().map(|&id| comp_name(id)).collect::<Vec<_>>().join(", "))
        }
        AttrValue::ProgramShape(p) => program_shape_to_string(p),
        AttrValue::IoAliases(a) => io_aliases_to_string(a),
        AttrValue::Raw(r) => r.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dim_labels_round_trip() {
        for text in ["b01f_01io->b01f", "bf_io->bf", "b0f_0io->b0f", "f01b_i01o->01bf"] {
            let d = parse_dim_labels(text).unwrap();
            assert_eq!(dim_labels_to_string(&d), text);
        }
        assert!(parse_dim_labels("b00f_01io->b01f").is_err());
    }

    #[test]
    fn window_round_trip() {
        let text = "{size=3x3 pad=1_2x1_2 lhs_dilate=2x2 rhs_reversal=1x1}";
        let w = parse_window(&mut Cursor::new(text)).unwrap();
        assert_eq!(window_to_string(&w), text);
    }
}
