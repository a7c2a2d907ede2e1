//! Broken kernels are refusals, never panics or invalid IR: random kernels with random
//! damage (ids, types, indices, loop bounds, memory types, buffer lengths) must compile or
//! come back as `Unsupported`; `Backend` would mean the tier built IR LLVM rejects. Nothing
//! here runs, since a damaged kernel may index out of its buffers.

use tessera_codegen::CodegenError;
use tessera_lower::kernel::random::random_kernel;
use tessera_lower::kernel::*;
use tessera_testkit::Rng;

/// Random damage to a kernel, drawn from a seeded generator.
struct Damage(Rng);

impl Damage {
    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
    fn int(&mut self) -> i64 {
        *self.0.pick(&[-2, -1, 0, 1, 3, 1000])
    }
    fn ty(&mut self) -> Ty {
        *self.0.pick(&[Ty::Pred, Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F64])
    }
    fn value(&mut self) -> ValueId {
        ValueId(self.below(50) as u32)
    }

    fn index(&mut self, e: &mut IndexExpr) {
        if self.one_in(4) {
            e.offset += self.int();
        }
        for t in &mut e.terms {
            match self.below(12) {
                0 => t.div = self.int(),
                1 => t.modulo = Some(self.int()),
                2 => t.scale = self.int(),
                3 => t.src = IndexSrc::Var(VarId(self.below(6) as u32)),
                4 => t.src = IndexSrc::Value(self.value()),
                _ => {}
            }
        }
    }

    fn body(&mut self, body: &mut [Stmt]) {
        for s in body {
            if !self.one_in(25) {
                match s {
                    Stmt::Loop(l) => self.body(&mut l.body),
                    Stmt::If { then_body, else_body, .. } => {
                        self.body(then_body);
                        self.body(else_body);
                    }
                    _ => {}
                }
                continue;
            }
            match s {
                Stmt::Let(_, op) => match op {
                    Op::Load { index, mem, buf } => {
                        self.index(index);
                        if self.one_in(4) {
                            *mem = MemType::Scalar(self.ty());
                        }
                        if self.one_in(8) {
                            buf.0 += 3;
                        }
                    }
                    Op::Index(e) => self.index(e),
                    Op::Unary { ty, a, .. } => {
                        *ty = self.ty();
                        *a = self.value();
                    }
                    Op::Binary { ty, a, .. } | Op::Cmp { ty, a, .. } => {
                        if self.one_in(2) {
                            *ty = self.ty();
                        } else {
                            *a = self.value();
                        }
                    }
                    Op::Select { cond, .. } | Op::AnyLane { a: cond } => *cond = self.value(),
                    Op::Fma { ty, c, .. } => {
                        if self.one_in(2) {
                            *ty = self.ty();
                        } else {
                            *c = self.value();
                        }
                    }
                    Op::Cast { from, to, .. } => {
                        *from = self.ty();
                        *to = self.ty();
                    }
                    Op::Math { args, ty, .. } => {
                        if self.one_in(2) {
                            args.pop();
                        } else {
                            *ty = self.ty();
                        }
                    }
                    Op::Const(c) => {
                        if let Const::Int { ty, .. } = c {
                            *ty = self.ty();
                        }
                    }
                    Op::GetLocal(l) => l.0 += 1,
                },
                Stmt::Loop(l) => {
                    l.start += self.int();
                    l.end += self.int();
                    l.vector_width = self.below(40) as u32;
                    if self.one_in(3) {
                        l.var = VarId(0);
                    }
                }
                Stmt::Store { index, value, mem, .. } => {
                    self.index(index);
                    if self.one_in(3) {
                        *value = self.value();
                    }
                    if self.one_in(4) {
                        *mem = MemType::Packed { bits: self.below(9) as u8, pred: self.one_in(2) };
                    }
                }
                Stmt::DeclLocal { ty, init, .. } => {
                    *ty = self.ty();
                    *init = self.value();
                }
                Stmt::SetLocal { local, value } => {
                    local.0 += self.below(3) as u32;
                    *value = self.value();
                }
                Stmt::If { cond, .. } => *cond = self.value(),
                Stmt::Call { .. } => {}
            }
        }
    }
}

#[test]
fn damaged_kernels_are_refused_or_compiled_never_panics() {
    let mut d = Damage(Rng::new(0x0bad_c0de));
    let (mut compiled, mut refused) = (0, 0);
    for seed in 0..600 {
        let mut k = random_kernel(10_000 + seed);
        d.body(&mut k.body);
        for b in &mut k.buffers {
            if d.one_in(40) {
                b.len += d.int();
            }
            if d.one_in(60) {
                b.mem = MemType::Packed { bits: d.below(9) as u8, pred: d.one_in(2) };
            }
            if d.one_in(60) {
                b.mem = MemType::Scalar(d.ty());
            }
        }
        if d.one_in(30) {
            k.grid.extent = d.int();
        }
        match tessera_codegen::llvm::compile(std::slice::from_ref(&k)) {
            Ok(_) => compiled += 1,
            Err(CodegenError::Unsupported { .. }) => refused += 1,
            Err(e) => panic!("seed {seed}: {e}\n{k}"),
        }
    }
    eprintln!("damaged kernels: {compiled} compiled, {refused} refused");
    // The damage must exercise both outcomes.
    assert!(compiled > 50 && refused > 50, "{compiled} compiled, {refused} refused");
}
