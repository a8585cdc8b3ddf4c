//! The scan layer: reading and extracting every selected file, in
//! parallel, into the per-file facts the inventory regroups. It uses the
//! [`crate::extract`]ors, the files [`crate::discover`] selected and
//! [`crate::base`], nothing above.
//!
//! Each worker thread gets a large stack so that a pathological file cannot
//! overflow it while being parsed, and one read buffer that it reuses for
//! every file. The [`Prefilter`] runs before any parsing: most files never
//! mention the cache namespace, the metric prefix, a scan limit or an owner
//! where it could matter, and those are counted but not parsed. A file over
//! the size limit is read no further than its first [`PROBE_BYTES`] (the
//! one read that, for most files, is all a file costs: see [`Reader`]), so
//! memory stays a small multiple of the largest file read (plus at most
//! [`PREREAD_BYTES`] read ahead, see [`Preread`]). Which extractor reads a
//! file is `extract::extract_file`'s decision.

pub mod allows;
pub mod owners;
pub mod prefilter;

use std::io::Read;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::base::diagnostic::{Anchor, Diagnostic};
use crate::base::line_index::TextRange;
use crate::discover::walk::{FoundFile, Roles, SelectedFile};
use crate::extract::{self, ExtractConfig, FileFacts};
use crate::scan::owners::ModulePaths;
use crate::scan::prefilter::{Prefilter, Verdict};

/// Files larger than this are skipped with a warning unless the command
/// line says otherwise (`--max-file-size`).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 << 20;

/// Stack size for extraction threads.
const STACK_BYTES: usize = 256 << 20;
/// How much of a file is inspected for NUL bytes to call it binary.
const BINARY_SNIFF_BYTES: usize = 8192;

/// The facts of one scanned source file.
#[derive(Debug)]
pub struct ScannedFile {
    /// Path relative to the root.
    pub rel: String,
    /// What the file was searched for.
    pub roles: Roles,
    /// What it contributed.
    pub facts: FileFacts,
}

/// A doc file's text (docs are small and searched for many mentions).
#[derive(Debug)]
pub struct DocFile {
    /// Path relative to the root.
    pub rel: String,
    /// The text.
    pub text: String,
}

/// The result of scanning every selected file.
#[derive(Debug, Default)]
pub struct ScanOutput {
    /// Source files that contributed facts, sorted by path.
    pub sources: Vec<ScannedFile>,
    /// Doc files, sorted by path.
    pub docs: Vec<DocFile>,
    /// Files that could not be read or parsed.
    pub warnings: Vec<Diagnostic>,
    /// How many selected files were looked at.
    pub files_scanned: usize,
    /// Inline allows, in file and line order.
    pub allows: Vec<allows::InlineAllow>,
}

enum Outcome {
    Source(ScannedFile),
    Doc(DocFile),
    Warning(Diagnostic),
    Skipped,
}

/// The most bytes [`Preread::read_until`] holds.
pub const PREREAD_BYTES: usize = 8 << 20;

/// Files read before the policy said which ones matter.
///
/// On a large policy, loading it takes longer than walking the tree, and
/// the second core has nothing to do once the walk is over. It reads files
/// then, while the policy loads: the scan takes their bytes from here
/// instead of opening them again, so less of the reading is left for after
/// the policy. A file that cannot be read, or is over the size limit, is
/// left out: the scan reads it again and reports it exactly as before.
///
/// Only files under [`PROBE_BYTES`] are kept, the ones a single read
/// takes whole: the files read ahead are every file found, selected or
/// not, and a large one (the policy itself, often a megabyte) cost the
/// thread more time, zeroing, copying and page faults than hundreds of
/// small sources; the scan reads it if it is selected.
///
/// Files are known by their place in the walk's list
/// ([`SelectedFile::found_index`]), so keeping one costs no copy of its
/// path and no hashing, and all bytes go into one buffer whose room is
/// reserved at the start: the pages are only touched as files fill them,
/// and nothing is copied to grow it.
#[derive(Debug, Default)]
pub struct Preread {
    bytes: Vec<u8>,
    /// The bytes of the walk's `i`-th file, for the files read.
    files: Vec<Option<Range<usize>>>,
}

