//! Shapes and layouts in HLO text: `f32[2,<=4,?]{2,0,1:T(8,128)(2,1)E(16)S(1)}`, tuples
//! `(f32[], s32[3]{0})`, `token[]`. Parsing accepts layout suffixes in any order; printing
//! emits them in XLA's order, so printing is canonical.

use std::fmt::{self, Write};
use std::str::FromStr;

use super::cursor::{Cursor, ParseError, ParseResult};
use crate::element_type::ElementType;
use crate::layout::{DimLevel, DimLevelKind, Layout, SplitConfig, Tile, COMBINE_DIM};
use crate::shape::{ArrayShape, Shape, UNBOUNDED};

/// Tuples nested deeper than this are rejected instead of exhausting the stack.
const MAX_TUPLE_DEPTH: usize = 64;

/// Parses a shape at the cursor. Array layouts are validated against the rank.
pub fn parse_shape(c: &mut Cursor<'_>) -> ParseResult<Shape> {
    parse_shape_at_depth(c, 0)
}

fn parse_shape_at_depth(c: &mut Cursor<'_>, depth: usize) -> ParseResult<Shape> {
    if c.looking_at("(") {
        if depth >= MAX_TUPLE_DEPTH {
            return Err(c.error(format!("tuple shapes nest deeper than {MAX_TUPLE_DEPTH} levels")));
        }
        let elems = c.list("(", ")", |c| parse_shape_at_depth(c, depth + 1))?;
        return Ok(Shape::Tuple(elems));
    }
    parse_array_shape(c)
}

/// A non-tuple shape; kept out of the tuple recursion so its frames stay small.
#[inline(never)]
fn parse_array_shape(c: &mut Cursor<'_>) -> ParseResult<Shape> {
    let start = {
        c.skip_trivia();
        c.pos()
    };
    let Some(name) = c.word() else {
        let found = c.describe_next();
        return Err(c.error(format!("expected primitive type, found {found}")));
    };
    let Some(element_type) = ElementType::from_name(name) else {
        return Err(c.error_at(start, format!("expected primitive type, found '{name}'")));
    };
    let dims_pos = c.pos();
    let dims = c.list("[", "]", parse_dim)?;
    match element_type {
        ElementType::Token | ElementType::Opaque => {
            if !dims.is_empty() {
                return Err(c.error_at(dims_pos, format!("{name} shapes have no dimensions")));
            }
            // XLA accepts (and ignores) a layout here; so do we.
            if layout_follows(c) {
                parse_layout(c)?;
            }
            return Ok(if element_type == ElementType::Token { Shape::Token } else { Shape::Opaque });
        }
        ElementType::Tuple => return Err(c.error_at(start, "expected primitive type, found 'tuple'")),
        _ => {}
    }
    let mut array = ArrayShape {
        element_type,
        dims: dims.iter().map(|d| d.0).collect(),
        dynamic: dims.iter().map(|d| d.1).collect(),
        layout: None,
    };
    if layout_follows(c) {
        let layout_pos = c.pos();
        let layout = parse_layout(c)?;
        layout.validate_for_rank(array.rank()).map_err(|m| c.error_at(layout_pos, m))?;
        array.layout = Some(layout);
    }
    Ok(Shape::Array(array))
}

/// A `{` starts a layout only when an integer, `:` or `}` follows it; otherwise it opens
/// something else (a computation body after `-> f32[2]`).
fn layout_follows(c: &mut Cursor<'_>) -> bool {
    if c.peek() != Some(b'{') {
        return false;
    }
    let mut probe = c.clone();
    probe.eat("{");
    matches!(probe.peek(), Some(b'0'..=b'9' | b':' | b'}'))
}

