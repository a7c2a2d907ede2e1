//! `tessera_rt_fft` on boxes with known transforms: a prime length (Rader or Bluestein) there
//! and back, an inverse real transform that ignores the redundant columns, bad arguments.

use tessera_fft::{tessera_rt_fft, FFT, IFFT, IRFFT, RFFT};

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
