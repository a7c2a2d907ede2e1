//! `.npy` files under DESIGN.md section 8's conventions.
//!
//! Logical files hold values in C order: bf16 and f16 as `<u2` raw bits (an f16 may also come
//! as `<f2`), pred as `|b1`, complex as `<c8`/`<c16`, sub-byte integers one per byte
//! (`|i1`/`|u1`, signed values sign-extended) and the f8/f4 types as `|u1` raw bits. Physical
//! files (`--physical`) hold a literal's raw buffer as a 1-D array: of the element dtype with
//! one entry per physical slot when slots have the type's natural size, else as `|u1` bytes
//! (sub-byte elements packed low bits first), padding included.
//!
//! The format is small enough to read and write here directly: a magic string, a Python dict
//! literal header and raw data. (The `npyz` crate was tried first, but its header reader
//! overflows, and so panics in debug builds, on a hostile `shape`; inputs must never panic.)
//! Keeping the data as plain bytes also lets every element type keep its exact bits.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use crate::element_type::ElementType;
use crate::layout::Layout;
use crate::layout_index::{LayoutError, LayoutMap};
use crate::literal::{Literal, LiteralError};
use crate::shape::Shape;

/// Why an `.npy` file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("{path}: {source}")]
    File { path: String, source: Box<NpyError> },
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("not a valid .npy file: {0}")]
    Format(String),
    #[error("{0}")]
    Mismatch(String),
    #[error("unsupported .npy content: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Literal(#[from] LiteralError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// A plain numpy dtype: kind (`b`, `i`, `u`, `f`, `c`) and size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dtype {
    kind: char,
    size: usize,
}

impl Dtype {
    const fn new(kind: char, size: usize) -> Dtype {
        Dtype { kind, size }
    }

    fn descr(self) -> String {
        let order = if self.size == 1 { '|' } else { '<' };
        format!("{order}{}{}", self.kind, self.size)
    }
}

/// The dtype a logical file holds for an element type.
fn logical_dtype(element_type: ElementType) -> Result<Dtype, NpyError> {
    use ElementType::*;
    Ok(match element_type {
        Pred => Dtype::new('b', 1),
        S1 | S2 | S4 | S8 => Dtype::new('i', 1),
        S16 => Dtype::new('i', 2),
        S32 => Dtype::new('i', 4),
        S64 => Dtype::new('i', 8),
        U1 | U2 | U4 | U8 => Dtype::new('u', 1),
        U16 | F16 | BF16 => Dtype::new('u', 2),
        U32 => Dtype::new('u', 4),
        U64 => Dtype::new('u', 8),
        F32 => Dtype::new('f', 4),
        F64 => Dtype::new('f', 8),
        C64 => Dtype::new('c', 8),
        C128 => Dtype::new('c', 16),
        F4E2M1FN | F8E3M4 | F8E4M3 | F8E4M3FN | F8E4M3B11FNUZ | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0FNU => {
            Dtype::new('u', 1)
        }
        Token | Tuple | Opaque => {
            return Err(NpyError::Unsupported(format!("{element_type} values cannot be stored in .npy files")))
        }
    })
}

/// Dtypes accepted for an element type when reading: the one written, and `<f2` for f16.
fn accepts(element_type: ElementType, dtype: Dtype) -> Result<bool, NpyError> {
    Ok(dtype == logical_dtype(element_type)? || (element_type == ElementType::F16 && dtype == Dtype::new('f', 2)))
}

/// The element type a dtype means when no shape is expected.
fn inferred_type(dtype: Dtype) -> Option<ElementType> {
    use ElementType::*;
    Some(match (dtype.kind, dtype.size) {
        ('b', 1) => Pred,
        ('i', 1) => S8,
        ('i', 2) => S16,
        ('i', 4) => S32,
        ('i', 8) => S64,
        ('u', 1) => U8,
        ('u', 2) => U16,
        ('u', 4) => U32,
        ('u', 8) => U64,
        ('f', 2) => F16,
        ('f', 4) => F32,
        ('f', 8) => F64,
        ('c', 8) => C64,
        ('c', 16) => C128,
        _ => return None,
    })
}

