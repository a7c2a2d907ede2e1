//! XLA's HLO text format: parsing and printing.
//!
//! [`parse_module`] reads a module as XLA prints it (or as people write it: nested operands,
//! omitted shapes that can be inferred, compact `%t#0` tuple elements, async sugar) and makes
//! the checks XLA's parser makes. Omitted shapes are inferred by [`crate::verify::infer_shape`],
//! the verifier's rules. Text that does not start like a module is read as a single
//! instruction and wrapped in a module, as XLA does. [`print_module`] prints a module in XLA's long form
//! ([`PrintOptions::long`], the default `HloPrintOptions` with operand shapes) or short form
//! ([`PrintOptions::short`], `ShortParsable`), byte for byte as XLA does.

mod attr_parser;
mod cursor;
mod literal_text;
mod parser;
mod printer;
mod shape_text;

use std::fmt;
use std::str::FromStr;

pub use attr_parser::{dim_labels_to_string, escape_string, parse_dim_labels, window_to_string};
pub use cursor::{Cursor, ParseError, ParseResult};
pub use literal_text::{format_element, literal_to_string, parse_literal};
pub use parser::parse_module;
pub use printer::{computation_post_order, print_computation, print_module, PrintOptions};
pub use shape_text::{parse_layout, parse_shape};

use crate::ir::Module;

impl FromStr for Module {
    type Err = ParseError;
    fn from_str(text: &str) -> Result<Module, ParseError> {
        parse_module(text)
    }
}

/// The long form, as XLA's `ToString()` with operand shapes.
impl fmt::Display for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_module(self, &PrintOptions::long()))
    }
}
