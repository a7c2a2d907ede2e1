//! Vector constants loaded from a table, for vector loops that use many.
//!
//! Cranelift's optimizer hoists a `vconst` (what a splatted constant becomes) out of the
//! innermost loop that uses it. A loop running `exp` and `tanh` (`bench_elementwise_16m`)
//! uses about 30 distinct vector constants; hoisted, they outgrow x86-64's 16 xmm registers,
//! and the register allocator kept them in stack slots: a reload before each use and, on the
//! back edge, stores of values the slots already held (8 per iteration). Such a loop loads
//! its constants from a read-only table of the function instead, at an address the loop
//! carries as a block parameter. A load whose address varies around the loop is not hoisted,
//! and one marked `can_move` is pure: the optimizer merges equal loads within an iteration
//! and places each just before its first user, and a constant used once becomes that
//! instruction's memory operand.
//!
//! The address varies only formally: the loop's latch redefines its variable as the address
//! plus 0, so the SSA builder gives the loop header a block parameter for it (the same value
//! on every edge would give none). Cranelift folds the addition afterwards but removes
//! constant block parameters only before it optimizes, so the parameter stays, costing one
//! general register for the loop.
//!
//! Loops with few constants keep them in registers across the loop, where a use costs
//! nothing: the table applies from [`TABLE_MIN_CONSTANTS`] distinct constants on.

use std::collections::{HashMap, HashSet};

use cranelift_codegen::ir::{types, GlobalValue, InstBuilder, InstructionData, MemFlagsData, Opcode, Type, Value};
use cranelift_frontend::Variable;
use cranelift_module::{DataDescription, DataId, Module};
use tessera_lower::kernel::{Op, Stmt, ValueId};

use super::function::Translator;
use super::{Failure, Result};

/// The fewest distinct nonzero vector constants for which a loop loads them from the table:
/// below this they fit in registers beside the loop's own values (exp alone uses 11).
const TABLE_MIN_CONSTANTS: usize = 12;

/// A function's table of vector constants (module doc).
#[derive(Default)]
pub(crate) struct ConstTable {
    /// The table's data object and its global value in the function, declared at first use.
    data: Option<(DataId, GlobalValue)>,
    bytes: Vec<u8>,
    /// Each constant's place for each copy of a loop body ([`Self::next_copy`]).
    offsets: HashMap<([u8; 16], u32), i32>,
    /// The copy of a loop body being translated.
    copy: u32,
    /// In a loop's body that loads its constants: the variable carrying the table's address
    /// around the loop, and its value in the body.
    active: Option<(Variable, Value)>,
}

impl ConstTable {
    /// From here on, a new half of a [`super::vector::Halves`] loop takes its constants from
    /// places of its own. The halves would otherwise share each constant's load (the optimizer
    /// merges loads of one place with no store between), keeping every constant live from
    /// the first half to the second: in a loop converting f16 values that was 20 constants,
    /// and the register allocator spilled them, a store and a reload each. Loaded again, a
    /// constant costs one load from a cache line the loop keeps hot. A lane reduction's
    /// copies still share theirs: given places of their own, softmax's sum of `exp` (two
    /// copies) ran 12% slower on Cranelift.
    pub(crate) fn next_copy(&mut self) {
        self.copy += 1;
    }

    /// Defines the table's contents in `module` once the function is translated.
    pub(crate) fn define(self, module: &mut dyn Module) -> Result<()> {
        let Some((id, _)) = self.data else { return Ok(()) };
        let mut desc = DataDescription::new();
        desc.define(self.bytes.into_boxed_slice());
        desc.set_align(16);
        module.define_data(id, &desc).map_err(|e| Failure::Malformed(format!("the vector constant table: {e}")))
    }
}

/// The bits of `v` when an integer or float constant defines it.
pub(crate) fn constant_bits(t: &Translator, v: Value) -> Option<u64> {
    let dfg = &t.b.func.dfg;
    match dfg.insts[dfg.value_def(v).inst()?] {
        InstructionData::UnaryImm { opcode: Opcode::Iconst, imm } => Some(imm.bits() as u64),
        InstructionData::UnaryIeee32 { opcode: Opcode::F32const, imm } => Some(u64::from(imm.bits())),
        InstructionData::UnaryIeee64 { opcode: Opcode::F64const, imm } => Some(imm.bits()),
        _ => None,
    }
}

