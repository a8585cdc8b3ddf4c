//! One soak run: services, load, periodic samples, drain, final sample,
//! artifacts.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dwevidence::html;
use dwevidence::profile::{self, Reference};
use dwevidence::sample::{Sample, SampleKind};
use dwevidence::summary::{ServiceMode, Summary};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::api::Api;
use crate::config::{Backend, Soak};
use crate::load::{self, Mix, Stats};
use crate::perf_metrics::{self, PerfValues};
use crate::provenance;
use crate::sampler::{Observed, Sampler};
use crate::services::{self, ManagedRedis, ManagedServer, StartError};
use crate::summarize::{self, Observations};

/// Why a run could not produce an artifact (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A service would not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The configuration does not describe a runnable soak.
    #[error("{0}")]
    Setup(String),
    /// An artifact could not be written.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    std::fs::write(path, bytes).map_err(|source| RunError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The services under test, kept alive for the run.
struct Services {
    _server: Option<ManagedServer>,
    _redis: Option<ManagedRedis>,
    base_url: String,
    server_pid: Option<u32>,
    database_path: Option<PathBuf>,
    redis_url: Option<String>,
    mode: ServiceMode,
    /// The dwserver executable the harness started, if it started one.
    server_bin: Option<PathBuf>,
}

fn services(soak: &Soak) -> Result<Services, RunError> {
    let args = &soak.args;
    if let Some(base_url) = &args.base_url {
        if args.cache == Backend::Redis && args.redis_url.is_none() {
            return Err(RunError::Setup(
                "--cache redis with --base-url needs --redis-url (the server's Redis)".into(),
            ));
        }
        return Ok(Services {
            _server: None,
            _redis: None,
            base_url: base_url.clone(),
            server_pid: args.server_pid,
            database_path: args.database_path.clone(),
            redis_url: args
                .redis_url
                .clone()
                .filter(|_| args.cache == Backend::Redis),
            mode: ServiceMode::External,
            server_bin: None,
        });
    }
    let (redis, redis_url, mode) = match (args.cache, &args.redis_url) {
        (Backend::Memory, _) => (None, None, ServiceMode::Managed),
        (Backend::Redis, Some(url)) => (None, Some(url.clone()), ServiceMode::External),
        (Backend::Redis, None) => {
            let redis = ManagedRedis::start(&args.redis_server_bin, &args.output)?;
            let url = redis.url.clone();
            (Some(redis), Some(url), ServiceMode::Managed)
        }
    };
    let bin = args
        .server_bin
        .clone()
        .unwrap_or_else(services::default_server_bin);
    let server = ManagedServer::start(&bin, &args.output, redis_url.as_deref())?;
    Ok(Services {
        base_url: server.base_url.clone(),
        server_pid: Some(server.pid()),
        database_path: Some(server.database_path.clone()),
        _server: Some(server),
        _redis: redis,
        redis_url,
        mode,
        server_bin: Some(bin),
    })
}

