//! Leaves, tokens, random numbers, host transfers, asynchronous copies and collectives.
//!
//! Many of these produce what their declaration says (a parameter, an infeed, a received
//! value); inference checks the parts the operands do determine.

use super::{ash, check_reducer, dim_index, list, scalar_type, sh, size_eq, Ctx, Res};
use crate::element_type::ElementType;
use crate::ir::{Payload, RandomAlgorithm, RandomDistribution};
use crate::shape::Shape;

pub fn parameter(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(0)?;
    match cx.inst.payload {
        Payload::Parameter(n) if n >= 0 => Ok(cx.declared()),
        Payload::Parameter(n) => bail!("parameter.number", "parameter number {n} is negative"),
        _ => bail!("parameter.number", "parameter has no parameter number"),
    }
}

pub fn constant(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(0)?;
    let Some(lit) = cx.inst.literal() else {
        bail!("constant.literal", "constant has no literal");
    };
    if !lit.shape().compatible(&cx.inst.shape.without_layout())
        && !lit.shape().without_layout().compatible(&cx.inst.shape.without_layout())
    {
        bail!(
            "constant.literal",
            "constant literal of shape {} does not match the declared {}",
            sh(lit.shape()),
            sh(&cx.inst.shape)
        );
    }
    Ok(cx.declared())
}

pub fn after_all(cx: &Ctx) -> Res<Shape> {
    for (i, s) in cx.ops.iter().enumerate() {
        if !s.is_token() {
            bail!("token.operand", "after-all operand {i} must be a token but is {}", sh(s));
        }
    }
    Ok(Shape::Token)
}

pub fn add_dependency(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    Ok(cx.op(0)?.without_layout())
}

/// opt-barrier and domain pass their operand through.
pub fn pass_through(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    Ok(cx.op(0)?.without_layout())
}

/// partition-id and replica-id.
pub fn id(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(0)?;
    Ok(Shape::scalar(ElementType::U32))
}

/// `rng(a, b), distribution=..`: scalar parameters of the result's element type; uniform
/// works on floats and integers, normal on floats.
pub fn rng(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    let dist = cx.word("distribution", RandomDistribution::parse)?;
    let out = cx.declared_array()?;
    for i in 0..2 {
        let p = cx.op(i)?;
        if scalar_type(p) != Some(out.element_type) {
            bail!("rng.parameter", "rng parameter {i} must be {}[] like the result but is {}", out.element_type, sh(p));
        }
    }
    let t = out.element_type;
    let ok = match dist {
        RandomDistribution::Uniform => t.is_float() || t.is_integral() || t.is_pred(),
        RandomDistribution::Normal => t.is_float(),
    };
    if !ok {
        bail!("rng.type", "{dist} cannot produce {}", ash(out));
    }
    Ok(cx.declared())
}

/// `rng-bit-generator(state)`: produces `(new state, bits)`, the state unchanged in shape.
pub fn rng_bit_generator(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let state = cx.arr(0)?;
    if cx.attr("algorithm").is_some() {
        cx.word("algorithm", RandomAlgorithm::parse)?;
    }
    let declared = cx.declared();
    match &declared {
        Shape::Tuple(e) if e.len() == 2 && e[0].compatible(&cx.op(0)?.without_layout()) => {
            if let Some(bits) = e[1].as_array() {
                if !bits.element_type.is_integral() {
                    bail!("rng_bit_generator.shape", "rng-bit-generator produces integers, not {}", ash(bits));
                }
            }
            Ok(declared)
        }
        _ => bail!(
            "rng_bit_generator.shape",
            "rng-bit-generator of state {} must produce (state, bits) but is declared {}",
            ash(state),
            sh(&declared)
        ),
    }
}

pub fn rng_get_and_update_state(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(0)?;
    cx.declared_array()?;
    Ok(cx.declared())
}

fn expect_token(cx: &Ctx, i: usize) -> Res<()> {
    let s = cx.op(i)?;
    if !s.is_token() {
        bail!("token.operand", "{} operand {i} must be a token but is {}", cx.opcode(), sh(s));
    }
    Ok(())
}

