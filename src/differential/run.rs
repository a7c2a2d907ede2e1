//! Runs one program on the interpreter and both JIT tiers, in both I/O modes (literals, and
//! raw physical buffers whose padding holds garbage) and, for a module with
//! `input_output_alias`, on donated buffers, and judges every tier's outputs against the
//! interpreter's (`compare.rs`).

use std::panic::{catch_unwind, AssertUnwindSafe};

use tessera_hlo::ir::AttrList;
use tessera_hlo::{Literal, Module};

use super::compare::agree;
use super::generate::Header;
use super::inputs::arguments;
use crate::conformance::{classify, run_donated, run_physical, Outcome};
use crate::{Backend, Client, ClientOptions, Error, Executable};

/// Ops a JIT tier may still refuse without failing the run: a refusal whose message names
/// one of these counts as "known". Keep it minimal; delete entries as tiers learn the ops.
pub const NOT_YET_SUPPORTED: &[&str] = &[];

/// How one JIT tier did on one program.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Pass,
    /// An output differs from the interpreter's (the message says which, where, and in
    /// which I/O mode).
    Mismatch(String),
    /// The tier refused an op on [`NOT_YET_SUPPORTED`].
    KnownRefusal(String),
    /// The tier refused an op the generator produced and that list does not excuse.
    Refused(String),
    /// Any other compile or run error, or a panic.
    Failed(String),
}

impl Verdict {
    /// Whether this verdict fails the run.
    pub fn is_failure(&self) -> bool {
        !matches!(self, Verdict::Pass | Verdict::KnownRefusal(_))
    }
}

/// A program's result on every backend.
#[derive(Clone, Debug)]
pub struct Report {
    /// `Err` when the interpreter itself could not run the program: a generator bug (or an
    /// interpreter one), and nothing to compare against.
    pub reference: Result<(), String>,
    pub tiers: Vec<(Backend, Verdict)>,
}

impl Report {
    pub fn is_failure(&self) -> bool {
        self.reference.is_err() || self.tiers.iter().any(|(_, v)| v.is_failure())
    }

    /// One line per problem.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Err(e) = &self.reference {
            out.push(format!("interp: {e}"));
        }
        for (b, v) in &self.tiers {
            match v {
                Verdict::Pass => {}
                Verdict::Mismatch(m) => out.push(format!("{b}: mismatch: {m}")),
                Verdict::KnownRefusal(m) => out.push(format!("{b}: refused (known): {m}")),
                Verdict::Refused(m) => out.push(format!("{b}: refused: {m}")),
                Verdict::Failed(m) => out.push(format!("{b}: error: {m}")),
            }
        }
        out
    }
}

/// A client per backend, made once for many programs.
pub struct Backends {
    interp: Client,
    tiers: Vec<Client>,
}

impl Backends {
    pub fn new(options: &ClientOptions) -> Result<Backends, Error> {
        Ok(Backends {
            interp: Client::with_options(Backend::Interp, options)?,
            tiers: vec![
                Client::with_options(Backend::Cranelift, options)?,
                Client::with_options(Backend::Llvm, options)?,
            ],
        })
    }

    /// Runs `module` with the arguments `header` describes on every backend.
    pub fn run(&self, module: &Module, header: &Header) -> Report {
        let reference = arguments(module, header).and_then(|args| {
            let want = guarded(|| {
                let exe = self.interp.compile(module, &Default::default()).map_err(|e| e.to_string())?;
                exe.run(&args).map_err(|e| e.to_string())
            })?;
            if want.len() != header.checks.len() {
                return Err(format!("{} outputs but the header has {} checks", want.len(), header.checks.len()));
            }
            Ok((args, want))
        });
        let (args, want) = match reference {
            Ok(r) => r,
            Err(e) => return Report { reference: Err(e), tiers: Vec::new() },
        };
        let tiers = self.tiers.iter().map(|c| (c.backend(), tier_verdict(c, module, header, &args, &want))).collect();
        Report { reference: Ok(()), tiers }
    }
}

/// Runs `f`, turning a panic into an error (a panic anywhere is a bug to report, not a
/// reason to stop fuzzing).
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(format!("panicked: {what}"))
        }
    }
}

fn error_verdict(e: Error) -> Verdict {
    match classify(e) {
        Outcome::Unsupported(m) if NOT_YET_SUPPORTED.iter().any(|op| m.contains(op)) => Verdict::KnownRefusal(m),
        Outcome::Unsupported(m) => Verdict::Refused(m),
        Outcome::Failed(m) | Outcome::Mismatch(m) => Verdict::Failed(m),
        Outcome::Pass { .. } => Verdict::Failed("an error classified as a pass".into()),
    }
}

fn tier_verdict(client: &Client, module: &Module, header: &Header, args: &[Literal], want: &[Literal]) -> Verdict {
    let compiled = catch_unwind(AssertUnwindSafe(|| client.compile(module, &Default::default())));
    let exe: Executable = match compiled {
        Ok(Ok(exe)) => exe,
        Ok(Err(e)) => return error_verdict(e),
        Err(_) => return Verdict::Failed("panicked while compiling".into()),
    };
    // Donated buffers only where the module lets a result share a parameter's memory.
    let donation = module.attr("input_output_alias").is_some();
    for mode in ["logical", "physical", "donated"] {
        if mode == "donated" && !donation {
            continue;
        }
        let got = catch_unwind(AssertUnwindSafe(|| match mode {
            "physical" => run_physical(&exe, args),
            "donated" => run_donated(&exe, args),
            _ => exe.run(args),
        }));
        let got = match got {
            Ok(Ok(g)) => g,
            Ok(Err(e)) => {
                return match error_verdict(e) {
                    Verdict::Failed(m) => Verdict::Failed(format!("{mode} run: {m}")),
                    other => other,
                }
            }
            Err(_) => return Verdict::Failed(format!("panicked while running ({mode} I/O)")),
        };
        if got.len() != want.len() {
            return Verdict::Mismatch(format!("{mode}: {} outputs, the interpreter gives {}", got.len(), want.len()));
        }
        for (i, ((g, w), check)) in got.iter().zip(want).zip(&header.checks).enumerate() {
            if let Err(m) = agree(g, w, *check) {
                return Verdict::Mismatch(format!("{mode} I/O, output {i}: {m}"));
            }
        }
    }
    Verdict::Pass
}
