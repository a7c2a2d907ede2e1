//! The interpreter's convolution against a direct transcription of XLA's definition, on
//! random dimension labels, windows (stride, padding, both dilations, reversal) and group
//! counts. The interpreter rearranges operands and splits work over threads; the reference
//! computes each output element on its own from the labels, so a slip in either shows up.

use tessera_hlo::eval::evaluate;
use tessera_hlo::text::parse_module;
use tessera_hlo::Literal;
use tessera_testkit::Rng;

const CASES: usize = 3000;

#[derive(Clone, Copy, Debug)]
struct WinDim {
    size: i64,
    stride: i64,
    lo: i64,
    hi: i64,
    base_dilation: i64,
    window_dilation: i64,
    reversal: bool,
}

/// One random convolution: labels are one char per dimension, digits for spatial ones.
struct Conv {
    lhs: Vec<char>,
    lhs_dims: Vec<i64>,
    rhs: Vec<char>,
    rhs_dims: Vec<i64>,
    out: Vec<char>,
    out_dims: Vec<i64>,
    window: Vec<WinDim>,
    fgc: i64,
    bgc: i64,
}

fn pos(labels: &[char], c: char) -> usize {
    labels.iter().position(|&x| x == c).expect("label")
}

fn digit(d: usize) -> char {
    char::from(b'0' + d as u8)
}

fn shuffled(rng: &mut Rng, mut v: Vec<char>) -> Vec<char> {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.index(i + 1));
    }
    v
}

fn random_conv(rng: &mut Rng) -> Conv {
    let spatial = rng.index(4);
    let labels = |a: char, b: char| (0..spatial).map(digit).chain([a, b]).collect::<Vec<_>>();
    let (lhs, rhs, out) =
        (shuffled(rng, labels('b', 'f')), shuffled(rng, labels('i', 'o')), shuffled(rng, labels('b', 'f')));
    let (fgc, bgc) = match rng.below(4) {
        0 => (1 + rng.below(3) as i64, 1),
        1 => (1, 1 + rng.below(3) as i64),
        _ => (1, 1),
    };
    let group_in = 1 + rng.below(3) as i64;
    let out_features = (1 + rng.below(3) as i64) * fgc * bgc;
    let batch = (1 + rng.below(2) as i64) * bgc;
    let mut window = Vec::new();
    let (mut in_spatial, mut k_spatial) = (Vec::new(), Vec::new());
    for _ in 0..spatial {
        let w = WinDim {
            size: 1 + rng.below(3) as i64,
            stride: 1 + rng.below(3) as i64,
            lo: rng.below(5) as i64 - 2,
            hi: rng.below(5) as i64 - 2,
            base_dilation: 1 + rng.below(3) as i64,
            window_dilation: 1 + rng.below(3) as i64,
            reversal: rng.chance(50),
        };
        in_spatial.push(rng.below(5) as i64);
        k_spatial.push(w.size);
        window.push(w);
    }
    let size_of = |labels: &[char], a: i64, b: i64, sp: &[i64]| -> Vec<i64> {
        labels
            .iter()
            .map(|&c| match c {
                'b' | 'i' => a,
                'f' | 'o' => b,
                d => sp[(d as u8 - b'0') as usize],
            })
            .collect()
    };
    let out_spatial: Vec<i64> = window
        .iter()
        .zip(&in_spatial)
        .map(|(w, &n)| {
            let dilated = if n == 0 { 0 } else { (n - 1) * w.base_dilation + 1 };
            let padded = dilated + w.lo + w.hi;
            let span = (w.size - 1) * w.window_dilation + 1;
            if padded < span {
                0
            } else {
                (padded - span) / w.stride + 1
            }
        })
        .collect();
    Conv {
        lhs_dims: size_of(&lhs, batch, group_in * fgc, &in_spatial),
        rhs_dims: size_of(&rhs, group_in, out_features, &k_spatial),
        out_dims: size_of(&out, batch / bgc, out_features, &out_spatial),
        lhs,
        rhs,
        out,
        window,
        fgc,
        bgc,
    }
}

