//! The persistent compile cache (DESIGN.md section 7), after JAX's: compiled programs stored
//! on disk, so compiling a module this machine compiled before is a file read and a link.
//!
//! An entry is a program image (`tessera_codegen::image`: its objects, buffer table, launches,
//! host operations) plus the module's entry signature, under a key that fingerprints
//! everything the code depends on: the module's text, the backend, the target CPU and its
//! features, the compile options that change the program, the memory spaces' capacities, the
//! LLVM library, and this build of Tessera (`TESSERA_BUILD_ID`, a fingerprint of its sources).
//!
//! Entries are written to a temporary file and renamed into place, so a reader (another
//! process included) sees a whole entry or none, and concurrent writers of one key leave one
//! whole entry. Each entry carries its key, its length and a checksum of its contents: an entry
//! that fails any check (truncated, corrupted, another format) is removed and the module is
//! recompiled; it is never loaded. The cache keeps at most `TESSERA_CACHE_MAX_MB` megabytes
//! of entries (default 1 GiB), evicting the least recently used.
//!
//! Finding the least recently used means reading every entry's size and time, about 2 us an
//! entry: 7-10 ms for a cache of 4,000 entries, four times what compiling a small module takes
//! on the Cranelift tier. So a store scans only when the cache may be over its bound: a
//! ledger file (`.usage`) holds the total the last scan found plus what stores added since,
//! and a store that keeps that total within the bound just updates it. Writers racing on the
//! ledger can lose an addition, so the estimate can only fall short by what they stored at
//! the same moment; a scan at least every [`RESCAN`] corrects it.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use tessera_codegen::image::ProgramImage;
use tessera_hlo::Shape;
use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

/// Where a client's compile cache is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CacheSetting {
    /// `TESSERA_CACHE_DIR` if set, else `tessera` in the user's cache directory (`~/.cache`
    /// on Linux); off if `TESSERA_CACHE=off`.
    #[default]
    FromEnvironment,
    /// No cache: every compile compiles.
    Off,
    /// This directory (created when needed), whatever the environment says.
    Directory(PathBuf),
}

/// What the cache did for one compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// No cache: it is off, the backend has nothing to cache (the interpreter), or the compile
    /// dumps what it does (which needs a real compile).
    Off,
    /// Loaded from the cache.
    Hit,
    /// Compiled (and stored, unless storing failed: see `stored`).
    Miss { stored: Result<(), String> },
    /// An entry was found but failed its checks (the reason); it was removed and the module
    /// recompiled.
    Rejected { reason: String, stored: Result<(), String> },
}

impl CacheOutcome {
    /// `off`, `hit`, `miss` or `rejected`.
    pub fn name(&self) -> &'static str {
        match self {
            CacheOutcome::Off => "off",
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss { .. } => "miss",
            CacheOutcome::Rejected { .. } => "rejected",
        }
    }
}

/// The on-disk cache of one client.
#[derive(Clone, Debug)]
pub(crate) struct CompileCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// An entry's key: 128 bits of the fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key(u128);

/// What an entry holds: the entry computation's parameter and result shapes (with their
/// layouts) and the program's image.
pub(crate) struct CachedProgram {
    pub parameters: Vec<Shape>,
    pub result: Shape,
    pub image: ProgramImage,
}

/// Identifies the container format; bumped when it changes.
const MAGIC: &[u8; 8] = b"TSRCACH1";
/// Magic, key, payload length, payload checksum.
const HEADER: usize = 8 + 16 + 8 + 8;
/// Entries' file extension.
const EXTENSION: &str = "tcc";
/// The default bound on the cache's size.
const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// The ledger's file name (a leading dot, as temporary files have, keeps it apart from entries).
const LEDGER: &str = ".usage";
/// The ledger's first line, naming its format.
const LEDGER_FORMAT: &str = "tessera compile cache usage 1";
/// The longest a store trusts the ledger's total without scanning the cache again.
const RESCAN: std::time::Duration = std::time::Duration::from_secs(600);

