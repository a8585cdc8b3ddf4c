pub struct Store;

impl Store {
    pub fn signal(queue: &str) -> String {
        format!("server:signal:{queue}")
    }
}

pub fn record(q: &str) -> String { format!("dw_runs_total{{task_queue=\"{q}\"}} 1") }