//! Ahead-of-time compilation through the facade: a module (text or built) becomes an object
//! file and a C header (DESIGN.md section 6; the generic entry point and the header's
//! contents are documented in `tessera_codegen::aot`). The object runs with no Tessera, LLVM
//! or Cranelift present: it needs libc, libm and, when its kernels call GEMM, convolution or
//! FFT routines, the runtime's static library `libtessera_rt.a`.

use std::path::Path;

use tessera_codegen::aot::{self, AotOptions};
use tessera_hlo::ir::AttrList;
use tessera_hlo::verify::verify;
use tessera_hlo::{Module, Opcode};
use tessera_lower::{assign_buffers, implemented_custom_call, lower_module, LowerOptions};

pub use tessera_codegen::aot::{is_c_identifier, AotArtifacts};
pub use tessera_codegen::Tier;

use crate::Error;

/// Compiles `module` into an object and header (nothing is written).
pub fn compile(module: &Module, lower: &LowerOptions, options: &AotOptions) -> Result<AotArtifacts, Error> {
    verify(module)?;
    for inst in module.computations.iter().flat_map(|c| c.instructions.iter()) {
        let target = inst.attr_word("custom_call_target").unwrap_or("");
        if inst.opcode == Opcode::CustomCall && !implemented_custom_call(target) {
            return Err(Error::CustomCall {
                target: target.to_string(),
                message: format!("'{}' calls it; an ahead-of-time object has no host functions", inst.name),
            });
        }
    }
    let backend = options.tier.name();
    let mut lower = lower.clone();
    if options.dump_dir.is_some() {
        lower.dump_dir.clone_from(&options.dump_dir);
    }
    // An unknown target fails in code generation, which names it.
    lower.fma = options.cpu.resolve_for_object(backend, options.triple.as_deref()).is_ok_and(|t| t.has_fma());
    let mut program = lower_module(module, &lower).map_err(|source| Error::Lower { backend, source })?;
    assign_buffers(&mut program, &Default::default())?;
    if let Some(dir) = &options.dump_dir {
        tessera_lower::dump_program(&program, dir);
    }
    Ok(aot::compile(&program, options)?)
}

/// Writes `artifacts` to `object` and `header`, both or neither: each goes to a temporary
/// file beside its destination first and is renamed into place only when both are complete.
pub fn write(artifacts: &AotArtifacts, object: &Path, header: &Path) -> Result<(), Error> {
    let io = |path: &Path, source: std::io::Error| Error::Io { path: path.display().to_string(), source };
    let staged = |path: &Path| {
        let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        name.push(format!(".tmp-{}", std::process::id()));
        path.with_file_name(name)
    };
    let (tmp_object, tmp_header) = (staged(object), staged(header));
    let result = (|| {
        std::fs::write(&tmp_object, &artifacts.object).map_err(|e| io(object, e))?;
        std::fs::write(&tmp_header, &artifacts.header).map_err(|e| io(header, e))?;
        std::fs::rename(&tmp_object, object).map_err(|e| io(object, e))?;
        if let Err(e) = std::fs::rename(&tmp_header, header) {
            let _ = std::fs::remove_file(object);
            return Err(io(header, e));
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp_object);
        let _ = std::fs::remove_file(&tmp_header);
    }
    result
}
