//! gather and scatter on random dimension numbers: operands of rank 1 to 3 in random layouts,
//! index vectors anywhere in the indices (or implicit), batching dimensions, every index
//! type, window sizes from 0 to the whole dimension, and start indices in and out of range.
//! Each module's kernel runs in the kernel interpreter against the reference interpreter.

mod support;

use support::{check_module_with, random_args, Rng};

const INDEX_TYPES: [&str; 8] = ["s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64"];
const VALUE_TYPES: [&str; 6] = ["f32", "f64", "bf16", "s32", "u8", "pred"];

fn shuffled(rng: &mut Rng, mut v: Vec<usize>) -> Vec<usize> {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

/// A window extent in `0..=dim`, rarely 0 (an empty window makes the whole op trivial).
fn window_size(rng: &mut Rng, dim: i64) -> i64 {
    if rng.below(16) == 0 {
        0
    } else {
        1 + rng.below(dim as u64) as i64
    }
}

fn list(v: &[usize]) -> String {
    v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
}

fn shape(ty: &str, dims: &[i64], rng: &mut Rng) -> String {
    let d: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    let layout = shuffled(rng, (0..dims.len()).collect());
    format!("{ty}[{}]{{{}}}", d.join(","), list(&layout))
}

/// The parts gather and scatter share: an operand, which of its dimensions the index vector
/// addresses, which are batching dimensions, and indices laid out around them.
struct Common {
    op_dims: Vec<i64>,
    index_map: Vec<usize>,
    /// (operand dimension, indices dimension) pairs.
    batching: Vec<(usize, usize)>,
    /// Operand dimensions dropped from the window (size 1 there).
    dropped: Vec<usize>,
    idx_dims: Vec<i64>,
    ivd: usize,
    /// The batch dimensions of the indices (all but `ivd`), in order.
    batch_dims: Vec<i64>,
}

fn common(rng: &mut Rng) -> Common {
    let rank = 1 + rng.below(3) as usize;
    let op_dims: Vec<i64> = (0..rank).map(|_| 1 + rng.below(5) as i64).collect();
    let order = shuffled(rng, (0..rank).collect());
    let n_batching = if rank > 1 && rng.below(3) == 0 { 1 } else { 0 };
    let batching_ops: Vec<usize> = order[..n_batching].to_vec();
    let rest: Vec<usize> = order[n_batching..].to_vec();
    let n_map = rng.below(rest.len() as u64 + 1) as usize;
    let index_map: Vec<usize> = shuffled(rng, rest.clone())[..n_map].to_vec();
    let mut dropped: Vec<usize> = rest.iter().copied().filter(|_| rng.below(3) == 0).collect();
    dropped.sort_unstable();
    // Indices: some batch dimensions (the batching ones among them), then the vector dimension
    // placed anywhere, or implicit when the vector has one component.
    let n_batch = n_batching + rng.below(3) as usize;
    let mut batch_dims: Vec<i64> = (0..n_batch).map(|_| 1 + rng.below(4) as i64).collect();
    let batch_slots = shuffled(rng, (0..n_batch).collect());
    let mut batching_slots = Vec::new();
    for (k, &od) in batching_ops.iter().enumerate() {
        batch_dims[batch_slots[k]] = op_dims[od];
        batching_slots.push(batch_slots[k]);
    }
    let implicit = n_map == 1 && rng.below(2) == 0;
    let ivd = if implicit { n_batch } else { rng.below(n_batch as u64 + 1) as usize };
    let mut idx_dims = batch_dims.clone();
    if !implicit {
        idx_dims.insert(ivd, n_map as i64);
    }
    let to_idx_dim = |slot: usize| if slot >= ivd && !implicit { slot + 1 } else { slot };
    let batching = batching_ops.iter().zip(&batching_slots).map(|(&o, &s)| (o, to_idx_dim(s))).collect();
    Common { op_dims, index_map, batching, dropped, idx_dims, ivd, batch_dims }
}

fn random_gather(rng: &mut Rng) -> String {
    let c = common(rng);
    let ty = *rng.pick(&VALUE_TYPES);
    let ity = *rng.pick(&INDEX_TYPES);
    let rank = c.op_dims.len();
    let batching_ops: Vec<usize> = c.batching.iter().map(|&(o, _)| o).collect();
    let sizes: Vec<i64> = (0..rank)
        .map(|d| if c.dropped.contains(&d) || batching_ops.contains(&d) { 1 } else { window_size(rng, c.op_dims[d]) })
        .collect();
    let window: Vec<usize> = (0..rank).filter(|d| !c.dropped.contains(d) && !batching_ops.contains(d)).collect();
    let out_rank = c.batch_dims.len() + window.len();
    let mut offset_dims = shuffled(rng, (0..out_rank).collect())[..window.len()].to_vec();
    offset_dims.sort_unstable();
    let mut out_dims = Vec::with_capacity(out_rank);
    let (mut b, mut w) = (c.batch_dims.iter(), window.iter());
    for d in 0..out_rank {
        out_dims.push(if offset_dims.contains(&d) { sizes[*w.next().unwrap()] } else { *b.next().unwrap() });
    }
    let (ops, idxs): (Vec<usize>, Vec<usize>) = c.batching.iter().copied().unzip();
    let size_list: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
    format!(
        "HloModule g\n\nENTRY e {{\n  p = {} parameter(0)\n  i = {} parameter(1)\n  ROOT g = {} gather(p, i), offset_dims={{{}}}, collapsed_slice_dims={{{}}}, start_index_map={{{}}}, operand_batching_dims={{{}}}, start_indices_batching_dims={{{}}}, index_vector_dim={}, slice_sizes={{{}}}\n}}\n",
        shape(ty, &c.op_dims, rng),
        shape(ity, &c.idx_dims, rng),
        shape(ty, &out_dims, rng),
        list(&offset_dims),
        list(&c.dropped),
        list(&c.index_map),
        list(&ops),
        list(&idxs),
        c.ivd,
        size_list.join(","),
    )
}

fn random_scatter(rng: &mut Rng) -> String {
    let c = common(rng);
    let (ty, combiner) = *rng.pick(&[
        ("f32", "add"),
        ("f64", "maximum"),
        ("bf16", "multiply"),
        ("s32", "subtract"),
        ("u8", "add"),
        ("pred", "or"),
        ("s16", "set"),
    ]);
    let ity = *rng.pick(&INDEX_TYPES);
    let rank = c.op_dims.len();
    let batching_ops: Vec<usize> = c.batching.iter().map(|&(o, _)| o).collect();
    let window: Vec<usize> = (0..rank).filter(|d| !c.dropped.contains(d) && !batching_ops.contains(d)).collect();
    let win_sizes: Vec<i64> = window.iter().map(|&d| window_size(rng, c.op_dims[d])).collect();
    let upd_rank = c.batch_dims.len() + window.len();
    let mut window_upd = shuffled(rng, (0..upd_rank).collect())[..window.len()].to_vec();
    window_upd.sort_unstable();
    let mut upd_dims = Vec::with_capacity(upd_rank);
    let (mut b, mut w) = (c.batch_dims.iter(), win_sizes.iter());
    for d in 0..upd_rank {
        upd_dims.push(if window_upd.contains(&d) { *w.next().unwrap() } else { *b.next().unwrap() });
    }
    let comp = if combiner == "set" {
        format!("a = {ty}[] parameter(0)\n  ROOT b = {ty}[] parameter(1)")
    } else {
        format!("a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n  ROOT r = {ty}[] {combiner}(a, b)")
    };
    let (ops, idxs): (Vec<usize>, Vec<usize>) = c.batching.iter().copied().unzip();
    format!(
        "HloModule s\n\ncomb {{\n  {comp}\n}}\n\nENTRY e {{\n  p = {} parameter(0)\n  i = {} parameter(1)\n  u = {} parameter(2)\n  ROOT s = {} scatter(p, i, u), update_window_dims={{{}}}, inserted_window_dims={{{}}}, scatter_dims_to_operand_dims={{{}}}, input_batching_dims={{{}}}, scatter_indices_batching_dims={{{}}}, index_vector_dim={}, to_apply=comb\n}}\n",
        shape(ty, &c.op_dims, rng),
        shape(ity, &c.idx_dims, rng),
        shape(ty, &upd_dims, rng),
        shape(ty, &c.op_dims, rng),
        list(&window_upd),
        list(&c.dropped),
        list(&c.index_map),
        list(&ops),
        list(&idxs),
        c.ivd,
    )
}

fn sweep(what: &str, n: u64, make: fn(&mut Rng) -> String) {
    let mut rng = Rng::new(0x6A7E);
    let mut nonempty = 0;
    for case in 0..n {
        let text = make(&mut rng);
        let module =
            tessera_hlo::text::parse_module(&text).unwrap_or_else(|e| panic!("{what} {case}: parse: {e}\n{text}"));
        for seed in [1, 2] {
            let args = random_args(&module, seed + case);
            if let Err(e) = check_module_with(&module, &args) {
                panic!("{what} {case}, seed {seed}: {e}\n{text}");
            }
        }
        let out = module.entry_comp().root_inst().shape.dims().iter().product::<i64>();
        let upd = module.entry_comp().parameter_shapes().get(2).map_or(1, |s| s.dims().iter().product::<i64>());
        nonempty += u64::from(out > 0 && upd > 0);
    }
    // The generator must mostly make ops that move data, or the sweep proves little.
    assert!(nonempty * 4 >= n * 3, "{what}: only {nonempty} of {n} modules move any data");
}

#[test]
fn random_gathers_match_the_interpreter() {
    sweep("gather", 400, random_gather);
}

#[test]
fn random_scatters_match_the_interpreter() {
    sweep("scatter", 400, random_scatter);
}

#[test]
fn complex_factorizations_are_refused_by_name() {
    let text = "HloModule c\n\nENTRY e {\n  a = c64[3,3]{1,0} parameter(0)\n  ROOT l = c64[3,3]{1,0} cholesky(a), lower=true\n}\n";
    let module = tessera_hlo::text::parse_module(text).expect("parses");
    let err = tessera_lower::emit_kernel(&module, module.entry_comp(), "k").expect_err("complex cholesky");
    assert!(err.to_string().contains("complex numbers"), "{err}");
}