fn parse_dim(c: &mut Cursor<'_>) -> ParseResult<(i64, bool)> {
    if c.eat("?") {
        return Ok((UNBOUNDED, true));
    }
    let bounded = c.eat("<=");
    let pos = {
        c.skip_trivia();
        c.pos()
    };
    let size = c.int()?;
    if size < 0 {
        return Err(c.error_at(pos, format!("dimension size {size} must not be negative")));
    }
    Ok((size, bounded))
}

/// Parses `{minor_to_major:suffixes}`.
pub fn parse_layout(c: &mut Cursor<'_>) -> ParseResult<Layout> {
    c.expect("{")?;
    let mut layout = Layout::default();
    if !c.looking_at(":") && !c.looking_at("}") {
        loop {
            layout.minor_to_major.push(c.int()?);
            if !c.eat(",") {
                break;
            }
        }
    }
    if c.eat(":") {
        while !c.looking_at("}") {
            parse_layout_suffix(c, &mut layout)?;
        }
    }
    c.expect("}")?;
    Ok(layout)
}

fn parse_layout_suffix(c: &mut Cursor<'_>, layout: &mut Layout) -> ParseResult<()> {
    // `SC` before `S`: the longer prefix wins.
    if c.eat("SC") {
        while c.looking_at("(") {
            c.expect("(")?;
            let dimension = c.int()?;
            c.expect(":")?;
            let mut split_indices = vec![c.int()?];
            while c.eat(",") {
                split_indices.push(c.int()?);
            }
            c.expect(")")?;
            layout.split_configs.push(SplitConfig { dimension, split_indices });
        }
    } else if c.eat("D") {
        layout.dim_levels = c.list("(", ")", parse_dim_level)?;
    } else if c.eat("T") {
        if !c.looking_at("(") {
            return Err(c.error("expects '(' after 'T'"));
        }
        while c.looking_at("(") {
            let dims = c.list("(", ")", |c| if c.eat("*") { Ok(COMBINE_DIM) } else { c.int() })?;
            layout.tiles.push(Tile { dims });
        }
    } else if c.eat("L") {
        layout.tail_padding_alignment = paren_int(c)?;
    } else if c.eat("#") {
        layout.index_type = Some(paren_type(c)?);
    } else if c.eat("*") {
        layout.pointer_type = Some(paren_type(c)?);
    } else if c.eat("E") {
        layout.element_size_bits = paren_int(c)?;
    } else if c.eat("S") {
        layout.memory_space = paren_int(c)?;
    } else if c.eat("P") {
        c.expect("(")?;
        layout.physical_shape = Some(Box::new(parse_shape_at_depth(c, MAX_TUPLE_DEPTH - 1)?));
        c.expect(")")?;
    } else if c.eat("M") {
        layout.dynamic_metadata_prefix_bytes = paren_int(c)?;
    } else {
        let found = c.describe_next();
        return Err(c.error(format!("unexpected layout attribute {found}")));
    }
    Ok(())
}

fn paren_int(c: &mut Cursor<'_>) -> ParseResult<i64> {
    c.expect("(")?;
    let v = c.int()?;
    c.expect(")")?;
    Ok(v)
}

fn paren_type(c: &mut Cursor<'_>) -> ParseResult<ElementType> {
    c.expect("(")?;
    let pos = c.pos();
    let t = c.word().and_then(ElementType::from_name).ok_or_else(|| c.error_at(pos, "expected primitive type"))?;
    c.expect(")")?;
    Ok(t)
}

fn parse_dim_level(c: &mut Cursor<'_>) -> ParseResult<DimLevel> {
    let kind = if c.eat("D") {
        DimLevelKind::Dense
    } else if c.eat("C") {
        DimLevelKind::Compressed
    } else if c.eat("S") {
        DimLevelKind::Singleton
    } else if c.eat("H") {
        DimLevelKind::LooseCompressed
    } else {
        let found = c.describe_next();
        return Err(c.error(format!("expected a DimLevelType abbreviation (D, C, S or H), found {found}")));
    };
    let mut level = DimLevel { kind, unique: true, ordered: true };
    loop {
        if c.rest().starts_with('+') {
            c.eat("+");
            level.unique = false;
        } else if c.rest().starts_with('~') {
            c.eat("~");
            level.ordered = false;
        } else {
            return Ok(level);
        }
    }
}

