//! `tessera_rt_fft` on boxes with known transforms: a prime length (Rader or Bluestein) there
//! and back, an inverse real transform that ignores the redundant columns, bad arguments; and
//! `tessera_rt_fft_f32` against it.

use tessera_fft::{tessera_rt_fft, tessera_rt_fft_f32, FFT, IFFT, IRFFT, RFFT};

fn run(kind: i64, n: [i64; 3], data: &mut [f64]) {
    // SAFETY: `data` holds the box.
    unsafe { tessera_rt_fft(kind, n[0], n[1], n[2], data.as_mut_ptr()) };
}

#[test]
fn prime_length_forward_and_back() {
    let x: Vec<f64> = (0..14).map(|i| (i as f64 * 0.37).cos()).collect();
    let mut d = x.clone();
    run(FFT, [1, 1, 7], &mut d);
    // DC term: the sum of the inputs.
    let sum: (f64, f64) = x.chunks(2).fold((0.0, 0.0), |a, c| (a.0 + c[0], a.1 + c[1]));
    assert!((d[0] - sum.0).abs() < 1e-12 && (d[1] - sum.1).abs() < 1e-12);
    run(IFFT, [1, 1, 7], &mut d);
    assert!(d.iter().zip(&x).all(|(a, b)| (a - b).abs() < 1e-12));
}

#[test]
fn irfft_ignores_the_redundant_columns() {
    let n = [2, 3, 4];
    let x: Vec<f64> = (0..24).map(|i| (i as f64 * 0.9).sin()).collect();
    let mut d: Vec<f64> = x.iter().flat_map(|&r| [r, 0.0]).collect();
    run(RFFT, n, &mut d);
    for row in d.chunks_mut(8) {
        row[6..].fill(f64::NAN);
    }
    run(IRFFT, n, &mut d);
    assert!(x.iter().enumerate().all(|(i, &r)| (d[2 * i] - r).abs() < 1e-12));
}

#[test]
fn bad_arguments_do_nothing() {
    let mut d = [1.0, 2.0];
    run(7, [1, 1, 1], &mut d);
    run(FFT, [-1, 1, 1], &mut d);
    assert_eq!(d, [1.0, 2.0]);
}

/// Every kind on boxes of one to three dimensions, odd and even rows (a real row of one
/// element too), in f32 against f64: the same transform, within f32's rounding.
#[test]
fn f32_boxes_match_f64() {
    for n in [[1, 1, 1], [1, 1, 2], [1, 1, 9], [1, 4, 6], [3, 5, 7], [2, 3, 16]] {
        let total = n.iter().product::<i64>() as usize;
        for kind in [FFT, IFFT, RFFT, IRFFT] {
            let x: Vec<f64> = (0..2 * total)
                .map(|i| if kind == RFFT && i % 2 == 1 { 0.0 } else { (i as f64 * 0.61).sin() })
                .collect();
            let mut d = x.clone();
            run(kind, n, &mut d);
            let mut f: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            // SAFETY: `f` holds the box.
            unsafe { tessera_rt_fft_f32(kind, n[0], n[1], n[2], f.as_mut_ptr()) };
            // Where the contract defines the result: the first n2/2 + 1 columns of a real
            // transform's spectrum, the real parts of an inverse real transform.
            let n2 = n[2] as usize;
            for (i, (&a, &b)) in d.iter().zip(&f).enumerate() {
                let col = (i / 2) % n2;
                let defined = match kind {
                    RFFT => col <= n2 / 2,
                    IRFFT => i % 2 == 0,
                    _ => true,
                };
                if defined {
                    assert!(
                        (a - f64::from(b)).abs() < 1e-4 * (1.0 + a.abs()) * total as f64,
                        "{n:?} kind {kind} at {i}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