impl Preread {
    /// Reads `found` files (each at most `max_file_bytes`, and under
    /// [`PROBE_BYTES`]) until `stop` is set or [`PREREAD_BYTES`] are held.
    /// Reads nothing on one core, where it would only slow the policy load
    /// down.
    pub fn read_until(found: &[FoundFile], max_file_bytes: u64, stop: &AtomicBool) -> Preread {
        let mut preread = Preread::default();
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            return preread;
        }
        // One byte under the first read: a file that fills it is left out.
        let mut reader = Reader::new(max_file_bytes.min(PROBE_BYTES as u64 - 1));
        preread.bytes.reserve_exact(PREREAD_BYTES);
        preread.files.reserve_exact(found.len());
        for file in found {
            if stop.load(Ordering::Relaxed) || preread.bytes.len() >= PREREAD_BYTES {
                break;
            }
            let mut kept = None;
            if let Ok(Ok(bytes)) = reader.read(&file.path) {
                if preread.bytes.len() + bytes.len() <= PREREAD_BYTES {
                    let start = preread.bytes.len();
                    preread.bytes.extend_from_slice(bytes);
                    kept = Some(start..preread.bytes.len());
                }
            }
            preread.files.push(kept);
            reader.shrink();
        }
        preread
    }

    /// The bytes read for the walk's `found_index`-th file, if it was read.
    fn get(&self, found_index: usize) -> Option<&[u8]> {
        let range = self.files.get(found_index)?.as_ref()?;
        Some(&self.bytes[range.clone()])
    }
}

/// Scans `files` on one worker thread per core; files over
/// `max_file_bytes` are skipped with a warning.
pub fn scan(
    root: &Path,
    files: &[SelectedFile],
    config: &ExtractConfig,
    owner_names: &[String],
    max_file_bytes: u64,
) -> ScanOutput {
    // Building can only fail on absurd pattern sets; then every file is parsed.
    let prefilter = Prefilter::new(config, owner_names);
    let nothing_read = Preread::default();
    scan_with(
        root,
        files,
        &nothing_read,
        config,
        prefilter.as_ref(),
        max_file_bytes,
    )
}

/// [`scan`] with a prefilter built by the caller (`None`: every file is
/// read by its extractor), taking the bytes of the files in `preread` from
/// there (`preread` must have read the list that `files` were selected
/// from: it knows files by their place in it).
pub fn scan_with(
    root: &Path,
    files: &[SelectedFile],
    preread: &Preread,
    config: &ExtractConfig,
    prefilter: Option<&Prefilter>,
    max_file_bytes: u64,
) -> ScanOutput {
    let modules = ModulePaths::default();
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(files.len().max(1));
    let mut outcomes: Vec<Vec<(usize, Outcome)>> = Vec::new();
    let mut inline_allows = Vec::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let worker = || {
                    let mut out = Vec::new();
                    let mut worker = Worker {
                        reader: Reader::new(max_file_bytes),
                        allows: Vec::new(),
                    };
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(file) = files.get(i) else { break };
                        let outcome = scan_one(
                            root,
                            file,
                            preread,
                            config,
                            prefilter,
                            &modules,
                            &mut worker,
                        );
                        worker.reader.shrink();
                        if !matches!(outcome, Outcome::Skipped) {
                            out.push((i, outcome));
                        }
                    }
                    (out, worker.allows)
                };
                std::thread::Builder::new()
                    .name("dwlint-scan".into())
                    .stack_size(STACK_BYTES)
                    .spawn_scoped(scope, worker)
            })
            .collect();
        for handle in handles.into_iter().flatten() {
            if let Ok((out, found)) = handle.join() {
                outcomes.push(out);
                inline_allows.extend(found);
            }
        }
    });
    inline_allows.sort_by(|a, b| (&a.file, a.range.start).cmp(&(&b.file, b.range.start)));
    // Each worker's list is in file order (it takes files in order), so
    // merging them gives every outcome in file order without a combined
    // list and a sort, which moved each outcome twice more.
    let sources = outcomes
        .iter()
        .flatten()
        .filter(|(_, outcome)| matches!(outcome, Outcome::Source(_)))
        .count();
    let mut output = ScanOutput {
        sources: Vec::with_capacity(sources),
        files_scanned: files.len(),
        allows: inline_allows,
        ..ScanOutput::default()
    };
    let mut lists: Vec<_> = outcomes
        .into_iter()
        .map(|list| list.into_iter().peekable())
        .collect();
    loop {
        let first = lists
            .iter_mut()
            .enumerate()
            .filter_map(|(k, list)| list.peek().map(|(i, _)| (*i, k)))
            .min();
        let Some((_, k)) = first else { break };
        let Some((_, outcome)) = lists[k].next() else {
            break;
        };
        match outcome {
            Outcome::Source(f) => output.sources.push(f),
            Outcome::Doc(d) => output.docs.push(d),
            Outcome::Warning(w) => output.warnings.push(w),
            Outcome::Skipped => {}
        }
    }
    output
}