fn whole<T>(text: &str, f: impl FnOnce(&mut Cursor<'_>) -> ParseResult<T>) -> ParseResult<T> {
    let mut c = Cursor::new(text);
    let v = f(&mut c)?;
    if !c.at_end() {
        let found = c.describe_next();
        return Err(c.error(format!("unexpected {found} after the end")));
    }
    Ok(v)
}

impl FromStr for Shape {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Shape, ParseError> {
        whole(s, parse_shape)
    }
}

impl FromStr for Layout {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Layout, ParseError> {
        whole(s, parse_layout)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('{')?;
        join(f, &self.minor_to_major)?;
        let mut colon = false;
        let mut suffix = |f: &mut fmt::Formatter<'_>, text: fmt::Arguments<'_>| -> fmt::Result {
            if !colon {
                f.write_char(':')?;
                colon = true;
            }
            f.write_fmt(text)
        };
        if !self.dim_levels.is_empty() {
            let levels: Vec<String> = self.dim_levels.iter().map(dim_level_text).collect();
            suffix(f, format_args!("D({})", levels.join(",")))?;
        }
        if !self.tiles.is_empty() {
            let tiles: String = self.tiles.iter().map(tile_text).collect();
            suffix(f, format_args!("T{tiles}"))?;
        }
        if self.tail_padding_alignment != 1 {
            suffix(f, format_args!("L({})", self.tail_padding_alignment))?;
        }
        if let Some(t) = self.index_type {
            suffix(f, format_args!("#({t})"))?;
        }
        if let Some(t) = self.pointer_type {
            suffix(f, format_args!("*({t})"))?;
        }
        if self.element_size_bits != 0 {
            suffix(f, format_args!("E({})", self.element_size_bits))?;
        }
        if self.memory_space != 0 {
            suffix(f, format_args!("S({})", self.memory_space))?;
        }
        if !self.split_configs.is_empty() {
            let configs: String = self
                .split_configs
                .iter()
                .map(|s| {
                    let idx: Vec<String> = s.split_indices.iter().map(i64::to_string).collect();
                    format!("({}:{})", s.dimension, idx.join(","))
                })
                .collect();
            suffix(f, format_args!("SC{configs}"))?;
        }
        if let Some(p) = &self.physical_shape {
            suffix(f, format_args!("P({p})"))?;
        }
        if self.dynamic_metadata_prefix_bytes > 0 {
            suffix(f, format_args!("M({})", self.dynamic_metadata_prefix_bytes))?;
        }
        f.write_char('}')
    }
}

fn dim_level_text(level: &DimLevel) -> String {
    let mut s = match level.kind {
        DimLevelKind::Dense => "D",
        DimLevelKind::Compressed => "C",
        DimLevelKind::Singleton => "S",
        DimLevelKind::LooseCompressed => "H",
    }
    .to_string();
    if !level.unique {
        s.push('+');
    }
    if !level.ordered {
        s.push('~');
    }
    s
}

fn tile_text(tile: &Tile) -> String {
    let dims: Vec<String> =
        tile.dims.iter().map(|&d| if d == COMBINE_DIM { "*".to_string() } else { d.to_string() }).collect();
    format!("({})", dims.join(","))
}

fn join(f: &mut fmt::Formatter<'_>, values: &[i64]) -> fmt::Result {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            f.write_char(',')?;
        }
        write!(f, "{v}")?;
    }
    Ok(())
}

