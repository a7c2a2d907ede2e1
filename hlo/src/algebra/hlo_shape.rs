//! The abstract shape of an HLO [`Shape`], so `shape_of` applies to HLO values.

use super::extents::Extents;
use super::functions::Shaped;
use super::size::Dim;
use crate::shape::{ArrayShape, Shape};

impl Shaped for ArrayShape {
    /// Static dimensions are known extents. A dynamic dimension is unknown whether or not it
    /// has a bound: `<=N` limits the run-time extent but does not fix it.
    fn extents(&self) -> Extents {
        if self.dynamic.len() != self.dims.len() {
            return Extents::invalid(format!(
                "shape_of: array shape has {} dimensions but {} dynamic flags",
                self.dims.len(),
                self.dynamic.len()
            ));
        }
        let mut dims = Vec::with_capacity(self.dims.len());
        for (i, (&extent, &dynamic)) in self.dims.iter().zip(&self.dynamic).enumerate() {
            if dynamic {
                dims.push(Dim::Unknown);
                continue;
            }
            match u64::try_from(extent) {
                Ok(n) => dims.push(Dim::Known(n)),
                Err(_) => {
                    return Extents::invalid(format!("shape_of: static dimension {i} has negative extent {extent}"))
                }
            }
        }
        Extents::Ranked(dims)
    }
}

impl Shaped for Shape {
    /// Only arrays have extents; a tuple, token or opaque value is not a shaped value.
    fn extents(&self) -> Extents {
        match self {
            Shape::Array(array) => array.extents(),
            Shape::Tuple(_) => Extents::invalid("shape_of: a tuple has no array shape"),
            Shape::Token => Extents::invalid("shape_of: a token has no array shape"),
            Shape::Opaque => Extents::invalid("shape_of: an opaque value has no array shape"),
        }
    }
}
