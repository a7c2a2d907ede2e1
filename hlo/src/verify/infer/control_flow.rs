//! Ops that run other computations: while, conditional, call, fusion, async wrappers and
//! custom-call.

use super::{scalar_type, sh, Ctx, Res};
use crate::element_type::ElementType;
use crate::ir::{AttrValue, CompId, ProgramShape};
use crate::shape::Shape;

fn signature(p: &ProgramShape) -> String {
    format!("({}) -> {}", p.parameters.iter().map(sh).collect::<Vec<_>>().join(", "), sh(&p.result))
}

/// The operands must fit the callee's parameters one to one.
fn check_args(cx: &Ctx, callee: &ProgramShape, rule: &'static str, what: &str) -> Res<()> {
    if callee.parameters.len() != cx.ops.len() {
        bail!(
            rule,
            "{what} {} takes {} parameters but gets {} operands",
            signature(callee),
            callee.parameters.len(),
            cx.ops.len()
        );
    }
    for (i, (p, o)) in callee.parameters.iter().zip(cx.ops).enumerate() {
        if !p.compatible(o) {
            bail!(rule, "{what} parameter {i} is {} but operand {i} is {}", sh(p), sh(o));
        }
    }
    Ok(())
}

/// `while(init), condition=c, body=b`: c is `(T) -> pred[]`, b is `(T) -> T`.
pub fn while_loop(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let init = cx.op(0)?;
    let cond = cx.comp("condition")?;
    let body = cx.comp("body")?;
    if cond.parameters.len() != 1 || scalar_type(&cond.result) != Some(ElementType::Pred) {
        bail!("while.condition_signature", "while condition must be (T) -> pred[] but is {}", signature(&cond));
    }
    if body.parameters.len() != 1 {
        bail!("while.body_signature", "while body must take one parameter but is {}", signature(&body));
    }
    if !body.result.compatible(&body.parameters[0]) {
        bail!("while.body_signature", "while body must return its parameter's shape but is {}", signature(&body));
    }
    if !cond.parameters[0].compatible(&body.parameters[0]) {
        bail!(
            "while.condition_signature",
            "while condition parameter {} differs from the body parameter {}",
            sh(&cond.parameters[0]),
            sh(&body.parameters[0])
        );
    }
    if !init.compatible(&body.parameters[0]) {
        bail!(
            "while.init_mismatch",
            "while init {} does not match the loop state {}",
            sh(init),
            sh(&body.parameters[0])
        );
    }
    Ok(init.without_layout())
}

/// The branch computations: `branch_computations={..}` or, for a pred selector,
/// `true_computation` and `false_computation`.
fn branches(cx: &Ctx) -> Res<Vec<CompId>> {
    match cx.attr("branch_computations") {
        Some(AttrValue::Computations(b)) => return Ok(b.clone()),
        Some(_) => bail!("attr.kind", "conditional attribute branch_computations must list computations"),
        None => {}
    }
    match (cx.attr("true_computation"), cx.attr("false_computation")) {
        (Some(AttrValue::Computation(t)), Some(AttrValue::Computation(f))) => Ok(vec![*t, *f]),
        _ => bail!("attr.missing", "conditional needs branch_computations or true_computation and false_computation"),
    }
}

/// `conditional(selector, args..)`: a pred selector picks one of two branches, an s32 selector
/// one of N; branch i takes operand i+1 and all branches return the same shape.
pub fn conditional(cx: &Ctx) -> Res<Shape> {
    cx.expect_at_least(1)?;
    let sel = cx.op(0)?;
    let ids = branches(cx)?;
    match scalar_type(sel) {
        Some(ElementType::Pred) if ids.len() != 2 => {
            bail!("conditional.branch_count", "a pred-selected conditional needs 2 branches but has {}", ids.len())
        }
        Some(ElementType::Pred) => {}
        Some(ElementType::S32) if ids.is_empty() => {
            bail!("conditional.branch_count", "an index-selected conditional needs at least one branch")
        }
        Some(ElementType::S32) => {}
        _ => bail!("conditional.selector", "conditional selector must be pred[] or s32[] but is {}", sh(sel)),
    }
    if cx.ops.len() != ids.len() + 1 {
        bail!(
            "operands.count",
            "conditional with {} branches takes {} operands but has {}",
            ids.len(),
            ids.len() + 1,
            cx.ops.len()
        );
    }
    let mut result: Option<Shape> = None;
    for (i, &id) in ids.iter().enumerate() {
        let b = cx.comp_by_id(id, "branch")?;
        let arg = cx.op(i + 1)?;
        if b.parameters.len() != 1 || !b.parameters[0].compatible(arg) {
            bail!(
                "conditional.branch_signature",
                "branch {i} {} does not take operand {} ({})",
                signature(&b),
                i + 1,
                sh(arg)
            );
        }
        match &result {
            Some(r) if !r.compatible(&b.result) => bail!(
                "conditional.branch_results_differ",
                "branch {i} returns {} but branch 0 returns {}",
                sh(&b.result),
                sh(r)
            ),
            Some(_) => {}
            None => result = Some(b.result.without_layout()),
        }
    }
    // At least one branch exists, checked above.
    Ok(result.unwrap_or(Shape::Tuple(vec![])))
}

