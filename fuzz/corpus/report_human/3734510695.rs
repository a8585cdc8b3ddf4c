pub struct Store;

impl Store {
    pub fn signal(queue: &str) -> String {
        format!("server:signal:{queue}")
    }

    pub fn hint(queue: &str) -> String {
        // A new key family, shipped without a policy entry.
        format!("server:poll-hint:{}", queue)
    }
}