impl CompileCache {
    /// The cache `setting` names, or `None` if it is off (or no cache directory is known).
    pub(crate) fn open(setting: &CacheSetting) -> Option<CompileCache> {
        let dir = match setting {
            CacheSetting::Off => return None,
            CacheSetting::Directory(dir) => dir.clone(),
            CacheSetting::FromEnvironment => {
                if std::env::var("TESSERA_CACHE").is_ok_and(|v| matches!(v.as_str(), "off" | "0" | "false")) {
                    return None;
                }
                match std::env::var_os("TESSERA_CACHE_DIR") {
                    Some(dir) if !dir.is_empty() => PathBuf::from(dir),
                    _ => dirs::cache_dir()?.join("tessera"),
                }
            }
        };
        let max_bytes = std::env::var("TESSERA_CACHE_MAX_MB")
            .ok()
            .and_then(|mb| mb.parse::<u64>().ok())
            .map_or(DEFAULT_MAX_BYTES, |mb| mb.saturating_mul(1 << 20));
        Some(CompileCache { dir, max_bytes })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of `module_text` compiled with everything else `context` describes (each
    /// part's text, in a fixed order).
    pub(crate) fn key(module_text: &str, context: &[&str]) -> Key {
        let mut material = Vec::with_capacity(module_text.len() + 256);
        for part in [env!("TESSERA_BUILD_ID"), env!("CARGO_PKG_VERSION")].iter().chain(context) {
            material.extend_from_slice(part.as_bytes());
            // Parts hold no NUL, so the separator makes the concatenation unambiguous.
            material.push(0);
        }
        material.extend_from_slice(module_text.as_bytes());
        Key(xxh3_128(&material))
    }

    fn path(&self, key: Key) -> PathBuf {
        self.dir.join(format!("{:032x}.{EXTENSION}", key.0))
    }

    /// The entry under `key`: `Ok(None)` if there is none, `Err(reason)` if there is one that
    /// fails its checks (it is removed).
    pub(crate) fn load(&self, key: Key) -> Result<Option<CachedProgram>, String> {
        let path = self.path(key);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        match decode(key, &bytes) {
            Ok(program) => {
                // Recently used entries are evicted last.
                if let Ok(file) = fs::File::options().append(true).open(&path) {
                    let _ = file.set_modified(SystemTime::now());
                }
                Ok(Some(program))
            }
            Err(reason) => {
                let _ = fs::remove_file(&path);
                Err(format!("{}: {reason}", path.display()))
            }
        }
    }

    /// Stores `program` under `key`, atomically, then trims the cache to its bound.
    pub(crate) fn store(&self, key: Key, program: &CachedProgram) -> Result<(), String> {
        let bytes = encode(key, program);
        fs::create_dir_all(&self.dir).map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let temp = self.dir.join(format!(
            ".{:032x}.{}.{}.tmp",
            key.0,
            std::process::id(),
            WRITES.fetch_add(1, Ordering::Relaxed)
        ));
        let written = fs::File::create(&temp).and_then(|mut f| f.write_all(&bytes));
        if let Err(e) = written.and_then(|()| fs::rename(&temp, self.path(key))) {
            let _ = fs::remove_file(&temp);
            return Err(format!("writing {}: {e}", self.path(key).display()));
        }
        let now = SystemTime::now();
        match self.read_ledger() {
            Some((total, scanned))
                if total.saturating_add(bytes.len() as u64) <= self.max_bytes
                    && now.duration_since(scanned).is_ok_and(|age| age < RESCAN) =>
            {
                self.write_ledger(total + bytes.len() as u64, scanned);
            }
            _ => self.trim(),
        }
        Ok(())
    }

    /// The ledger's total and the time of the scan it started from; `None` when it is
    /// missing or unreadable (the next store scans and writes it).
    fn read_ledger(&self) -> Option<(u64, SystemTime)> {
        let text = fs::read_to_string(self.dir.join(LEDGER)).ok()?;
        let mut lines = text.lines();
        if lines.next()? != LEDGER_FORMAT {
            return None;
        }
        let (total, secs) = lines.next()?.split_once(' ')?;
        let scanned = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs.parse().ok()?);
        Some((total.parse().ok()?, scanned))
    }

    /// Replaces the ledger, atomically as entries are; a ledger that cannot be written is
    /// missing, which only costs the next store a scan.
    fn write_ledger(&self, total: u64, scanned: SystemTime) {
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let secs = scanned.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let temp =
            self.dir.join(format!("{LEDGER}.{}.{}.tmp", std::process::id(), WRITES.fetch_add(1, Ordering::Relaxed)));
        let text = format!("{LEDGER_FORMAT}\n{total} {secs}\n");
        if fs::write(&temp, text).and_then(|()| fs::rename(&temp, self.dir.join(LEDGER))).is_err() {
            let _ = fs::remove_file(&temp);
        }
    }

    /// Removes the least recently used entries while the cache holds more than its bound, and
    /// temporary files a writer that died left behind; then records what remains in the
    /// ledger.
    fn trim(&self) {
        let Ok(dir) = fs::read_dir(&self.dir) else { return };
        let now = SystemTime::now();
        let mut entries = Vec::new();
        let mut total = 0u64;
        for entry in dir.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(now);
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name.ends_with(".tmp") {
                if now.duration_since(modified).is_ok_and(|age| age.as_secs() > 3600) {
                    let _ = fs::remove_file(&path);
                }
            } else if path.extension().is_some_and(|e| e == EXTENSION) {
                total += meta.len();
                entries.push((modified, meta.len(), path));
            }
        }
        if total > self.max_bytes {
            entries.sort();
            for (_, len, path) in entries {
                if total <= self.max_bytes {
                    break;
                }
                if fs::remove_file(&path).is_ok() {
                    total -= len;
                }
            }
        }
        self.write_ledger(total, now);
    }
}