/// `call` (to_apply) and `fusion` (calls): the callee's parameters take the operands and its
/// result is the result.
pub fn call(cx: &Ctx, attr: &str) -> Res<Shape> {
    let callee = cx.comp(attr)?;
    check_args(cx, &callee, "call.signature_mismatch", &format!("{} computation", cx.opcode()))?;
    Ok(callee.result.without_layout())
}

/// `async-start(args..), calls=c`: the result is a tuple `((args..), c's result, context..)`,
/// declared; both leading elements are checked against the callee.
pub fn async_start(cx: &Ctx) -> Res<Shape> {
    let callee = cx.comp("calls")?;
    check_args(cx, &callee, "async.signature_mismatch", "async computation")?;
    let declared = cx.declared();
    let ok = match &declared {
        Shape::Tuple(e) if e.len() >= 2 => {
            let args = Shape::Tuple(cx.ops.iter().map(|s| s.without_layout()).collect());
            e[0].compatible(&args) && e[1].compatible(&callee.result)
        }
        _ => false,
    };
    if !ok {
        bail!(
            "async.shape",
            "async-start must produce ((operands), result, context..) for {} but is declared {}",
            signature(&callee),
            sh(&declared)
        );
    }
    Ok(declared)
}

pub fn async_update(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    let s = cx.op(0)?;
    if !matches!(s, Shape::Tuple(e) if e.len() >= 2) {
        bail!("async.shape", "async-update operand must be an async context tuple but is {}", sh(s));
    }
    Ok(s.without_layout())
}

pub fn async_done(cx: &Ctx) -> Res<Shape> {
    cx.expect_count(1)?;
    match cx.op(0)? {
        Shape::Tuple(e) if e.len() >= 2 => Ok(e[1].without_layout()),
        s => bail!("async.shape", "async-done operand must be an async context tuple but is {}", sh(s)),
    }
}

/// A custom call's result is whatever its target says; only the named computations must
/// exist.
pub fn custom_call(cx: &Ctx) -> Res<Shape> {
    for id in cx.inst.called_computations() {
        cx.comp_by_id(id, "called")?;
    }
    Ok(cx.declared())
}

/// `scan(inputs.., inits..), dimensions={d}, num_carries=c, to_apply=f`: f maps one slice of
/// every input (dimension d removed) and the carries to `(outputs.., new carries..)`; the
/// result stacks each output along d and ends with the final carries. The parameter order
/// of f (slices first or carries first) is accepted either way.
pub fn scan(cx: &Ctx) -> Res<Shape> {
    use super::{array, dim_index, list};
    let carries = cx.int_or("num_carries", 0)?;
    let carries = match usize::try_from(carries) {
        Ok(c) if c <= cx.ops.len() => c,
        _ => bail!("scan.num_carries", "num_carries={carries} does not fit {} operands", cx.ops.len()),
    };
    let inputs = cx.ops.len() - carries;
    let dims = cx.ints("dimensions")?;
    let [d] = dims else {
        bail!("scan.dimension", "scan needs exactly one dimension but has {}", list(dims));
    };
    let mut length: Option<i64> = None;
    let mut slices = Vec::with_capacity(inputs);
    for i in 0..inputs {
        let a = cx.arr(i)?;
        let di = dim_index(*d, a.rank(), "scan.dimension", "scan")?;
        if length.is_some_and(|l| !super::size_eq(l, a.dims[di])) {
            bail!("scan.inputs_mismatch", "scan inputs differ in the length of dimension {di}");
        }
        length = Some(a.dims[di]);
        let mut dims = a.dims.clone();
        dims.remove(di);
        slices.push(array(a.element_type, dims, vec![false; a.rank() - 1]));
    }
    let Some(length) = length else {
        bail!("operands.count", "scan needs at least one input besides its {carries} carries");
    };
    let inits: Vec<Shape> = cx.ops[inputs..].iter().map(|s| s.without_layout()).collect();
    let f = cx.comp("to_apply")?;
    let fits = |order: Vec<&Shape>| {
        order.len() == f.parameters.len() && order.iter().zip(&f.parameters).all(|(a, b)| a.compatible(b))
    };
    if !fits(slices.iter().chain(&inits).collect()) && !fits(inits.iter().chain(&slices).collect()) {
        bail!(
            "scan.computation_signature",
            "scan computation {} does not take the input slices and carries",
            signature(&f)
        );
    }
    let results: Vec<&Shape> = match &f.result {
        Shape::Tuple(e) if e.len() >= carries => e.iter().collect(),
        r if carries == 0 => vec![r],
        r => bail!(
            "scan.computation_signature",
            "scan computation returns {} but must return outputs and {carries} carries",
            sh(r)
        ),
    };
    let outputs = results.len() - carries;
    for (i, (r, init)) in results[outputs..].iter().zip(&inits).enumerate() {
        if !r.compatible(init) {
            bail!(
                "scan.computation_signature",
                "scan computation returns carry {i} as {} but its init is {}",
                sh(r),
                sh(init)
            );
        }
    }
    let mut out = Vec::with_capacity(results.len());
    for r in &results[..outputs] {
        let Shape::Array(a) = r else {
            bail!("scan.computation_signature", "scan outputs must be arrays but one is {}", sh(r));
        };
        let at = usize::try_from(*d).unwrap_or(0).min(a.rank());
        let mut dims = a.dims.clone();
        dims.insert(at, length);
        out.push(array(a.element_type, dims, vec![false; a.rank() + 1]));
    }
    out.extend(inits);
    Ok(Shape::Tuple(out))
}
