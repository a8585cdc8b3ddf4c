pub const K: &str = "server:signal:café";