/// The entry's bytes: header (magic, key, payload length, payload checksum), then the
/// payload: the signature's length and text (one shape per line, the result last), then the
/// image.
fn encode(key: Key, program: &CachedProgram) -> Vec<u8> {
    let mut signature = String::new();
    for shape in program.parameters.iter().chain([&program.result]) {
        signature.push_str(&shape.to_string());
        signature.push('\n');
    }
    let mut payload = (signature.len() as u64).to_le_bytes().to_vec();
    payload.extend_from_slice(signature.as_bytes());
    payload.extend_from_slice(&program.image.encode());
    let mut bytes = Vec::with_capacity(HEADER + payload.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&key.0.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&xxh3_64(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    bytes
}

/// The program `bytes` hold if they are a whole, intact entry for `key`.
fn decode(key: Key, bytes: &[u8]) -> Result<CachedProgram, String> {
    if bytes.len() < HEADER {
        return Err(format!("truncated ({} bytes)", bytes.len()));
    }
    let (header, payload) = bytes.split_at(HEADER);
    if &header[..8] != MAGIC {
        return Err("not a cache entry of this format".into());
    }
    let field =
        |range: std::ops::Range<usize>| -> u64 { u64::from_le_bytes(header[range].try_into().expect("8 bytes")) };
    let stored_key = u128::from_le_bytes(header[8..24].try_into().expect("16 bytes"));
    if stored_key != key.0 {
        return Err("it holds another key".into());
    }
    if field(24..32) != payload.len() as u64 {
        return Err(format!("truncated: {} of {} payload bytes", payload.len(), field(24..32)));
    }
    if field(32..40) != xxh3_64(payload) {
        return Err("its checksum does not match (the file is corrupt)".into());
    }
    let (length, rest) = payload.split_first_chunk::<8>().ok_or("no signature")?;
    let length = usize::try_from(u64::from_le_bytes(*length)).map_err(|_| "bad signature length")?;
    if length > rest.len() {
        return Err("bad signature length".into());
    }
    let (signature, image) = rest.split_at(length);
    let signature = std::str::from_utf8(signature).map_err(|_| "the signature is not text")?;
    let mut shapes = signature
        .lines()
        .map(|line| line.parse::<Shape>().map_err(|e| format!("signature shape '{line}': {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let result = shapes.pop().ok_or("the signature has no result")?;
    let image = ProgramImage::decode(image)?;
    Ok(CachedProgram { parameters: shapes, result, image })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_codegen::image::{ImageBuffer, ImageLaunch, ImageRole};
    use tessera_codegen::{ObjectCode, Tier};

    fn program() -> CachedProgram {
        let image = ProgramImage {
            tier: Tier::Cranelift,
            code: ObjectCode { objects: vec![vec![1, 2, 3]], kernels: vec!["k".into()], entry: Some("e".into()) },
            buffers: vec![
                ImageBuffer { name: "p".into(), bytes: 16, role: ImageRole::Parameter(0) },
                ImageBuffer { name: "c".into(), bytes: 4, role: ImageRole::Constant(vec![9, 8, 7, 6]) },
            ],
            launches: vec![ImageLaunch { name: "k".into(), kernel: 0, extent: 4, buffers: vec![0, 1], traffic: None }],
            hosts: vec![],
            checks: vec!["check".into()],
            arenas: vec![(0, 128)],
            aliases: vec![(0, 0)],
        };
        CachedProgram {
            parameters: vec!["f32[4]{0}".parse().unwrap(), "(s32[], f32[2,3]{0,1})".parse().unwrap()],
            result: "f32[4]{0}".parse().unwrap(),
            image,
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-cache-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn entries_round_trip() {
        let key = CompileCache::key("HloModule m", &["llvm"]);
        let decoded = decode(key, &encode(key, &program())).unwrap();
        assert_eq!(decoded.image, program().image);
        assert_eq!(decoded.parameters, program().parameters);
        assert_eq!(decoded.result, program().result);
    }

    #[test]
    fn keys_cover_every_part() {
        let base = CompileCache::key("HloModule m", &["llvm", "cpu"]);
        assert_eq!(base, CompileCache::key("HloModule m", &["llvm", "cpu"]));
        assert_ne!(base, CompileCache::key("HloModule n", &["llvm", "cpu"]));
        assert_ne!(base, CompileCache::key("HloModule m", &["cranelift", "cpu"]));
        assert_ne!(base, CompileCache::key("HloModule m", &["llvm", "cpu2"]));
        // Parts are separated: moving text from one part to the next is another key.
        assert_ne!(CompileCache::key("", &["ab", "c"]), CompileCache::key("", &["a", "bc"]));
    }

    #[test]
    fn damaged_entries_are_rejected_and_removed() {
        let cache = CompileCache { dir: temp_dir("damaged"), max_bytes: DEFAULT_MAX_BYTES };
        let key = CompileCache::key("HloModule m", &[]);
        assert!(cache.load(key).unwrap().is_none());
        cache.store(key, &program()).unwrap();
        assert!(cache.load(key).unwrap().is_some());
        let whole = fs::read(cache.path(key)).unwrap();
        // Every truncation and every flipped byte is caught.
        for cut in [0, 7, HEADER - 1, HEADER, whole.len() / 2, whole.len() - 1] {
            fs::write(cache.path(key), &whole[..cut]).unwrap();
            let err = cache.load(key).err().unwrap_or_else(|| panic!("a {cut}-byte entry loaded"));
            assert!(err.contains("truncated") || err.contains("format"), "{err}");
            assert!(!cache.path(key).exists(), "a damaged entry stays");
        }
        for i in 0..whole.len() {
            let mut bad = whole.clone();
            bad[i] ^= 0x20;
            fs::write(cache.path(key), &bad).unwrap();
            assert!(cache.load(key).is_err(), "flipping byte {i} went unnoticed");
        }
        // An entry stored under another key is not this key's.
        let other = CompileCache::key("HloModule other", &[]);
        fs::write(cache.path(other), &whole).unwrap();
        assert!(cache.load(other).err().unwrap().contains("another key"));
        let _ = fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn concurrent_writers_leave_a_whole_entry() {
        let cache = CompileCache { dir: temp_dir("concurrent"), max_bytes: DEFAULT_MAX_BYTES };
        let key = CompileCache::key("HloModule m", &[]);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        cache.store(key, &program()).unwrap();
                        // A reader never sees a partial entry.
                        assert!(cache.load(key).is_ok());
                    }
                });
            }
        });
        assert_eq!(cache.load(key).unwrap().unwrap().image, program().image);
        let leftovers: Vec<_> =
            fs::read_dir(cache.dir()).unwrap().flatten().map(|e| e.file_name()).filter(|n| n != LEDGER).collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        let _ = fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn the_cache_evicts_the_least_recently_used() {
        let entry_bytes = encode(Key(0), &program()).len() as u64;
        let cache = CompileCache { dir: temp_dir("evict"), max_bytes: 3 * entry_bytes };
        let keys: Vec<Key> = (0..5).map(|i| CompileCache::key(&format!("HloModule m{i}"), &[])).collect();
        for (i, &key) in keys.iter().enumerate() {
            cache.store(key, &program()).unwrap();
            // Modification times order the entries (some file systems keep whole seconds).
            let when = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + i as u64);
            fs::File::options().append(true).open(cache.path(key)).unwrap().set_modified(when).unwrap();
        }
        let kept: Vec<bool> = keys.iter().map(|&k| cache.path(k).exists()).collect();
        assert_eq!(kept, [false, false, true, true, true]);
        let _ = fs::remove_dir_all(cache.dir());
    }

    /// The bytes of the entries in `cache`'s folder.
    fn entry_bytes(cache: &CompileCache) -> u64 {
        let entries = fs::read_dir(cache.dir()).unwrap().flatten();
        entries
            .filter(|e| e.path().extension().is_some_and(|x| x == EXTENSION))
            .map(|e| e.metadata().unwrap().len())
            .sum()
    }

    #[test]
    fn the_ledger_counts_what_stores_add_and_a_bad_one_is_rebuilt() {
        let cache = CompileCache { dir: temp_dir("ledger"), max_bytes: DEFAULT_MAX_BYTES };
        let keys: Vec<Key> = (0..3).map(|i| CompileCache::key(&format!("HloModule m{i}"), &[])).collect();
        cache.store(keys[0], &program()).unwrap();
        cache.store(keys[1], &program()).unwrap();
        assert_eq!(cache.read_ledger().map(|(total, _)| total), Some(entry_bytes(&cache)));
        // An entry written behind the cache's back is not counted until the next scan, which
        // an unreadable ledger forces.
        fs::write(cache.dir().join(format!("{:032x}.{EXTENSION}", 7)), [0u8; 100]).unwrap();
        fs::write(cache.dir().join(LEDGER), "garbage").unwrap();
        cache.store(keys[2], &program()).unwrap();
        assert_eq!(cache.read_ledger().map(|(total, _)| total), Some(entry_bytes(&cache)));
        // So does a ledger whose scan is older than `RESCAN`.
        let (total, _) = cache.read_ledger().unwrap();
        cache.write_ledger(total - 100, SystemTime::now() - 2 * RESCAN);
        cache.store(keys[0], &program()).unwrap();
        assert_eq!(cache.read_ledger().map(|(total, _)| total), Some(entry_bytes(&cache)));
        let _ = fs::remove_dir_all(cache.dir());
    }
}