/// Runs the soak and writes every artifact; the summary says whether it passed.
pub fn run(soak: &Soak) -> Result<Summary, RunError> {
    let args = &soak.args;
    std::fs::create_dir_all(&args.output).map_err(|source| RunError::Write {
        path: args.output.clone(),
        source,
    })?;
    let services = services(soak)?;
    let api = connect(&services.base_url, args.token.as_deref())?;
    let redis = match &services.redis_url {
        Some(url) => Some(
            redis::Client::open(url.as_str())
                .map_err(|e| RunError::Setup(format!("redis {url}: {e}")))?,
        ),
        None => None,
    };
    let namespaces = load::namespaces(args.namespaces);
    prepare_namespaces(&api, &namespaces)?;
    let sampler = Sampler::new(
        api.clone(),
        services.server_pid,
        services.database_path.clone(),
        redis,
        soak.policy.clone(),
        namespaces,
    );
    let values = Arc::new(Mutex::new(PerfValues {
        policies: soak.cache_policy_ids.clone(),
        ..PerfValues::default()
    }));
    let metrics_addr =
        perf_metrics::serve(&args.metrics_addr, Arc::clone(&values)).map_err(|e| {
            RunError::Setup(format!(
                "cannot serve /metrics on {}: {e}",
                args.metrics_addr
            ))
        })?;
    eprintln!(
        "dwsoak: driving {} ({} cache); own metrics on http://{metrics_addr}/metrics",
        services.base_url,
        args.cache.name()
    );

    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mix = Mix {
        namespaces: args.namespaces,
        task_queues: args.task_queues,
        workers: args.workers,
        starts_per_second: args.starts_per_second,
        signals_per_workflow: args.signals_per_workflow,
    };
    let interrupted = interruption_flag()?;
    let progress = progress_bar(args.duration + args.drain, args.quiet);
    let started_at_unix_ms = unix_ms();
    let start = Instant::now();
    let load_thread = {
        let (api, stats, stop) = (api.clone(), Arc::clone(&stats), Arc::clone(&stop));
        std::thread::spawn(move || load::run(&api, &mix, &stats, &stop))
    };

    let mut recorder = Recorder::create(&args.output.join("samples.jsonl"), Arc::clone(&values))?;
    let duration = Duration::from_secs(args.duration);
    let interval = Duration::from_secs(args.sample_interval);
    for slot in 1..=soak.expected_samples {
        let due = interval * slot as u32;
        if due > duration {
            break;
        }
        wait_until(start + due, &progress, start, &interrupted);
        if interrupted.load(Ordering::Relaxed) || start.elapsed() > duration + interval / 2 {
            break;
        }
        let (sample, observed) = sampler.take(
            SampleKind::Periodic,
            start.elapsed(),
            unix_ms(),
            &stats.totals(),
        );
        progress.set_message(status_line(&sample));
        recorder.record(sample, observed, &stats)?;
    }
    wait_until(start + duration, &progress, start, &interrupted);
    stop.store(true, Ordering::Relaxed);
    let load_seconds = start.elapsed().as_secs_f64();
    let _ = load_thread.join();
    let mut failures = Vec::new();
    if interrupted.load(Ordering::Relaxed) {
        failures.push(format!(
            "interrupted by a signal after {load_seconds:.0} s of the configured {} s; the drain was skipped",
            args.duration
        ));
    } else {
        progress.set_message("draining".to_string());
        let drained = Instant::now() + Duration::from_secs(args.drain);
        wait_until(drained, &progress, start, &interrupted);
    }
    let (final_sample, observed) = sampler.take(
        SampleKind::Final,
        start.elapsed(),
        unix_ms(),
        &stats.totals(),
    );
    recorder.record(final_sample, observed, &stats)?;
    progress.finish_and_clear();

    let checkout = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let provenance = provenance::collect(
        |k| std::env::var(k).ok(),
        &checkout,
        &services.base_url,
        &soak.policy_path,
        &soak.policy_sha256,
        services.server_bin.as_deref(),
    );
    let observations = Observations {
        samples: recorder.samples,
        health: sampler.health(),
        totals: stats.totals(),
        live_findings: recorder.live_findings,
        unowned_keys: recorder.unowned_keys,
        started_at_unix_ms,
        finished_at_unix_ms: unix_ms(),
        load_seconds,
        services: services.mode,
        failures,
    };
    let summary = summarize::summarize(soak, &observations, provenance);
    write_artifacts(soak, &summary, &observations, &values)?;
    Ok(summary)
}

