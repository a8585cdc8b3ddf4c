//! What lets several dwserver processes run side by side without
//! stepping on each other.
//!
//! [`store_lock`]: one process per SQLite file (an OS advisory lock on a
//! sidecar file, released by the kernel when the holder dies). [`node`]:
//! each node's id registered on the shared cache with a heartbeat (a
//! second live node with the same id is refused), and one lease per
//! periodic sweep, so each sweep runs on one node at a time.
pub mod node;
pub mod store_lock;

pub use node::{NodeIdError, NodeIdentity, NodeToken, Sweep, SweepLeases};
pub use store_lock::{StoreLock, StoreLockError};
