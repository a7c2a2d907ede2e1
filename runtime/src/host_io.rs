//! The host's side of host operations: the infeed and outfeed queues of an executable, and
//! the conversion between a host value's buffers (physical bytes in their layouts) and the
//! literal a host function or queue sees.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use tessera_hlo::{Literal, Shape};

use crate::step::HostValueEntry;

/// Literals queued for infeed and literals outfeed produced, first in first out.
#[derive(Debug, Default)]
pub(crate) struct HostQueues {
    infeed: Mutex<VecDeque<Literal>>,
    outfeed: Mutex<VecDeque<Literal>>,
}

/// A poisoned lock only means another thread panicked mid-push; the queue is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HostQueues {
    pub(crate) fn push_infeed(&self, literal: Literal) {
        lock(&self.infeed).push_back(literal);
    }

    pub(crate) fn pop_infeed(&self) -> Option<Literal> {
        lock(&self.infeed).pop_front()
    }

    pub(crate) fn infeed_len(&self) -> usize {
        lock(&self.infeed).len()
    }

    pub(crate) fn push_outfeed(&self, literal: Literal) {
        lock(&self.outfeed).push_back(literal);
    }

    pub(crate) fn pop_outfeed(&self) -> Option<Literal> {
        lock(&self.outfeed).pop_front()
    }

    pub(crate) fn outfeed_len(&self) -> usize {
        lock(&self.outfeed).len()
    }
}

/// The array leaf shapes of a host value, depth-first.
pub(crate) fn leaf_shapes(shape: &Shape) -> Vec<&Shape> {
    match shape {
        Shape::Tuple(elems) => elems.iter().flat_map(leaf_shapes).collect(),
        other => vec![other],
    }
}

/// The literal whose array leaf `i` has the physical bytes `leaves[i]`.
pub(crate) fn read_value(value: &HostValueEntry, leaves: &[&[u8]]) -> Result<Literal, String> {
    fn build(shape: &Shape, leaves: &mut std::slice::Iter<'_, &[u8]>) -> Result<Literal, String> {
        match shape {
            Shape::Tuple(elems) => {
                Ok(Literal::tuple(elems.iter().map(|e| build(e, leaves)).collect::<Result<_, _>>()?))
            }
            _ => {
                let bytes = leaves.next().ok_or("a host value has fewer buffers than arrays")?;
                Literal::from_physical_bytes(shape.clone(), bytes.to_vec()).map_err(|e| e.to_string())
            }
        }
    }
    build(&value.shape, &mut leaves.iter())
}

/// The physical bytes of each array leaf of `literal`, laid out as the host value's shape
/// says; a literal of another shape is an error naming both.
pub(crate) fn write_value(value: &HostValueEntry, literal: &Literal) -> Result<Vec<Vec<u8>>, String> {
    if !literal.shape().compatible(&value.shape) {
        return Err(format!("got {} where {} is expected", literal.shape(), value.shape.without_layout()));
    }
    fn collect(literal: &Literal, out: &mut Vec<Literal>) {
        match literal.tuple_elements() {
            Some(elems) => elems.iter().for_each(|e| collect(e, out)),
            None => out.push(literal.clone()),
        }
    }
    let mut lits = Vec::new();
    collect(literal, &mut lits);
    let shapes = leaf_shapes(&value.shape);
    if lits.len() != shapes.len() {
        return Err("the literal's arrays do not match the value's".into());
    }
    lits.iter()
        .zip(shapes)
        .map(|(lit, shape)| {
            let laid = lit.relayout_like(shape).map_err(|e| e.to_string())?;
            Ok(laid.physical_bytes().map_err(|e| e.to_string())?.to_vec())
        })
        .collect()
}
