//! Long-poll wait slots: local lock files, not cache keys.
//!
//! A long poll holds a slot while it waits, so a node caps how many waits
//! it holds globally and per namespace. Slots live on the node's own disk,
//! under `<polling cache path>/wait-slots/<server-id hash>/<pool>/`: each
//! pool has one admission mutex (`admission.lock`) and one exclusively
//! locked file per held wait. The locks are OS advisory locks, so a holder
//! that dies releases its slot at once, with no TTL to wait out. One
//! admission, under the mutex, counts the held files (their content names
//! the namespace) against both caps; namespaces are metadata on a slot, so
//! new namespace names create no new files or collections. An admission
//! reuses an idle file and keeps the other idle ones while the pool's
//! files stay within its global cap (it retires those past it), so after
//! it the pool holds at most the global cap's files (one more after a
//! refusal, which keeps an idle one) and the mutex.
//!
//! An admission is cheap however many waits are held. The process keeps
//! the admission mutex's file open (an in-process lock orders its own
//! threads, the file lock other processes), and it remembers the slots it
//! holds itself with their namespaces: those it counts without opening,
//! locking and reading their files again. Only files it does not hold are
//! opened, so with every wait held here an admission reads the directory
//! and touches no other file (before, each held slot cost four system
//! calls per admission, a twentieth of dwserver's CPU under the SDK
//! benchmark, docs/performance.md). Slots held by another process on the
//! same directory are counted from their files as before.
//!
//! A released slot's file stays open, unlocked (so any process may take
//! it), and the next admission locks it through that handle: a wait no
//! longer costs a file created, truncated, written, unlinked and closed,
//! which was most of an admission's CPU once the held slots were counted
//! from memory (a handle whose file another process retired is told apart
//! by its inode and closed). A reused file that already names the
//! namespace is not written again.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use fs4::fs_std::FileExt;

use crate::cache::hash_dimensions;

/// Why a slot operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WaitSlotError {
    /// The slot directory or a lock file could not be used.
    #[error("wait slot storage {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The caps of one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitCaps {
    /// Waits held at once by the node (all namespaces).
    pub global: usize,
    /// Waits held at once by one namespace.
    pub per_namespace: usize,
}

/// One pool of wait slots (e.g. workflow-task polls) of one node.
#[derive(Debug, Clone)]
pub struct WaitSlotPool {
    dir: PathBuf,
    caps: WaitCaps,
    /// The admission mutex's file, opened once; the in-process lock
    /// around it orders this process's admissions and releases (a file
    /// lock taken twice through one open file does not exclude).
    mutex: Arc<Mutex<Option<File>>>,
    /// The slots this process holds: file -> namespace.
    held: Held,
    /// Slot files this process released, kept open and unlocked.
    kept: Kept,
}

/// The slots one process holds, by file, with their namespaces.
type Held = Arc<Mutex<HashMap<PathBuf, String>>>;

/// The slot files one process released and keeps open (unlocked, so
/// another process may take them), by file, with the inode each handle
/// opened: a file another process retired (and maybe created again under
/// the same name) is told apart from the one the handle holds.
type Kept = Arc<Mutex<HashMap<PathBuf, (File, u64)>>>;

