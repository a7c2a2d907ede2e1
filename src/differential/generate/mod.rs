//! Random valid HLO modules for differential testing.
//!
//! A program is grown from one seed: entry parameters with random shapes (rank 0 to 4, sizes
//! including 1 and odd ones), element types and layouts (permuted, tiled, jagged), then a
//! random mix of ops (`ops.rs`) that mostly extend values nothing uses yet, so the root
//! depends on most of the graph and elementwise chains fuse. The root is one value or a tuple
//! of the unused ones, laid out as a random `entry_computation_layout` says.
//!
//! The generator writes HLO text directly (every attribute as XLA prints it) and keeps, per
//! value, what `facts.rs` knows about its elements; that decides which ops are admitted and
//! whether each output must match bit for bit. A module that does not parse and verify is a
//! generator bug, reported as such. The text starts with a header (seed, argument
//! distributions, per-output checks) so a saved file reproduces its failure by itself.

pub mod facts;
mod ops;
mod ops_indexed;

use std::collections::HashMap;

use tessera_hlo::text::parse_module;
use tessera_hlo::verify::verify;
use tessera_hlo::{ElementType, Module};

use super::rng::Rng;
use facts::{Facts, Kind};

/// Element types of generated values (the corpus' set, minus complex numbers).
pub const TYPES: &[ElementType] = &[
    ElementType::F32,
    ElementType::F64,
    ElementType::BF16,
    ElementType::F16,
    ElementType::S8,
    ElementType::S32,
    ElementType::S64,
    ElementType::U8,
    ElementType::U32,
    ElementType::Pred,
];

/// No generated value has more elements than this: the interpreter stays fast.
const MAX_ELEMENTS: i64 = 4096;

/// How the arguments of one entry parameter are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgDist {
    /// Floats uniform in `[lo, hi]`, rounded to the type.
    Uniform { lo: f64, hi: f64 },
    /// Integers uniform in `lo..=hi`.
    Int { lo: i64, hi: i64 },
    /// False or true.
    Pred,
}

/// How one output of the program is compared with the interpreter's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Bit for bit (a float zero's sign aside).
    Exact,
    /// Within the float tolerance of `compare.rs`.
    Close,
}

/// What the generator settles in the module header: enough to re-run a saved file.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub seed: u64,
    pub args: Vec<ArgDist>,
    pub checks: Vec<Check>,
}

/// A generated program.
#[derive(Clone, Debug)]
pub struct Program {
    pub header: Header,
    /// The module text, header comment included.
    pub text: String,
    pub module: Module,
}

/// Which op families the generator draws from (all by default).
#[derive(Clone, Debug)]
pub struct Options {
    /// Ops per program: `min..=max`.
    pub min_ops: usize,
    pub max_ops: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options { min_ops: 2, max_ops: 18 }
    }
}

/// The program of `seed`. `Err` only for a generator bug (text that does not parse or
/// verify), with the text in the message.
pub fn generate(seed: u64, options: &Options) -> Result<Program, String> {
    let mut g = Gen::new(seed);
    let ops = g.rng.range(options.min_ops as i64, options.max_ops as i64) as usize;
    let mut made = 0;
    // Some draws are refused (an op not admitted on the picked operand); bound the retries.
    for _ in 0..ops * 6 {
        if made == ops {
            break;
        }
        if g.random_op().is_some() {
            made += 1;
        }
    }
    if made == 0 || g.vals.iter().all(|v| v.param.is_some()) {
        let p = g.any_value();
        g.push_op(g.vals[p].ty, g.vals[p].dims.clone(), g.vals[p].facts, format!("copy({})", g.vals[p].name));
    }
    let (text, header) = g.finish(seed);
    let module = parse_module(&text).map_err(|e| format!("generated module does not parse: {e}\n{text}"))?;
    verify(&module).map_err(|e| format!("generated module does not verify: {e}\n{text}"))?;
    Ok(Program { header, text, module })
}

/// One generated value.
#[derive(Clone, Debug)]
pub(crate) struct Val {
    pub name: String,
    pub ty: ElementType,
    pub dims: Vec<i64>,
    pub facts: Facts,
    /// How many instructions use it.
    pub uses: u32,
    /// The parameter number, for entry parameters.
    pub param: Option<usize>,
    /// Index into `Gen::lines` of the instruction defining it.
    pub line: usize,
}

struct Param {
    /// The shape `entry_computation_layout` declares (layout always explicit).
    entry_shape: String,
    dist: ArgDist,
}

pub(crate) struct Gen {
    pub rng: Rng,
    pub vals: Vec<Val>,
    /// Instructions of the entry computation, in order.
    lines: Vec<String>,
    /// Called computations, by a key saying what they compute.
    comps: Vec<(String, String)>,
    comp_names: HashMap<String, String>,
    params: Vec<Param>,
    next_name: usize,
}

