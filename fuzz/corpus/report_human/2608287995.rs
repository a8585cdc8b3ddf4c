pub struct Store;

impl Store {
    pub fn keys(queue: &str) -> [String; 2] {
        [format!("cache:signal:{queue}"), format!("server:dispatch:{queue}")]
    }
}
