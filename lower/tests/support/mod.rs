//! Runs a module's entry computation through `emit_kernel` and the kernel interpreter on
//! random arguments and compares the result with the reference interpreter.

#![allow(dead_code)]

use tessera_hlo::{ElementType, LayoutMap, Literal, Module, Shape};
use tessera_lower::kernel::{run_kernel, Kernel};
pub use tessera_testkit::Rng;

/// Random raw bits for one element: floats mostly in [-4, 4] with some specials, integers
/// mostly small with edge values mixed in.
pub fn random_bits(et: ElementType, rng: &mut Rng) -> u128 {
    use ElementType as E;
    let special = rng.below(16) == 0;
    let f: f64 = if special {
        [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1.0, -1.0, 0.5][rng.below(8) as usize]
    } else {
        rng.uniform(-4.0, 4.0) * if rng.below(4) == 0 { 16.0 } else { 1.0 }
    };
    match et {
        E::Pred => u128::from(rng.below(2) == 1),
        E::F16 => u128::from(half::f16::from_f64(f).to_bits()),
        E::BF16 => u128::from(half::bf16::from_f64(f).to_bits()),
        E::F32 => u128::from((f as f32).to_bits()),
        E::F64 => u128::from(f.to_bits()),
        // Real part in the low half, as the literal stores complex elements.
        E::C64 => random_bits(E::F32, rng) | (random_bits(E::F32, rng) << 32),
        E::C128 => random_bits(E::F64, rng) | (random_bits(E::F64, rng) << 64),
        _ => {
            let w = et.bit_width();
            let mask: u64 = if w >= 64 { u64::MAX } else { (1u64 << w) - 1 };
            let v: i64 = match rng.below(8) {
                0 => [0i64, -1, 1, i64::MIN, i64::MAX, 2][rng.below(6) as usize],
                1 => rng.next_u64() as i64,
                _ => rng.below(41) as i64 - 20,
            };
            let v = if et.is_signed_integral() && w < 64 && v == i64::MIN {
                -(1i64 << (w - 1))
            } else if et.is_signed_integral() && w < 64 && v == i64::MAX {
                (1i64 << (w - 1)) - 1
            } else {
                v
            };
            u128::from(v as u64 & mask)
        }
    }
}

pub fn random_literal(shape: &Shape, rng: &mut Rng) -> Literal {
    let a = shape.as_array().expect("array parameter");
    let n = a.dims.iter().product::<i64>() as usize;
    let bits: Vec<u128> = (0..n).map(|_| random_bits(a.element_type, rng)).collect();
    Literal::from_bits_vec(shape.clone(), bits).expect("literal")
}

/// The physical bytes of `lit` in `shape`'s layout, padding filled with 0xFF (NaN for floats)
/// so a kernel that reads padding as data gets caught.
pub fn physical_with_garbage(lit: &Literal, shape: &Shape) -> Vec<u8> {
    let a = shape.as_array().expect("array");
    let laid = lit.relayout(&a.layout_or_default()).expect("relayout");
    let mut bytes = laid.physical_bytes().expect("bytes").to_vec();
    let map = LayoutMap::new(a).expect("layout");
    let bits = map.element_size_bits() as i64;
    if bits % 8 == 0 {
        let size = (bits / 8) as usize;
        for slot in 0..map.physical_element_count() {
            if map.logical_index(slot).is_none() {
                let s = slot as usize * size;
                bytes[s..s + size].iter_mut().for_each(|b| *b = 0xFF);
            }
        }
    }
    bytes
}

/// Absolute slack for results of sums with cancellation (reductions, dots).
fn abs_tolerance(et: ElementType) -> f64 {
    match et {
        ElementType::F16 => 4e-3,
        ElementType::BF16 => 3e-2,
        ElementType::F32 => 5e-5,
        _ => 1e-12,
    }
}

fn tolerance(et: ElementType) -> f64 {
    match et {
        ElementType::F16 => 2e-3,
        ElementType::BF16 => 1.6e-2,
        ElementType::F32 => 2e-5,
        _ => 1e-12,
    }
}

fn float_of(et: ElementType, bits: u128) -> f64 {
    match et {
        ElementType::F16 => half::f16::from_bits(bits as u16).to_f64(),
        ElementType::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
        ElementType::F32 => f64::from(f32::from_bits(bits as u32)),
        _ => f64::from_bits(bits as u64),
    }
}

/// Compares two literals of one array shape element by element (floats within tolerance,
/// NaN equal to NaN); the first mismatch is the error.
pub fn compare(got: &Literal, want: &Literal, what: &str) -> Result<(), String> {
    compare_slack(got, want, what, 1.0)
}

