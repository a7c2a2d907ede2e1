//! XLA's HLO text format: parsing and printing.

mod attr_parser;
mod cursor;
mod literal_text;
mod parser;
mod printer;
mod shape_text;

pub use attr_parser::{dim_labels_to_string, escape_string, parse_dim_labels, window_to_string};
pub use cursor::{Cursor, ParseError, ParseResult};
pub use literal_text::{format_element, literal_to_string, parse_literal};
pub use parser::parse_module;
pub use printer::{computation_post_order, instruction_post_order, print_computation, print_module, PrintOptions};
pub use shape_text::{parse_layout, parse_shape};