fn warning(code: &'static str, rel: &str, message: String, help: &str) -> Outcome {
    Outcome::Warning(
        Diagnostic::new(code, rel, message)
            .at(Anchor::plain(rel, TextRange::file_start()))
            .help(help),
    )
}

/// How many bytes the first read of a file asks for. Most source files
/// are smaller: for them that one read is the whole file, and the size is
/// never asked for (see [`Reader`]).
const PROBE_BYTES: usize = 64 << 10;

/// One worker's read buffer, reused for every file it reads, and the
/// directory of the last file it opened.
///
/// Most selected files are small and sit next to the previous one (the
/// files are sorted by path), so the fixed cost of a file is its system
/// calls: it is opened by name inside its open directory rather than by its
/// whole path from the root, and read first with one call of up to
/// [`PROBE_BYTES`] (one byte over the size limit, if the limit is lower).
/// A regular file on a file system that fills every read until the file's
/// end (ext4, xfs, btrfs, tmpfs, overlayfs and the like) is whole when that
/// read comes back short, so a small file costs three calls (open, read,
/// close) and its size is never asked for. Only when the first read fills
/// is the size looked up and the limit applied, so a file over the limit is
/// not read past [`PROBE_BYTES`]. Elsewhere (procfs, sysfs, FUSE, network
/// file systems, whose reads may stop short before the end and whose sizes
/// may lie) the size is looked up first and reading goes on to the end, as
/// it always did. On a tree of 2,201 small files in one directory that is
/// three calls a file, and the kernel looks up one name instead of five.
struct Reader {
    /// The last file's bytes are its first part (see [`Reader::read`]);
    /// the rest is already initialized space, kept so that a read does not
    /// zero it again.
    buffer: Vec<u8>,
    max_file_bytes: u64,
    #[cfg(unix)]
    dir: Option<OpenDir>,
}

/// The directory of the last file a [`Reader`] opened.
#[cfg(unix)]
struct OpenDir {
    path: std::path::PathBuf,
    fd: std::os::fd::OwnedFd,
    /// Whether its file system fills every read of a regular file until the
    /// file's end, so that a short read means the whole file was read.
    whole_reads: bool,
}

impl Reader {
    fn new(max_file_bytes: u64) -> Reader {
        Reader {
            buffer: Vec::new(),
            max_file_bytes,
            #[cfg(unix)]
            dir: None,
        }
    }

