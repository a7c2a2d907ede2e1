//! What Tessera's tests share, kept in one place so every crate's tests draw random data the
//! same way. A dev-dependency only: nothing the workspace ships links it.

/// A seeded SplitMix64 generator (Steele, Lea and Flood; Vigna's `splitmix64.c`).
///
/// Tests need data that is random enough to reach odd cases yet identical on every machine
/// and every run, so a failure reproduces from its seed alone. SplitMix64 is small, accepts
/// any seed (0 included, unlike xorshift), and its 64-bit arithmetic is the same everywhere.
/// It is not a cryptographic or statistically strong source, and need not be.
///
/// The sequence is part of the tests' meaning: a test that stores values computed from it
/// would change if it did, so the unit tests below pin the first outputs.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The high half of [`next_u64`](Self::next_u64) (the better-mixed bits).
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// In `0..n`, or 0 when `n` is 0, so a generator of "any element of this (maybe empty)
    /// list" needs no special case. A plain remainder: its bias is negligible for the small
    /// `n` tests use, and it keeps the sequences the tests were written against.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// An index into something of length `n` (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// In `lo..=hi` (`lo` when `hi < lo`). Wrapping arithmetic, so the whole `i64` range
    /// works even where overflow checks are on.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi < lo {
            return lo;
        }
        let span = hi.wrapping_sub(lo) as u64;
        let offset = if span == u64::MAX { self.next_u64() } else { self.below(span + 1) };
        lo.wrapping_add(offset as i64)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn bool(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// Between `lo` and `hi`: `lo` plus the span times a fraction in [0, 1) made of the top 53
    /// bits. Only rounding of that sum can reach `hi` (never for power-of-two spans).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let fraction = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * fraction
    }

    /// In [0, 1) with f32's 24 bits: an f64 fraction rounded to f32 could come out as 1.0.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32
    }

    /// A uniformly chosen element; `xs` must not be empty.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        assert!(!xs.is_empty(), "Rng::pick from an empty slice");
        &xs[self.index(xs.len())]
    }
}

/// A folder under the system's temporary directory that one test owns: empty when made, and
/// removed with all it holds when dropped, also when the test fails and unwinds, so test runs
/// leave nothing behind. Its name joins `prefix`, the process id (test binaries run side by
/// side) and `name` (tests in one binary run on several threads).
#[derive(Debug)]
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    pub fn new(prefix: &str, name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("{prefix}_{}_{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
        TempDir(dir)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::{Rng, TempDir};

    #[test]
    fn a_temp_dir_is_removed_with_its_contents_when_dropped() {
        let dir = TempDir::new("tessera_testkit", "drop");
        std::fs::create_dir_all(dir.join("inner")).unwrap();
        std::fs::write(dir.join("inner/file"), b"x").unwrap();
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }

    // Reference outputs of Vigna's splitmix64.c for these seeds.
    #[test]
    fn seed_0_gives_the_reference_sequence() {
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn seed_1_gives_the_reference_sequence() {
        let mut r = Rng::new(1);
        assert_eq!(r.next_u64(), 0x910A_2DEC_8902_5CC1);
        assert_eq!(r.next_u64(), 0xBEEB_8DA1_658E_EC67);
        assert_eq!(r.next_u64(), 0xF893_A2EE_FB32_555E);
    }

    #[test]
    fn derived_values_stay_in_their_ranges() {
        let mut r = Rng::new(7);
        assert_eq!(r.below(0), 0);
        assert_eq!(r.range(5, 4), 5);
        for _ in 0..10_000 {
            assert!(r.below(3) < 3);
            assert!((-2..=2).contains(&r.range(-2, 2)));
            let f = r.unit_f32();
            assert!((0.0..1.0).contains(&f));
            let x = r.uniform(-4.0, 4.0);
            assert!((-4.0..4.0).contains(&x));
        }
        // The whole i64 range draws without overflowing.
        r.range(i64::MIN, i64::MAX);
        assert!(r.chance(100) && !r.chance(0));
        assert_eq!(*r.pick(&[9]), 9);
    }
}