/// Checks a declared tuple's element count and that element `token_at` is a token.
fn declared_tuple_with_token(cx: &Ctx, len: usize, token_at: usize) -> Res<Vec<Shape>> {
    match cx.declared() {
        Shape::Tuple(e) if e.len() == len && e[token_at].is_token() => Ok(e),
        other => bail!(
            "token.result",
            "{} must produce a tuple of {len} with a token at {token_at} but is declared {}",
            cx.opcode(),
            sh(&other)
        ),
    }
}

pub fn infeed(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    expect_token(cx, 0)?;
    Ok(Shape::Tuple(declared_tuple_with_token(cx, 2, 1)?))
}

pub fn outfeed(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    expect_token(cx, 1)?;
    if let Some(crate::ir::AttrValue::Shape(s)) = cx.attr("outfeed_shape") {
        if !s.compatible(cx.op(0)?) && !s.without_layout().compatible(&cx.op(0)?.without_layout()) {
            bail!("outfeed.shape", "outfeed_shape {} does not match the operand {}", sh(s), sh(cx.op(0)?));
        }
    }
    Ok(Shape::Token)
}

pub fn send(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(2)?;
    expect_token(cx, 1)?;
    Ok(Shape::Tuple(vec![cx.op(0)?.without_layout(), Shape::scalar(ElementType::U32), Shape::Token]))
}

pub fn send_done(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    match cx.op(0)? {
        Shape::Tuple(e) if e.len() == 3 && e[2].is_token() => Ok(Shape::Token),
        s => bail!("token.operand", "send-done operand must be a send's (value, u32[], token) but is {}", sh(s)),
    }
}

pub fn recv(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    expect_token(cx, 0)?;
    let e = declared_tuple_with_token(cx, 3, 2)?;
    if scalar_type(&e[1]) != Some(ElementType::U32) {
        bail!("token.result", "recv must produce (value, u32[], token) but element 1 is {}", sh(&e[1]));
    }
    Ok(Shape::Tuple(e))
}

pub fn recv_done(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    match cx.op(0)? {
        Shape::Tuple(e) if e.len() == 3 && e[2].is_token() => {
            Ok(Shape::Tuple(vec![e[0].without_layout(), Shape::Token]))
        }
        s => bail!("token.operand", "recv-done operand must be a recv's (value, u32[], token) but is {}", sh(s)),
    }
}

/// `copy-start(x)` is `(x, x, u32[])`: destination, source and a context.
pub fn copy_start(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let s = cx.op(0)?.without_layout();
    Ok(Shape::Tuple(vec![s.clone(), s, Shape::scalar(ElementType::U32)]))
}

pub fn copy_done(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    match cx.op(0)? {
        Shape::Tuple(e) if e.len() == 3 => Ok(e[0].without_layout()),
        s => bail!("async.shape", "copy-done operand must be a copy-start's (dest, source, context) but is {}", sh(s)),
    }
}

/// The operands, as one value when there is one and as a tuple otherwise.
fn one_or_tuple(cx: &Ctx) -> Shape {
    match cx.ops {
        [one] => one.without_layout(),
        many => Shape::Tuple(many.iter().map(|s| s.without_layout()).collect()),
    }
}

fn check_arrays(cx: &Ctx) -> Res<()> {
    cx.expect_at_least(1)?;
    for i in 0..cx.ops.len() {
        cx.arr(i)?;
    }
    Ok(())
}

/// all-reduce and all-reduce-start: a reducer over each operand's element type.
pub fn all_reduce(cx: &Ctx) -> Res<Shape> {
    check_arrays(cx)?;
    let f = cx.comp("to_apply")?;
    let inits: Vec<Shape> = cx.ops.iter().filter_map(|s| s.as_array()).map(|a| Shape::scalar(a.element_type)).collect();
    // XLA applies one scalar reducer to every operand, so all must share its type.
    let Some(first) = inits.first() else {
        bail!("operands.count", "{} needs operands", cx.opcode());
    };
    for i in &inits {
        if !i.compatible(first) {
            bail!(
                "all_reduce.type_mismatch",
                "{} operands must share an element type: {} vs {}",
                cx.opcode(),
                sh(first),
                sh(i)
            );
        }
    }
    check_reducer(&f, &[first], &[first.element_type()], "all_reduce.computation_signature", "all-reduce")?;
    Ok(one_or_tuple(cx))
}

