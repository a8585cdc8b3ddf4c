//! What lets several dwserver processes run side by side without
//! stepping on each other.
//!
//! [`store_lock`]: one process per SQLite file (an OS advisory lock on a
//! sidecar file, released by the kernel when the holder dies).
pub mod store_lock;

pub use store_lock::{StoreLock, StoreLockError};