fn list(v: &[i64]) -> String {
    v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

fn module_text(c: &Conv, ty: &str) -> String {
    let join = |f: &dyn Fn(&WinDim) -> String| c.window.iter().map(f).collect::<Vec<_>>().join("x");
    let window = if c.window.is_empty() {
        String::new()
    } else {
        format!(
            "window={{size={} stride={} pad={} lhs_dilate={} rhs_dilate={} rhs_reversal={}}}, ",
            join(&|w| w.size.to_string()),
            join(&|w| w.stride.to_string()),
            join(&|w| format!("{}_{}", w.lo, w.hi)),
            join(&|w| w.base_dilation.to_string()),
            join(&|w| w.window_dilation.to_string()),
            join(&|w| u8::from(w.reversal).to_string()),
        )
    };
    let s = |v: &[char]| v.iter().collect::<String>();
    format!(
        "HloModule m\nENTRY e {{\n x = {ty}[{}] parameter(0)\n k = {ty}[{}] parameter(1)\n\
         ROOT c = {ty}[{}] convolution(x, k), {window}dim_labels={}_{}->{}, feature_group_count={}, batch_group_count={}\n}}\n",
        list(&c.lhs_dims),
        list(&c.rhs_dims),
        list(&c.out_dims),
        s(&c.lhs),
        s(&c.rhs),
        s(&c.out),
        c.fgc,
        c.bgc
    )
}

fn strides(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// XLA's definition, element by element: output feature `of` belongs to feature group
/// `of / (K / fgc)` and batch group `of / (K / bgc)`; the window position of kernel index `k`
/// is `k` (or `size - 1 - k` reversed); it reads input coordinate `(o * stride - lo + position
/// * window_dilation) / base_dilation` when that is a whole, in-range coordinate.
fn reference(c: &Conv, x: &[i64], w: &[i64]) -> Vec<i64> {
    let (ls, ks, os) = (strides(&c.lhs_dims), strides(&c.rhs_dims), strides(&c.out_dims));
    let spatial = c.window.len();
    let k_out = c.rhs_dims[pos(&c.rhs, 'o')];
    let k_in = c.rhs_dims[pos(&c.rhs, 'i')];
    let batch = c.lhs_dims[pos(&c.lhs, 'b')];
    let n: i64 = c.out_dims.iter().product();
    let kernel_shape: Vec<i64> = (0..spatial).map(|d| c.rhs_dims[pos(&c.rhs, digit(d))]).collect();
    let kernel_points: i64 = kernel_shape.iter().product();
    (0..n)
        .map(|lin| {
            let o: Vec<i64> = (0..c.out_dims.len()).map(|d| lin / os[d] % c.out_dims[d]).collect();
            let (ob, of) = (o[pos(&c.out, 'b')], o[pos(&c.out, 'f')]);
            let feature_group = of / (k_out / c.fgc);
            let batch_group = of / (k_out / c.bgc);
            let mut acc = 0i64;
            for kl in 0..kernel_points {
                let mut k = vec![0i64; spatial];
                let mut rest = kl;
                for d in (0..spatial).rev() {
                    k[d] = rest % kernel_shape[d];
                    rest /= kernel_shape[d];
                }
                let mut input = vec![0i64; spatial];
                let mut inside = true;
                for d in 0..spatial {
                    let wd = c.window[d];
                    let position = if wd.reversal { wd.size - 1 - k[d] } else { k[d] };
                    let p = o[pos(&c.out, digit(d))] * wd.stride - wd.lo + position * wd.window_dilation;
                    inside &=
                        p >= 0 && p % wd.base_dilation == 0 && p / wd.base_dilation < c.lhs_dims[pos(&c.lhs, digit(d))];
                    input[d] = p / wd.base_dilation;
                }
                if !inside {
                    continue;
                }
                for i in 0..k_in {
                    let mut li = (ob + batch_group * (batch / c.bgc)) * ls[pos(&c.lhs, 'b')]
                        + (feature_group * k_in + i) * ls[pos(&c.lhs, 'f')];
                    let mut ki = of * ks[pos(&c.rhs, 'o')] + i * ks[pos(&c.rhs, 'i')];
                    for d in 0..spatial {
                        li += input[d] * ls[pos(&c.lhs, digit(d))];
                        ki += k[d] * ks[pos(&c.rhs, digit(d))];
                    }
                    acc += x[li as usize] * w[ki as usize];
                }
            }
            acc
        })
        .collect()
}

#[test]
fn convolution_matches_the_definition_on_random_configurations() {
    let mut rng = Rng::new(0x5EED_C0DE);
    let mut tested = 0;
    for case in 0..CASES {
        let c = random_conv(&mut rng);
        // Negative padding can leave less than nothing to convolve; the verifier rejects that.
        let text = module_text(&c, "s32");
        if tessera_hlo::verify::verify(&parse_module(&text).unwrap_or_else(|e| panic!("case {case}: {e}\n{text}")))
            .is_err()
        {
            continue;
        }
        tested += 1;
        let n = |d: &[i64]| d.iter().product::<i64>() as usize;
        let x: Vec<i64> = (0..n(&c.lhs_dims)).map(|_| rng.below(7) as i64 - 3).collect();
        let w: Vec<i64> = (0..n(&c.rhs_dims)).map(|_| rng.below(5) as i64 - 2).collect();
        let want = reference(&c, &x, &w);
        // Small integers keep float sums exact, so both element classes must match exactly.
        let text = module_text(&c, "s32");
        let m = parse_module(&text).unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
        let args = [
            Literal::from_vec(&c.lhs_dims, x.iter().map(|&v| v as i32).collect::<Vec<_>>()).unwrap(),
            Literal::from_vec(&c.rhs_dims, w.iter().map(|&v| v as i32).collect::<Vec<_>>()).unwrap(),
        ];
        let got = evaluate(&m, &args).unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
        let want_i: Vec<i32> = want.iter().map(|&v| v as i32).collect();
        assert_eq!(got.to_vec::<i32>().unwrap(), want_i, "case {case}:\n{text}");
        let text = module_text(&c, "f32");
        let m = parse_module(&text).unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
        let args = [
            Literal::from_vec(&c.lhs_dims, x.iter().map(|&v| v as f32).collect::<Vec<_>>()).unwrap(),
            Literal::from_vec(&c.rhs_dims, w.iter().map(|&v| v as f32).collect::<Vec<_>>()).unwrap(),
        ];
        let got = evaluate(&m, &args).unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
        let want_f: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        assert_eq!(got.to_vec::<f32>().unwrap(), want_f, "case {case}:\n{text}");
    }
    assert!(tested > CASES / 2, "only {tested} of {CASES} random convolutions verified");
}
