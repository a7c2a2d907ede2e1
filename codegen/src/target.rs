//! Which CPU the tiers generate code for: the host (the default), or a named x86-64
//! microarchitecture level, each with optional feature toggles in LLVM's spelling (`+avx2`,
//! `-avx512f`). Both tiers resolve the same [`CpuTarget`] through [`CpuTarget::resolve`], so
//! they agree on what code may use; a JIT target that asks for a feature the host lacks is
//! refused here, naming the feature, instead of dying of SIGILL in the first kernel.
//!
//! The environment override `TESSERA_CPU` (a CPU name) with `TESSERA_CPU_FEATURES` (toggles,
//! comma-separated) applies wherever no target is given explicitly ([`CpuTarget::from_env`]):
//! running the test binaries under valgrind, which does not decode AVX-512, needs
//! `TESSERA_CPU=x86-64-v3`.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use inkwell::targets::TargetMachine;

use crate::CodegenError;

/// The named CPUs a target may ask for besides the host: the x86-64 psABI levels, which LLVM
/// and Cranelift both know by these names. Each lists the features (LLVM names) it adds to the
/// level before it; a level's features are checked against the host's one by one.
const X86_LEVELS: [(&str, &[&str]); 4] = [
    ("x86-64", &["cmov", "cx8", "fxsr", "sse", "sse2"]),
    ("x86-64-v2", &["cx16", "sahf", "popcnt", "sse3", "ssse3", "sse4.1", "sse4.2"]),
    ("x86-64-v3", &["avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"]),
    ("x86-64-v4", &["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"]),
];

/// The aarch64 CPUs an object may be compiled for (LLVM's names; `generic` is the default).
const AARCH64_CPUS: [&str; 11] = [
    "generic",
    "cortex-a53",
    "cortex-a72",
    "cortex-a76",
    "neoverse-n1",
    "neoverse-n2",
    "neoverse-v1",
    "neoverse-v2",
    "ampere1",
    "apple-m1",
    "apple-m2",
];

/// The architectures objects may be compiled for (the first component of a triple; the OS
/// must be Linux).
const OBJECT_ARCHES: [&str; 2] = ["x86_64", "aarch64"];

/// The environment variables [`CpuTarget::from_env`] reads.
pub const CPU_ENV: &str = "TESSERA_CPU";
pub const FEATURES_ENV: &str = "TESSERA_CPU_FEATURES";

/// A CPU to generate code for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuTarget {
    /// `None`: the host CPU with all its features. Otherwise one of the x86-64 levels
    /// (`x86-64`, `x86-64-v2`, `x86-64-v3`, `x86-64-v4`).
    pub cpu: Option<String>,
    /// Feature toggles applied on top of the CPU's features, in order: `+name` enables,
    /// `-name` disables (LLVM's feature names, e.g. `+avx512f`, `-fma`).
    pub features: Vec<String>,
}

/// A target made concrete for this host: what LLVM and Cranelift are told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedTarget {
    /// The target triple (the host's for the JIT, which runs code here).
    pub triple: String,
    /// LLVM's CPU name (`target-cpu`).
    pub cpu: String,
    /// LLVM's feature string (`target-features`); empty for a named level without toggles.
    pub features: String,
    /// Every feature (LLVM name) the code may use.
    pub enabled: BTreeSet<String>,
    /// Whether the host's full feature set is the base (Cranelift then starts from its own
    /// host detection), as opposed to a named level.
    pub is_host: bool,
}

impl ResolvedTarget {
    pub fn has(&self, feature: &str) -> bool {
        self.enabled.contains(feature)
    }

    /// Whether the code may use fused multiply-add instructions: x86-64's FMA3 feature, or any
    /// aarch64 CPU (FMADD and FMLA are base instructions there).
    pub fn has_fma(&self) -> bool {
        self.has("fma") || self.triple.starts_with("aarch64")
    }

    /// Whether the code may convert between f16 and f32 in one instruction: x86-64's F16C
    /// (`vcvtph2ps`, `vcvtps2ph`), or any aarch64 CPU (`fcvt` is a base instruction there).
    pub fn has_half_conversions(&self) -> bool {
        self.has("f16c") || self.triple.starts_with("aarch64")
    }
}

struct HostCpu {
    triple: String,
    cpu: String,
    features: String,
    enabled: BTreeSet<String>,
}

