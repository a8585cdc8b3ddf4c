pub struct Store;

impl Store {
    // The missing `)` makes this file unparseable; the key is still found.
    pub fn signal(queue: &str -> String {
        format!("server:signal:{queue}")
    }
}
