//! Randomly generated fused computations (elementwise ops, transposes, reverses, slices,
//! broadcasts and a closing reduce) on random layouts, tiled ones included, through
//! emit_kernel + the kernel interpreter against the reference interpreter.

mod support;

use std::collections::HashSet;

use support::{check_module_slack, random_args, Rng};

/// A random layout for `dims`: any dimension order, sometimes tiled on the minor two.
fn layout(rng: &mut Rng, rank: usize) -> String {
    let mut order: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let m2m: Vec<String> = order.iter().map(|d| d.to_string()).collect();
    let tile = if rank >= 2 {
        *rng.pick(&["", "", ":T(8,128)", ":T(2,4)", ":T(4,8)(2,1)", ":T(2,128)"])
    } else {
        *rng.pick(&["", "", ":T(4)", ":T(8)"])
    };
    format!("{{{}{}}}", m2m.join(","), tile)
}

fn shape(ty: &str, dims: &[i64], layout: &str) -> String {
    let d: Vec<String> = dims.iter().map(|x| x.to_string()).collect();
    format!("{ty}[{}]{layout}", d.join(","))
}

fn generate(rng: &mut Rng) -> String {
    let ty = *rng.pick(&["f32", "f32", "s32", "bf16", "f64"]);
    let rank = 1 + rng.below(3) as usize;
    let dims: Vec<i64> = (0..rank).map(|_| 1 + rng.below(13) as i64).collect();
    let mut lines = Vec::new();
    let mut nodes: Vec<(String, Vec<i64>)> = Vec::new();
    let nparams = 1 + rng.below(3);
    for i in 0..nparams {
        let l = layout(rng, rank);
        lines.push(format!("  p{i} = {} parameter({i})", shape(ty, &dims, &l)));
        nodes.push((format!("p{i}"), dims.clone()));
    }
    let float = ty != "s32";
    // Nodes computed from an exponential or a sine. The kernel's math functions may differ from
    // the reference's (f64, then rounded) by up to 2 ulp (`emit::math`'s contract), and a math
    // function applied to such a value can amplify that without bound (the sine of an
    // exponential's 1e21, where one ulp spans many periods), so no path applies one to another.
    let mut from_math: HashSet<String> = HashSet::new();
    for n in 0..(2 + rng.below(6)) {
        let name = format!("n{n}");
        // Mostly extend the newest node, so the root depends on most of the DAG.
        let (a, ad) = if rng.below(3) > 0 { nodes.last().cloned().expect("nodes") } else { rng.pick(&nodes).clone() };
        let l = layout(rng, ad.len());
        let kind = rng.below(7);
        let same: Vec<&(String, Vec<i64>)> = nodes.iter().filter(|(_, d)| *d == ad).collect();
        let (b, _) = (*rng.pick(&same)).clone();
        if from_math.contains(&a) || (kind <= 1 && from_math.contains(&b)) {
            from_math.insert(name.clone());
        }
        let line = match kind {
            0 | 1 => {
                let op = if float {
                    *rng.pick(&["add", "multiply", "subtract", "maximum", "minimum"])
                } else {
                    *rng.pick(&["add", "multiply", "subtract", "maximum", "divide", "xor", "shift-left"])
                };
                nodes.push((name.clone(), ad.clone()));
                format!("  {name} = {} {op}({a}, {b})", shape(ty, &ad, &l))
            }
            2 => {
                let op = if !float {
                    "negate"
                } else if from_math.contains(&a) {
                    *rng.pick(&["negate", "abs"])
                } else {
                    *rng.pick(&["negate", "abs", "exponential", "sine"])
                };
                if op == "exponential" || op == "sine" {
                    from_math.insert(name.clone());
                }
                nodes.push((name.clone(), ad.clone()));
                format!("  {name} = {} {op}({a})", shape(ty, &ad, &l))
            }
            3 => {
                let mut perm: Vec<usize> = (0..ad.len()).collect();
                for i in (1..perm.len()).rev() {
                    let j = rng.below(i as u64 + 1) as usize;
                    perm.swap(i, j);
                }
                let od: Vec<i64> = perm.iter().map(|&p| ad[p]).collect();
                let l = layout(rng, od.len());
                let ps: Vec<String> = perm.iter().map(|p| p.to_string()).collect();
                nodes.push((name.clone(), od.clone()));
                format!("  {name} = {} transpose({a}), dimensions={{{}}}", shape(ty, &od, &l), ps.join(","))
            }
            4 => {
                let d = rng.below(ad.len() as u64);
                nodes.push((name.clone(), ad.clone()));
                format!("  {name} = {} reverse({a}), dimensions={{{d}}}", shape(ty, &ad, &l))
            }
            5 => {
                let mut od = Vec::new();
                let mut parts = Vec::new();
                for &n in &ad {
                    let start = rng.below(n as u64) as i64;
                    let stride = 1 + rng.below(2) as i64;
                    let len = (n - start + stride - 1) / stride;
                    od.push(len);
                    parts.push(format!("[{start}:{n}:{stride}]"));
                }
                let l = layout(rng, od.len());
                nodes.push((name.clone(), od.clone()));
                format!("  {name} = {} slice({a}), slice={{{}}}", shape(ty, &od, &l), parts.join(", "))
            }
            _ => {
                let extra = 1 + rng.below(4) as i64;
                let mut od = vec![extra];
                od.extend(&ad);
                let l = layout(rng, od.len());
                let ds: Vec<String> = (1..=ad.len()).map(|d| d.to_string()).collect();
                nodes.push((name.clone(), od.clone()));
                format!("  {name} = {} broadcast({a}), dimensions={{{}}}", shape(ty, &od, &l), ds.join(","))
            }
        };
        lines.push(line);
    }
    let (last, ld) = nodes.last().cloned().expect("nodes");
    let reduce = rng.below(3) == 0;
    let mut text = String::from("HloModule r\n");
    if reduce {
        text +=
            &format!("add {{\n  x = {ty}[] parameter(0)\n  y = {ty}[] parameter(1)\n  ROOT s = {ty}[] add(x, y)\n}}\n");
        let d = rng.below(ld.len() as u64) as usize;
        let od: Vec<i64> = ld.iter().enumerate().filter(|(i, _)| *i != d).map(|(_, &x)| x).collect();
        let l = layout(rng, od.len());
        lines.push(format!("  z = {ty}[] constant(0)"));
        lines.push(format!("  ROOT out = {} reduce({last}, z), dimensions={{{d}}}, to_apply=add", shape(ty, &od, &l)));
    } else {
        let l = layout(rng, ld.len());
        lines.push(format!("  ROOT out = {} copy({last})", shape(ty, &ld, &l)));
    }
    text += &format!("ENTRY e {{\n{}\n}}\n", lines.join("\n"));
    text
}

#[test]
fn random_fused_computations_match_the_reference() {
    let mut rng = Rng::new(2026);
    let mut checked = 0;
    for _ in 0..1500 {
        let text = generate(&mut rng);
        let Ok(module) = tessera_hlo::text::parse_module(&text) else { continue };
        if tessera_hlo::verify::verify(&module).is_err() {
            continue;
        }
        let args = random_args(&module, rng.next_u64());
        if let Err(e) = check_module_slack(&module, &args, 10.0) {
            panic!("{e}\nmodule:\n{text}");
        }
        if std::env::var_os("SHOW").is_some() && checked < 3 {
            println!("{text}");
        }
        checked += 1;
    }
    assert!(checked >= 1000, "only {checked} generated modules verified");
}
