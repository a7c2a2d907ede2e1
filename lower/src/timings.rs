//! Where a compile's time went, phase by phase (parsing, verification, each pass, lowering,
//! code generation): what `tessera run --profile` prints and compile-time work is steered by.

use std::fmt;
use std::time::{Duration, Instant};

/// Phases in the order they first ran; a phase that runs several times (a pass of the
/// simplification group, once per round) is one entry holding its total.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timings {
    phases: Vec<(String, Duration)>,
}

impl Timings {
    pub fn new() -> Timings {
        Timings::default()
    }

    pub fn add(&mut self, phase: &str, took: Duration) {
        match self.phases.iter_mut().find(|(name, _)| name == phase) {
            Some((_, total)) => *total += took,
            None => self.phases.push((phase.to_string(), took)),
        }
    }

    /// Runs `f`, adding its time to `phase`.
    pub fn time<T>(&mut self, phase: &str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let value = f();
        self.add(phase, start.elapsed());
        value
    }

    pub fn extend(&mut self, other: &Timings) {
        for (name, took) in &other.phases {
            self.add(name, *took);
        }
    }

    pub fn phases(&self) -> &[(String, Duration)] {
        &self.phases
    }

    pub fn total(&self) -> Duration {
        self.phases.iter().map(|(_, d)| *d).sum()
    }
}

/// An aligned table: phase, milliseconds, share of the total.
impl fmt::Display for Timings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total().as_secs_f64().max(f64::MIN_POSITIVE);
        let width = self.phases.iter().map(|(n, _)| n.len()).chain(["phase".len()]).max().unwrap_or(0);
        writeln!(f, "{:<width$}  {:>10}  {:>6}", "phase", "ms", "share")?;
        for (name, took) in &self.phases {
            let s = took.as_secs_f64();
            writeln!(f, "{name:<width$}  {:>10.3}  {:>5.1}%", s * 1e3, 100.0 * s / total)?;
        }
        write!(f, "{:<width$}  {:>10.3}", "total", total * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_phases_add_up_in_first_run_order() {
        let mut t = Timings::new();
        t.add("parse", Duration::from_millis(2));
        t.add("dce", Duration::from_millis(1));
        t.add("parse", Duration::from_millis(3));
        assert_eq!(
            t.phases(),
            &[("parse".to_string(), Duration::from_millis(5)), ("dce".to_string(), Duration::from_millis(1))]
        );
        assert_eq!(t.total(), Duration::from_millis(6));
        let text = t.to_string();
        assert!(text.lines().nth(1).unwrap().starts_with("parse"), "{text}");
        assert!(text.contains("83.3%"), "{text}");
    }
}
