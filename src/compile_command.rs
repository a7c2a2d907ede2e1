//! `tessera compile`: a module to a relocatable object plus a C header (DESIGN.md section 8).

use std::path::PathBuf;

use tessera::aot::{self, Tier};
use tessera::{CpuTarget, LowerOptions};
use tessera_codegen::aot::AotOptions;
use tessera_hlo::text::parse_module;

pub struct CompileArgs {
    pub module: PathBuf,
    pub tier: Tier,
    pub object: PathBuf,
    pub header: PathBuf,
    pub name: Option<String>,
    pub target: Option<String>,
    pub cpu: Option<String>,
    pub parallel: bool,
    pub strict_precision: bool,
    pub dump: Option<PathBuf>,
}

pub fn compile(args: &CompileArgs) -> Result<(), String> {
    let path = args.module.display();
    // The symbol defaults to the object's file name, which must then be a C identifier.
    let symbol = match &args.name {
        Some(n) => n.clone(),
        None => args.object.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string(),
    };
    if !aot::is_c_identifier(&symbol) {
        return Err(format!(
            "'{symbol}' is not a valid C identifier for the entry symbol{}",
            if args.name.is_none() { " (taken from the object's file name; pass --name SYMBOL)" } else { "" }
        ));
    }
    if args.object == args.header {
        return Err(format!("the object and the header would both be {}", args.object.display()));
    }
    let text = std::fs::read_to_string(&args.module).map_err(|e| format!("{path}: {e}"))?;
    let module = parse_module(&text).map_err(|e| format!("{path}:{e}"))?;
    let options = AotOptions {
        tier: args.tier,
        symbol,
        triple: args.target.clone(),
        cpu: CpuTarget::parse(args.cpu.as_deref().unwrap_or(""), ""),
        source: args.module.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        parallel: args.parallel,
        dump_dir: args.dump.clone(),
        object_name: args.object.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    let lower = LowerOptions { excess_precision: !args.strict_precision, ..LowerOptions::default() };
    let artifacts = aot::compile(&module, &lower, &options).map_err(|e| format!("{path}: {e}"))?;
    aot::write(&artifacts, &args.object, &args.header).map_err(|e| e.to_string())?;
    eprintln!(
        "tessera: compiled {path} with {} for {} ({}) in {:.1} ms: {} ({} bytes), {} ({} bytes){}",
        args.tier.name(),
        artifacts.triple,
        artifacts.cpu,
        artifacts.compile_time.as_secs_f64() * 1e3,
        args.object.display(),
        artifacts.object.len(),
        args.header.display(),
        artifacts.header.len(),
        if artifacts.needs_runtime { "; link with libtessera_rt.a" } else { "" }
    );
    Ok(())
}