pub(crate) fn kind(ty: ElementType) -> Kind {
    if ty.is_float() {
        Kind::Float(ty.bit_width())
    } else if ty.is_signed_integral() {
        Kind::Signed(ty.bit_width())
    } else if ty.is_unsigned_integral() {
        Kind::Unsigned(ty.bit_width())
    } else {
        Kind::Pred
    }
}

pub(crate) fn elements(dims: &[i64]) -> i64 {
    dims.iter().product()
}

fn list(xs: &[i64]) -> String {
    xs.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// `f32[3,4]{0,1}`; `layout` is the text inside the braces, empty for none.
pub(crate) fn shape_text(ty: ElementType, dims: &[i64], layout: &str) -> String {
    if layout.is_empty() {
        format!("{}[{}]", ty.name(), list(dims))
    } else {
        format!("{}[{}]{{{}}}", ty.name(), list(dims), layout)
    }
}

/// The row-major layout's text (`""` for scalars, which print none).
fn default_layout(rank: usize) -> String {
    if rank == 0 {
        String::new()
    } else {
        list(&(0..rank as i64).rev().collect::<Vec<_>>())
    }
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            rng: Rng::new(seed),
            vals: Vec::new(),
            lines: Vec::new(),
            comps: Vec::new(),
            comp_names: HashMap::new(),
            params: Vec::new(),
            next_name: 0,
        }
    }

    pub fn fresh(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        format!("{prefix}{}", self.next_name)
    }

    /// A random layout for a `ty` array of `dims`: any dimension order, sometimes tiled
    /// (f32-style `T(8,128)`, small and odd tiles, sub-tiles packing 16- and 8-bit types).
    pub fn random_layout(&mut self, ty: ElementType, dims: &[i64]) -> String {
        let rank = dims.len();
        if rank == 0 {
            return String::new();
        }
        let mut order: Vec<i64> = (0..rank as i64).rev().collect();
        if self.rng.chance(0.6) {
            self.rng.shuffle(&mut order);
        }
        let mut text = list(&order);
        if self.rng.chance(0.4) && ty != ElementType::Pred {
            let tiles: &[&str] = match (rank, ty.bit_width()) {
                (1, _) => &["T(4)", "T(8)", "T(128)", "T(1024)", "T(3)"],
                (_, 16) => &["T(8,128)(2,1)", "T(2,128)(2,1)", "T(4,8)(2,1)", "T(8,128)", "T(2,4)", "T(2,2)"],
                (_, 8) => &["T(8,128)(4,1)", "T(4,8)(4,1)", "T(2,2)", "T(8,128)", "T(1,4)"],
                _ => &["T(8,128)", "T(2,128)", "T(2,2)", "T(4,8)", "T(1,4)", "T(3,5)", "T(4,4)(2,2)"],
            };
            text.push(':');
            text.push_str(*self.rng.pick(tiles));
        }
        text
    }

    /// Random dims of `rank` with at most [`MAX_ELEMENTS`] elements.
    pub fn random_dims(&mut self, rank: usize) -> Vec<i64> {
        const SIZES: &[i64] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 31, 33, 64, 130];
        const WEIGHTS: &[u32] = &[8, 8, 10, 8, 8, 4, 6, 6, 4, 3, 4, 3, 3, 2, 2, 1, 1];
        loop {
            let dims: Vec<i64> = (0..rank).map(|_| SIZES[self.rng.weighted(WEIGHTS)]).collect();
            if elements(&dims) <= MAX_ELEMENTS / 4 {
                return dims;
            }
        }
    }

    pub fn random_rank(&mut self) -> usize {
        self.rng.weighted(&[5, 25, 35, 25, 10])
    }

    pub fn random_type(&mut self) -> ElementType {
        *self.rng.pick(TYPES)
    }

    /// Adds `name = shape text` with maybe an explicit random layout; returns the value.
    pub fn push_op(&mut self, ty: ElementType, dims: Vec<i64>, facts: Facts, op: String) -> usize {
        let layout = if self.rng.chance(0.25) { self.random_layout(ty, &dims) } else { String::new() };
        self.push_with_layout(ty, dims, facts, op, &layout)
    }

    pub fn push_with_layout(
        &mut self,
        ty: ElementType,
        dims: Vec<i64>,
        facts: Facts,
        op: String,
        layout: &str,
    ) -> usize {
        let name = self.fresh("v");
        self.lines.push(format!("{name} = {} {op}", shape_text(ty, &dims, layout)));
        self.vals.push(Val { name, ty, dims, facts, uses: 0, param: None, line: self.lines.len() - 1 });
        self.vals.len() - 1
    }

    /// Marks values as used (by an op just pushed).
    pub fn used(&mut self, ids: &[usize]) {
        for &i in ids {
            self.vals[i].uses += 1;
        }
    }

    /// A new entry parameter.
    pub fn param(&mut self, ty: ElementType, dims: Vec<i64>) -> usize {
        let number = self.params.len();
        let dist = self.random_dist(ty);
        let facts = match dist {
            ArgDist::Uniform { lo, hi } => Facts::exact(lo, hi),
            ArgDist::Int { lo, hi } => Facts::exact(lo as f64, hi as f64),
            ArgDist::Pred => Facts::exact(0.0, 1.0),
        };
        self.param_with(ty, dims, dist, facts, number)
    }

    /// A new scalar integer parameter drawn from `lo..=hi` (dynamic-slice starts).
    pub fn int_param(&mut self, ty: ElementType, lo: i64, hi: i64) -> usize {
        let number = self.params.len();
        self.param_with(ty, Vec::new(), ArgDist::Int { lo, hi }, Facts::exact(lo as f64, hi as f64), number)
    }

    pub(crate) fn params_len(&self) -> usize {
        self.params.len()
    }

    /// Appends an entry instruction that defines no pool value (a tuple, a loop).
    pub(crate) fn push_line(&mut self, line: String) {
        self.lines.push(line);
    }

    pub(crate) fn param_with(
        &mut self,
        ty: ElementType,
        dims: Vec<i64>,
        dist: ArgDist,
        facts: Facts,
        number: usize,
    ) -> usize {
        let entry = if self.rng.chance(0.5) { self.random_layout(ty, &dims) } else { default_layout(dims.len()) };
        // Mostly the instruction states the entry layout; sometimes another (the lowering
        // then relayouts the argument), sometimes none (it takes the entry's).
        let own = match self.rng.weighted(&[6, 2, 2]) {
            0 => entry.clone(),
            1 => self.random_layout(ty, &dims),
            _ => String::new(),
        };
        let name = self.fresh("p");
        self.lines.push(format!("{name} = {} parameter({number})", shape_text(ty, &dims, &own)));
        self.params.push(Param { entry_shape: shape_text(ty, &dims, &entry), dist });
        self.vals.push(Val { name, ty, dims, facts, uses: 0, param: Some(number), line: self.lines.len() - 1 });
        self.vals.len() - 1
    }

    fn random_dist(&mut self, ty: ElementType) -> ArgDist {
        match kind(ty) {
            Kind::Float(_) => match self.rng.weighted(&[6, 3, 1]) {
                0 => ArgDist::Uniform { lo: -1.0, hi: 1.0 },
                // Positive: log, sqrt, power and divide get operands they admit.
                1 => ArgDist::Uniform { lo: 0.5, hi: 2.0 },
                _ => ArgDist::Uniform { lo: -4.0, hi: 4.0 },
            },
            k @ (Kind::Signed(_) | Kind::Unsigned(_)) => {
                let (tlo, thi) = k.bounds();
                let (tlo, thi) = (tlo.max(i64::MIN as f64) as i64, thi.min(i64::MAX as f64) as i64);
                let signed = matches!(k, Kind::Signed(_));
                match self.rng.weighted(&[7, 2, 1]) {
                    0 if signed => ArgDist::Int { lo: -8, hi: 7 },
                    0 => ArgDist::Int { lo: 0, hi: 15 },
                    1 if signed => ArgDist::Int { lo: -100, hi: 100 },
                    1 => ArgDist::Int { lo: 0, hi: 200 },
                    _ => ArgDist::Int { lo: tlo, hi: thi },
                }
            }
            Kind::Pred => ArgDist::Pred,
        }
    }

    /// A scalar constant instruction (not a pool value); returns its name.
    pub fn constant(&mut self, ty: ElementType, literal: &str) -> String {
        let name = self.fresh("c");
        self.lines.push(format!("{name} = {}[] constant({literal})", ty.name()));
        name
    }

    /// The name of a called computation built by `body` (cached by `key`): `body` gets the
    /// computation's name and returns its instruction lines.
    pub fn computation(&mut self, key: &str, body: impl FnOnce(&str) -> Vec<String>) -> String {
        if let Some(n) = self.comp_names.get(key) {
            return n.clone();
        }
        let name = self.fresh(&format!("{key}_"));
        let lines = body(&name);
        let mut text = format!("{name} {{\n");
        for l in lines {
            text.push_str("  ");
            text.push_str(&l);
            text.push('\n');
        }
        text.push_str("}\n");
        self.comps.push((key.to_string(), text));
        self.comp_names.insert(key.to_string(), name.clone());
        name
    }

    /// Some value, preferring ones nothing uses yet.
    pub fn any_value(&mut self) -> usize {
        self.pick(|_| true).unwrap_or_else(|| {
            let ty = self.random_type();
            let rank = self.random_rank();
            let dims = self.random_dims(rank);
            self.param(ty, dims)
        })
    }

    /// A value satisfying `ok`, preferring unused ones (and, among those, recent ones).
    pub fn pick(&mut self, ok: impl Fn(&Val) -> bool) -> Option<usize> {
        let all: Vec<usize> = (0..self.vals.len()).filter(|&i| ok(&self.vals[i])).collect();
        if all.is_empty() {
            return None;
        }
        let unused: Vec<usize> = all.iter().copied().filter(|&i| self.vals[i].uses == 0).collect();
        if !unused.is_empty() && self.rng.chance(0.75) {
            // The newest unused value half the time: long chains.
            if self.rng.chance(0.5) {
                return unused.last().copied();
            }
            return Some(*self.rng.pick(&unused));
        }
        Some(*self.rng.pick(&all))
    }

    /// A value of type `ty` and `dims`: an existing one, or a new parameter, splatted
    /// constant or iota.
    pub fn like(&mut self, ty: ElementType, dims: &[i64]) -> usize {
        if self.rng.chance(0.5) {
            if let Some(v) = self.pick(|v| v.ty == ty && v.dims == dims) {
                return v;
            }
        }
        match self.rng.weighted(&[5, 3, 1]) {
            0 => self.param(ty, dims.to_vec()),
            1 => self.splat(ty, dims),
            _ if ty != ElementType::Pred && !dims.is_empty() => self.iota(ty, dims),
            _ => self.param(ty, dims.to_vec()),
        }
    }

    /// A random scalar constant broadcast to `dims`.
    pub fn splat(&mut self, ty: ElementType, dims: &[i64]) -> usize {
        let (text, value) = self.random_scalar(ty);
        let c = self.constant(ty, &text);
        let facts = Facts::exact(value, value);
        if dims.is_empty() {
            // A scalar constant is itself the value.
            let name = self.fresh("v");
            self.lines.push(format!("{name} = {}[] copy({c})", ty.name()));
            self.vals.push(Val { name, ty, dims: vec![], facts, uses: 0, param: None, line: self.lines.len() - 1 });
            return self.vals.len() - 1;
        }
        self.push_op(ty, dims.to_vec(), facts, format!("broadcast({c}), dimensions={{}}"))
    }

    /// A random scalar literal of `ty` (text and value).
    pub fn random_scalar(&mut self, ty: ElementType) -> (String, f64) {
        match kind(ty) {
            Kind::Float(_) => {
                let v = (self.rng.range(-16, 16) as f64) / 8.0;
                (format!("{v}"), v)
            }
            Kind::Signed(_) => {
                let v = self.rng.range(-9, 9);
                (v.to_string(), v as f64)
            }
            Kind::Unsigned(_) => {
                let v = self.rng.range(0, 12);
                (v.to_string(), v as f64)
            }
            Kind::Pred => {
                let v = self.rng.chance(0.5);
                (v.to_string(), f64::from(u8::from(v)))
            }
        }
    }

    /// `iota` of `ty` along a random dimension of `dims`.
    pub fn iota(&mut self, ty: ElementType, dims: &[i64]) -> usize {
        let d = self.rng.below(dims.len() as u64) as usize;
        let facts = Facts::exact(0.0, (dims[d] - 1) as f64);
        let (tlo, thi) = kind(ty).bounds();
        let facts = if facts.hi > thi || facts.lo < tlo { Facts::full(kind(ty)) } else { facts };
        self.push_op(ty, dims.to_vec(), facts, format!("iota(), iota_dimension={d}"))
    }

    /// The module text and header: called computations, then the entry with its root (one
    /// value, or a tuple of several nothing uses), `entry_computation_layout` declaring the
    /// parameters' and results' layouts.
    fn finish(mut self, seed: u64) -> (String, Header) {
        let last = self.vals.iter().rposition(|v| v.param.is_none()).unwrap_or(self.vals.len() - 1);
        let mut outs: Vec<usize> = (0..self.vals.len())
            .filter(|&i| i != last && self.vals[i].uses == 0 && self.vals[i].param.is_none())
            .collect();
        self.rng.shuffle(&mut outs);
        outs.truncate(self.rng.range(0, 3) as usize);
        outs.insert(0, last);
        let result_layouts: Vec<String> = outs
            .iter()
            .map(|&o| {
                let (ty, dims) = (self.vals[o].ty, self.vals[o].dims.clone());
                if self.rng.chance(0.5) {
                    self.random_layout(ty, &dims)
                } else {
                    default_layout(dims.len())
                }
            })
            .collect();
        let result_shapes: Vec<String> = outs
            .iter()
            .zip(&result_layouts)
            .map(|(&o, l)| shape_text(self.vals[o].ty, &self.vals[o].dims, l))
            .collect();
        let tuple = outs.len() > 1 || self.rng.chance(0.1);
        let result = if tuple { format!("({})", result_shapes.join(", ")) } else { result_shapes[0].clone() };
        if tuple {
            let names: Vec<String> = outs.iter().map(|&o| self.vals[o].name.clone()).collect();
            let shapes: Vec<String> =
                outs.iter().map(|&o| shape_text(self.vals[o].ty, &self.vals[o].dims, "")).collect();
            self.lines.push(format!("ROOT out = ({}) tuple({})", shapes.join(", "), names.join(", ")));
        } else {
            let line = &mut self.lines[self.vals[last].line];
            *line = format!("ROOT {line}");
        }
        let checks: Vec<Check> =
            outs.iter().map(|&o| if self.vals[o].facts.exact { Check::Exact } else { Check::Close }).collect();
        let header = Header { seed, args: self.params.iter().map(|p| p.dist).collect(), checks };
        let params: Vec<String> = self.params.iter().map(|p| p.entry_shape.clone()).collect();
        let aliases = donations(seed, &params, &result_shapes, tuple);
        let mut text = header.to_text();
        text.push_str(&format!(
            "HloModule fuzz_{seed}, {aliases}entry_computation_layout={{({})->{result}}}\n\n",
            params.join(", ")
        ));
        for (_, c) in &self.comps {
            text.push_str(c);
            text.push('\n');
        }
        text.push_str("ENTRY main {\n");
        for l in &self.lines {
            text.push_str("  ");
            text.push_str(l);
            text.push('\n');
        }
        text.push_str("}\n");
        (text, header)
    }
}