fn host_cpu() -> &'static HostCpu {
    static HOST: OnceLock<HostCpu> = OnceLock::new();
    HOST.get_or_init(|| {
        let triple = TargetMachine::get_default_triple().as_str().to_string_lossy().into_owned();
        let cpu = TargetMachine::get_host_cpu_name().to_string();
        let features = TargetMachine::get_host_cpu_features().to_string();
        let enabled = features.split(',').filter_map(|f| f.strip_prefix('+')).map(str::to_string).collect();
        HostCpu { triple, cpu, features, enabled }
    })
}

fn target_error(tier: &'static str, message: String) -> CodegenError {
    CodegenError::Target { tier, message }
}

/// Feature names are LLVM's: lowercase letters, digits, `.`, `_` and `-`.
fn valid_feature_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

impl CpuTarget {
    /// The host CPU with every feature it has (what the tiers did before targets existed).
    pub fn host() -> CpuTarget {
        CpuTarget::default()
    }

    /// A named CPU (`host` means the host).
    pub fn named(cpu: &str) -> CpuTarget {
        CpuTarget { cpu: (cpu != "host").then(|| cpu.to_string()), features: Vec::new() }
    }

    /// The same CPU with feature toggles added (`+avx2`, `-fma`).
    pub fn with_features<S: AsRef<str>>(mut self, toggles: &[S]) -> CpuTarget {
        self.features.extend(toggles.iter().map(|t| t.as_ref().trim().to_string()));
        self
    }

    /// A CPU name and a comma-separated toggle list, as the environment and command lines
    /// spell them (an empty name is the host).
    pub fn parse(cpu: &str, features: &str) -> CpuTarget {
        let cpu = cpu.trim();
        let toggles: Vec<&str> = features.split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
        CpuTarget::named(if cpu.is_empty() { "host" } else { cpu }).with_features(&toggles)
    }

    /// `TESSERA_CPU` and `TESSERA_CPU_FEATURES` when set, else the host.
    pub fn from_env() -> CpuTarget {
        let cpu = std::env::var(CPU_ENV).unwrap_or_default();
        let features = std::env::var(FEATURES_ENV).unwrap_or_default();
        CpuTarget::parse(&cpu, &features)
    }

    /// A readable name: `host`, `x86-64-v3`, `x86-64-v3,+avx512f`.
    pub fn describe(&self) -> String {
        let mut s = self.cpu.clone().unwrap_or_else(|| "host".into());
        for f in &self.features {
            s.push(',');
            s.push_str(f);
        }
        s
    }

    /// What the tiers generate code for when this target runs here (JIT): every feature it
    /// asks for must be one the host has. `tier` names the tier in errors.
    pub fn resolve(&self, tier: &'static str) -> Result<ResolvedTarget, CodegenError> {
        let host = host_cpu();
        let resolved = self.resolve_on(tier, None)?;
        if let Some(missing) = resolved.enabled.iter().find(|f| !host.enabled.contains(*f)) {
            return Err(CodegenError::UnsupportedFeature {
                tier,
                feature: missing.clone(),
                target: self.describe(),
                host: host.cpu.clone(),
            });
        }
        Ok(resolved)
    }

    /// What the tiers generate an object for: `triple` (`None`: the host's), on which the code
    /// runs later, elsewhere perhaps, so the host's features do not limit it. The host CPU is
    /// the default on the host's architecture, `generic` on another.
    pub fn resolve_for_object(&self, tier: &'static str, triple: Option<&str>) -> Result<ResolvedTarget, CodegenError> {
        let host = host_cpu();
        let Some(triple) = triple.filter(|t| *t != host.triple) else {
            return self.resolve_on(tier, None);
        };
        let arch = triple.split('-').next().unwrap_or("");
        let parts = triple.split('-').count();
        if !OBJECT_ARCHES.contains(&arch) || !(3..=4).contains(&parts) || !triple.contains("linux") {
            return Err(target_error(
                tier,
                format!(
                    "unknown target triple '{triple}' (objects can be made for {})",
                    OBJECT_ARCHES.map(|a| format!("{a}-unknown-linux-gnu")).join(", ")
                ),
            ));
        }
        self.resolve_on(tier, Some(triple.to_string()))
    }

