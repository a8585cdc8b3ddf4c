use metrics::counter;

pub struct RunMetrics;

impl RunMetrics {
    pub fn record(queue: &str) {
        counter!("dw_runs_total", "task_queue" => queue.to_owned()).increment(1);
    }

    pub fn exposition(queue: &str, n: u64) -> String {
        format!("dw_runs_total{{task_queue=\"{queue}\"}} {n}\ndw_uptime_seconds {n}\n")
    }
}
