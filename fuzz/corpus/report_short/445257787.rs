use metrics::{counter, describe_counter};

pub fn record() {
    counter!("dw_runs_total").increment(1);
    describe_counter!("dw_signal_rejections_total", "Signals rejected");
    counter!("dw_signal_rejections_total", "reason" => "structural_limit").increment(1);
}