/// A held wait; dropping it (or the process dying) frees the slot.
#[derive(Debug)]
pub struct WaitSlot {
    file: Option<File>,
    inode: u64,
    path: PathBuf,
    held: Held,
    kept: Kept,
    order: Arc<Mutex<Option<File>>>,
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        // Under the pool's in-process admission lock: an admission of this
        // process sees the slot either held or kept, never between.
        // Another process's admission may find the file unlocked at once.
        let _order = lock(&self.order);
        lock(&self.held).remove(&self.path);
        if let Some(file) = self.file.take() {
            if FileExt::unlock(&file).is_ok() {
                lock(&self.kept).insert(self.path.clone(), (file, self.inode));
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded maps and file are left whole by any panic.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl WaitSlot {
    /// The slot file (tests watch it being reused).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Why an admission was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitRefusal {
    /// The node holds its global cap of waits.
    GlobalCap,
    /// The namespace holds its cap of waits.
    NamespaceCap,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WaitSlotError + '_ {
    move |source| WaitSlotError::Io {
        path: path.to_owned(),
        source,
    }
}

/// An idle slot file an admission locked: reused, kept or retired.
struct Idle {
    path: PathBuf,
    file: File,
    inode: u64,
}

impl WaitSlotPool {
    /// The pool `pool` of node `server_id` under `root` (`DW_POLLING_CACHE_PATH`).
    pub fn open(
        root: &Path,
        server_id: &str,
        pool: &str,
        caps: WaitCaps,
    ) -> Result<Self, WaitSlotError> {
        let dir = root
            .join("wait-slots")
            .join(hash_dimensions(&[server_id]))
            .join(pool);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        Ok(WaitSlotPool {
            dir,
            caps,
            mutex: Arc::new(Mutex::new(None)),
            held: Arc::default(),
            kept: Arc::default(),
        })
    }

    /// The pool's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Slot files on disk (held or idle), not counting the mutex.
    pub fn slot_files(&self) -> Result<Vec<PathBuf>, WaitSlotError> {
        Ok(self.slot_entries()?.into_iter().map(|(p, _)| p).collect())
    }

    /// Slot files on disk with their inodes, by name.
    fn slot_entries(&self) -> Result<Vec<(PathBuf, u64)>, WaitSlotError> {
        use std::os::unix::fs::DirEntryExt;
        let mut files = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let entry = entry.map_err(io(&self.dir))?;
            if entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("slot-"))
            {
                files.push((entry.path(), entry.ino()));
            }
        }
        files.sort();
        Ok(files)
    }

    /// Admits one wait of `namespace`, or says which cap refused it.
    pub fn admit(&self, namespace: &str) -> Result<Result<WaitSlot, WaitRefusal>, WaitSlotError> {
        let mutex_path = self.dir.join("admission.lock");
        let mut mutex = lock(&self.mutex);
        if mutex.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&mutex_path)
                .map_err(io(&mutex_path))?;
            *mutex = Some(file);
        }
        let Some(file) = mutex.as_ref() else {
            unreachable!("opened above");
        };
        if let Err(e) = file.lock_exclusive() {
            // Opened again next time, in case the file itself went bad.
            *mutex = None;
            return Err(io(&mutex_path)(e));
        }
        let outcome = self.admit_locked(namespace);
        let _ = FileExt::unlock(file);
        outcome
    }

    fn admit_locked(
        &self,
        namespace: &str,
    ) -> Result<Result<WaitSlot, WaitRefusal>, WaitSlotError> {
        let entries = self.slot_entries()?;
        let mut idle: Vec<Idle> = Vec::new();
        let mut held = 0usize;
        let mut held_here = 0usize;
        let mine = lock(&self.held);
        let mut kept = lock(&self.kept);
        // A kept handle whose file another process retired is closed.
        kept.retain(|path, (_, inode)| {
            entries
                .binary_search_by(|(p, _)| p.cmp(path))
                .is_ok_and(|at| entries[at].1 == *inode)
        });
        for (path, inode) in &entries {
            if let Some(owner) = mine.get(path) {
                // Held by this process: counted without touching the file.
                held += 1;
                held_here += usize::from(owner == namespace);
                continue;
            }
            // A file this process released is locked through the handle it
            // kept; any other is opened.
            let (file, inode) = match kept.remove(path) {
                Some(handle) => handle,
                None => match OpenOptions::new().read(true).write(true).open(path) {
                    Ok(file) => (file, *inode),
                    Err(_) => continue, // retired by someone else between listing and opening
                },
            };
            if file.try_lock_exclusive().unwrap_or(false) {
                idle.push(Idle {
                    path: path.clone(),
                    file,
                    inode,
                });
            } else {
                held += 1;
                if content(&file).is_some_and(|owner| owner == namespace) {
                    held_here += 1;
                }
                // Kept too: the next admission locks it without opening it.
                kept.insert(path.clone(), (file, inode));
            }
        }
        drop(mine);
        let refusal = if held >= self.caps.global {
            Some(WaitRefusal::GlobalCap)
        } else if held_here >= self.caps.per_namespace {
            Some(WaitRefusal::NamespaceCap)
        } else {
            None
        };
        let reuse = if refusal.is_none() { idle.pop() } else { None };
        // Idle files are kept (open, unlocked) while the pool's files stay
        // within its global cap; the others are retired while we hold
        // their locks. A refused admission keeps one so the next admission
        // does not create a file.
        let holding = held + usize::from(reuse.is_some());
        let room = self
            .caps
            .global
            .saturating_sub(holding)
            .max(usize::from(refusal.is_some()));
        for (n, spare) in idle.into_iter().enumerate() {
            if n < room && FileExt::unlock(&spare.file).is_ok() {
                kept.insert(spare.path, (spare.file, spare.inode));
            } else {
                let _ = fs::remove_file(&spare.path);
                drop(spare.file);
            }
        }
        drop(kept);
        if let Some(refusal) = refusal {
            return Ok(Err(refusal));
        }
        let Idle {
            path,
            mut file,
            inode,
        } = match reuse {
            Some(slot) => slot,
            None => self.create_slot(&entries)?,
        };
        // A reused file that already names the namespace (the usual case:
        // one namespace's polls reuse one another's files) is left as it
        // is; truncating and writing it again cost the file system a block
        // freed and one allocated.
        if content(&file).is_none_or(|owner| owner != namespace) {
            file.set_len(0).map_err(io(&path))?;
            file.seek(SeekFrom::Start(0)).map_err(io(&path))?;
            file.write_all(namespace.as_bytes()).map_err(io(&path))?;
            file.flush().map_err(io(&path))?;
        }
        lock(&self.held).insert(path.clone(), namespace.to_owned());
        Ok(Ok(WaitSlot {
            file: Some(file),
            inode,
            path,
            held: self.held.clone(),
            kept: self.kept.clone(),
            order: self.mutex.clone(),
        }))
    }

    /// A new slot file, locked, under the first name `entries` does not use.
    fn create_slot(&self, entries: &[(PathBuf, u64)]) -> Result<Idle, WaitSlotError> {
        // Names are dense (retired files free theirs); another process may
        // take a free name first, so this ends within (files on disk + 1)
        // attempts past the first free one.
        let name = |n: u64| self.dir.join(format!("slot-{n:06}"));
        let mut n = 0u64;
        while entries
            .binary_search_by(|(p, _)| p.as_path().cmp(&name(n)))
            .is_ok()
        {
            n += 1;
        }
        loop {
            let path = name(n);
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => {
                    file.lock_exclusive().map_err(io(&path))?;
                    let inode = {
                        use std::os::unix::fs::MetadataExt;
                        file.metadata().map_err(io(&path))?.ino()
                    };
                    return Ok(Idle { path, file, inode });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(io(&path)(e)),
            }
        }
    }
}

