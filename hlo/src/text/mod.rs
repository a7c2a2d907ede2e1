//! XLA's HLO text format: parsing and printing.

mod cursor;
mod shape_text;

pub use cursor::{Cursor, ParseError, ParseResult};
pub use shape_text::{parse_layout, parse_shape};