/// all-reduce-done returns its operand.
pub fn done_same(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    Ok(cx.op(0)?.without_layout())
}

/// all-gather-done and collective-permute-done return element `index` of the start tuple.
pub fn done_element(cx: &Ctx, index: usize) -> Res<Shape> {
    cx.expect_count(1)?;
    match cx.op(0)? {
        Shape::Tuple(e) if e.len() > index => Ok(e[index].without_layout()),
        s => bail!("async.shape", "{} operand must be a start's tuple but is {}", cx.opcode(), sh(s)),
    }
}

/// Gathers and scatters change one dimension by the (unknown here) participant count: the
/// declared results are checked to differ from the operands only there, by a whole factor.
fn check_scaled(cx: &Ctx, results: &[&Shape], grow: bool) -> Res<()> {
    let dims = cx.ints("dimensions")?;
    let [d] = dims else {
        bail!("collective.dimension", "{} needs one dimension but has {}", cx.opcode(), list(dims));
    };
    if results.len() != cx.ops.len() {
        bail!("collective.shape", "{} has {} operands but {} results", cx.opcode(), cx.ops.len(), results.len());
    }
    for (i, r) in results.iter().enumerate() {
        let a = cx.arr(i)?;
        let Some(r) = r.as_array() else {
            bail!("collective.shape", "{} result {i} must be an array but is {}", cx.opcode(), sh(r));
        };
        let d = dim_index(*d, a.rank(), "collective.dimension", &cx.opcode().to_string())?;
        let (small, big) = if grow { (a, r) } else { (r, a) };
        let fits = r.element_type == a.element_type
            && r.rank() == a.rank()
            && (0..a.rank()).all(|j| j == d || size_eq(a.dims[j], r.dims[j]))
            && (small.dims[d] == 0 && big.dims[d] == 0 || small.dims[d] > 0 && big.dims[d] % small.dims[d] == 0);
        if !fits {
            bail!(
                "collective.shape",
                "{} result {} does not follow from operand {} along dimension {d}",
                cx.opcode(),
                ash(r),
                ash(a)
            );
        }
    }
    Ok(())
}

fn declared_results(cx: &Ctx) -> Vec<Shape> {
    match (&cx.inst.shape, cx.ops.len()) {
        (Shape::Tuple(e), n) if n != 1 => e.clone(),
        (s, _) => vec![s.clone()],
    }
}

pub fn all_gather(cx: &Ctx) -> Res<Shape> {
    check_arrays(cx)?;
    let results = declared_results(cx);
    check_scaled(cx, &results.iter().collect::<Vec<_>>(), true)?;
    Ok(cx.declared())
}

/// all-gather-start produces `(operands, results)`.
pub fn all_gather_start(cx: &Ctx) -> Res<Shape> {
    check_arrays(cx)?;
    let declared = cx.declared();
    match &declared {
        Shape::Tuple(e) if e.len() == 2 && e[0].compatible(&one_or_tuple(cx)) => {
            let results: Vec<&Shape> = match (&e[1], cx.ops.len()) {
                (Shape::Tuple(r), n) if n != 1 => r.iter().collect(),
                (r, _) => vec![r],
            };
            check_scaled(cx, &results, true)?;
            Ok(declared)
        }
        _ => bail!(
            "collective.shape",
            "all-gather-start must produce (operands, results) but is declared {}",
            sh(&declared)
        ),
    }
}

pub fn reduce_scatter(cx: &Ctx) -> Res<Shape> {
    check_arrays(cx)?;
    cx.comp("to_apply")?;
    let results = declared_results(cx);
    check_scaled(cx, &results.iter().collect::<Vec<_>>(), false)?;
    Ok(cx.declared())
}

