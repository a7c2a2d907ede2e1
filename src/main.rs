//! The `tessera` command line. The contract (DESIGN.md section 8) is exact because scripts
//! depend on it: exit code 0 on success, 1 on a compile or run error (message on stderr),
//! 2 on a usage error.

mod summary;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
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
}

fn main() -> ExitCode {
    // clap exits with 2 on usage errors and 0 for --help/--version, as the contract wants.
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Parse { module, print } => parse_command(&module, print),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
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
