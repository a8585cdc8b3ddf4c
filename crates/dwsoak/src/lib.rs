//! `dwsoak`: the soak harness of the seed's Soak Evidence section.
//!
//! It drives a dwserver over HTTP with a workflow load, samples the server's
//! memory, its SQLite file, every cache family (and Redis), runs the live
//! metric checks at every sample, and writes the evidence artifact that
//! `dwlint evidence verify` re-checks. The binary is a thin shell over
//! [`run::run`]; the schema and the trust profile come from `dwevidence`.

pub mod api;
pub mod config;
pub mod load;
pub mod perf_metrics;
pub mod provenance;
pub mod run;
pub mod sampler;
pub mod services;
pub mod summarize;