/// With a split dimension, all-to-all exchanges blocks of one array and keeps its shape;
/// without, it exchanges whole operands and returns them as a tuple.
pub fn all_to_all(cx: &Ctx) -> Res<Shape> {
    check_arrays(cx)?;
    if cx.attr("dimensions").is_some() {
        cx.expect_count(1)?;
        let a = cx.arr(0)?;
        let dims = cx.ints("dimensions")?;
        let [d] = dims else {
            bail!("collective.dimension", "all-to-all needs one split dimension but has {}", list(dims));
        };
        dim_index(*d, a.rank(), "collective.dimension", "all-to-all split")?;
        return Ok(cx.op(0)?.without_layout());
    }
    Ok(Shape::Tuple(cx.ops.iter().map(|s| s.without_layout()).collect()))
}

/// `ragged-all-to-all(input, output, input_offsets, send_sizes, output_offsets, recv_sizes)`
/// updates and returns `output`.
pub fn ragged_all_to_all(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(6)?;
    let input = cx.arr(0)?;
    let output = cx.arr(1)?;
    if input.element_type != output.element_type || input.rank() != output.rank() {
        bail!(
            "collective.shape",
            "ragged-all-to-all input {} and output {} differ in type or rank",
            ash(input),
            ash(output)
        );
    }
    for i in 2..6 {
        let m = cx.arr(i)?;
        if !m.element_type.is_integral() || m.rank() != 1 {
            bail!("collective.shape", "ragged-all-to-all operand {i} must be an integer vector but is {}", ash(m));
        }
    }
    Ok(cx.op(1)?.without_layout())
}

/// Whether a collective-permute is the in-place form `(input, output, input_offsets,
/// output_offsets)`, which XLA marks with `slice_sizes`.
fn in_place_permute(cx: &Ctx) -> bool {
    cx.ops.len() == 4 && cx.attr("slice_sizes").is_some()
}

/// collective-permute sends each operand and returns values of the operands' shapes (a
/// tuple when several are combined); the in-place form returns the output buffer.
pub fn collective_permute(cx: &Ctx) -> Res<Shape> {
    cx.expect_at_least(1)?;
    if in_place_permute(cx) {
        let (input, output) = (cx.op(0)?, cx.op(1)?);
        if input.element_type() != output.element_type() || input.is_tuple() != output.is_tuple() {
            bail!(
                "collective.shape",
                "collective-permute output buffer {} does not fit the input {}",
                sh(output),
                sh(input)
            );
        }
        return Ok(output.without_layout());
    }
    Ok(one_or_tuple(cx))
}

/// collective-permute-start produces `(inputs, results, contexts..)`.
pub fn collective_permute_start(cx: &Ctx) -> Res<Shape> {
    cx.expect_at_least(1)?;
    let declared = cx.declared();
    let (input, result) = if in_place_permute(cx) {
        (cx.op(0)?.without_layout(), cx.op(1)?.without_layout())
    } else {
        (one_or_tuple(cx), one_or_tuple(cx))
    };
    match &declared {
        Shape::Tuple(e) if e.len() >= 2 && e[0].compatible(&input) && e[1].compatible(&result) => Ok(declared),
        _ => bail!(
            "collective.shape",
            "collective-permute-start of {} must produce ({}, {}, ..) but is declared {}",
            sh(&input),
            sh(&input),
            sh(&result),
            sh(&declared)
        ),
    }
}

/// collective-broadcast returns its operands; with `has_dynamic_root` the last operand
/// names the root and is not part of the result.
pub fn collective_broadcast(cx: &Ctx) -> Res<Shape> {
    check_arrays(cx)?;
    let data = if cx.bool_or("has_dynamic_root", false)? { cx.ops.len() - 1 } else { cx.ops.len() };
    match &cx.ops[..data] {
        [] => bail!("operands.count", "collective-broadcast with a dynamic root needs data operands"),
        [one] => Ok(one.without_layout()),
        many => Ok(Shape::Tuple(many.iter().map(|s| s.without_layout()).collect())),
    }
}