impl ArrayShape {
    /// `f32[2,<=3,?]` without the layout.
    pub fn dims_text(&self) -> String {
        let dims: Vec<String> = self
            .dims
            .iter()
            .zip(&self.dynamic)
            .map(|(&d, &dynamic)| match (d, dynamic) {
                (UNBOUNDED, _) => "?".to_string(),
                (d, true) => format!("<={d}"),
                (d, false) => d.to_string(),
            })
            .collect();
        format!("{}[{}]", self.element_type, dims.join(","))
    }
}

impl Shape {
    /// The shape as XLA prints it without layouts (computation signatures use this).
    pub fn to_string_without_layout(&self) -> String {
        match self {
            Shape::Array(a) => a.dims_text(),
            Shape::Tuple(elems) => {
                let mut out = String::from("(");
                for (i, e) in elems.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                        if i % 5 == 0 {
                            out.push_str(&format!("/*index={i}*/"));
                        }
                    }
                    out.push_str(&e.to_string_without_layout());
                }
                out.push(')');
                out
            }
            Shape::Token => "token[]".to_string(),
            Shape::Opaque => "opaque[]".to_string(),
        }
    }
}

/// Prints with layouts, as XLA's `HumanStringWithLayout`: a scalar's empty layout `{}` is
/// left out, but a scalar layout with suffixes (`f32[]{:S(2)}`) is printed.
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Array(a) => {
                f.write_str(&a.dims_text())?;
                if let Some(layout) = &a.layout {
                    let text = layout.to_string();
                    if !(a.dims.is_empty() && text == "{}") {
                        f.write_str(&text)?;
                    }
                }
                Ok(())
            }
            Shape::Tuple(elems) => {
                f.write_char('(')?;
                for (i, e) in elems.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                        // XLA marks every fifth element of a long tuple.
                        if i % 5 == 0 {
                            write!(f, "/*index={i}*/")?;
                        }
                    }
                    write!(f, "{e}")?;
                }
                f.write_char(')')
            }
            Shape::Token => f.write_str("token[]"),
            Shape::Opaque => f.write_str("opaque[]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) {
        let shape: Shape = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(shape.to_string(), text);
    }

    #[test]
    fn shapes_print_back() {
        for text in [
            "f32[]",
            "f32[2,3]{1,0}",
            "bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)}",
            "bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)}",
            "f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}",
            "pred[64,128]{1,0:T(32,128)(32,1)E(1)}",
            "f32[10]{0:L(8)}",
            "f32[]{:S(2)}",
            "s32[?,<=4]{1,0}",
            "(f32[], (s32[3]{0}, token[]))",
            "()",
            "f32[10,10]{1,0:T(128,8)P(f32[10,10])}",
            "f32[4,4]{1,0:D(D,C+~)#(u32)*(u16)M(8)}",
            "f32[8,8]{1,0:SC(0:2,4)}",
        ] {
            round_trip(text);
        }
    }

    #[test]
    fn canonical_suffix_order_and_spacing() {
        let s: Shape = "f32[123,456,789]{2,1,0:S(1)T(2, * , 128)}".parse().unwrap();
        assert_eq!(s.to_string(), "f32[123,456,789]{2,1,0:T(2,*,128)S(1)}");
    }

    #[test]
    fn scalar_empty_layout_is_not_printed() {
        let s: Shape = "f32[]{}".parse().unwrap();
        assert_eq!(s.to_string(), "f32[]");
    }

    #[test]
    fn rejects_bad_shapes() {
        let err = "f32[123,456,789]{1:T(2, * , 128)}".parse::<Shape>().unwrap_err();
        assert!(err.message.contains("Dimensions size is 3, but minor to major size is 1."), "{err}");
        for bad in
            ["f32[123,456]foobar{0,1}", "f32[123,456]{foo}", "f32[123,456]dense{foo}", "b()", "f32[-1]", "g32[2]"]
        {
            assert!(bad.parse::<Shape>().is_err(), "{bad} should be rejected");
        }
        assert!("f32[2,2]{0,0}".parse::<Shape>().is_err());
        assert!("f32[99999999999999999999]".parse::<Shape>().is_err());
    }
}