    /// Reads `path` into the buffer; `Ok(Err(size))` when it is over the
    /// limit (such a file is read no further than its first
    /// [`PROBE_BYTES`], or not at all when its size is looked up first).
    fn read(&mut self, path: &Path) -> std::io::Result<Result<&[u8], u64>> {
        let (mut file, whole_reads) = self.open(path)?;
        let mut filled = 0;
        if whole_reads {
            // One byte over the limit is enough to see that a file is over.
            let probe = usize::try_from(self.max_file_bytes.saturating_add(1))
                .map_or(PROBE_BYTES, |over| over.min(PROBE_BYTES));
            if self.buffer.len() < probe {
                self.buffer.resize(probe, 0);
            }
            filled = read_some(&mut file, &mut self.buffer[..probe])?;
            if filled < probe {
                return Ok(Ok(&self.buffer[..filled]));
            }
        }
        let size = file.metadata()?.len();
        if size > self.max_file_bytes {
            return Ok(Err(size));
        }
        // `size` fits: it is at most the limit, and the limit is memory.
        let size = usize::try_from(size).unwrap_or(usize::MAX - 1);
        // Read unless the first read already holds all of it (a file whose
        // size says it is empty is read too: under /proc it is not).
        if filled < size || filled == 0 {
            // One byte more than the file holds, to notice that it grew.
            if self.buffer.len() < size + 1 {
                self.buffer.resize(size + 1, 0);
            }
            loop {
                match read_some(&mut file, &mut self.buffer[filled..=size])? {
                    0 => break,
                    n => filled += n,
                }
                if filled >= size {
                    break;
                }
            }
        }
        if filled == size {
            // All of it as it was when its size was looked up: a regular
            // file's read stops short only at its end, so no read is spent
            // to see nothing.
            return Ok(Ok(&self.buffer[..filled]));
        }
        // It changed size while being read (or is not what its size says,
        // like a file under /proc): read on to the end, cut at the limit
        // (plus one byte, to notice).
        self.buffer.truncate(filled);
        let rest = self
            .max_file_bytes
            .saturating_add(1)
            .saturating_sub(filled as u64);
        (&mut file).take(rest).read_to_end(&mut self.buffer)?;
        if self.buffer.len() as u64 > self.max_file_bytes {
            return Ok(Err(self.buffer.len() as u64));
        }
        Ok(Ok(&self.buffer))
    }

    /// Opens `path` by name inside its directory, which stays open for the
    /// next file; by its whole path when the directory cannot be opened.
    /// Also says whether a short read of it means its end was reached.
    #[cfg(unix)]
    fn open(&mut self, path: &Path) -> std::io::Result<(std::fs::File, bool)> {
        use rustix::fs::{Mode, OFlags};
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok((std::fs::File::open(path)?, false));
        };
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        if self.dir.as_ref().is_none_or(|open| open.path != parent) {
            self.dir = rustix::fs::open(
                parent,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()
            .map(|fd| OpenDir {
                path: parent.to_path_buf(),
                whole_reads: fills_whole_reads(&fd),
                fd,
            });
        }
        match &self.dir {
            Some(dir) => {
                let fd = rustix::fs::openat(
                    &dir.fd,
                    name,
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                Ok((std::fs::File::from(fd), dir.whole_reads))
            }
            None => Ok((std::fs::File::open(path)?, false)),
        }
    }

    #[cfg(not(unix))]
    fn open(&mut self, path: &Path) -> std::io::Result<(std::fs::File, bool)> {
        Ok((std::fs::File::open(path)?, false))
    }

    /// Gives back the memory a large file made the buffer take, so that it
    /// is not held for the small files that follow.
    fn shrink(&mut self) {
        const KEEP: usize = 1 << 20;
        if self.buffer.capacity() > KEEP {
            self.buffer = Vec::new();
        }
    }
}

/// One read into `buf`, tried again when a signal interrupts it.
fn read_some(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            done => return done,
        }
    }
}

