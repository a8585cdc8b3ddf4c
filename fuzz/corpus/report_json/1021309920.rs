pub struct Store;

impl Store {
    pub fn signal(queue: &str) -> String {
        format!("server:signal:{queue}")
    }
}
