/// Stores wake signals; `server:not-a-key:` here is documentation.
pub struct SignalStore;

impl SignalStore {
    pub fn key(namespace: &str, queue: &str) -> String {
        // "server:commented-out:" is a comment, not a key.
        format!("server:signal:{namespace}:{queue}")
    }

    pub fn scan_limit(config: &dyn Fn(&str) -> Option<usize>) -> usize {
        config("server.polling.recovery_scan_limit").unwrap_or(5)
    }
}
