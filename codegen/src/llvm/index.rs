//! Index expressions: `offset + sum of ((src / div) % modulo) * scale` as `i64` arithmetic.

use inkwell::values::{IntMathValue, IntValue};

use tessera_lower::kernel::{IndexExpr, IndexSrc, Term, Ty};

use super::function::Translator;
use crate::CodegenError;

impl<'a, 'ctx> Translator<'a, 'ctx> {
    /// The value of `index` at the current position. Sources are non-negative (the IR's
    /// contract), so division and remainder are unsigned, which LLVM turns into shifts and
    /// masks for powers of two. The sums wrap: offsets are in bounds by contract, and flags
    /// that promise no overflow would only license miscompiles when a contract is broken.
    pub fn index(&self, index: &IndexExpr) -> Result<IntValue<'ctx>, CodegenError> {
        let i64t = self.ctx.i64_type();
        let err = self.err();
        let mut sum = i64t.const_int(index.offset as u64, true);
        for term in &index.terms {
            let v = match term.src {
                IndexSrc::Var(var) => self.var(var)?,
                IndexSrc::Value(id) => self.value(id, Ty::I64)?.into_int_value(),
            };
            let v = self.term(term, v, |c| Ok(i64t.const_int(c as u64, true)))?;
            sum = self.builder.build_int_add(sum, v, "idx").map_err(&err)?;
        }
        Ok(sum)
    }

    /// `((v / div) % modulo) * scale` for `term` whose source's value is `v`, a scalar or a
    /// vector of lanes (`constant` makes a constant of `v`'s type).
    pub(super) fn term<T: IntMathValue<'ctx>>(
        &self,
        term: &Term,
        mut v: T,
        constant: impl Fn(i64) -> Result<T, CodegenError>,
    ) -> Result<T, CodegenError> {
        if term.div < 1 || term.modulo.is_some_and(|m| m < 1) {
            return Err(self.unsupported(format!(
                "index term with divisor {} and modulus {:?} (both must be at least 1)",
                term.div, term.modulo
            )));
        }
        let err = self.err();
        if term.div != 1 {
            v = self.builder.build_int_unsigned_div(v, constant(term.div)?, "div").map_err(&err)?;
        }
        if let Some(m) = term.modulo {
            v = self.builder.build_int_unsigned_rem(v, constant(m)?, "mod").map_err(&err)?;
        }
        if term.scale != 1 {
            v = self.builder.build_int_mul(v, constant(term.scale)?, "scale").map_err(&err)?;
        }
        Ok(v)
    }
}
