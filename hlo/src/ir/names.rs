//! Fresh names for passes that add many instructions or computations at once.
//! [`Computation::unique_name`] and [`Module::unique_computation_name`] scan every name for
//! each candidate, which is quadratic when a pass names hundreds of new values (fusion names a
//! computation per kernel; call inlining an instruction per callee instruction). A
//! [`UniqueNames`] indexes the names once and hands out the same names those functions would,
//! provided every new name comes from it and no name is removed meanwhile.

use std::collections::{HashMap, HashSet};

use super::{Computation, Module};

pub struct UniqueNames {
    taken: HashSet<String>,
    /// For each base asked for, the suffix its search resumes at: every `base.k` below it is
    /// taken (names are only ever added), so the answer is the same as a search from 1.
    next: HashMap<String, u64>,
}

impl UniqueNames {
    /// The names of `module`'s computations.
    pub fn of_computations(module: &Module) -> UniqueNames {
        UniqueNames::new(module.computations.iter().map(|c| c.name.clone()))
    }

    /// The names of `comp`'s instructions.
    pub fn of_instructions(comp: &Computation) -> UniqueNames {
        UniqueNames::new(comp.instructions.iter().map(|i| i.name.clone()))
    }

    fn new(names: impl Iterator<Item = String>) -> UniqueNames {
        UniqueNames { taken: names.collect(), next: HashMap::new() }
    }

    /// `base` if it is free, else the first free of `base.1`, `base.2`, ...; taken from now on.
    pub fn fresh(&mut self, base: &str) -> String {
        if self.taken.insert(base.to_string()) {
            return base.to_string();
        }
        let next = self.next.entry(base.to_string()).or_insert(1);
        loop {
            let name = format!("{base}.{next}");
            *next += 1;
            if self.taken.insert(name.clone()) {
                return name;
            }
        }
    }
}
