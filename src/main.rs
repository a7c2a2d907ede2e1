//! The `tessera` command line. The contract (DESIGN.md section 8) is exact because scripts
//! depend on it: exit code 0 on success, 1 on a compile or run error (message on stderr) or
//! a `compare` disagreement, 2 on a usage error.

mod compare_command;
mod compile_command;
mod fuzz_command;
mod progress;
mod run_command;
mod summary;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tessera::Backend;
use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::verify::verify;

#[derive(Parser)]
#[command(name = "tessera", version, about = "A compiler backend for XLA's HLO")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and verify an HLO text module; summarize it, or print it back with --print.
    Parse {
        module: PathBuf,
        /// Print the module in XLA's text form instead of the summary.
        #[arg(long)]
        print: bool,
    },
    /// Compile a module and run it on DIR/0.npy, 1.npy, ... (entry-parameter order), writing
    /// the results (a tuple flattened depth-first) to the --out folder.
    Run {
        module: PathBuf,
        /// Folder with the arguments 0.npy, 1.npy, ...
        #[arg(long, value_name = "DIR")]
        args: PathBuf,
        /// Folder to write the results 0.npy, 1.npy, ... into (optional with --time).
        #[arg(long, value_name = "DIR", required_unless_present_any = ["time", "profile"])]
        out: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "llvm")]
        backend: BackendArg,
        /// After one warm-up run, time N runs and print one JSON line.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        time: Option<u32>,
        /// Then run again (N times with --time, else once) timing every kernel, and print
        /// where the time went as a table on stderr (compiled backends).
        #[arg(long)]
        profile: bool,
        /// Threads kernels run on (default: all cores).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        threads: Option<u32>,
        /// Arguments and results are raw physical buffers (1-D, padding included).
        #[arg(long)]
        physical: bool,
        /// Round every bf16 op's result, even where an explicit convert to f32 reads it (by
        /// default such a convert reads the unrounded f32 result, as on XLA:CPU).
        #[arg(long)]
        strict_precision: bool,
        /// Write the module after every pass, the fusion decisions, the program with each
        /// kernel's IR, and the tier's IR and assembly into DIR.
        #[arg(long, value_name = "DIR")]
        dump: Option<PathBuf>,
    },
    /// Compile a module ahead of time into a relocatable object and a C header that any C or
    /// Rust program links (with libtessera_rt.a when the header says so).
    Compile {
        module: PathBuf,
        #[arg(long, value_enum, default_value = "llvm")]
        backend: TierArg,
        /// The object file to write.
        #[arg(short = 'o', value_name = "NAME.o")]
        object: PathBuf,
        /// The C header to write.
        #[arg(long, value_name = "NAME.h")]
        header: PathBuf,
        /// The entry function's name (default: the object's file name).
        #[arg(long, value_name = "SYMBOL")]
        name: Option<String>,
        /// The target triple (default: the host's), e.g. aarch64-unknown-linux-gnu.
        #[arg(long, value_name = "TRIPLE")]
        target: Option<String>,
        /// The target CPU (default: the host CPU on the host's architecture, else generic),
        /// e.g. x86-64-v3 for objects that run on any AVX2 machine.
        #[arg(long, value_name = "CPU")]
        cpu: Option<String>,
        /// Split kernel grids across the threads tessera_rt_set_threads starts (the object then
        /// links libtessera_rt.a); without it everything runs on the calling thread.
        #[arg(long)]
        parallel: bool,
        /// Round every bf16 op's result, even where an explicit convert to f32 reads it (by
        /// default such a convert reads the unrounded f32 result, as on XLA:CPU).
        #[arg(long)]
        strict_precision: bool,
        /// Write the module after every pass, the fusion decisions, the program with each
        /// kernel's IR, and the tier's IR and assembly into DIR.
        #[arg(long, value_name = "DIR")]
        dump: Option<PathBuf>,
    },
    /// Compile a module on every backend, run each on the same arguments, check the JIT tiers
    /// against the interpreter and print compile and run times. Exit code 1 if a tier
    /// disagrees or fails; a tier that refuses the module (an unsupported op) is only reported.
    Compare {
        module: PathBuf,
        /// Folder with the arguments 0.npy, 1.npy, ... (default: seeded random arguments:
        /// floats uniform in [-1, 1), signed ints in [-8, 8), unsigned in [0, 8), random preds).
        #[arg(long, value_name = "DIR")]
        args: Option<PathBuf>,
        /// Timed runs per backend (after one checked run); the table shows their median.
        #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
        runs: u32,
        /// Threads kernels run on (default: all cores).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        threads: Option<u32>,
        /// Round every bf16 op's result, even where an explicit convert to f32 reads it (by
        /// default such a convert reads the unrounded f32 result, as on XLA:CPU).
        #[arg(long)]
        strict_precision: bool,
        /// Write the module after every pass, the fusion decisions, the program with each
        /// kernel's IR, and the tier's IR and assembly into DIR.
        #[arg(long, value_name = "DIR")]
        dump: Option<PathBuf>,
    },
    /// Differential testing: generate random valid programs, run each on the interpreter and
    /// both JIT tiers (logical and physical I/O) and compare. Exit code 1 if any program
    /// fails (a mismatch, an unexpected refusal, an error).
    Fuzz {
        /// Programs to run.
        #[arg(long, value_name = "N", default_value_t = 100)]
        count: u64,
        /// Seed of the first program; program i has seed S + i.
        #[arg(long, value_name = "S", default_value_t = 0)]
        seed: u64,
        /// Folder to write every failing program into (seed-<seed>.hlo).
        #[arg(long, value_name = "DIR")]
        save: Option<PathBuf>,
        /// Threads kernels run on (default: all cores).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        threads: Option<u32>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum TierArg {
    Cranelift,
    Llvm,
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Interp,
    Cranelift,
    Llvm,
    /// Cranelift's code at once, LLVM's once it is ready (compiled in the background)
    Tiered,
}

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Backend {
        match b {
            BackendArg::Interp => Backend::Interp,
            BackendArg::Cranelift => Backend::Cranelift,
            BackendArg::Llvm => Backend::Llvm,
            BackendArg::Tiered => Backend::Tiered,
        }
    }
}

