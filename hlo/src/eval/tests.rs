//! XLA's integer edge cases (DESIGN.md section 3) and argument checking.

use super::{evaluate, EvalError};
use crate::literal::Literal;
use crate::text::parse_module;

fn run_binary(op: &str, ty: &str, a: Literal, b: Literal) -> Literal {
    let n = a.element_count();
    let text = format!(
        "HloModule m\nENTRY e {{\n  a = {ty}[{n}] parameter(0)\n  b = {ty}[{n}] parameter(1)\n  ROOT r = {ty}[{n}] {op}(a, b)\n}}\n"
    );
    let m = parse_module(&text).expect("parse");
    evaluate(&m, &[a, b]).expect("evaluate")
}

#[test]
fn integer_division_edge_cases() {
    let a = Literal::from_vec(&[4], vec![7i32, i32::MIN, -7, 0]).unwrap();
    let b = Literal::from_vec(&[4], vec![0i32, -1, 2, 0]).unwrap();
    let q = run_binary("divide", "s32", a.clone(), b.clone());
    assert_eq!(q.to_vec::<i32>().unwrap(), vec![-1, i32::MIN, -3, -1]);
    let r = run_binary("remainder", "s32", a, b);
    assert_eq!(r.to_vec::<i32>().unwrap(), vec![7, 0, -1, 0]);
    let a = Literal::from_vec(&[2], vec![i64::MIN, 5]).unwrap();
    let b = Literal::from_vec(&[2], vec![-1i64, 0]).unwrap();
    assert_eq!(run_binary("divide", "s64", a.clone(), b.clone()).to_vec::<i64>().unwrap(), vec![i64::MIN, -1]);
    assert_eq!(run_binary("remainder", "s64", a, b).to_vec::<i64>().unwrap(), vec![0, 5]);
    let a = Literal::from_vec(&[2], vec![200u8, 9]).unwrap();
    let b = Literal::from_vec(&[2], vec![0u8, 4]).unwrap();
    assert_eq!(run_binary("divide", "u8", a.clone(), b.clone()).to_vec::<u8>().unwrap(), vec![255, 2]);
    assert_eq!(run_binary("remainder", "u8", a, b).to_vec::<u8>().unwrap(), vec![200, 1]);
}

#[test]
fn remainder_takes_the_dividends_sign() {
    let a = Literal::from_vec(&[4], vec![-7i8, 7, -7, 7]).unwrap();
    let b = Literal::from_vec(&[4], vec![3i8, -3, -3, 3]).unwrap();
    assert_eq!(run_binary("remainder", "s8", a, b).to_vec::<i8>().unwrap(), vec![-1, 1, -1, 1]);
}

#[test]
fn shifts_saturate() {
    let a = Literal::from_vec(&[4], vec![-8i32, 8, -8, 1]).unwrap();
    let b = Literal::from_vec(&[4], vec![32i32, 33, -1, 31]).unwrap();
    assert_eq!(run_binary("shift-left", "s32", a.clone(), b.clone()).to_vec::<i32>().unwrap(), vec![0, 0, 0, i32::MIN]);
    assert_eq!(
        run_binary("shift-right-arithmetic", "s32", a.clone(), b.clone()).to_vec::<i32>().unwrap(),
        vec![-1, 0, -1, 0]
    );
    assert_eq!(run_binary("shift-right-logical", "s32", a, b).to_vec::<i32>().unwrap(), vec![0, 0, 0, 0]);
    let a = Literal::from_vec(&[2], vec![0x80u8, 0x80]).unwrap();
    let b = Literal::from_vec(&[2], vec![7u8, 1]).unwrap();
    assert_eq!(run_binary("shift-right-arithmetic", "u8", a, b).to_vec::<u8>().unwrap(), vec![0xff, 0xc0]);
}

#[test]
fn overflow_wraps_and_max_propagates_nan() {
    let a = Literal::from_vec(&[1], vec![i32::MAX]).unwrap();
    let b = Literal::from_vec(&[1], vec![1i32]).unwrap();
    assert_eq!(run_binary("add", "s32", a, b).to_vec::<i32>().unwrap(), vec![i32::MIN]);
    let a = Literal::from_vec(&[2], vec![f32::NAN, 1.0]).unwrap();
    let b = Literal::from_vec(&[2], vec![1.0f32, f32::NAN]).unwrap();
    let r = run_binary("maximum", "f32", a.clone(), b.clone()).to_vec::<f32>().unwrap();
    assert!(r.iter().all(|x| x.is_nan()));
    let r = run_binary("minimum", "f32", a, b).to_vec::<f32>().unwrap();
    assert!(r.iter().all(|x| x.is_nan()));
}