/// Whether the file system holding `dir` is one whose reads of a regular
/// file return less than asked only at the file's end: the local disk file
/// systems, tmpfs and overlayfs (whose reads are its lower file system's).
/// Not procfs or sysfs (a read of a large file under /proc returns one page),
/// nor FUSE or network file systems, whose servers decide; nor any file
/// system not named here. Costs one call per directory opened.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn fills_whole_reads(dir: &std::os::fd::OwnedFd) -> bool {
    // Magic numbers from linux/magic.h (ZFS's from its own headers).
    const WHOLE_READS: [u32; 8] = [
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0x794C_7630, // overlayfs
        0xF2F5_2010, // f2fs
        0x2FC1_2FC1, // zfs
        0xCA45_1A4E, // bcachefs
    ];
    // `f_type` is signed on some targets and 32 bits wide on others; every
    // magic number fits in 32 bits.
    rustix::fs::fstatfs(dir).is_ok_and(|fs| WHOLE_READS.contains(&(fs.f_type as u32)))
}

/// Elsewhere the file system is not known: the size is looked up first.
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
fn fills_whole_reads(_dir: &std::os::fd::OwnedFd) -> bool {
    false
}

/// `bytes` as `16 MiB`, `512 KiB` or `100 bytes`.
pub fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => {
            format!("{:.1} MiB", b as f64 / f64::from(1 << 20)).replace(".0 MiB", " MiB")
        }
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0).replace(".0 KiB", " KiB"),
        b => format!("{b} bytes"),
    }
}

/// What one scan thread keeps from file to file.
struct Worker {
    /// Its read buffer.
    reader: Reader,
    /// The inline allows found so far.
    allows: Vec<allows::InlineAllow>,
}