/// [`compare`] with the absolute tolerance scaled by `slack` (sums of many terms).
pub fn compare_slack(got: &Literal, want: &Literal, what: &str, slack: f64) -> Result<(), String> {
    let et = want.element_type();
    let n = want.element_count();
    let mut bad = 0;
    let mut first = String::new();
    // Complex elements compare part by part, as two floats of the part type.
    let (et, n, part_of) = match et.complex_component() {
        Some(part) => (part, 2 * n, Some(part.bit_width())),
        None => (et, n, None),
    };
    for i in 0..n {
        let (g, w) = match part_of {
            Some(w) => {
                let pick = |lit: &Literal, d: u128| {
                    lit.get_bits(i / 2).map_or(d, |b| (b >> (w * (i as u32 % 2))) & ((1u128 << w) - 1))
                };
                (pick(got, u128::MAX), pick(want, 0))
            }
            None => (got.get_bits(i).unwrap_or(u128::MAX), want.get_bits(i).unwrap_or(0)),
        };
        let ok = if et.is_float() {
            let (a, b) = (float_of(et, g), float_of(et, w));
            (a.is_nan() && b.is_nan())
                || a == b
                || (a - b).abs() <= tolerance(et) * a.abs().max(b.abs()) + slack * abs_tolerance(et)
        } else {
            g == w
        };
        if !ok {
            if bad == 0 {
                first = format!("{what}: element {i}: got bits {g:#x}, want {w:#x}");
                if et.is_float() {
                    first += &format!(" ({} vs {})", float_of(et, g), float_of(et, w));
                }
            }
            bad += 1;
        }
    }
    if bad > 0 {
        return Err(format!("{first} ({bad} of {n} elements differ)"));
    }
    Ok(())
}

/// Statements the kernel executes (each statement times the trip counts around it).
pub fn work(kernel: &Kernel) -> u128 {
    use tessera_lower::kernel::Stmt;
    fn count(stmts: &[Stmt], trips: u128) -> u128 {
        stmts
            .iter()
            .map(|s| match s {
                Stmt::Loop(l) => count(&l.body, trips.saturating_mul((l.end - l.start).max(0) as u128)),
                Stmt::If { then_body, else_body, .. } => trips + count(then_body, trips).max(count(else_body, trips)),
                _ => trips,
            })
            .fold(0u128, |a, b| a.saturating_add(b))
    }
    count(&kernel.body, kernel.grid.extent.max(0) as u128)
}

/// More statements than the kernel interpreter runs in a few seconds.
pub const WORK_LIMIT: u128 = 200_000_000;

/// Emits the entry computation, runs it on `args` and returns the result literals (one per
/// output buffer) with the kernel.
pub fn run_emitted(module: &Module, args: &[Literal]) -> Result<(Kernel, Vec<Literal>), String> {
    let comp = module.entry_comp();
    let kernel = tessera_lower::emit_kernel(module, comp, "k").map_err(|e| format!("emit: {e}"))?;
    if work(&kernel) > WORK_LIMIT {
        return Err(format!("skip: the kernel executes {} statements", work(&kernel)));
    }
    let params = comp.parameter_shapes();
    let root = &comp.root_inst().shape;
    let out_shapes: Vec<Shape> = match root {
        Shape::Tuple(s) => s.clone(),
        s => vec![s.clone()],
    };
    let mut bufs: Vec<Vec<u8>> = params.iter().zip(args).map(|(s, a)| physical_with_garbage(a, s)).collect();
    for s in &out_shapes {
        let map = LayoutMap::new(s.as_array().ok_or("tuple leaf")?).map_err(|e| e.to_string())?;
        bufs.push(vec![0xA5; map.physical_byte_size() as usize]);
    }
    // Private scratch buffers after the outputs start with garbage.
    for b in kernel.buffers.iter().skip(bufs.len()) {
        bufs.push(vec![0x5A; (b.len as usize * b.mem.bits() as usize).div_ceil(8)]);
    }
    let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    run_kernel(&kernel, &mut views).map_err(|e| format!("run: {e}\n{kernel}"))?;
    let n = params.len();
    let outs = out_shapes
        .iter()
        .enumerate()
        .map(|(i, s)| Literal::from_physical_bytes(s.clone(), bufs[n + i].clone()).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((kernel, outs))
}

/// Random arguments for `module`'s entry parameters.
pub fn random_args(module: &Module, seed: u64) -> Vec<Literal> {
    let mut rng = Rng::new(seed);
    module.entry_comp().parameter_shapes().iter().map(|s| random_literal(s, &mut rng)).collect()
}

/// Emit + interpret vs evaluate on `args`.
pub fn check_module_with(module: &Module, args: &[Literal]) -> Result<Kernel, String> {
    check_module_slack(module, args, 1.0)
}

pub fn check_module_slack(module: &Module, args: &[Literal], slack: f64) -> Result<Kernel, String> {
    let want = tessera_hlo::eval::evaluate(module, args).map_err(|e| format!("eval: {e}"))?;
    let (kernel, got) = run_emitted(module, args)?;
    let wants: Vec<Literal> = match want.tuple_elements() {
        Some(e) => e.to_vec(),
        None => vec![want],
    };
    if wants.len() != got.len() {
        return Err(format!("{} outputs, want {}", got.len(), wants.len()));
    }
    for (i, (g, w)) in got.iter().zip(&wants).enumerate() {
        compare_slack(g, w, &format!("output {i}"), slack).map_err(|e| format!("{e}\n{kernel}"))?;
    }
    Ok(kernel)
}

/// Parses `text` and checks it on random arguments from two seeds.
pub fn check(text: &str) -> Kernel {
    check_slack(text, 1.0)
}

/// [`check`] for results that sum many terms: absolute float tolerance times `slack`.
pub fn check_slack(text: &str, slack: f64) -> Kernel {
    let module = tessera_hlo::text::parse_module(text).unwrap_or_else(|e| panic!("parse: {e}\n{text}"));
    let mut kernel = None;
    for seed in [1, 2] {
        let args = random_args(&module, seed);
        match check_module_slack(&module, &args, slack) {
            Ok(k) => kernel = Some(k),
            Err(e) => panic!("{e}\nmodule:\n{text}"),
        }
    }
    kernel.expect("checked")
}