#[test]
fn argument_mismatches_are_errors() {
    let m = parse_module("HloModule m\nENTRY e {\n  ROOT a = f32[2] parameter(0)\n}\n").unwrap();
    assert!(matches!(evaluate(&m, &[]), Err(EvalError::Argument(_))));
    let wrong_type = Literal::from_vec(&[2], vec![1i32, 2]).unwrap();
    assert!(matches!(evaluate(&m, &[wrong_type]), Err(EvalError::Argument(_))));
    let wrong_dims = Literal::from_vec(&[3], vec![1f32, 2.0, 3.0]).unwrap();
    assert!(matches!(evaluate(&m, &[wrong_dims]), Err(EvalError::Argument(_))));
}

#[test]
fn unsupported_ops_are_named() {
    let m = parse_module(
        "HloModule m\nENTRY e {\n  a = f32[4] parameter(0)\n  ROOT s = f32[4] sort(a), dimensions={0}, to_apply=%c\n}\n",
    );
    if let Ok(m) = m {
        let a = Literal::from_vec(&[4], vec![1f32, 2.0, 3.0, 4.0]).unwrap();
        match evaluate(&m, &[a]) {
            Err(EvalError::Unsupported { opcode }) => assert!(opcode.contains("sort")),
            other => panic!("expected unsupported, got {other:?}"),
        }
    }
}

#[test]
fn conditional_pred_picks_the_true_operand() {
    let text = "HloModule m\n\
        t { a = f32[] parameter(0)\n ROOT r = f32[] negate(a) }\n\
        f { b = f32[] parameter(0)\n ROOT r = f32[] add(b, b) }\n\
        ENTRY e {\n p = pred[] parameter(0)\n x = f32[] parameter(1)\n y = f32[] parameter(2)\n\
        ROOT c = f32[] conditional(p, x, y), true_computation=t, false_computation=f\n}\n";
    let m = parse_module(text).expect("parse");
    let run = |p: bool| {
        let r = evaluate(&m, &[Literal::scalar(p), Literal::scalar(3f32), Literal::scalar(5f32)]).expect("eval");
        r.to_vec::<f32>().unwrap()[0]
    };
    assert_eq!(run(true), -3.0);
    assert_eq!(run(false), 10.0);
}

#[test]
fn dynamic_slice_starts_are_clamped() {
    let text = "HloModule m\nENTRY e {\n a = s32[5] parameter(0)\n i = s32[] parameter(1)\n\
        ROOT d = s32[2] dynamic-slice(a, i), dynamic_slice_sizes={2}\n}\n";
    let m = parse_module(text).expect("parse");
    let a = Literal::from_vec(&[5], vec![10i32, 11, 12, 13, 14]).unwrap();
    let run = |i: i32| evaluate(&m, &[a.clone(), Literal::scalar(i)]).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(run(1), vec![11, 12]);
    assert_eq!(run(9), vec![13, 14]);
    assert_eq!(run(-4), vec![10, 11]);
}

/// A dot whose operands are large enough to be packed (one bf16 operand read transposed, one
/// f32 operand read as it is) gives, bit for bit, what it gives on widened operands.
#[test]
fn dots_of_packed_operands_match_widened_ones() {
    use super::dot::{dot, dot_of, Operand};
    use super::Value;
    let text = "HloModule m\nENTRY e {\n  a = f32[300,256] parameter(0)\n  b = bf16[260,256] parameter(1)\n  \
                ROOT d = f32[300,260] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n}\n";
    let m = parse_module(text).expect("parse");
    let inst = m.entry_comp().root_inst();
    let a = Literal::from_vec(&[300, 256], (0..300 * 256).map(|i| ((i * 37) % 101) as f32 * 0.25 - 12.0).collect())
        .unwrap();
    let b = Literal::from_vec(
        &[260, 256],
        (0..260 * 256).map(|i| half::bf16::from_f32(((i * 53) % 97) as f32 * 0.125 - 6.0)).collect(),
    )
    .unwrap();
    let wide = |l: &Literal| match Value::from_literal(l, "arg").unwrap() {
        Value::Arr(a) => a,
        _ => panic!("not an array"),
    };
    let (wa, wb) = (wide(&a), wide(&b));
    let want = dot(inst, &[&wa, &wb]).unwrap();
    let (Value::Packed(pa), Value::Packed(pb)) = (Value::Arr(wa.clone()).packed(), Value::Arr(wb.clone()).packed())
    else {
        panic!("the operands were not packed");
    };
    for (l, r) in [(Operand::Packed(&pa), Operand::Packed(&pb)), (Operand::Wide(&wa), Operand::Packed(&pb))] {
        let got = dot_of(inst, l, r).unwrap();
        let shape = crate::shape::Shape::array(got.ty, &got.dims);
        assert_eq!(got.to_literal(&shape).unwrap(), want.to_literal(&shape).unwrap());
    }
}