/// A parsed header: dtype, byte order, dims and axis order.
struct Header {
    dtype: Dtype,
    big_endian: bool,
    dims: Vec<i64>,
    fortran: bool,
    descr: String,
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// Header dicts longer than this are not something numpy writes for a plain array.
const MAX_HEADER_LEN: usize = 1 << 20;

fn read_header(reader: &mut impl Read) -> Result<Header, NpyError> {
    let truncated = |e: io::Error| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            NpyError::Format("the file ends inside the header".to_string())
        } else {
            NpyError::Io(e)
        }
    };
    let mut prefix = [0u8; 8];
    reader.read_exact(&mut prefix).map_err(truncated)?;
    if !prefix.starts_with(MAGIC) {
        return Err(NpyError::Format("missing the \\x93NUMPY magic string".to_string()));
    }
    let major = prefix[6];
    let len = match major {
        1 => {
            let mut b = [0u8; 2];
            reader.read_exact(&mut b).map_err(truncated)?;
            usize::from(u16::from_le_bytes(b))
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            reader.read_exact(&mut b).map_err(truncated)?;
            usize::try_from(u32::from_le_bytes(b)).unwrap_or(usize::MAX)
        }
        v => return Err(NpyError::Unsupported(format!("format version {v}"))),
    };
    if len > MAX_HEADER_LEN {
        return Err(NpyError::Format(format!("header of {len} bytes is implausibly long")));
    }
    let mut text = vec![0u8; len];
    reader.read_exact(&mut text).map_err(truncated)?;
    // Versions 1 and 2 are latin-1, version 3 UTF-8; a plain array's header is ASCII either way.
    let text = String::from_utf8(text).map_err(|_| NpyError::Format("header is not text".to_string()))?;
    let dict = parse_header_dict(&text)?;
    let descr = dict.descr;
    let mut chars = descr.chars();
    let (order, kind) = (chars.next(), chars.next());
    let size: Option<usize> = chars.as_str().parse().ok();
    let big_endian = match order {
        Some('<' | '|' | '=') => false,
        Some('>') => true,
        _ => return Err(NpyError::Unsupported(format!("dtype {descr}"))),
    };
    let (Some(kind @ ('b' | 'i' | 'u' | 'f' | 'c')), Some(size @ 1..=16)) = (kind, size) else {
        return Err(NpyError::Unsupported(format!("dtype {descr}")));
    };
    let count = dict.dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d));
    if count.and_then(|c| c.checked_mul(size as i64)).is_none() {
        return Err(NpyError::Format(format!("dimensions {} overflow", dims_text(&dict.dims))));
    }
    Ok(Header { dtype: Dtype::new(kind, size), big_endian, dims: dict.dims, fortran: dict.fortran, descr })
}

struct HeaderDict {
    descr: String,
    fortran: bool,
    dims: Vec<i64>,
}

/// Parses the Python dict literal of an npy header: `{'descr': '<f4', 'fortran_order':
/// False, 'shape': (2, 3), }`. Structured dtypes (a list for `descr`) are unsupported.
fn parse_header_dict(text: &str) -> Result<HeaderDict, NpyError> {
    let bad = |what: &str| NpyError::Format(format!("header {what}: {}", text.trim_end()));
    let mut p = DictParser { rest: text };
    let (mut descr, mut fortran, mut dims) = (None, None, None);
    p.expect('{').ok_or_else(|| bad("is not a dict"))?;
    loop {
        if p.eat('}') {
            break;
        }
        let key = p.string().ok_or_else(|| bad("has a malformed key"))?;
        p.expect(':').ok_or_else(|| bad("misses a ':'"))?;
        match key.as_str() {
            "descr" => {
                if p.peek() == Some('[') {
                    return Err(NpyError::Unsupported("structured dtypes".to_string()));
                }
                descr = Some(p.string().ok_or_else(|| bad("has a malformed descr"))?);
            }
            "fortran_order" => fortran = Some(p.boolean().ok_or_else(|| bad("has a malformed fortran_order"))?),
            "shape" => dims = Some(p.int_tuple().ok_or_else(|| bad("has a malformed shape"))?),
            _ => return Err(bad(&format!("has an unknown key '{key}'"))),
        }
        if !p.eat(',') {
            p.expect('}').ok_or_else(|| bad("misses a '}'"))?;
            break;
        }
    }
    match (descr, fortran, dims) {
        (Some(descr), Some(fortran), Some(dims)) => Ok(HeaderDict { descr, fortran, dims }),
        _ => Err(bad("misses descr, fortran_order or shape")),
    }
}

