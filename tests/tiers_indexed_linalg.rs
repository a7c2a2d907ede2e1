//! gather, scatter, dynamic-slice, dynamic-update-slice, cholesky and triangular-solve on
//! both JIT tiers against the reference interpreter, on what the corpus does not cover:
//! tiled and column-major layouts, every index element type (s8..s64, u8..u64), start indices
//! far out of bounds, batching dimensions, variadic scatters, overlapping updates whose order
//! matters, batched and transposed linear algebra, f64 and half types.

use tessera::{Backend, Client, CompileOptions};
use tessera_hlo::{ElementType, Literal, Shape};
use tessera_testkit::Rng;

fn float_bits(et: ElementType, f: f64) -> u128 {
    match et {
        ElementType::F16 => u128::from(half::f16::from_f64(f).to_bits()),
        ElementType::BF16 => u128::from(half::bf16::from_f64(f).to_bits()),
        ElementType::F32 => u128::from((f as f32).to_bits()),
        _ => u128::from(f.to_bits()),
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

/// Integers are mostly small (indices in and out of range, negatives included) with the
/// type's extremes mixed in; floats lie in [-4, 4].
fn random_literal(shape: &Shape, rng: &mut Rng) -> Literal {
    let a = shape.as_array().expect("array parameter");
    let et = a.element_type;
    let n = a.dims.iter().product::<i64>() as usize;
    let bits = (0..n)
        .map(|_| {
            if et == ElementType::Pred {
                return u128::from(rng.bool());
            }
            if et.is_float() {
                return float_bits(et, rng.uniform(-4.0, 4.0));
            }
            let w = et.bit_width();
            let mask = if w >= 64 { u64::MAX } else { (1u64 << w) - 1 };
            let v: i64 = match rng.below(12) {
                0 => *rng.pick(&[i64::MIN, i64::MAX, -1]),
                _ => rng.below(20) as i64 - 4,
            };
            let v = match (et.is_signed_integral() && w < 64, v) {
                (true, i64::MIN) => -(1i64 << (w - 1)),
                (true, i64::MAX) => (1i64 << (w - 1)) - 1,
                _ => v,
            };
            u128::from(v as u64 & mask)
        })
        .collect();
    Literal::from_bits_vec(shape.without_layout(), bits).expect("literal")
}

/// Symmetric positive definite matrices M M^T + n I for a cholesky operand.
fn spd_literal(shape: &Shape, rng: &mut Rng) -> Literal {
    let a = shape.as_array().expect("array");
    let (r, n) = (a.dims.len(), a.dims[a.dims.len() - 1] as usize);
    let batch: i64 = a.dims[..r - 2].iter().product();
    let mut bits = Vec::new();
    for _ in 0..batch {
        let m: Vec<f64> = (0..n * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
        for i in 0..n {
            for j in 0..n {
                let mut s: f64 = (0..n).map(|k| m[i * n + k] * m[j * n + k]).sum();
                if i == j {
                    s += n as f64;
                }
                bits.push(float_bits(a.element_type, s));
            }
        }
    }
    Literal::from_bits_vec(shape.without_layout(), bits).expect("literal")
}

/// Triangular matrices with a dominant diagonal (both triangles filled: the solver must read
/// only its own).
fn well_conditioned(shape: &Shape, rng: &mut Rng) -> Literal {
    let a = shape.as_array().expect("array");
    let n = a.dims[a.dims.len() - 1];
    let count: i64 = a.dims.iter().product();
    let bits = (0..count)
        .map(|k| {
            let (i, j) = ((k / n) % n, k % n);
            let x = if i == j { rng.uniform(2.0, 4.0) } else { rng.uniform(-0.5, 0.5) };
            float_bits(a.element_type, x)
        })
        .collect();
    Literal::from_bits_vec(shape.without_layout(), bits).expect("literal")
}

/// How a case's arguments are made.
#[derive(Clone, Copy)]
enum Args {
    Random,
    /// Parameter 0 is symmetric positive definite.
    Spd,
    /// Parameter 0 is a diagonally dominant triangular-solve matrix.
    Triangular,
}

fn args_for(module: &tessera_hlo::Module, kind: Args, seed: u64) -> Vec<Literal> {
    let mut rng = Rng::new(seed);
    module
        .entry_comp()
        .parameter_shapes()
        .iter()
        .enumerate()
        .map(|(i, s)| match (kind, i) {
            (Args::Spd, 0) => spd_literal(s, &mut rng),
            (Args::Triangular, 0) => well_conditioned(s, &mut rng),
            _ => random_literal(s, &mut rng),
        })
        .collect()
}

/// Compares logical elements: integers exactly, floats within `rtol` (NaN equals NaN).
fn compare(got: &Literal, want: &Literal, rtol: f64) -> Result<(), String> {
    let et = want.element_type();
    if got.element_type() != et || got.element_count() != want.element_count() {
        return Err(format!("got {}, want {}", got.shape(), want.shape()));
    }
    for i in 0..want.element_count() {
        let (g, w) = (got.get_bits(i).unwrap_or(u128::MAX), want.get_bits(i).unwrap_or(0));
        let ok = if et.is_float() {
            let (a, b) = (float_of(et, g), float_of(et, w));
            (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rtol * (1.0 + a.abs().max(b.abs()))
        } else {
            g == w
        };
        if !ok {
            let extra =
                if et.is_float() { format!(" ({} vs {})", float_of(et, g), float_of(et, w)) } else { String::new() };
            return Err(format!("element {i}: got bits {g:#x}, want {w:#x}{extra}"));
        }
    }
    Ok(())
}

/// Runs `body` (an entry computation's instructions) on the interpreter and both JIT tiers.
fn check_tiers(body: &str, kind: Args, rtol: f64) {
    check_module_text(&format!("HloModule m\n\nENTRY e {{\n  {body}\n}}\n"), kind, rtol);
}

fn check_exact(body: &str) {
    check_tiers(body, Args::Random, 0.0);
}

#[test]
fn gather_layouts_and_index_types() {
    let cases = [
        // Rows of a tiled operand by s64 indices into a column-major result.
        "p = f32[10,300]{1,0:T(8,128)} parameter(0)\n  i = s64[6,1]{1,0} parameter(1)\n  ROOT g = f32[6,300]{0,1} gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,300}",
        // u32 index vectors along dimension 0, mapped to the operand's dimensions in reverse.
        "p = s32[9,7]{0,1} parameter(0)\n  i = u32[2,5]{0,1} parameter(1)\n  ROOT g = s32[5,3,2]{2,1,0} gather(p, i), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={1,0}, index_vector_dim=0, slice_sizes={3,2}",
        // s8 indices, implicit index vector dimension, bf16 tiled operand.
        "p = bf16[16,300]{1,0:T(8,128)(2,1)} parameter(0)\n  i = s8[4,3]{1,0} parameter(1)\n  ROOT g = bf16[4,3,5]{2,1,0} gather(p, i), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,5}",
        // u64 indices (huge ones clamp to the last start), f64 operand, window in the middle.
        "p = f64[8,6,5]{2,1,0} parameter(0)\n  i = u64[4,2]{1,0} parameter(1)\n  ROOT g = f64[2,4,3]{0,1,2} gather(p, i), offset_dims={0,2}, collapsed_slice_dims={1}, start_index_map={1,2}, index_vector_dim=1, slice_sizes={2,1,3}",
        // Batching dimensions (take_along_axis), u8 indices, s16 operand.
        "p = s16[5,7,4]{1,2,0} parameter(0)\n  i = u8[5,3,1]{2,1,0} parameter(1)\n  ROOT g = s16[5,3,4]{2,1,0} gather(p, i), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,4}",
        // s16 indices, pred operand, offset dimensions before the batch dimension.
        "p = pred[12,10]{1,0} parameter(0)\n  i = s16[7]{0} parameter(1)\n  ROOT g = pred[12,7]{1,0} gather(p, i), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=1, slice_sizes={12,1}",
        // f16 operand, scalar-per-position gather of whole windows (nothing collapsed).
        "p = f16[6,6]{1,0} parameter(0)\n  i = s32[3,2]{1,0} parameter(1)\n  ROOT g = f16[3,4,4]{2,1,0} gather(p, i), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={4,4}",
    ];
    for body in cases {
        check_exact(body);
    }
}

const ADD_F32: &str = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}\n\n";

/// Runs a module text that already has its computations: `comps` before an entry `body`.
fn check_with(comps: &str, body: &str) {
    let text = format!("HloModule m\n\n{comps}ENTRY e {{\n  {body}\n}}\n");
    check_module_text(&text, Args::Random, 0.0);
}

/// Runs a module on the interpreter and both JIT tiers with arguments from three seeds; every
/// result must agree with the interpreter's.
fn check_module_text(text: &str, kind: Args, rtol: f64) {
    let module = tessera_hlo::text::parse_module(text).unwrap_or_else(|e| panic!("parse: {e}\n{text}"));
    let opts = CompileOptions::default();
    let reference = Client::new(Backend::Interp).unwrap().compile(&module, &opts).unwrap();
    for backend in [Backend::Cranelift, Backend::Llvm] {
        let exe = Client::new(backend)
            .unwrap()
            .compile(&module, &opts)
            .unwrap_or_else(|e| panic!("{backend}: compile: {e}\n{text}"));
        for seed in 1..=3 {
            let args = args_for(&module, kind, seed);
            let want = reference.run(&args).unwrap_or_else(|e| panic!("interp: {e}\n{text}"));
            let got = exe.run(&args).unwrap_or_else(|e| panic!("{backend}: run: {e}\n{text}"));
            assert_eq!(got.len(), want.len(), "{backend}\n{text}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                if let Err(e) = compare(g, w, rtol) {
                    panic!("{backend}, seed {seed}, output {i}: {e}\n{text}");
                }
            }
        }
    }
}

/// Scatters whose operand dies at them run in the operand's buffer (`update_in_place`): on
/// a kernel's result, and on one of a multi-output kernel's results. One whose operand is
/// read again after it must not: the later reader would see the updated rows.
#[test]
fn scatters_in_place_agree_with_the_interpreter() {
    let head = "p = f32[64,32]{1,0} parameter(0)\n  i = s32[6,1]{1,0} parameter(1)\n  ";
    let scatter = "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add";
    check_with(
        ADD_F32,
        &format!(
            "{head}u = f32[6,32]{{1,0}} parameter(2)\n  x = f32[64,32]{{1,0}} multiply(p, p)\n  \
             ROOT s = f32[64,32]{{1,0}} scatter(x, i, u), {scatter}"
        ),
    );
    check_with(
        ADD_F32,
        &format!(
            "{head}u = f32[6,32]{{1,0}} parameter(2)\n  x = f32[64,32]{{1,0}} multiply(p, p)\n  \
             y = f32[64,32]{{1,0}} negate(p)\n  s = f32[64,32]{{1,0}} scatter(x, i, u), {scatter}\n  \
             ROOT t = (f32[64,32]{{1,0}}, f32[64,32]{{1,0}}) tuple(s, y)"
        ),
    );
    check_with(
        ADD_F32,
        &format!(
            "{head}u = f32[6,32]{{1,0}} parameter(2)\n  x = f32[64,32]{{1,0}} multiply(p, p)\n  \
             s = f32[64,32]{{1,0}} scatter(x, i, u), {scatter}\n  y = f32[64,32]{{1,0}} negate(x)\n  \
             ROOT t = (f32[64,32]{{1,0}}, f32[64,32]{{1,0}}) tuple(s, y)"
        ),
    );
}

/// An embedding gradient's shape: many updates into a few rows (rows repeat, and their
/// updates add in order), each window a contiguous row that runs in lanes with a peeled tail
/// (40 f32 or bf16, 12 f64), in the operand's buffer.
#[test]
fn scatter_rows_in_lanes_add_repeated_rows_in_order() {
    for (t, w) in [("f32", 40), ("f64", 12), ("bf16", 40)] {
        let add =
            format!("add {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT r = {t}[] add(a, b)\n}}\n\n");
        let body = format!(
            "p = {t}[20,{w}]{{1,0}} parameter(0)\n  i = s32[48,1]{{1,0}} parameter(1)\n  u = {t}[48,{w}]{{1,0}} parameter(2)\n  \
             x = {t}[20,{w}]{{1,0}} negate(p)\n  ROOT s = {t}[20,{w}]{{1,0}} scatter(x, i, u), update_window_dims={{1}}, \
             inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add"
        );
        check_with(&add, &body);
    }
}

#[test]
fn scatter_layouts_index_types_and_order() {
    // Adds into a tiled operand from column-major updates, s64 indices (out-of-bounds windows
    // skipped), two positions often hitting one row.
    check_with(
        ADD_F32,
        "p = f32[10,300]{1,0:T(8,128)} parameter(0)\n  i = s64[6,1]{1,0} parameter(1)\n  u = f32[6,300]{0,1} parameter(2)\n  ROOT s = f32[10,300]{1,0:T(8,128)} scatter(p, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add",
    );
    // Overwrites: the last update of an element wins, so the order is observable. u8 indices
    // along dimension 0 of the indices, mapped to the operand dimensions in reverse.
    check_with(
        "set {\n  a = s32[] parameter(0)\n  ROOT b = s32[] parameter(1)\n}\n\n",
        "p = s32[9,7]{0,1} parameter(0)\n  i = u8[2,12]{1,0} parameter(1)\n  u = s32[12,2,3]{2,1,0} parameter(2)\n  ROOT s = s32[9,7]{1,0} scatter(p, i, u), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={1,0}, index_vector_dim=0, to_apply=set",
    );
    // Variadic: a running sum and a running product in one pass, u32 and s16 indices.
    check_with(
        "pair {\n  a = f64[] parameter(0)\n  b = s32[] parameter(1)\n  c = f64[] parameter(2)\n  d = s32[] parameter(3)\n  s = f64[] add(a, c)\n  m = s32[] multiply(b, d)\n  ROOT t = (f64[], s32[]) tuple(s, m)\n}\n\n",
        "p = f64[8,5]{0,1} parameter(0)\n  q = s32[8,5]{1,0} parameter(1)\n  i = u32[10]{0} parameter(2)\n  u = f64[10,5]{1,0} parameter(3)\n  v = s32[10,5]{0,1} parameter(4)\n  ROOT s = (f64[8,5]{1,0}, s32[8,5]{0,1}) scatter(p, q, i, u, v), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=pair",
    );
    // Batching dimensions (put_along_axis), bf16 with a max combiner, s16 indices.
    check_with(
        "mx {\n  a = bf16[] parameter(0)\n  b = bf16[] parameter(1)\n  ROOT r = bf16[] maximum(a, b)\n}\n\n",
        "p = bf16[5,7,4]{1,2,0} parameter(0)\n  i = s16[5,3,1]{2,1,0} parameter(1)\n  u = bf16[5,3,4]{2,1,0} parameter(2)\n  ROOT s = bf16[5,7,4]{2,1,0} scatter(p, i, u), update_window_dims={2}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=mx",
    );
    // Scalar updates into a pred array with `or`, u64 indices (huge ones skipped), s8 pairs.
    check_with(
        "lor {\n  a = pred[] parameter(0)\n  b = pred[] parameter(1)\n  ROOT r = pred[] or(a, b)\n}\n\n",
        "p = pred[6,6]{1,0} parameter(0)\n  i = u64[9,2]{1,0} parameter(1)\n  u = pred[9]{0} parameter(2)\n  ROOT s = pred[6,6]{0,1} scatter(p, i, u), update_window_dims={}, inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=lor",
    );
    check_with(
        "sub {\n  a = s8[] parameter(0)\n  b = s8[] parameter(1)\n  ROOT r = s8[] subtract(a, b)\n}\n\n",
        "p = s8[4,5,6]{2,1,0} parameter(0)\n  i = s8[3,2]{1,0} parameter(1)\n  u = s8[3,2,6]{2,1,0} parameter(2)\n  ROOT s = s8[4,5,6]{2,1,0} scatter(p, i, u), update_window_dims={1,2}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=sub",
    );
}

#[test]
fn dynamic_slices_on_tiled_layouts_and_index_types() {
    let cases = [
        "p = f32[10,300]{1,0:T(8,128)} parameter(0)\n  i = s32[] parameter(1)\n  j = s32[] parameter(2)\n  ROOT r = f32[4,130]{0,1} dynamic-slice(p, i, j), dynamic_slice_sizes={4,130}",
        "p = f32[7,9,4]{0,1,2} parameter(0)\n  i = s64[] parameter(1)\n  j = s64[] parameter(2)\n  k = s64[] parameter(3)\n  ROOT r = f32[7,2,3]{1,0,2} dynamic-slice(p, i, j, k), dynamic_slice_sizes={7,2,3}",
        "p = s8[7,9]{0,1} parameter(0)\n  i = u8[] parameter(1)\n  j = u8[] parameter(2)\n  ROOT r = s8[3,9]{1,0} dynamic-slice(p, i, j), dynamic_slice_sizes={3,9}",
        "p = f64[6,5,4]{0,2,1} parameter(0)\n  i = u64[] parameter(1)\n  j = u64[] parameter(2)\n  k = u64[] parameter(3)\n  ROOT r = f64[2,3,4]{2,1,0} dynamic-slice(p, i, j, k), dynamic_slice_sizes={2,3,4}",
        "p = bf16[16,300]{1,0:T(8,128)(2,1)} parameter(0)\n  i = s16[] parameter(1)\n  j = s16[] parameter(2)\n  ROOT r = bf16[5,129]{1,0:T(8,128)(2,1)} dynamic-slice(p, i, j), dynamic_slice_sizes={5,129}",
        "p = f32[10,300]{1,0:T(8,128)} parameter(0)\n  u = f32[4,7]{0,1} parameter(1)\n  i = u16[] parameter(2)\n  j = u16[] parameter(3)\n  ROOT r = f32[10,300]{1,0:T(8,128)} dynamic-update-slice(p, u, i, j)",
        "p = bf16[16,300]{1,0:T(8,128)(2,1)} parameter(0)\n  u = bf16[3,200]{1,0} parameter(1)\n  i = s16[] parameter(2)\n  j = s16[] parameter(3)\n  ROOT r = bf16[16,300]{0,1} dynamic-update-slice(p, u, i, j)",
        "p = u32[9,9]{1,0} parameter(0)\n  u = u32[2,4]{0,1} parameter(1)\n  i = u32[] parameter(2)\n  j = u32[] parameter(3)\n  ROOT r = u32[9,9]{0,1} dynamic-update-slice(p, u, i, j)",
        "p = pred[9,9]{1,0} parameter(0)\n  u = pred[2,4]{0,1} parameter(1)\n  i = s8[] parameter(2)\n  j = s8[] parameter(3)\n  ROOT r = pred[9,9]{0,1} dynamic-update-slice(p, u, i, j)",
    ];
    for body in cases {
        check_exact(body);
    }
}

#[test]
fn cholesky_batched_layouts_and_types() {
    let cases = [
        "a = f32[3,5,5]{2,1,0} parameter(0)\n  ROOT l = f32[3,5,5]{2,1,0} cholesky(a), lower=true",
        "a = f32[3,5,5]{1,2,0} parameter(0)\n  ROOT l = f32[3,5,5]{0,1,2} cholesky(a), lower=false",
        "a = f64[2,2,7,7]{3,2,1,0} parameter(0)\n  ROOT l = f64[2,2,7,7]{2,3,1,0} cholesky(a), lower=true",
        "a = f64[9,9]{1,0} parameter(0)\n  ROOT l = f64[9,9]{1,0} cholesky(a), lower=false",
        "a = f32[12,12]{1,0:T(8,128)} parameter(0)\n  ROOT l = f32[12,12]{1,0:T(8,128)} cholesky(a), lower=true",
    ];
    for body in cases {
        check_tiers(body, Args::Spd, 1e-6);
    }
}

#[test]
fn triangular_solve_every_option() {
    for left in [true, false] {
        for lower in [true, false] {
            for unit in [true, false] {
                for t in ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"] {
                    let b = if left { "[2,4,3]" } else { "[2,3,4]" };
                    let body = format!(
                        "a = f64[2,4,4]{{2,1,0}} parameter(0)\n  b = f64{b}{{2,1,0}} parameter(1)\n  ROOT x = f64{b}{{2,1,0}} triangular-solve(a, b), left_side={left}, lower={lower}, unit_diagonal={unit}, transpose_a={t}"
                    );
                    check_tiers(&body, Args::Triangular, 1e-12);
                }
            }
        }
    }
}

#[test]
fn triangular_solve_layouts_and_f32() {
    let cases = [
        "a = f32[6,6]{0,1} parameter(0)\n  b = f32[6,5]{0,1} parameter(1)\n  ROOT x = f32[6,5]{1,0} triangular-solve(a, b), left_side=true, lower=false, unit_diagonal=false, transpose_a=TRANSPOSE",
        "a = f32[3,6,6]{1,2,0} parameter(0)\n  b = f32[3,2,6]{2,1,0} parameter(1)\n  ROOT x = f32[3,2,6]{1,2,0} triangular-solve(a, b), left_side=false, lower=true, unit_diagonal=false, transpose_a=NO_TRANSPOSE",
        "a = f32[10,10]{1,0:T(8,128)} parameter(0)\n  b = f32[10,130]{1,0:T(8,128)} parameter(1)\n  ROOT x = f32[10,130]{1,0:T(8,128)} triangular-solve(a, b), left_side=true, lower=true, unit_diagonal=true, transpose_a=ADJOINT",
    ];
    for body in cases {
        check_tiers(body, Args::Triangular, 1e-6);
    }
}