/// A client of the server once it answers its health route (within 15 s).
fn connect(base_url: &str, token: Option<&str>) -> Result<Api, RunError> {
    let ready_by = Instant::now() + Duration::from_secs(15);
    loop {
        let api = Api::new(base_url, token);
        if api.healthy() {
            return Ok(api);
        }
        if Instant::now() >= ready_by {
            return Err(RunError::Setup(format!(
                "{base_url} did not answer /api/system/health within 15 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Registers the load's namespaces (the server serves registered ones only).
fn prepare_namespaces(api: &Api, namespaces: &[String]) -> Result<(), RunError> {
    for namespace in namespaces {
        let reply = api.register_namespace(namespace);
        if !reply.ok {
            return Err(RunError::Setup(format!(
                "cannot register namespace {namespace}: HTTP {} {}",
                reply.status,
                reply.body.map(|b| b.to_string()).unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// Writes each sample as it is taken and keeps what the summary needs.
struct Recorder {
    path: PathBuf,
    out: BufWriter<File>,
    values: Arc<Mutex<PerfValues>>,
    samples: Vec<Sample>,
    live_findings: Vec<String>,
    unowned_keys: Vec<String>,
}

impl Recorder {
    fn create(path: &Path, values: Arc<Mutex<PerfValues>>) -> Result<Recorder, RunError> {
        let file = File::create(path).map_err(|source| RunError::Write {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Recorder {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
            values,
            samples: Vec::new(),
            live_findings: Vec::new(),
            unowned_keys: Vec::new(),
        })
    }

    /// Appends `sample` to samples.jsonl (flushed, so a dying run keeps it),
    /// collects its findings and refreshes `/metrics`.
    fn record(
        &mut self,
        sample: Sample,
        observed: Observed,
        stats: &Stats,
    ) -> Result<(), RunError> {
        let line = serde_json::to_string(&sample).unwrap_or_default();
        writeln!(self.out, "{line}")
            .and_then(|_| self.out.flush())
            .map_err(|source| RunError::Write {
                path: self.path.clone(),
                source,
            })?;
        for finding in observed.live_findings {
            if !self.live_findings.contains(&finding) {
                self.live_findings.push(finding);
            }
        }
        for key in observed.unowned_keys {
            if !self.unowned_keys.contains(&key) && self.unowned_keys.len() < 20 {
                self.unowned_keys.push(key);
            }
        }
        if let Ok(mut v) = self.values.lock() {
            v.sample = Some(sample.clone());
            v.totals = stats.totals();
            v.assertion_failed = !self.live_findings.is_empty() || !self.unowned_keys.is_empty();
        }
        self.samples.push(sample);
        Ok(())
    }
}

/// summary.json, report.html and metrics.prom.
fn write_artifacts(
    soak: &Soak,
    summary: &Summary,
    observations: &Observations,
    values: &Mutex<PerfValues>,
) -> Result<(), RunError> {
    let args = &soak.args;
    let summary_path = args.output.join("summary.json");
    let json = serde_json::to_string_pretty(summary).unwrap_or_default() + "\n";
    write_file(&summary_path, json.as_bytes())?;
    let reference = Reference {
        cache_policy_ids: &soak.cache_policy_ids,
        policy_sha256: &soak.policy_sha256,
        repository: &args.repository,
        server_image: None,
    };
    let failures = profile::evaluate(summary, &reference);
    let report = html::render(
        summary,
        &observations.samples,
        &failures,
        &html::Context {
            source: &summary_path.to_string_lossy(),
            notes: Vec::new(),
        },
    );
    write_file(&args.output.join("report.html"), report.as_bytes())?;
    if let Ok(mut v) = values.lock() {
        v.totals = observations.totals.clone();
        v.assertion_failed = !summary.assertion_failures.is_empty();
        write_file(
            &args.output.join("metrics.prom"),
            perf_metrics::render(&v).as_bytes(),
        )?;
    }
    Ok(())
}

fn progress_bar(seconds: u64, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(seconds),
        if quiet {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        },
    );
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} s {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Set by the first SIGINT or SIGTERM; a second one ends the process at once.
fn interruption_flag() -> Result<Arc<AtomicBool>, RunError> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&flag))
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&flag)))
            .map_err(|e| RunError::Setup(format!("cannot handle signal {signal}: {e}")))?;
    }
    Ok(flag)
}

/// Waits until `deadline`, or until a signal interrupts the run.
fn wait_until(deadline: Instant, progress: &ProgressBar, start: Instant, interrupted: &AtomicBool) {
    loop {
        if interrupted.load(Ordering::Relaxed) {
            return;
        }
        progress.set_position(start.elapsed().as_secs());
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(250)));
    }
}

fn status_line(sample: &Sample) -> String {
    let mib = |b: Option<u64>| {
        b.map_or("?".to_owned(), |b| {
            format!("{:.1} MiB", b as f64 / 1048576.0)
        })
    };
    format!(
        "rss {} | server:* keys {} | requests {} | errors {}",
        mib(sample.server_memory_bytes),
        sample
            .server_cache_keys
            .map_or("?".to_owned(), |k| k.to_string()),
        sample.requests_total,
        sample.errors_total
    )
}
