pub mod polling {
    pub struct SignalStore;

    impl SignalStore {
        pub fn key(queue: &str) -> String {
            format!("server:signal:{queue}")
        }
    }
}

pub fn render(n: u64) -> String {
    format!("dw_runs_total {n}\n")
}