impl Translator<'_, '_> {
    /// Before a vector loop whose body is `body` (`varying`: its values that vary by lane):
    /// when the body uses enough distinct constants, makes the variable that carries the
    /// table's address around the loop (to pass to [`Self::constants_enter`]).
    pub(crate) fn constants_before(
        &mut self,
        body: &[Stmt],
        varying: &dyn Fn(ValueId) -> bool,
    ) -> Result<Option<Variable>> {
        let mut seen: HashSet<u64> = HashSet::new();
        self.count_constants(body, varying, &mut seen);
        if seen.len() < TABLE_MIN_CONSTANTS || !self.is_x86_64() {
            return Ok(None);
        }
        let gv = match self.consts.data {
            Some((_, gv)) => gv,
            None => {
                let id = self
                    .module
                    .declare_anonymous_data(false, false)
                    .map_err(|e| Failure::Malformed(format!("the vector constant table: {e}")))?;
                let gv = self.module.declare_data_in_func(id, self.b.func);
                self.consts.data = Some((id, gv));
                gv
            }
        };
        let var = self.b.declare_var(types::I64);
        let address = self.b.ins().symbol_value(types::I64, gv);
        self.b.def_var(var, address);
        Ok(Some(var))
    }

    /// At the start of the loop's body: constants come from the table from here on.
    pub(crate) fn constants_enter(&mut self, var: Option<Variable>) {
        self.consts.active = var.map(|var| (var, self.b.use_var(var)));
    }

    /// At the loop's latch, before it branches back: carries the address around (module doc).
    pub(crate) fn constants_latch(&mut self) {
        if let Some((var, address)) = self.consts.active.take() {
            let next = self.b.ins().iadd_imm_s(address, 0);
            self.b.def_var(var, next);
        }
    }

    /// A vector of type `vt` with every lane `lane`: from the table inside a loop that loads
    /// its constants, when `lane` is a nonzero constant (a zero vector is one xor, and the
    /// vector translation recognizes zero splats); else a splat.
    pub(crate) fn splat_lanes(&mut self, vt: Type, lane: Value) -> Value {
        let Some((_, address)) = self.consts.active else { return self.b.ins().splat(vt, lane) };
        let bits = match constant_bits(self, lane) {
            Some(bits) if bits != 0 && vt.bits() == 128 => bits,
            _ => return self.b.ins().splat(vt, lane),
        };
        let lane_bytes = (vt.lane_bits() / 8) as usize;
        let mut vector = [0u8; 16];
        for chunk in vector.chunks_mut(lane_bytes) {
            chunk.copy_from_slice(&bits.to_le_bytes()[..lane_bytes]);
        }
        let table = &mut self.consts;
        let offset = *table.offsets.entry((vector, table.copy)).or_insert_with(|| {
            let at = table.bytes.len() as i32;
            table.bytes.extend_from_slice(&vector);
            at
        });
        let flags = MemFlagsData::trusted().with_readonly().with_can_move();
        self.b.ins().load(vt, flags, address, offset)
    }

    /// Adds to `seen` the bits of the distinct nonzero constants `body`'s vector operations
    /// splat (the uniform constant operands of its varying values, stores and locals, and the
    /// sign masks of float negations and absolute values).
    fn count_constants(&self, body: &[Stmt], varying: &dyn Fn(ValueId) -> bool, seen: &mut HashSet<u64>) {
        let note = |t: &Self, id: ValueId, seen: &mut HashSet<u64>| {
            if varying(id) {
                return;
            }
            if let Some(bits) = t.value(id).ok().and_then(|(v, _)| constant_bits(t, v)).filter(|&b| b != 0) {
                seen.insert(bits);
            }
        };
        for stmt in body {
            match stmt {
                Stmt::Let(id, op) if varying(*id) => {
                    if let Some(mask) = match op {
                        Op::Unary { op, ty, .. } => super::vector::sign_mask(*op, *ty),
                        _ => None,
                    } {
                        seen.insert(mask);
                    }
                    for o in super::vector::operands(op) {
                        note(self, o, seen);
                    }
                }
                Stmt::Store { value, .. } | Stmt::SetLocal { value, .. } => note(self, *value, seen),
                Stmt::DeclLocal { init, .. } => note(self, *init, seen),
                Stmt::If { then_body, else_body, .. } => {
                    self.count_constants(then_body, varying, seen);
                    self.count_constants(else_body, varying, seen);
                }
                _ => {}
            }
        }
    }
}