    /// The CPU and features for `triple` (`None`: the host), without checking the host has
    /// them.
    fn resolve_on(&self, tier: &'static str, triple: Option<String>) -> Result<ResolvedTarget, CodegenError> {
        let host = host_cpu();
        let triple = triple.unwrap_or_else(|| host.triple.clone());
        let on_host_arch = triple.split('-').next() == host.triple.split('-').next();
        let (cpu, mut enabled, mut features, is_host) = match self.cpu.as_deref() {
            None if on_host_arch => (host.cpu.clone(), host.enabled.clone(), vec![host.features.clone()], true),
            None => ("generic".to_string(), BTreeSet::new(), Vec::new(), false),
            Some(name) if triple.starts_with("aarch64") => {
                if !AARCH64_CPUS.contains(&name) {
                    return Err(target_error(
                        tier,
                        format!("unknown target CPU '{name}' for {triple} (known: {})", AARCH64_CPUS.join(", ")),
                    ));
                }
                (name.to_string(), BTreeSet::new(), Vec::new(), false)
            }
            Some(name) => {
                let x86 = triple.starts_with("x86_64");
                let Some(pos) = X86_LEVELS.iter().position(|(n, _)| *n == name).filter(|_| x86) else {
                    let known: Vec<&str> =
                        std::iter::once("host").chain(X86_LEVELS.iter().filter(|_| x86).map(|(n, _)| *n)).collect();
                    return Err(target_error(
                        tier,
                        format!("unknown target CPU '{name}' (this host knows: {})", known.join(", ")),
                    ));
                };
                let enabled = X86_LEVELS[..=pos].iter().flat_map(|(_, fs)| fs.iter()).map(|f| f.to_string()).collect();
                (name.to_string(), enabled, Vec::new(), false)
            }
        };
        for toggle in &self.features {
            let (on, name) = match (toggle.strip_prefix('+'), toggle.strip_prefix('-')) {
                (Some(n), _) => (true, n),
                (_, Some(n)) => (false, n),
                _ => {
                    return Err(target_error(
                        tier,
                        format!("target feature toggle '{toggle}' must start with + or - (e.g. +avx2)"),
                    ))
                }
            };
            if !valid_feature_name(name) {
                return Err(target_error(tier, format!("'{name}' is not a target feature name")));
            }
            if on {
                enabled.insert(name.to_string());
            } else {
                enabled.remove(name);
            }
            features.push(toggle.clone());
        }
        Ok(ResolvedTarget { triple, cpu, features: features.join(","), enabled, is_host })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_names_and_toggles() {
        assert_eq!(CpuTarget::parse("", ""), CpuTarget::host());
        assert_eq!(CpuTarget::parse("host", " "), CpuTarget::host());
        let t = CpuTarget::parse("x86-64-v3", "+avx512f, -fma");
        assert_eq!(t.cpu.as_deref(), Some("x86-64-v3"));
        assert_eq!(t.features, vec!["+avx512f".to_string(), "-fma".to_string()]);
        assert_eq!(t.describe(), "x86-64-v3,+avx512f,-fma");
    }

    #[test]
    fn the_host_resolves_to_its_own_features() {
        let r = CpuTarget::host().resolve("test").unwrap();
        assert!(r.is_host);
        assert_eq!(r.enabled, host_cpu().enabled);
    }

    #[test]
    fn bad_names_and_toggles_are_errors() {
        let err = CpuTarget::named("pentium-9000").resolve("test").unwrap_err().to_string();
        assert!(err.contains("unknown target CPU 'pentium-9000'"), "{err}");
        let err = CpuTarget::host().with_features(&["avx2"]).resolve("test").unwrap_err().to_string();
        assert!(err.contains("must start with + or -"), "{err}");
        let err = CpuTarget::host().with_features(&["+AVX2"]).resolve("test").unwrap_err().to_string();
        assert!(err.contains("not a target feature name"), "{err}");
    }

    #[test]
    fn a_feature_the_host_lacks_is_refused_by_name() {
        let err = CpuTarget::host().with_features(&["+no-such-feature"]).resolve("test").unwrap_err();
        assert!(err.to_string().contains("unsupported target feature 'no-such-feature'"), "{err}");
        match err {
            CodegenError::UnsupportedFeature { feature, .. } => assert_eq!(feature, "no-such-feature"),
            other => panic!("{other}"),
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn levels_add_their_features_and_toggles_apply_in_order() {
        let v2 = CpuTarget::named("x86-64-v2").resolve("test").unwrap();
        assert!(!v2.is_host && v2.has("sse4.2") && !v2.has("avx"));
        assert_eq!(v2.features, "");
        let t = CpuTarget::named("x86-64-v2").with_features(&["-popcnt"]).resolve("test").unwrap();
        assert!(!t.has("popcnt"));
        assert_eq!(t.features, "-popcnt");
        let host_avx512 = host_cpu().enabled.contains("avx512f");
        assert_eq!(
            CpuTarget::named("x86-64-v4").resolve("test").is_ok(),
            host_avx512 && host_cpu().enabled.contains("avx512vl")
        );
    }
}
