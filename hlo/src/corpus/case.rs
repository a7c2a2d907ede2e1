//! One corpus case as it sits on disk (`../shared/corpus/<case>/`, format in the corpus
//! README): the module, its arguments (stored, or regenerated from `arg_gen`), and what each
//! output must be (stored values, or `expected_stats` for outputs too large to store), with the
//! tolerances to judge them by.

use std::fs;
use std::path::{Path, PathBuf};

use crate::npy::read_npy;
use crate::text::parse_module;
use crate::{Literal, Module, Shape};
use serde_json::Value as Json;

use super::bench_args::{generate, Dist};

/// What one output must be.
pub enum Expected {
    /// The stored output, logical values.
    Values(Literal),
    /// Summary statistics and samples of an output too large to store.
    Stats(Stats),
    /// Neither stored nor summarized: not checked.
    Unchecked,
}

pub struct Stats {
    pub n: usize,
    pub sum: f64,
    pub sum_abs: f64,
    pub min: f64,
    pub max: f64,
    pub samples: Vec<(usize, f64)>,
}

pub struct Output {
    pub expected: Expected,
    pub rtol: f64,
    pub atol: f64,
}

pub struct Case {
    pub name: String,
    pub dir: PathBuf,
    pub category: String,
    pub module: Module,
    /// Whether the arguments are large (bench cases): worth timing, not worth printing.
    pub is_bench: bool,
    meta: Json,
}

impl Case {
    /// Reads `dir/case.json` and `dir/module.hlo`.
    pub fn load(dir: &Path) -> Result<Case, String> {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let meta_path = dir.join("case.json");
        let meta: Json =
            serde_json::from_slice(&fs::read(&meta_path).map_err(|e| format!("{}: {e}", meta_path.display()))?)
                .map_err(|e| format!("{}: {e}", meta_path.display()))?;
        let module_path = dir.join("module.hlo");
        let text = fs::read_to_string(&module_path).map_err(|e| format!("{}: {e}", module_path.display()))?;
        let module = parse_module(&text).map_err(|e| format!("{}: {e}", module_path.display()))?;
        let category = meta.get("category").and_then(Json::as_str).unwrap_or("").to_string();
        Ok(Case { is_bench: category == "bench", name, dir: dir.to_path_buf(), category, module, meta })
    }

    /// Every case directory under `corpus`, sorted by name.
    pub fn list(corpus: &Path) -> Result<Vec<PathBuf>, String> {
        let entries = fs::read_dir(corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
        let mut dirs: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.join("case.json").exists()).collect();
        dirs.sort();
        Ok(dirs)
    }

    /// The case names `TESSERA_CASES` selects (comma-separated, exact names), or `None` when it
    /// is unset: a conformance test then runs every case and checks its pass counts.
    pub fn selection_from_env() -> Option<Vec<String>> {
        let v = std::env::var("TESSERA_CASES").ok()?;
        Some(v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
    }

    /// [`Case::list`] narrowed to the `TESSERA_CASES` selection; the flag says whether a
    /// selection applied (pass-count checks then mean nothing).
    pub fn list_selected(corpus: &Path) -> Result<(Vec<PathBuf>, bool), String> {
        let mut dirs = Case::list(corpus)?;
        let Some(names) = Case::selection_from_env() else { return Ok((dirs, false)) };
        dirs.retain(|d| d.file_name().is_some_and(|n| names.iter().any(|s| n.to_str() == Some(s.as_str()))));
        Ok((dirs, true))
    }

    /// The opcodes of every computation of the module (what `case.json`'s `ops` lists, read
    /// from the module itself so hand-edited cases cannot disagree).
    pub fn opcodes(&self) -> Vec<String> {
        let mut ops: Vec<String> = self
            .module
            .computations
            .iter()
            .flat_map(|c| c.instructions.iter().map(|i| i.opcode.name().to_string()))
            .collect();
        ops.sort();
        ops.dedup();
        ops
    }

    /// One literal per entry parameter, logical values in row-major order.
    pub fn arguments(&self) -> Result<Vec<Literal>, String> {
        let params = self.module.entry_comp().parameter_shapes();
        let specs = self.meta.get("arg_gen").and_then(Json::as_array);
        let mut args = Vec::with_capacity(params.len());
        for (i, shape) in params.iter().enumerate() {
            let file = format!("args/{i}.npy");
            let path = self.dir.join(&file);
            if path.exists() {
                args.push(read_npy(&path, &shape.without_layout()).map_err(|e| format!("{}: {e}", path.display()))?);
                continue;
            }
            let spec = specs
                .and_then(|s| s.iter().find(|a| a.get("file").and_then(Json::as_str) == Some(&file)))
                .ok_or_else(|| format!("{file} is neither stored nor generated"))?;
            args.push(generated(spec, shape)?);
        }
        Ok(args)
    }

    /// Every argument that has an `arg_gen` entry, regenerated even when it is also stored (so
    /// the generator can be checked against the stored file), with its parameter number.
    pub fn generated_arguments(&self) -> Result<Vec<(usize, Literal)>, String> {
        let params = self.module.entry_comp().parameter_shapes();
        let mut out = Vec::new();
        for spec in self.meta.get("arg_gen").and_then(Json::as_array).into_iter().flatten() {
            let file = spec.get("file").and_then(Json::as_str).ok_or("arg_gen entry without file")?;
            let i: usize = file
                .strip_prefix("args/")
                .and_then(|f| f.strip_suffix(".npy"))
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("arg_gen file {file} is not args/N.npy"))?;
            let shape = params.get(i).ok_or_else(|| format!("arg_gen file {file} names no parameter"))?;
            out.push((i, generated(spec, shape)?));
        }
        Ok(out)
    }

