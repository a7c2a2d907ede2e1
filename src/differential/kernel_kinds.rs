//! Kinds of kernel a lowered program holds that the tests count, so they can require that
//! generated (or hand-written) programs exercise them.

use tessera_lower::kernel::{BufId, Kernel, Op, Stmt};

/// Whether `kernel` stages a chain of values (`emit::staging`): some lane reduction both
/// loads one of its writable buffers and stores it (it reads the value held there and
/// stores the next one over it).
pub fn stages_a_chain(kernel: &Kernel) -> bool {
    kernel.buffers.iter().enumerate().any(|(i, b)| b.writable && chains(&kernel.body, BufId(i as u32)))
}

fn chains(body: &[Stmt], buf: BufId) -> bool {
    body.iter().any(|st| match st {
        Stmt::Loop(lp) if !lp.reductions.is_empty() => touches(&lp.body, buf) == (true, true),
        Stmt::Loop(lp) => chains(&lp.body, buf),
        Stmt::If { then_body, else_body, .. } => chains(then_body, buf) || chains(else_body, buf),
        _ => false,
    })
}

/// Whether `body` loads `buf`, and whether it stores it.
fn touches(body: &[Stmt], buf: BufId) -> (bool, bool) {
    body.iter().fold((false, false), |(loads, stores), st| {
        let (l, s) = match st {
            Stmt::Let(_, Op::Load { buf: b, .. }) => (*b == buf, false),
            Stmt::Store { buf: b, .. } => (false, *b == buf),
            Stmt::Loop(lp) => touches(&lp.body, buf),
            Stmt::If { then_body, else_body, .. } => {
                let (a, b) = (touches(then_body, buf), touches(else_body, buf));
                (a.0 || b.0, a.1 || b.1)
            }
            _ => (false, false),
        };
        (loads || l, stores || s)
    })
}
