//! Tessera's HLO layer: element types, shapes, layouts (with the one implementation of layout
//! index math), literals, the HLO IR, its text format, the verifier with shape inference, the
//! builder, and shape algebra.