    /// What each output (the result tuple flattened depth-first) must be.
    pub fn outputs(&self) -> Result<Vec<Output>, String> {
        let mut shapes = Vec::new();
        for (_, s) in self.module.entry_comp().root_inst().shape.leaves() {
            shapes.push(s.without_layout());
        }
        let listed = self.meta.get("outputs").and_then(Json::as_array);
        let num = |v: Option<&Json>, k: &str| v.and_then(|v| v.get(k)).and_then(Json::as_f64);
        let stats = self.meta.get("expected_stats").and_then(Json::as_array);
        let mut out = Vec::with_capacity(shapes.len());
        for (i, shape) in shapes.iter().enumerate() {
            let o = listed.and_then(|l| l.get(i));
            let rtol = num(o, "rtol").or_else(|| self.meta.get("rtol").and_then(Json::as_f64)).unwrap_or(0.0);
            let atol = num(o, "atol").or_else(|| self.meta.get("atol").and_then(Json::as_f64)).unwrap_or(0.0);
            let path = self.dir.join(format!("expected/{i}.npy"));
            let expected = if path.exists() {
                Expected::Values(read_npy(&path, shape).map_err(|e| format!("{}: {e}", path.display()))?)
            } else if let Some(s) =
                stats.and_then(|s| s.iter().find(|s| s.get("index").and_then(Json::as_u64) == Some(i as u64)))
            {
                Expected::Stats(parse_stats(s)?)
            } else {
                Expected::Unchecked
            };
            out.push(Output { expected, rtol, atol });
        }
        Ok(out)
    }
}

fn parse_stats(s: &Json) -> Result<Stats, String> {
    let f = |k: &str| s.get(k).and_then(Json::as_f64).ok_or_else(|| format!("expected_stats without {k}"));
    let n = s
        .get("shape")
        .and_then(Json::as_array)
        .map(|d| d.iter().map(|x| x.as_u64().unwrap_or(0) as usize).product())
        .ok_or("expected_stats without shape")?;
    let mut samples = Vec::new();
    for p in s.get("samples").and_then(Json::as_array).into_iter().flatten() {
        match p.as_array().map(Vec::as_slice) {
            Some([j, v]) => {
                samples.push((j.as_u64().ok_or("malformed sample index")? as usize, v.as_f64().unwrap_or(f64::NAN)))
            }
            _ => return Err("malformed sample".into()),
        }
    }
    Ok(Stats { n, sum: f("sum")?, sum_abs: f("sum_abs")?, min: f("min")?, max: f("max")?, samples })
}

fn generated(spec: &Json, shape: &Shape) -> Result<Literal, String> {
    let num = |k: &str| spec.get(k).and_then(Json::as_f64).ok_or_else(|| format!("arg_gen entry without {k}"));
    let dtype = spec.get("dtype").and_then(Json::as_str).ok_or("arg_gen entry without dtype")?;
    let seed = spec.get("seed").and_then(Json::as_u64).ok_or("arg_gen entry without seed")?;
    let dist = match spec.get("dist").and_then(Json::as_str).unwrap_or("uniform") {
        "uniform" => Dist::Uniform { lo: num("lo")?, hi: num("hi")? },
        "randint" => Dist::RandInt { lo: num("lo")? as i64, hi: num("hi")? as i64 },
        other => return Err(format!("arg_gen distribution {other} is not known")),
    };
    generate(shape, dtype, seed, dist)
}
