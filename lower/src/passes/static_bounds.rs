//! Bounded dynamic dimensions (`f32[<=4,3]`) become static at their bounds. Programs here have
//! static shapes: a value's size is always its bound, which is what `hlo::eval` runs, and a
//! `set-dimension-size` to a run-time size is checked to keep it there (`build_program`).
//! Unbounded dimensions (`?`) have no bound and stay, for the lowering to refuse by name.

use tessera_hlo::shape::UNBOUNDED;
use tessera_hlo::{Module, Shape};

use crate::pass::Pass;
use crate::LowerError;

#[derive(Default)]
pub struct StaticBounds;

impl Pass for StaticBounds {
    fn name(&self) -> &'static str {
        "static_bounds"
    }

    fn run(&mut self, module: &mut Module) -> Result<bool, LowerError> {
        let mut changed = false;
        for comp in &mut module.computations {
            for inst in &mut comp.instructions {
                changed |= make_static(&mut inst.shape);
            }
        }
        Ok(changed)
    }
}

/// Clears the dynamic flag of every bounded dimension in `shape`; whether any was set.
fn make_static(shape: &mut Shape) -> bool {
    match shape {
        Shape::Array(a) => {
            let mut changed = false;
            for (flag, &dim) in a.dynamic.iter_mut().zip(&a.dims) {
                if *flag && dim != UNBOUNDED {
                    *flag = false;
                    changed = true;
                }
            }
            changed
        }
        Shape::Tuple(elems) => elems.iter_mut().fold(false, |c, e| make_static(e) | c),
        Shape::Token | Shape::Opaque => false,
    }
}