struct DictParser<'a> {
    rest: &'a str,
}

impl DictParser<'_> {
    fn peek(&mut self) -> Option<char> {
        self.rest = self.rest.trim_start();
        self.rest.chars().next()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.rest = self.rest.get(c.len_utf8()..).unwrap_or_default();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Option<()> {
        self.eat(c).then_some(())
    }

    fn string(&mut self) -> Option<String> {
        let quote = self.peek().filter(|&q| q == '\'' || q == '"')?;
        let body = self.rest.get(1..)?;
        let end = body.find(quote)?;
        let s = body.get(..end)?.to_string();
        self.rest = body.get(end + 1..)?;
        Some(s)
    }

    fn boolean(&mut self) -> Option<bool> {
        self.peek()?;
        for (word, value) in [("True", true), ("False", false)] {
            if let Some(rest) = self.rest.strip_prefix(word) {
                self.rest = rest;
                return Some(value);
            }
        }
        None
    }

    fn int_tuple(&mut self) -> Option<Vec<i64>> {
        self.expect('(')?;
        let mut out = Vec::new();
        loop {
            if self.eat(')') {
                return Some(out);
            }
            self.peek()?;
            let digits = self.rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(self.rest.len());
            let (number, rest) = self.rest.split_at(digits);
            out.push(number.parse().ok()?);
            self.rest = rest;
            if !self.eat(',') {
                self.expect(')')?;
                return Some(out);
            }
        }
    }
}