/// `input_output_alias={...}, ` for a third of the programs whose results include one of a
/// parameter's exact shape (layout included): each such result may share the memory of a
/// parameter of its shape, so the runner's donated mode checks what the program then may and
/// may not overwrite. Drawn from a stream of its own, so the programs stay those of the seed.
fn donations(seed: u64, params: &[String], results: &[String], tuple: bool) -> String {
    let mut rng = Rng::new(seed ^ 0xD0_4A7E_D0_4A7E);
    if !rng.chance(1.0 / 3.0) {
        return String::new();
    }
    let mut taken = vec![false; params.len()];
    let mut pairs = Vec::new();
    for (k, result) in results.iter().enumerate() {
        let Some(p) = (0..params.len()).find(|&p| !taken[p] && params[p] == *result) else { continue };
        taken[p] = true;
        let output = if tuple { k.to_string() } else { String::new() };
        pairs.push(format!("{{{output}}}: ({p}, {{}}, may-alias)"));
    }
    if pairs.is_empty() {
        return String::new();
    }
    format!("input_output_alias={{ {} }}, ", pairs.join(", "))
}

impl Header {
    /// The header as comment lines:
    ///
    /// ```text
    /// // fuzz seed: 42
    /// // fuzz args: u(-1,1) i(-8,7) b
    /// // fuzz checks: exact close
    /// ```
    pub fn to_text(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| match a {
                ArgDist::Uniform { lo, hi } => format!("u({lo},{hi})"),
                ArgDist::Int { lo, hi } => format!("i({lo},{hi})"),
                ArgDist::Pred => "b".to_string(),
            })
            .collect();
        let checks: Vec<&str> =
            self.checks.iter().map(|c| if *c == Check::Exact { "exact" } else { "close" }).collect();
        format!("// fuzz seed: {}\n// fuzz args: {}\n// fuzz checks: {}\n", self.seed, args.join(" "), checks.join(" "))
    }

    /// Reads the header of a saved program (see [`Header::to_text`]).
    pub fn parse(text: &str) -> Result<Header, String> {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(&format!("// fuzz {name}:")).map(str::trim))
                .ok_or_else(|| format!("no `// fuzz {name}:` line"))
        };
        let seed = field("seed")?.parse::<u64>().map_err(|e| format!("fuzz seed: {e}"))?;
        let mut args = Vec::new();
        for a in field("args")?.split_whitespace() {
            let pair = |s: &str| -> Option<(String, String)> {
                let inner = s.get(2..s.len().checked_sub(1)?)?;
                let (x, y) = inner.split_once(',')?;
                Some((x.to_string(), y.to_string()))
            };
            let bad = || format!("fuzz args: cannot read `{a}`");
            args.push(match a.as_bytes().first() {
                Some(b'b') => ArgDist::Pred,
                Some(b'u') => {
                    let (x, y) = pair(a).ok_or_else(bad)?;
                    ArgDist::Uniform { lo: x.parse().map_err(|_| bad())?, hi: y.parse().map_err(|_| bad())? }
                }
                Some(b'i') => {
                    let (x, y) = pair(a).ok_or_else(bad)?;
                    ArgDist::Int { lo: x.parse().map_err(|_| bad())?, hi: y.parse().map_err(|_| bad())? }
                }
                _ => return Err(bad()),
            });
        }
        let checks = field("checks")?
            .split_whitespace()
            .map(|c| match c {
                "exact" => Ok(Check::Exact),
                "close" => Ok(Check::Close),
                _ => Err(format!("fuzz checks: `{c}`")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Header { seed, args, checks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_parse_verify_and_reproduce() {
        for seed in 0..300 {
            let p = generate(seed, &Options::default()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(Header::parse(&p.text).unwrap(), p.header);
            assert_eq!(generate(seed, &Options::default()).unwrap().text, p.text);
        }
    }

    #[test]
    fn every_op_family_is_generated() {
        let mut seen = std::collections::BTreeMap::<String, usize>::new();
        let mut tiled = 0;
        for seed in 0..400 {
            let p = generate(seed, &Options::default()).unwrap();
            for c in &p.module.computations {
                for i in &c.instructions {
                    *seen.entry(i.opcode.name().to_string()).or_default() += 1;
                }
            }
            tiled += usize::from(p.text.contains(":T("));
        }
        let families = [
            "add",
            "exponential",
            "compare",
            "select",
            "clamp",
            "convert",
            "bitcast-convert",
            "broadcast",
            "transpose",
            "reshape",
            "slice",
            "pad",
            "concatenate",
            "reverse",
            "iota",
            "copy",
            "reduce",
            "dot",
            "dynamic-slice",
            "dynamic-update-slice",
            "gather",
            "scatter",
            "reduce-window",
            "convolution",
            "while",
            "conditional",
            "sort",
            "topk",
        ];
        let missing: Vec<&str> = families.iter().copied().filter(|f| !seen.contains_key(*f)).collect();
        assert!(missing.is_empty(), "never generated: {missing:?} (seen {seen:?})");
        assert!(tiled > 100, "{tiled} of 400 programs have tiled layouts");
    }

    /// The generated programs exercise the simplifier's rules for loops and for data
    /// movement, reduces and compares, and layout assignment's choices, so that the
    /// differential tests check their rewrites against the interpreter (which runs neither).
    #[test]
    fn simplifier_and_layout_rules_are_generated() {
        let wanted = [
            "while_dead_state",
            "while_invariant_motion",
            "runs its body once",
            "reduce of a broadcast",
            "reduce of a transpose",
            "slice inside one operand of a concatenate",
            "slice inside the operand of a pad",
            "concatenate of continuing slices",
            "the constant on the right",
            "select on a negated predicate",
            "transpose of a dot",
            "-> row-major",
            "its transpose reads it in order",
        ];
        let mut seen = vec![0usize; wanted.len()];
        for seed in 0..400 {
            let mut module = generate(seed, &Options::default()).unwrap().module;
            // In the pipeline's order: layouts first, then the simplifiers.
            let mut layouts = tessera_lower::passes::LayoutAssignment::default();
            tessera_lower::Pass::run(&mut layouts, &mut module).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let mut simplify = tessera_lower::passes::Simplify::default();
            tessera_lower::Pass::run(&mut simplify, &mut module).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let reports = [tessera_lower::Pass::report(&layouts), tessera_lower::Pass::report(&simplify)];
            for line in reports.iter().flatten() {
                for (k, w) in wanted.iter().enumerate() {
                    seen[k] += usize::from(line.contains(w));
                }
            }
        }
        let tally: Vec<String> = wanted.iter().zip(&seen).map(|(w, n)| format!("{w}: {n}")).collect();
        println!("simplifier and layout rewrites in 400 programs: {}", tally.join(", "));
        assert!(seen.iter().all(|&n| n > 0), "a rule never rewrote: {}", tally.join(", "));
    }

    /// Some generated programs hold a row kernel that fusion stages (`emit::staging`), some
    /// one staging a chain of values (a lane reduction loading one staged value and storing
    /// the next over it), some a
    /// kernel of merged sibling loops, some one of sibling loops that fusion merged around a
    /// costly value they share, some one of merged sibling column reductions (some of them
    /// with different reducers, merged by accumulator type) and some a column reduction that
    /// also writes a producer merged into it (`multi_output_fusion`),
    /// some a column reduction split into blocks of rows (`tree_reduction`), so the
    /// differential tests check these kinds of kernel against the interpreter.
    #[test]
    fn staged_and_multi_output_kernels_are_generated() {
        let (mut staged, mut chained, mut siblings, mut reductions, mut blocks) = (0, 0, 0, 0, 0);
        let (mut producers, mut shared, mut mixed) = (0, 0, 0);
        for seed in 0..400 {
            let program = generate(seed, &Options::default()).unwrap();
            let mut module = program.module.clone();
            let mut pipeline = tessera_lower::passes::standard_pipeline(true, true);
            pipeline.run(&mut module).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let reports = pipeline.reports();
            let says = |what: &str| reports.iter().flat_map(|(_, lines)| lines).any(|l| l.contains(what));
            staged += usize::from(says("(staged:"));
            siblings += usize::from(says("(sibling:"));
            reductions += usize::from(says("(sibling reduction:"));
            producers += usize::from(says("(producer-consumer:"));
            shared += usize::from(says("(sibling of kernels sharing a costly producer:"));
            blocks += usize::from(says("(a grid over the blocks)"));
            mixed += usize::from(module.comp_ids().any(|c| {
                let comp = module.comp(c);
                let root = comp.root_inst();
                let reducers: std::collections::HashSet<_> = root
                    .operands
                    .iter()
                    .map(|&o| comp.inst(o))
                    .filter(|i| root.opcode == tessera_hlo::Opcode::Tuple && i.opcode == tessera_hlo::Opcode::Reduce)
                    .filter_map(|i| i.called("to_apply"))
                    .map(|r| module.comp(r).root_inst().opcode)
                    .collect();
                reducers.len() > 1
            }));
            if says("(staged:") {
                let lowered = tessera_lower::lower_module(&program.module, &Default::default())
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                chained += usize::from(lowered.kernels.iter().any(crate::differential::kernel_kinds::stages_a_chain));
            }
        }
        println!(
            "of 400 programs: {staged} with a staged row kernel ({chained} staging a chain), {siblings} with merged \
             sibling loops ({shared} merged around a shared costly value), {reductions} with merged sibling \
             reductions ({mixed} with different reducers), {producers} with a producer merged into a column \
             reduction, {blocks} with a column reduction in blocks"
        );
        assert!(staged > 0, "no generated program stages a row kernel");
        assert!(chained > 0, "no generated program stages a chain of values");
        assert!(siblings > 0, "no generated program merges sibling loops");
        assert!(shared > 0, "no generated program merges sibling loops around a shared costly value");
        assert!(reductions > 0, "no generated program merges sibling reductions");
        assert!(mixed > 0, "no generated program merges column reductions with different reducers");
        assert!(producers > 0, "no generated program merges a producer into a column reduction");
        assert!(blocks > 0, "no generated program splits a column reduction into blocks");
    }

    /// Some generated programs hold two pairs of sibling loop kernels that read each other's
    /// results (`crossed_siblings`: a dot of `exp(x) + y` and `x * exp(y)`), which merged as
    /// two groups would depend on each other, and some a row reduction with a windowed sum's
    /// loop inside each lane of its reduction loop (`windowed_rows`), so the differential
    /// tests check both against the interpreter (each once failed: a cycle the verifier
    /// refused, and Cranelift's lane copies reading lane 0's window).
    #[test]
    fn crossed_siblings_and_windowed_rows_are_generated() {
        use tessera_hlo::Opcode;
        use tessera_lower::kernel::Stmt;
        fn nested_in_lanes(body: &[Stmt]) -> bool {
            body.iter().any(|s| match s {
                Stmt::Loop(l) if !l.reductions.is_empty() && l.body.iter().any(|t| matches!(t, Stmt::Loop(_))) => true,
                Stmt::Loop(l) => nested_in_lanes(&l.body),
                Stmt::If { then_body, else_body, .. } => nested_in_lanes(then_body) || nested_in_lanes(else_body),
                _ => false,
            })
        }
        let (mut crossed, mut windowed) = (0, 0);
        for seed in 0..400 {
            let program = generate(seed, &Options::default()).unwrap();
            let entry = program.module.entry_comp();
            let reads_exp = |id: tessera_hlo::InstId, op: Opcode| {
                let i = entry.inst(id);
                i.opcode == op && i.operands.iter().any(|&o| entry.inst(o).opcode == Opcode::Exp)
            };
            crossed += usize::from(entry.instructions.iter().any(|i| {
                i.opcode == Opcode::Dot
                    && matches!(i.operands.as_slice(), &[b, d] if reads_exp(b, Opcode::Add) && reads_exp(d, Opcode::Multiply))
            }));
            if program.text.contains("reduce-window") {
                let lowered = tessera_lower::lower_module(&program.module, &Default::default())
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                windowed += usize::from(lowered.kernels.iter().any(|k| nested_in_lanes(&k.body)));
            }
        }
        println!(
            "of 400 programs: {crossed} with crossed siblings, {windowed} with a window's loop in a lane reduction"
        );
        assert!(crossed > 0, "no generated program holds crossed siblings");
        assert!(windowed > 0, "no generated program runs a window's loop in a lane reduction");
    }

    /// Some generated programs lower a loop that index-set splitting cut into consecutive
    /// loops (a pad's or a concatenate's tests of the loop variable: `emit::split`), so the
    /// differential tests check split loops against the interpreter.
    #[test]
    fn split_loops_are_generated() {
        use tessera_lower::kernel::Stmt;
        fn split_pieces(body: &[Stmt]) -> bool {
            // Pieces follow one another, with what hoisting moved out of each in between.
            let loops: Vec<_> =
                body.iter().filter_map(|s| if let Stmt::Loop(l) = s { Some(l) } else { None }).collect();
            let follows = loops
                .windows(2)
                .any(|w| w[0].vector_width > 1 && w[1].vector_width > 1 && w[0].end == w[1].start && w[1].start > 0);
            follows
                || body.iter().any(|s| match s {
                    Stmt::Loop(l) => split_pieces(&l.body),
                    Stmt::If { then_body, else_body, .. } => split_pieces(then_body) || split_pieces(else_body),
                    _ => false,
                })
        }
        let mut split = 0;
        for seed in 0..400 {
            let program = generate(seed, &Options::default()).unwrap();
            let lowered = tessera_lower::lower_module(&program.module, &Default::default())
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            split += usize::from(lowered.kernels.iter().any(|k| split_pieces(&k.body)));
        }
        println!("of 400 programs: {split} with a split loop");
        assert!(split > 0, "no generated program splits a loop");
    }

    /// Some generated programs update a dying operand in place, with a `dynamic-update-slice`
    /// (which writes its window) and with a `scatter` (which reads what it combines with), and
    /// some update a while loop's state in place (a kernel writing the new value over the old,
    /// element by element), so the differential tests check these kinds of in-place kernel
    /// against the interpreter.
    #[test]
    fn updates_in_place_are_generated() {
        use tessera_lower::kernel::{BufId, Op, Stmt};
        fn loads_from(body: &[Stmt], buf: BufId) -> bool {
            body.iter().any(|s| match s {
                Stmt::Let(_, Op::Load { buf: b, .. }) => *b == buf,
                Stmt::Loop(l) => loads_from(&l.body, buf),
                Stmt::If { then_body, else_body, .. } => loads_from(then_body, buf) || loads_from(else_body, buf),
                _ => false,
            })
        }
        let (mut windows, mut scatters, mut states) = (0, 0, 0);
        for seed in 0..400 {
            let program = generate(seed, &Options::default()).unwrap();
            let lowered = tessera_lower::lower_module(&program.module, &Default::default())
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            for launch in lowered.launches() {
                let kernel = &lowered.kernels[launch.kernel];
                let Some(out) = launch.args.len().checked_sub(1).filter(|&o| kernel.buffers[o].writable) else {
                    continue;
                };
                let same: Vec<BufId> =
                    (0..out).filter(|&i| launch.args[i] == launch.args[out]).map(|i| BufId(i as u32)).collect();
                if same.is_empty() {
                    continue;
                }
                // Only a loop's state is passed to a kernel as both an input and its output
                // where the kernel reads it element by element (donated memory is two
                // buffers of the program).
                let out = BufId(out as u32);
                if loads_from(&kernel.body, out) {
                    scatters += 1;
                } else if tessera_lower::kernel::updates_in_place(kernel, &same, out) {
                    states += 1;
                } else {
                    windows += 1;
                }
            }
        }
        println!(
            "in 400 programs: {windows} updates in place writing a window, {scatters} combining (scatter), \
             {states} loop-state updates in place"
        );
        assert!(
            windows > 0 && scatters > 0 && states > 0,
            "{windows} window updates, {scatters} scatters, {states} loop-state updates in place"
        );
    }

    /// Some generated programs declare `input_output_alias`, and the lowering honors some of
    /// their pairs and not others, so the runner's donated mode checks both kinds.
    #[test]
    fn donations_are_generated_and_some_are_honored() {
        let (mut declared, mut honored, mut left_out) = (0, 0, 0);
        for seed in 0..400 {
            let program = generate(seed, &Options::default()).unwrap();
            let Some(tessera_hlo::ir::AttrValue::IoAliases(pairs)) =
                tessera_hlo::ir::AttrList::attr(&program.module, "input_output_alias")
            else {
                continue;
            };
            declared += 1;
            let lowered = tessera_lower::lower_module(&program.module, &Default::default())
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            honored += lowered.aliases.len();
            left_out += pairs.len() - lowered.aliases.len();
        }
        println!(
            "of 400 programs: {declared} declare input_output_alias; {honored} pairs honored, {left_out} left out"
        );
        assert!(honored > 0 && left_out > 0, "{declared} programs: {honored} pairs honored, {left_out} left out");
    }

    #[test]
    fn headers_round_trip() {
        let h = Header {
            seed: 7,
            args: vec![
                ArgDist::Uniform { lo: -1.0, hi: 0.5 },
                ArgDist::Int { lo: i64::MIN, hi: i64::MAX },
                ArgDist::Pred,
            ],
            checks: vec![Check::Exact, Check::Close],
        };
        assert_eq!(Header::parse(&h.to_text()).unwrap(), h);
        assert!(Header::parse("// fuzz seed: 1\n// fuzz args: x\n// fuzz checks:\n").is_err());
    }
}
