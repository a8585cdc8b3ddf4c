pub struct Broker;

impl Broker {
    pub fn keys(id: &str) -> [String; 2] {
        [format!("server:query-task:{id}"), format!("server:query-task:lease:{id}")]
    }
}
