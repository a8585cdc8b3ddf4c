use metrics::counter;
use prometheus::{IntCounterVec, Opts};

pub struct RunMetrics;

impl RunMetrics {
    pub fn record(ns: &str, queue: &str, kind: &str) {
        // namespace is request-scoped: it must not become a label.
        counter!("dw_runs_total", "namespace" => ns.to_owned(), "task_queue" => queue.to_owned()).increment(1);
        let _ = kind;
    }

    pub fn exposition(queue: &str, worker: &str) -> String {
        // worker_id is not declared at all.
        format!("dw_runs_total{{task_queue=\"{queue}\",worker_id=\"{worker}\"}} 1\n")
    }

    pub fn registry() -> IntCounterVec {
        // Leaves out the declared task_queue label.
        IntCounterVec::new(Opts::new("dw_runs_total", "Runs"), &["workflow_type"]).unwrap()
    }
}