fn main() -> ExitCode {
    // clap exits with 2 on usage errors and 0 for --help/--version, as the contract wants.
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Parse { module, print } => parse_command(&module, print).map(|()| ExitCode::SUCCESS),
        Command::Run { module, args, out, backend, time, profile, threads, physical, strict_precision, dump } => {
            run_command::run(&run_command::RunArgs {
                module,
                args,
                out,
                backend: backend.into(),
                time: time.map(|n| n as usize),
                profile,
                threads: threads.map(|n| n as usize),
                physical,
                strict_precision,
                dump,
            })
            .map(|()| ExitCode::SUCCESS)
        }
        Command::Compile { module, backend, object, header, name, target, cpu, parallel, strict_precision, dump } => {
            compile_command::compile(&compile_command::CompileArgs {
                module,
                tier: match backend {
                    TierArg::Cranelift => tessera::aot::Tier::Cranelift,
                    TierArg::Llvm => tessera::aot::Tier::Llvm,
                },
                object,
                header,
                name,
                target,
                cpu,
                parallel,
                strict_precision,
                dump,
            })
            .map(|()| ExitCode::SUCCESS)
        }
        Command::Compare { module, args, runs, threads, strict_precision, dump } => {
            compare_command::compare(&compare_command::CompareArgs {
                module,
                args,
                runs: runs as usize,
                threads: threads.map(|n| n as usize),
                strict_precision,
                dump,
            })
            .map(|agree| if agree { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Fuzz { count, seed, save, threads } => {
            fuzz_command::fuzz(&fuzz_command::FuzzArgs { count, seed, save, threads: threads.map(|n| n as usize) })
                .map(|ok| if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

fn parse_command(path: &PathBuf, print: bool) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let module = parse_module(&text).map_err(|e| format!("{}:{e}", path.display()))?;
    verify(&module).map_err(|e| format!("{}: {e}", path.display()))?;
    if print {
        print!("{}", print_module(&module, &PrintOptions::long()));
    } else {
        print!("{}", summary::summarize(&module));
    }
    Ok(())
}
