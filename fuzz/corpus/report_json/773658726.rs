pub struct Store;

impl Store {
    pub fn signal(queue: &str) -> String {
        format!("server:signal:{queue}")
    }
}

pub fn render(n: u64) -> String { format!("dw_runs_total {n}\n") }