fn scan_one(
    root: &Path,
    file: &SelectedFile,
    preread: &Preread,
    config: &ExtractConfig,
    prefilter: Option<&Prefilter>,
    modules: &ModulePaths,
    worker: &mut Worker,
) -> Outcome {
    let Worker {
        reader,
        allows: inline_allows,
    } = worker;
    let limit = reader.max_file_bytes;
    let read = match preread.get(file.found_index) {
        Some(bytes) => Ok(Ok(bytes)),
        None => reader.read(&file.path),
    };
    let bytes =
        match read {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(size)) => return warning(
                "unreadable-file",
                &file.rel,
                format!(
                    "`{}` is {}, over the {} file size limit, and was skipped",
                    file.rel,
                    human_size(size),
                    human_size(limit)
                ),
                "raise the limit with --max-file-size, or exclude the file in [sources].exclude",
            ),
            Err(e) => {
                return warning(
                    "unreadable-file",
                    &file.rel,
                    format!("cannot read `{}`: {e}", file.rel),
                    "fix the file's permissions or exclude it in [sources].exclude",
                )
            }
        };
    if memchr::memchr(0, &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)]).is_some() {
        return warning(
            "unreadable-file",
            &file.rel,
            format!("`{}` looks binary and was skipped", file.rel),
            "exclude binary files in [sources].exclude",
        );
    }
    // A scrape config may hold nothing but per-run variables, so the
    // remote-write files (few and small) are always read.
    let prefiltered = !file.roles.docs && !file.roles.remote_write;
    let verdict = match prefilter {
        // The prefilter's pass also looks for the allow marker.
        Some(p) if prefiltered => p.examine(&file.rel, bytes),
        _ => Verdict {
            wanted: true,
            allow_marker: memchr::memmem::find(bytes, allows::MARKER.as_bytes()).is_some(),
        },
    };
    // Whether or not the file is wanted: an allow left in a file that no
    // longer holds anything it could allow is reported as unused.
    if verdict.allow_marker {
        if let Ok(text) = std::str::from_utf8(bytes) {
            inline_allows.extend(allows::find(&file.rel, text));
        }
    }
    if !verdict.wanted {
        return Outcome::Skipped;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            return warning(
                "unreadable-file",
                &file.rel,
                format!(
                    "`{}` is not valid UTF-8 (at byte {}) and was skipped",
                    file.rel,
                    e.valid_up_to()
                ),
                "re-encode the file as UTF-8 or exclude it in [sources].exclude",
            )
        }
    };
    if file.roles.docs {
        return Outcome::Doc(DocFile {
            rel: file.rel.clone(),
            text: text.to_owned(),
        });
    }
    let facts = extract::extract_file(&file.rel, text, config, || {
        modules.module_path(root, &file.rel)
    });
    Outcome::Source(ScannedFile {
        rel: file.rel.clone(),
        roles: file.roles,
        facts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(reader: &mut Reader, path: &Path) -> Result<Vec<u8>, u64> {
        reader.read(path).unwrap().map(<[u8]>::to_vec)
    }

    #[test]
    fn files_up_to_the_limit_are_read_and_larger_ones_report_their_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut reader = Reader::new(10);
        for (name, text) in [
            ("empty.rs", ""),
            ("nine.rs", "012345678"),
            ("ten.rs", "0123456789"),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            assert_eq!(
                read(&mut reader, &path),
                Ok(text.as_bytes().to_vec()),
                "{name}"
            );
        }
        let eleven = dir.path().join("eleven.rs");
        std::fs::write(&eleven, "0123456789A").unwrap();
        assert_eq!(read(&mut reader, &eleven), Err(11));
        // The buffer is reused: a shorter file after a longer one is not
        // padded with the longer one's bytes.
        std::fs::write(dir.path().join("one.rs"), "x").unwrap();
        assert_eq!(
            read(&mut reader, &dir.path().join("one.rs")),
            Ok(b"x".to_vec())
        );
    }

    #[test]
    fn files_in_other_directories_are_opened_in_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut reader = Reader::new(100);
        for sub in ["a", "b", "a/c", "b"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
            let path = dir.path().join(sub).join("same-name.rs");
            std::fs::write(&path, sub).unwrap();
            assert_eq!(
                read(&mut reader, &path),
                Ok(sub.as_bytes().to_vec()),
                "{sub}"
            );
        }
        let missing = reader.read(&dir.path().join("a/missing.rs")).unwrap_err();
        let by_path = std::fs::File::open(dir.path().join("a/missing.rs")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(missing.to_string(), by_path.to_string());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_longer_than_its_size_is_read_to_its_end_and_held_to_the_limit() {
        // Files under /proc say they are empty and are not.
        let status = Path::new("/proc/self/status");
        let whole = std::fs::read(status).unwrap();
        assert!(whole.len() > 100);
        let mut reader = Reader::new(1 << 20);
        let read_back = read(&mut reader, status).unwrap();
        assert!(read_back.starts_with(b"Name:"), "{read_back:?}");
        assert!(read_back.len() > 100);
        let mut small = Reader::new(50);
        assert_eq!(read(&mut small, status), Err(51));
    }
    /// `len` bytes that differ from one position to the next, so that a
    /// piece read twice or left out shows.
    fn numbered(len: usize) -> Vec<u8> {
        (0..len).map(|i| b'a' + (i % 23) as u8).collect()
    }

    #[test]
    fn files_around_the_first_read_are_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut reader = Reader::new(1 << 20);
        for len in [
            PROBE_BYTES - 1,
            PROBE_BYTES,
            PROBE_BYTES + 1,
            2 * PROBE_BYTES + 3,
            5,
            PROBE_BYTES,
            0,
        ] {
            let path = dir.path().join(format!("{len}.rs"));
            std::fs::write(&path, numbered(len)).unwrap();
            assert_eq!(read(&mut reader, &path), Ok(numbered(len)), "{len} bytes");
        }
    }

    #[test]
    fn limits_below_and_around_the_first_read_are_applied_exactly() {
        let dir = tempfile::tempdir().unwrap();
        for limit in [0, 1, 100, PROBE_BYTES - 1, PROBE_BYTES, PROBE_BYTES + 1] {
            let mut reader = Reader::new(limit as u64);
            for len in [
                limit.saturating_sub(1),
                limit,
                limit + 1,
                limit + 2,
                3 * PROBE_BYTES,
            ] {
                let path = dir.path().join(format!("{limit}-{len}.rs"));
                std::fs::write(&path, numbered(len)).unwrap();
                let expected = if len <= limit {
                    Ok(numbered(len))
                } else {
                    Err(len as u64)
                };
                assert_eq!(
                    read(&mut reader, &path),
                    expected,
                    "{len} bytes, limit {limit}"
                );
            }
        }
    }

    #[test]
    fn a_file_over_the_limit_is_not_read_past_the_first_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.rs");
        std::fs::write(&path, numbered(64 * PROBE_BYTES)).unwrap();
        let mut reader = Reader::new(8 * PROBE_BYTES as u64);
        assert_eq!(read(&mut reader, &path), Err(64 * PROBE_BYTES as u64));
        assert!(
            reader.buffer.len() <= PROBE_BYTES,
            "{}",
            reader.buffer.len()
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_proc_file_of_several_pages_is_read_to_its_end() {
        // A read of /proc/self/smaps returns about a page at a time, so a
        // short read there is not its end. The last mapping (the highest
        // address, which does not move) is in what is read back.
        let smaps = Path::new("/proc/self/smaps");
        assert!(std::fs::read(smaps).unwrap().len() > 2 * 4096);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let last_range = maps.lines().last().unwrap().split(' ').next().unwrap();
        let mut reader = Reader::new(64 << 20);
        let read_back = read(&mut reader, smaps).unwrap();
        let read_back = String::from_utf8(read_back).unwrap();
        assert!(
            read_back.contains(last_range),
            "{last_range} not in {read_back}"
        );
        let proc_dir = rustix::fs::open(
            "/proc/self",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        assert!(!fills_whole_reads(&proc_dir));
    }

    #[test]
    fn read_ahead_holds_what_a_read_would_give_and_leaves_out_the_rest() {
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            return; // one core: nothing is read ahead, by design
        }
        let dir = tempfile::tempdir().unwrap();
        let mut found = Vec::new();
        for (rel, text) in [
            ("a.rs", "fn a() {}\n"),
            ("sub/b.rs", "const K: &str = \"server:x:\";\n"),
            ("big.rs", "0123456789abcdef0123456789abcdef0"),
        ] {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            found.push(FoundFile {
                rel: rel.into(),
                path,
            });
        }
        found.push(FoundFile {
            rel: "missing.rs".into(),
            path: dir.path().join("missing.rs"),
        });
        let go_on = AtomicBool::new(false);
        let preread = Preread::read_until(&found, 32, &go_on);
        assert_eq!(preread.get(0), Some(&b"fn a() {}\n"[..]));
        assert_eq!(
            preread.get(1).map(<[u8]>::to_vec),
            Some(std::fs::read(dir.path().join("sub/b.rs")).unwrap())
        );
        // Over the size limit, or unreadable: left for the scan to report.
        assert_eq!(preread.get(2), None);
        assert_eq!(preread.get(3), None);
        assert_eq!(preread.get(4), None, "past the walk's files");
        // Once the policy is loaded, nothing more is read.
        let stop = AtomicBool::new(true);
        assert_eq!(Preread::read_until(&found, 32, &stop).get(0), None);
        // Under the size limit but not under one first read: left out.
        let mut around = Vec::new();
        for len in [PROBE_BYTES - 1, PROBE_BYTES, 3 * PROBE_BYTES] {
            let path = dir.path().join(format!("{len}.rs"));
            std::fs::write(&path, numbered(len)).unwrap();
            around.push(FoundFile {
                rel: format!("{len}.rs"),
                path,
            });
        }
        let preread = Preread::read_until(&around, 1 << 20, &go_on);
        assert_eq!(
            preread.get(0).map(<[u8]>::to_vec),
            Some(numbered(PROBE_BYTES - 1))
        );
        assert_eq!(preread.get(1), None);
        assert_eq!(preread.get(2), None);
    }
}
