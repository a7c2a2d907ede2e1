//! The property tile-order loops exist for (DESIGN.md section 5): when a tiled array is
//! relaid out or transposed, the innermost loop computes its addresses without division or
//! remainder by that loop's variable, so they stay affine where the work is.

use tessera_hlo::text::parse_module;
use tessera_lower::kernel::{BinOp, IndexExpr, IndexSrc, Kernel, Loop, Op, Stmt};
use tessera_lower::{lower_module, LowerOptions};

/// Every innermost loop (a loop without loops inside), found anywhere in `body`.
fn innermost<'k>(body: &'k [Stmt], out: &mut Vec<&'k Loop>) {
    for s in body {
        match s {
            Stmt::Loop(l) => {
                let before = out.len();
                innermost(&l.body, out);
                if out.len() == before {
                    out.push(l);
                }
            }
            Stmt::If { then_body, else_body, .. } => {
                innermost(then_body, out);
                innermost(else_body, out);
            }
            _ => {}
        }
    }
}

/// Problems with one innermost loop: div/mod of its variable in an address, or an integer
/// division or remainder instruction in its body.
fn div_mod_in(l: &Loop, problems: &mut Vec<String>) {
    let check = |e: &IndexExpr, problems: &mut Vec<String>| {
        for t in &e.terms {
            if t.src == IndexSrc::Var(l.var) && (t.div != 1 || t.modulo.is_some()) {
                problems.push(format!("address term {t:?} divides the innermost loop variable"));
            }
        }
    };
    let mut stack: Vec<&Stmt> = l.body.iter().collect();
    while let Some(s) = stack.pop() {
        match s {
            Stmt::Let(_, Op::Load { index, .. }) | Stmt::Let(_, Op::Index(index)) | Stmt::Store { index, .. } => {
                check(index, problems)
            }
            Stmt::Let(_, Op::Binary { op: BinOp::SDiv | BinOp::UDiv | BinOp::SRem | BinOp::URem, .. }) => {
                problems.push("integer division in the innermost loop".into())
            }
            Stmt::If { then_body, else_body, .. } => stack.extend(then_body.iter().chain(else_body)),
            _ => {}
        }
    }
}

fn kernels(text: &str) -> Vec<Kernel> {
    let module = parse_module(text).unwrap();
    lower_module(&module, &LowerOptions { fusion: true, dump_dir: None, ..LowerOptions::default() }).unwrap().kernels
}

fn assert_affine_inner_loops(text: &str) {
    let ks = kernels(text);
    assert_eq!(ks.len(), 1, "one kernel");
    let mut loops = Vec::new();
    innermost(&ks[0].body, &mut loops);
    assert!(!loops.is_empty(), "the kernel has loops:\n{}", ks[0]);
    let mut problems = Vec::new();
    for l in loops {
        div_mod_in(l, &mut problems);
    }
    assert!(problems.is_empty(), "{}\n{}", problems.join("\n"), ks[0]);
}

#[test]
fn tiled_to_row_major_copy_has_affine_inner_loops() {
    assert_affine_inner_loops(
        "HloModule m, entry_computation_layout={(f32[300,500]{1,0:T(8,128)})->f32[300,500]{1,0}}\n\
         ENTRY main {\n  p = f32[300,500]{1,0:T(8,128)} parameter(0)\n  ROOT c = f32[300,500]{1,0} copy(p)\n}\n",
    );
}

#[test]
fn tiled_transpose_has_affine_inner_loops() {
    assert_affine_inner_loops(
        "HloModule m, entry_computation_layout={(f32[200,300]{1,0:T(8,128)})->f32[300,200]{1,0:T(8,128)}}\n\
         ENTRY main {\n  p = f32[200,300]{1,0:T(8,128)} parameter(0)\n  \
         ROOT t = f32[300,200]{1,0:T(8,128)} transpose(p), dimensions={1,0}\n}\n",
    );
}