/// A slot file's namespace, read from its start (`None`: unreadable).
fn content(mut file: &File) -> Option<String> {
    let mut owner = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut owner).ok()?;
    Some(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(dir: &Path, global: usize, per_namespace: usize) -> WaitSlotPool {
        WaitSlotPool::open(
            dir,
            "node-1",
            "workflow",
            WaitCaps {
                global,
                per_namespace,
            },
        )
        .unwrap()
    }

    #[test]
    fn caps_hold_and_idle_files_are_reused_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let pool = pool(tmp.path(), 3, 2);
        let a1 = pool.admit("a").unwrap().unwrap();
        let a2 = pool.admit("a").unwrap().unwrap();
        assert_eq!(
            pool.admit("a").unwrap().unwrap_err(),
            WaitRefusal::NamespaceCap
        );
        let b1 = pool.admit("b").unwrap().unwrap();
        assert_eq!(
            pool.admit("c").unwrap().unwrap_err(),
            WaitRefusal::GlobalCap
        );
        let reused = a1.path().to_owned();
        drop((a1, a2, b1));
        assert_eq!(
            pool.slot_files().unwrap().len(),
            3,
            "released files wait for reuse"
        );
        let c = pool.admit("c").unwrap().unwrap();
        assert_eq!(
            pool.slot_files().unwrap().len(),
            3,
            "one reused, the other idle ones kept: the global cap's three files"
        );
        assert!(pool.slot_files().unwrap().contains(&c.path().to_owned()));
        let _ = reused;
    }

    #[test]
    fn idle_files_past_the_global_cap_are_retired() {
        let tmp = tempfile::tempdir().unwrap();
        let wide = pool(tmp.path(), 6, 6);
        let slots: Vec<_> = (0..6).map(|_| wide.admit("a").unwrap().unwrap()).collect();
        drop(slots);
        // The same directory under a lower cap (a restart with a smaller
        // DW_LONG_POLL_MAX_WAITS): the six released files are idle.
        let narrow = pool(tmp.path(), 2, 2);
        let held = narrow.admit("a").unwrap().unwrap();
        assert_eq!(
            pool_files(&narrow),
            2,
            "the held one and one idle within the cap of two"
        );
        assert!(pool_files(&narrow) <= 2);
        drop(held);
    }

    #[test]
    fn a_released_slot_is_reused_through_its_kept_handle_not_a_retired_files_name() {
        let tmp = tempfile::tempdir().unwrap();
        let here = pool(tmp.path(), 2, 2);
        let there = pool(tmp.path(), 2, 2);
        let first = here.admit("a").unwrap().unwrap();
        let name = first.path().to_owned();
        drop(first);
        let again = here.admit("a").unwrap().unwrap();
        assert_eq!(again.path(), name, "the released file is reused");
        assert_eq!(fs::read_to_string(&name).unwrap(), "a");
        drop(again);
        // Another process retires the file and creates one of the same
        // name, which it holds: the handle kept here is of the old file.
        fs::remove_file(&name).unwrap();
        let theirs = there.admit("b").unwrap().unwrap();
        assert_eq!(theirs.path(), name);
        let mine = here.admit("a").unwrap().unwrap();
        assert_ne!(mine.path(), name, "the retired file's handle is not reused");
        assert_eq!(
            here.admit("a").unwrap().unwrap_err(),
            WaitRefusal::GlobalCap,
            "their slot and mine are the cap's two"
        );
        drop((mine, theirs));
    }

    #[test]
    fn slots_held_here_are_counted_from_memory_and_others_from_their_files() {
        let tmp = tempfile::tempdir().unwrap();
        let here = pool(tmp.path(), 4, 2);
        // Another process on the same directory: a second pool has its own
        // open files, so the file locks exclude each other as across processes.
        let there = pool(tmp.path(), 4, 2);
        let a1 = here.admit("a").unwrap().unwrap();
        // Rewriting a held file's namespace does not change how this process
        // counts it (it does not read its own slots' files again) ...
        fs::write(a1.path(), "b").unwrap();
        let a2 = here.admit("a").unwrap().unwrap();
        assert_eq!(
            here.admit("a").unwrap().unwrap_err(),
            WaitRefusal::NamespaceCap,
            "both of a's slots counted from memory"
        );
        // ... while the other process reads it from the file: "b" now.
        let b1 = there.admit("b").unwrap().unwrap();
        assert_eq!(
            there.admit("b").unwrap().unwrap_err(),
            WaitRefusal::NamespaceCap,
            "the rewritten file and b1 are b's two"
        );
        let c1 = there.admit("c").unwrap().unwrap();
        assert_eq!(
            here.admit("c").unwrap().unwrap_err(),
            WaitRefusal::GlobalCap,
            "two held here and two there"
        );
        drop((a1, a2, b1, c1));
        // Released slots are forgotten: the caps count only what is held.
        let d = [here.admit("d"), here.admit("d")];
        let e = [here.admit("e"), here.admit("e")];
        for slot in d.iter().chain(&e) {
            assert!(matches!(slot, Ok(Ok(_))), "{slot:?}");
        }
        assert_eq!(
            here.admit("f").unwrap().unwrap_err(),
            WaitRefusal::GlobalCap
        );
        assert_eq!(pool_files(&here), 4, "the held four, no idle file left");
    }

    fn pool_files(pool: &WaitSlotPool) -> usize {
        pool.slot_files().unwrap().len()
    }

    #[test]
    fn many_namespaces_share_the_same_bounded_files() {
        let tmp = tempfile::tempdir().unwrap();
        let pool = pool(tmp.path(), 4, 1);
        let mut held = Vec::new();
        for ns in 0..1000 {
            if let Ok(slot) = pool.admit(&format!("ns-{ns}")).unwrap() {
                held.push(slot);
            }
            if held.len() == 4 {
                held.remove(0);
            }
            assert!(pool.slot_files().unwrap().len() <= 5);
        }
    }
}