fn dims_text(dims: &[i64]) -> String {
    match dims {
        [d] => format!("({d},)"),
        _ => format!("({})", dims.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// Reads the `count * size` data bytes, little-endian. Reading grows the buffer as data
/// arrives, so a header that claims more than the file holds fails without a huge allocation.
fn read_data(reader: &mut impl Read, header: &Header, count: i64) -> Result<Vec<u8>, NpyError> {
    let len = usize::try_from(count)
        .ok()
        .and_then(|n| n.checked_mul(header.dtype.size))
        .ok_or_else(|| NpyError::Format(format!("{} elements of {} overflow", count, header.descr)))?;
    let mut bytes = Vec::new();
    reader.take(len as u64).read_to_end(&mut bytes)?;
    if bytes.len() != len {
        return Err(NpyError::Format(format!("data ends after {} of {len} bytes", bytes.len())));
    }
    if header.big_endian && header.dtype.size > 1 {
        // Complex values swap each part on its own.
        let part = if header.dtype.kind == 'c' { header.dtype.size / 2 } else { header.dtype.size };
        for chunk in bytes.chunks_exact_mut(part.max(1)) {
            chunk.reverse();
        }
    }
    Ok(bytes)
}

/// Builds a literal of `shape` (no layout) from logical C- or Fortran-order data bytes, then
/// moves it into `target`'s layout.
fn literal_from_data(
    element_type: ElementType,
    dims: &[i64],
    fortran: bool,
    bytes: Vec<u8>,
    target: &Shape,
) -> Result<Literal, NpyError> {
    let file_layout =
        if fortran { Layout::new(&(0..dims.len() as i64).collect::<Vec<_>>()) } else { Layout::row_major(dims.len()) };
    let file_shape = Shape::array_with_layout(element_type, dims, file_layout);
    let lit = if element_type.is_pred() || element_type.bit_width() < 8 {
        // One byte per element, but only the value's bits count: canonicalize through the
        // literal's encoding (pred to 0/1, sub-byte values cut and re-extended).
        Literal::from_bits_vec(file_shape, bytes.iter().map(|&b| u128::from(b)).collect())?
    } else {
        Literal::from_physical_bytes(file_shape, bytes)?
    };
    Ok(lit.into_layout_of(target)?)
}

/// Reads a logical `.npy` file for a parameter of shape `expected` (an array shape; its layout
/// decides how the literal is stored). The dtype and dimensions must match.
pub fn read_npy_from(mut reader: impl Read, expected: &Shape) -> Result<Literal, NpyError> {
    let Shape::Array(a) = expected else {
        return Err(NpyError::Mismatch(format!("expected shape {expected} is not an array")));
    };
    if !a.is_static() {
        return Err(NpyError::Mismatch(format!("expected shape {expected} is not static")));
    }
    let header = read_header(&mut reader)?;
    if !accepts(a.element_type, header.dtype)? {
        let want = logical_dtype(a.element_type)?.descr();
        let note = match a.element_type {
            ElementType::F16 => " (raw bits) or <f2",
            ElementType::BF16 => " (raw bits)",
            _ => "",
        };
        return Err(NpyError::Mismatch(format!(
            "dtype {} does not match {}: expected {want}{note}",
            header.descr, a.element_type
        )));
    }
    if header.dims != a.dims {
        return Err(NpyError::Mismatch(format!(
            "dimensions {} do not match {expected}: expected {}",
            dims_text(&header.dims),
            dims_text(&a.dims)
        )));
    }
    let count = a.element_count().ok_or_else(|| NpyError::Mismatch(format!("{expected} is too large")))?;
    let bytes = read_data(&mut reader, &header, count)?;
    literal_from_data(a.element_type, &a.dims, header.fortran, bytes, expected)
}

/// Reads a logical `.npy` file whose shape is inferred from the file: `<u2` becomes u16,
/// `<f2` f16, `|b1` pred, and so on; the literal is row-major.
pub fn read_npy_any_from(mut reader: impl Read) -> Result<Literal, NpyError> {
    let header = read_header(&mut reader)?;
    let element_type = inferred_type(header.dtype)
        .ok_or_else(|| NpyError::Unsupported(format!("dtype {} has no HLO element type", header.descr)))?;
    let count = header
        .dims
        .iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| NpyError::Format(format!("dimensions {} overflow", dims_text(&header.dims))))?;
    let bytes = read_data(&mut reader, &header, count)?;
    let target = Shape::array(element_type, &header.dims);
    literal_from_data(element_type, &header.dims, header.fortran, bytes, &target)
}

/// Writes a version 1.0 header, padded so the data starts at a multiple of 64 bytes as numpy
/// does.
fn write_header(writer: &mut impl Write, dtype: Dtype, dims: &[i64]) -> Result<(), NpyError> {
    let mut dict = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", dtype.descr(), dims_text(dims));
    let unpadded = MAGIC.len() + 4 + dict.len() + 1;
    dict.extend(std::iter::repeat_n(' ', unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let len =
        u16::try_from(dict.len()).map_err(|_| NpyError::Unsupported(format!("a header of {} bytes", dict.len())))?;
    writer.write_all(MAGIC)?;
    writer.write_all(&[1, 0])?;
    writer.write_all(&len.to_le_bytes())?;
    writer.write_all(dict.as_bytes())?;
    Ok(())
}

/// Writes an array literal's logical values in C order.
pub fn write_npy_to(literal: &Literal, mut writer: impl Write) -> Result<(), NpyError> {
    let Some(a) = literal.array_shape() else {
        return Err(NpyError::Unsupported(format!("{} is not an array", literal.shape())));
    };
    let element_type = a.element_type;
    let dtype = logical_dtype(element_type)?;
    write_header(&mut writer, dtype, &a.dims)?;
    if element_type.is_pred() || element_type.bit_width() < 8 {
        let width = element_type.bit_width();
        let signed = element_type.is_signed_integral();
        let bytes: Vec<u8> = literal
            .to_bits_vec()?
            .into_iter()
            .map(|bits| {
                let b = bits as u8;
                // Sign-extend sub-byte signed values to a whole `|i1`.
                if signed && width < 8 && (b >> (width - 1)) & 1 == 1 {
                    b | !((1u8 << width) - 1)
                } else {
                    b
                }
            })
            .collect();
        writer.write_all(&bytes)?;
    } else if literal.is_dense_row_major() {
        writer.write_all(literal.physical_bytes()?)?;
    } else {
        let dense = literal.relayout(&Layout::row_major(a.rank()))?;
        writer.write_all(dense.physical_bytes()?)?;
    }
    writer.flush()?;
    Ok(())
}

/// The dtype and length of an array's physical file.
fn physical_form(map: &LayoutMap) -> Result<(Dtype, i64), NpyError> {
    let element_type = map.element_type();
    if map.element_size_bits() as usize == element_type.byte_size() * 8 {
        Ok((logical_dtype(element_type)?, map.physical_element_count()))
    } else {
        Ok((Dtype::new('u', 1), map.physical_byte_size()))
    }
}

/// Reads a physical `.npy` file: the raw buffer of `expected` (a static array shape with its
/// layout) as a 1-D array of the layout's physical length. A `|u1` file of the buffer's byte
/// size is accepted for any element type.
pub fn read_npy_physical_from(mut reader: impl Read, expected: &Shape) -> Result<Literal, NpyError> {
    let Shape::Array(a) = expected else {
        return Err(NpyError::Mismatch(format!("expected shape {expected} is not an array")));
    };
    if !a.is_static() {
        return Err(NpyError::Mismatch(format!("expected shape {expected} is not static")));
    }
    let map = LayoutMap::new(a)?;
    let (dtype, len) = physical_form(&map)?;
    let header = read_header(&mut reader)?;
    let natural = map.element_size_bits() as usize == a.element_type.byte_size() * 8;
    let want_len = if header.dtype == dtype || (natural && accepts(a.element_type, header.dtype)?) {
        len
    } else if header.dtype.size == 1 && matches!(header.dtype.kind, 'u' | 'i') {
        map.physical_byte_size()
    } else {
        return Err(NpyError::Mismatch(format!(
            "dtype {} does not match the physical buffer of {expected}: expected {} (or |u1 bytes)",
            header.descr,
            dtype.descr()
        )));
    };
    if header.dims != [want_len] {
        return Err(NpyError::Mismatch(format!(
            "dimensions {} do not match the physical buffer of {expected}: expected ({want_len},)",
            dims_text(&header.dims)
        )));
    }
    let bytes = read_data(&mut reader, &header, want_len)?;
    Ok(Literal::from_physical_bytes(expected.clone(), bytes)?)
}

/// Writes an array literal's raw physical buffer, padding included.
pub fn write_npy_physical_to(literal: &Literal, mut writer: impl Write) -> Result<(), NpyError> {
    let Some(map) = literal.layout_map() else {
        return Err(NpyError::Unsupported(format!("{} is not an array", literal.shape())));
    };
    let (dtype, len) = physical_form(map)?;
    write_header(&mut writer, dtype, &[len])?;
    writer.write_all(literal.physical_bytes()?)?;
    writer.flush()?;
    Ok(())
}

fn in_file<T>(path: &Path, f: impl FnOnce() -> Result<T, NpyError>) -> Result<T, NpyError> {
    f().map_err(|e| NpyError::File { path: path.display().to_string(), source: Box::new(e) })
}

/// [`read_npy_from`] on a file.
pub fn read_npy(path: impl AsRef<Path>, expected: &Shape) -> Result<Literal, NpyError> {
    let path = path.as_ref();
    in_file(path, || read_npy_from(BufReader::new(File::open(path)?), expected))
}

/// [`read_npy_any_from`] on a file.
pub fn read_npy_any(path: impl AsRef<Path>) -> Result<Literal, NpyError> {
    let path = path.as_ref();
    in_file(path, || read_npy_any_from(BufReader::new(File::open(path)?)))
}

/// [`read_npy_physical_from`] on a file.
pub fn read_npy_physical(path: impl AsRef<Path>, expected: &Shape) -> Result<Literal, NpyError> {
    let path = path.as_ref();
    in_file(path, || read_npy_physical_from(BufReader::new(File::open(path)?), expected))
}

/// [`write_npy_to`] into a new file.
pub fn write_npy(literal: &Literal, path: impl AsRef<Path>) -> Result<(), NpyError> {
    let path = path.as_ref();
    in_file(path, || write_npy_to(literal, BufWriter::new(File::create(path)?)))
}

/// [`write_npy_physical_to`] into a new file.
pub fn write_npy_physical(literal: &Literal, path: impl AsRef<Path>) -> Result<(), NpyError> {
    let path = path.as_ref();
    in_file(path, || write_npy_physical_to(literal, BufWriter::new(File::create(path)?)))
}
