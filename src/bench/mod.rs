//! `pgshard bench`: the reference workloads (docs/BENCHMARKS.md, /work/shared/workloads.md)
//! against pgshard and against one plain PostgreSQL with the same settings, measured in
//! the same run, interleaved.
//!
//! One invocation:
//! 1. starts a plain PostgreSQL 15 in `OUT/plain` (the cluster workers' settings, no
//!    test shortcuts) and a local pgshard cluster in `OUT/cluster` (`cluster_up`), on
//!    free ports;
//! 2. loads W1: `pgbench -i -s S` into the plain server, and through pgshard followed by
//!    `SET citus.shard_count = 32` and the four `create_distributed_table` calls in one
//!    psql session;
//! 3. runs every workload R times, pgshard and plain alternating, and records pgbench's
//!    figures, latency percentiles (sampled per-transaction log) and the CPU time of
//!    pgshard and of every PostgreSQL server (from /proc);
//! 4. prints a table, writes `OUT/bench.json` (every raw figure, the machine, versions,
//!    settings, date and command) and `OUT/bench.svg` (the ratios);
//! 5. stops everything it started (also on error and Ctrl-C) and deletes the data
//!    directories (logs stay in `OUT/plain/logs`, `OUT/cluster/logs`, `OUT/runs`).
//!
//! Progress goes to stderr, the table to stdout.

pub mod cpu;
mod machine;
mod pgbench;
pub mod report;

use crate::cluster::node::{self, Node, Settings};
use crate::cluster::{cluster_down, cluster_up, ClusterInfo, ClusterOptions};
use anyhow::{anyhow, bail, Context, Result};
use pgbench::Env;
use report::{Reference, Run, ServerCpu, Status, Target, WorkloadResult};
use serde_json::json;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Command-line arguments of `pgshard bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Workloads to run (default: all): w1-select-prepared, w1-select-simple, w1-tpcb.
    pub workloads: Vec<String>,
    /// pgbench scale factor (100,000 accounts each) [default: 10; --quick: 1].
    #[arg(long)]
    pub scale: Option<u32>,
    /// pgbench clients (-c) [default: 16].
    #[arg(long)]
    pub clients: Option<u32>,
    /// Seconds per run (-T) [default: 30; --quick: 5].
    #[arg(long)]
    pub duration: Option<u32>,
    /// Workers of the pgshard cluster.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Runs per workload and target [default: 3; --quick: 1].
    #[arg(long)]
    pub repeat: Option<u32>,
    /// Directory for the servers, logs and results.
    #[arg(long, default_value = "pgshard-bench")]
    pub out: PathBuf,
    /// A short smoke run: scale 1, 5 s, one repetition (explicit options still win).
    #[arg(long)]
    pub quick: bool,
    /// First port to try: the plain server and the cluster take WORKERS+3 consecutive
    /// free ports from here on.
    #[arg(long, default_value_t = 26000)]
    pub port: u16,
    /// Keep the data directories and pgbench's per-transaction logs (servers are
    /// stopped all the same).
    #[arg(long)]
    pub keep: bool,
}

/// One benchmark workload: a pgbench mode against the W1 tables.
struct Workload {
    name: &'static str,
    description: &'static str,
    /// pgbench options besides -c/-j/-T and logging.
    args: &'static [&'static str],
    reference: (Option<f64>, Option<f64>),
}

/// Citus ratios and pgshard goals from workloads.md (this machine, scale 10, 16 clients).
const WORKLOADS: &[Workload] = &[
    Workload {
        name: "w1-select-prepared",
        description: "W1 select-only: one primary-key lookup in pgbench_accounts per \
                      transaction (pgbench -S), extended protocol with prepared statements",
        args: &["-M", "prepared", "-S"],
        reference: (Some(0.15), Some(0.8)),
    },
    Workload {
        name: "w1-select-simple",
        description: "W1 select-only (pgbench -S) over the simple query protocol: every \
                      statement parsed and planned again",
        args: &["-M", "simple", "-S"],
        reference: (Some(0.19), Some(0.8)),
    },
    Workload {
        name: "w1-tpcb",
        description: "W1 TPC-B read-write: BEGIN; UPDATE accounts; SELECT accounts; UPDATE \
                      tellers; UPDATE branches; INSERT history; END (prepared); the rows of \
                      one transaction live on different shards",
        args: &["-M", "prepared"],
        reference: (Some(0.12), Some(0.6)),
    },
];

const THREADS: u32 = 2;
const SHARD_COUNT: u32 = 32;
/// Fraction of transactions pgbench logs for the latency percentiles.
const SAMPLING_RATE: f64 = 0.1;
const W1_TABLES: [(&str, &str); 4] = [
    ("pgbench_accounts", "aid"),
    ("pgbench_branches", "bid"),
    ("pgbench_tellers", "tid"),
    ("pgbench_history", "aid"),
];

/// The resolved options.
struct Options {
    workloads: Vec<&'static Workload>,
    scale: u32,
    clients: u32,
    threads: u32,
    duration: u32,
    workers: usize,
    repeat: u32,
    out: PathBuf,
    port: u16,
    keep: bool,
}

impl Options {
    fn resolve(a: BenchArgs) -> Result<Options> {
        let mut workloads = Vec::new();
        for name in &a.workloads {
            let w = WORKLOADS.iter().find(|w| w.name == name).ok_or_else(|| {
                anyhow!(
                    "unknown workload {name:?}; known: {}",
                    WORKLOADS
                        .iter()
                        .map(|w| w.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            if !workloads.iter().any(|x: &&Workload| x.name == w.name) {
                workloads.push(w);
            }
        }
        if workloads.is_empty() {
            workloads = WORKLOADS.iter().collect();
        }
        let q = a.quick;
        let o = Options {
            workloads,
            scale: a.scale.unwrap_or(if q { 1 } else { 10 }),
            clients: a.clients.unwrap_or(16),
            threads: THREADS.min(a.clients.unwrap_or(16)),
            duration: a.duration.unwrap_or(if q { 5 } else { 30 }),
            workers: a.workers,
            repeat: a.repeat.unwrap_or(if q { 1 } else { 3 }),
            out: a.out,
            port: a.port,
            keep: a.keep,
        };
        if o.scale == 0 || o.clients == 0 || o.duration == 0 || o.repeat == 0 || o.workers == 0 {
            bail!("--scale, --clients, --duration, --repeat and --workers must be at least 1");
        }
        Ok(o)
    }

    fn plain_dir(&self) -> PathBuf {
        self.out.join("plain")
    }
    fn cluster_dir(&self) -> PathBuf {
        self.out.join("cluster")
    }
    fn runs_dir(&self) -> PathBuf {
        self.out.join("runs")
    }
}

/// Progress lines on stderr, with the time since the start.
struct Progress(Instant);

impl Progress {
    fn say(&self, msg: impl AsRef<str>) {
        let s = self.0.elapsed().as_secs();
        eprintln!("[bench {:>2}:{:02}] {}", s / 60, s % 60, msg.as_ref());
    }
}

/// What this invocation started, for the final clean-up.
#[derive(Default)]
struct Started {
    plain: Option<Node>,
    cluster: bool,
}

/// Runs the benchmark (see the module comment).
pub async fn run(args: BenchArgs) -> Result<()> {
    let mut opts = Options::resolve(args)?;
    let progress = Progress(Instant::now());
    fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    opts.out = fs::canonicalize(&opts.out)?;
    node::check_reachable(&opts.out)?;

    let mut started = Started::default();
    let result = tokio::select! {
        r = bench(&opts, &progress, &mut started) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    if let Err(e) = &result {
        progress.say(format!("failed: {e:#}"));
    }
    progress.say("stopping the servers and pgshard");
    let stopped = stop_everything(&opts, &started).await;
    if let Err(e) = &stopped {
        progress.say(format!("clean-up: {e:#}"));
    }
    result?;
    stopped?;
    progress.say("done");
    Ok(())
}

async fn bench(opts: &Options, progress: &Progress, started: &mut Started) -> Result<()> {
    for tool in ["pgbench", "psql"] {
        let mut cmd = pgbench::command(tool, &vec![]);
        cmd.arg("--version");
        let ok = pgbench::run(cmd, None).await.is_ok_and(|o| o.success());
        if !ok {
            bail!("{tool} is needed on PATH (install postgresql-client-15)");
        }
    }
    let date = machine::now_utc();
    let machine = machine::describe();
    let revision = machine::pgshard_revision();
    let command = machine::command_line();
    remove_previous(opts, progress).await?;
    fs::create_dir_all(opts.runs_dir())?;

    let base = free_ports(opts.port, opts.workers as u16 + 3)?;
    let plain_port = base;
    let cluster_port = base + 1;
    progress.say(format!(
        "starting a plain PostgreSQL on port {plain_port} and a pgshard cluster with {} \
         workers on ports {cluster_port}-{} in {}",
        opts.workers,
        cluster_port + opts.workers as u16 + 1,
        opts.out.display()
    ));

    // Both at once: initdb dominates.
    let plain_node = plain_node(opts, plain_port);
    started.plain = Some(plain_node.clone());
    started.cluster = true;
    let password = node::random_password();
    let plain_start = {
        let (n, pw) = (plain_node.clone(), password.clone());
        tokio::task::spawn_blocking(move || -> Result<()> {
            node::server_dir(n.log_file.parent().unwrap_or(Path::new(".")), 0o755)?;
            node::server_dir(&n.socket_dir, 0o755)?;
            n.create(&pw, Settings { fast: false })
                .context("initdb of the plain PostgreSQL")?;
            n.start()?;
            Ok(())
        })
    };
    let cluster_opts = ClusterOptions {
        dir: opts.cluster_dir(),
        workers: opts.workers,
        port: cluster_port,
        listen_host: "127.0.0.1".into(),
        pgshard_exe: std::env::current_exe()?,
        fast: false,
    };
    let (plain_res, cluster_res) = {
        let _quiet = StdoutToStderr::new();
        tokio::join!(plain_start, cluster_up(&cluster_opts))
    };
    plain_res??;
    let cluster = cluster_res.context("starting the pgshard cluster")?;
    let plain_env: Env = [
        ("PGHOST", "127.0.0.1".to_string()),
        ("PGPORT", plain_port.to_string()),
        ("PGUSER", "postgres".into()),
        ("PGPASSWORD", password),
        ("PGDATABASE", "postgres".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let pgshard_env: Env = cluster.pg_env();
    progress.say("servers and pgshard are up");

    // Load W1.
    let mut load = serde_json::Map::new();
    let t = Instant::now();
    progress.say(format!(
        "pgbench -i -s {} into the plain PostgreSQL",
        opts.scale
    ));
    pgbench_init(opts, &plain_env, "load-plain").await?;
    load.insert("plain_init_s".into(), json!(t.elapsed().as_secs_f64()));
    let t = Instant::now();
    progress.say(format!("pgbench -i -s {} through pgshard", opts.scale));
    pgbench_init(opts, &pgshard_env, "load-pgshard").await?;
    load.insert("pgshard_init_s".into(), json!(t.elapsed().as_secs_f64()));
    let t = Instant::now();
    progress.say(format!(
        "distributing the W1 tables through pgshard ({SHARD_COUNT} shards)"
    ));
    distribute(opts, &pgshard_env).await?;
    load.insert("distribute_s".into(), json!(t.elapsed().as_secs_f64()));
    progress.say("checkpoint on every server");
    for env in node_envs(&cluster).into_iter().chain([plain_env.clone()]) {
        pgbench::psql(&env, &["-c", "checkpoint"]).await?;
    }
    let postgres = server_settings(opts, &plain_env, &cluster).await;

    let plain_target = TargetCtx {
        target: Target::Plain,
        env: plain_env,
        probe: cpu::Probe {
            pgshard_pid: None,
            servers: vec![("plain".into(), plain_node.data_dir.clone())],
        },
    };
    let pgshard_pid: u32 = fs::read_to_string(opts.cluster_dir().join("pgshard.pid"))
        .context("reading pgshard.pid")?
        .trim()
        .parse()
        .context("parsing pgshard.pid")?;
    let mut servers = vec![(
        "coordinator".to_string(),
        opts.cluster_dir().join("coordinator"),
    )];
    for i in 1..=cluster.worker_ports.len() {
        servers.push((
            format!("worker{i}"),
            opts.cluster_dir().join(format!("worker{i}")),
        ));
    }
    let pgshard_target = TargetCtx {
        target: Target::Pgshard,
        env: pgshard_env,
        probe: cpu::Probe {
            pgshard_pid: Some(pgshard_pid),
            servers,
        },
    };

    // The runs.
    let mut results = Vec::new();
    let mut seq = 0;
    for w in &opts.workloads {
        let mut runs: Vec<Run> = Vec::new();
        let mut status = Status::Ok;
        let mut reason = None;
        'repeats: for rep in 1..=opts.repeat {
            // pgshard first in odd repetitions, plain first in even ones: drift over
            // time (caches, autovacuum, other load) hits both alike. The first run of a
            // workload is always pgshard's: if it cannot run it, the workload is skipped.
            let order = if rep % 2 == 1 {
                [&pgshard_target, &plain_target]
            } else {
                [&plain_target, &pgshard_target]
            };
            for t in order {
                seq += 1;
                progress.say(format!(
                    "{} {}/{} {}: pgbench {} -c {} -j {} -T {}",
                    w.name,
                    rep,
                    opts.repeat,
                    t.target.name(),
                    w.args.join(" "),
                    opts.clients,
                    opts.threads,
                    opts.duration
                ));
                let run = run_once(opts, w, t, rep, seq).await?;
                match &run.error {
                    None => progress.say(format!(
                        "  {} TPS, latency avg {} ms, p95 {} ms{}",
                        report::thousands(run.tps.unwrap_or(0.0)),
                        run.latency_avg_ms.map_or("-".into(), |v| format!("{v:.3}")),
                        run.latency_p95_ms.map_or("-".into(), |v| format!("{v:.3}")),
                        run.pgshard_cpu_us_per_txn
                            .map_or(String::new(), |v| format!(", pgshard {v:.1} µs CPU/txn"))
                    )),
                    Some(e) => progress.say(format!("  failed: {e}")),
                }
                let failed = run.error.clone();
                runs.push(run);
                if let Some(e) = failed {
                    status = match t.target {
                        Target::Pgshard => Status::Skipped,
                        Target::Plain => Status::Error,
                    };
                    reason = Some(match t.target {
                        Target::Pgshard => format!("through pgshard: {e}"),
                        Target::Plain => format!("plain PostgreSQL: {e}"),
                    });
                    break 'repeats;
                }
            }
        }
        let plain = report::summarize(&runs, Target::Plain);
        let pgshard = report::summarize(&runs, Target::Pgshard);
        let ratio = match (&plain, &pgshard, status) {
            (Some(p), Some(s), Status::Ok) if p.tps_median > 0.0 => {
                Some(s.tps_median / p.tps_median)
            }
            _ => None,
        };
        results.push(WorkloadResult {
            name: w.name.into(),
            description: w.description.into(),
            pgbench_args: pgbench_args(opts, w)
                .into_iter()
                .chain(["--log".into(), format!("--sampling-rate={SAMPLING_RATE}")])
                .collect(),
            status,
            reason,
            plain: if status == Status::Ok { plain } else { None },
            pgshard: if status == Status::Ok { pgshard } else { None },
            ratio,
            ratio_per_repeat: report::ratios_per_repeat(&runs),
            reference: Reference {
                citus_ratio: w.reference.0,
                goal_ratio: w.reference.1,
            },
            runs,
        });
    }

    // The report.
    let table = report::table(&results);
    let interference = report::interference(&results);
    let subtitle = format!(
        "pgbench scale {}, {} clients, -j {}, {} s x {}, {} workers, {SHARD_COUNT} shards; {}",
        opts.scale, opts.clients, opts.threads, opts.duration, opts.repeat, opts.workers, date
    );
    let doc = json!({
        "pgshard_bench_format": 1,
        "date": date,
        "command": command,
        "pgshard": revision,
        "machine": machine,
        "postgresql": postgres,
        "options": {
            "scale": opts.scale,
            "clients": opts.clients,
            "threads": opts.threads,
            "duration_s": opts.duration,
            "repeat": opts.repeat,
            "workers": opts.workers,
            "shard_count": SHARD_COUNT,
            "latency_sampling_rate": SAMPLING_RATE,
            "tls": false,
            "ports": { "plain": plain_port, "pgshard": cluster.port,
                       "coordinator": cluster.coordinator_port, "workers": cluster.worker_ports },
        },
        "notes": [
            "tps: pgbench's figure without initial connection time; latency_avg_ms: pgbench's 'latency average'",
            "latency percentiles: nearest rank over pgbench's per-transaction log sampled at latency_sampling_rate",
            "pgbench runs with -n; before each run the bench does what pgbench would: vacuum pgbench_branches, vacuum pgbench_tellers, truncate pgbench_history",
            "pgshard_cpu_us_per_txn: utime+stime of the pgshard process over the run / transactions processed",
            "server_cpu_us_per_txn: CPU of every PostgreSQL process of the target (plain: one server; pgshard: coordinator node + workers), same denominator",
            "ratio: median pgshard TPS / median plain TPS",
            "pgbench_cpu_s: getrusage(RUSAGE_CHILDREN) around the run; machine_irq_s: interrupt + softirq time (/proc/stat), mostly loopback TCP; other_cpu_fraction: machine busy time not spent by the target, pgshard, pgbench or interrupts, over all CPU time of the run",
        ],
        "load": load,
        "table": table,
        "interference": interference,
        "workloads": results,
    });
    let json_path = opts.out.join("bench.json");
    fs::write(&json_path, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let svg_path = opts.out.join("bench.svg");
    fs::write(&svg_path, report::svg(&results, &subtitle))
        .with_context(|| format!("writing {}", svg_path.display()))?;
    let mut md = format!("{subtitle}\n\n{}", report::markdown_table(&results));
    if let Some(note) = &interference {
        md.push_str(&format!("\n{note}\n"));
    }
    fs::write(opts.out.join("bench.md"), md)?;

    println!("{subtitle}");
    print!("{table}");
    if let Some(note) = &interference {
        println!("{note}");
    }
    println!(
        "results: {}, chart: {}",
        json_path.display(),
        svg_path.display()
    );
    Ok(())
}

/// One target of the comparison.
struct TargetCtx {
    target: Target,
    env: Env,
    probe: cpu::Probe,
}

fn pgbench_args(opts: &Options, w: &Workload) -> Vec<String> {
    let mut a: Vec<String> = w.args.iter().map(|s| s.to_string()).collect();
    a.extend([
        "-n".into(),
        "-c".into(),
        opts.clients.to_string(),
        "-j".into(),
        opts.threads.to_string(),
        "-T".into(),
        opts.duration.to_string(),
    ]);
    a
}

/// One pgbench run of `w` against `t`, with CPU snapshots around it.
async fn run_once(
    opts: &Options,
    w: &Workload,
    t: &TargetCtx,
    repeat: u32,
    seq: u32,
) -> Result<Run> {
    // What pgbench does before a run unless -n; done here so that the CPU figures cover
    // only the run. Errors are ignored, as pgbench ignores them.
    let mut prep_errors = Vec::new();
    for sql in [
        "vacuum pgbench_branches",
        "vacuum pgbench_tellers",
        "truncate pgbench_history",
    ] {
        if let Err(e) = pgbench::psql(&t.env, &["-c", sql]).await {
            prep_errors.push(format!("{e:#}"));
        }
    }

    let name = format!("{seq:02}-{}-{}-r{repeat}", w.name, t.target.name());
    let prefix = opts.runs_dir().join(&name);
    let output_file = opts.runs_dir().join(format!("{name}-output.txt"));
    let mut cmd = pgbench::command("pgbench", &t.env);
    cmd.args(pgbench_args(opts, w))
        .arg("--log")
        .arg(format!("--sampling-rate={SAMPLING_RATE}"))
        .arg(format!("--log-prefix={}", prefix.display()))
        .current_dir(opts.runs_dir());
    let loadavg_before = fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.trim().to_string());

    let before = t.probe.snapshot();
    let start = Instant::now();
    let out = pgbench::run(cmd, Some(Duration::from_secs(opts.duration as u64 + 120))).await?;
    let wall_s = start.elapsed().as_secs_f64();
    // Let the backends of the run exit and be reaped into the postmaster's cutime.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = t.probe.snapshot();
    let usage = cpu::usage(&t.probe, &before, &after);

    let mut text = out.text();
    if !prep_errors.is_empty() {
        text.push_str(&format!(
            "--- errors before the run (ignored) ---\n{}\n",
            prep_errors.join("\n")
        ));
    }
    fs::write(&output_file, text)?;
    let s = pgbench::parse_summary(&out.stdout);
    let pct = pgbench::percentiles(&prefix);
    if !opts.keep {
        for f in pgbench::log_files(&prefix) {
            let _ = fs::remove_file(f);
        }
    }

    let error = if !out.success() {
        Some(out.error_reason())
    } else if s.failed.unwrap_or(0) > 0 {
        Some(format!(
            "{} of {} transactions failed",
            s.failed.unwrap_or(0),
            s.failed.unwrap_or(0) + s.transactions.unwrap_or(0)
        ))
    } else if s.tps.is_none() || s.transactions.unwrap_or(0) == 0 {
        Some("pgbench reported no transactions".into())
    } else {
        None
    };
    let per_txn = |secs: f64| -> Option<f64> {
        let n = s.transactions.filter(|&n| n > 0)? as f64;
        Some(secs * 1e6 / n)
    };
    let servers_s: f64 = usage.servers_s.iter().map(|(_, s)| s).sum();
    Ok(Run {
        target: t.target,
        repeat,
        sequence: seq,
        ok: error.is_none(),
        error,
        exit_code: out.code,
        tps: s.tps,
        transactions: s.transactions,
        failed_transactions: s.failed,
        latency_avg_ms: s.latency_avg_ms,
        latency_p50_ms: pct.p50_ms,
        latency_p95_ms: pct.p95_ms,
        latency_p99_ms: pct.p99_ms,
        latency_samples: pct.samples,
        initial_connection_ms: s.initial_connection_ms,
        wall_s,
        pgshard_cpu_s: usage.pgshard_s,
        pgshard_cpu_us_per_txn: usage.pgshard_s.and_then(per_txn),
        server_cpu: usage
            .servers_s
            .iter()
            .map(|(name, s)| ServerCpu {
                name: name.clone(),
                cpu_s: *s,
            })
            .collect(),
        server_cpu_us_per_txn: per_txn(servers_s),
        pgbench_cpu_s: usage.client_s,
        other_cpu_fraction: if usage.machine_total_s > 0.0 {
            ((usage.machine_busy_s
                - usage.machine_irq_s
                - usage.client_s
                - servers_s
                - usage.pgshard_s.unwrap_or(0.0))
                / usage.machine_total_s)
                .max(0.0)
        } else {
            0.0
        },
        machine_cpu_busy_s: usage.machine_busy_s,
        machine_irq_s: usage.machine_irq_s,
        machine_cpu_total_s: usage.machine_total_s,
        loadavg_before,
        output_file: output_file.display().to_string(),
    })
}

/// `pgbench -i -s S`; its output goes to `OUT/runs/NAME-output.txt`.
async fn pgbench_init(opts: &Options, env: &Env, name: &str) -> Result<()> {
    let mut cmd = pgbench::command("pgbench", env);
    cmd.args(["-i", "-s", &opts.scale.to_string()])
        .current_dir(opts.runs_dir());
    let out = pgbench::run(cmd, None).await?;
    let file = opts.runs_dir().join(format!("{name}-output.txt"));
    fs::write(&file, out.text())?;
    if !out.success() {
        bail!(
            "pgbench -i -s {} failed: {} (see {})",
            opts.scale,
            out.error_reason(),
            file.display()
        );
    }
    Ok(())
}

/// `SET citus.shard_count` and the four `create_distributed_table` calls of W1, in one
/// psql session through pgshard.
async fn distribute(opts: &Options, env: &Env) -> Result<()> {
    let mut sql = format!("SET citus.shard_count = {SHARD_COUNT};\n");
    for (table, column) in W1_TABLES {
        sql.push_str(&format!(
            "SELECT create_distributed_table('{table}', '{column}');\n"
        ));
    }
    let mut cmd = pgbench::command("psql", env);
    cmd.args(["-X", "-v", "ON_ERROR_STOP=1", "-c", &sql]);
    let out = pgbench::run(cmd, None).await?;
    let file = opts.runs_dir().join("distribute-output.txt");
    fs::write(&file, format!("{sql}\n{}", out.text()))?;
    if !out.success() {
        bail!(
            "distributing the W1 tables failed: {} (see {})",
            out.error_reason(),
            file.display()
        );
    }
    Ok(())
}

/// libpq environments of the cluster's PostgreSQL servers (coordinator node, workers).
fn node_envs(cluster: &ClusterInfo) -> Vec<Env> {
    let mut ports = vec![cluster.coordinator_port];
    ports.extend(&cluster.worker_ports);
    ports
        .into_iter()
        .map(|port| {
            let mut env = cluster.pg_env();
            env.retain(|(k, _)| k != "PGPORT");
            env.push(("PGPORT".into(), port.to_string()));
            env
        })
        .collect()
}

/// Versions, and the settings of the plain server and of a worker as PostgreSQL reports
/// them (everything set in a configuration file), to show they are the same.
async fn server_settings(opts: &Options, plain: &Env, cluster: &ClusterInfo) -> serde_json::Value {
    let query = "select name, current_setting(name) from pg_settings \
                 where source = 'configuration file' order by name";
    let read = |env: Env| async move {
        let text = pgbench::psql(&env, &["-F", "\t", "-c", query])
            .await
            .unwrap_or_default();
        text.lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    let plain_settings = read(plain.clone()).await;
    let worker_settings = read(node_envs(cluster)[1.min(cluster.worker_ports.len())].clone()).await;
    // Where they listen differs by design.
    let local = ["port", "unix_socket_directories", "listen_addresses"];
    let differences: Vec<String> = plain_settings
        .iter()
        .filter(|(k, _)| !local.contains(&k.as_str()))
        .filter(|kv| !worker_settings.contains(kv))
        .map(|(k, v)| format!("{k}={v}"))
        .chain(
            worker_settings
                .iter()
                .filter(|(k, _)| !local.contains(&k.as_str()))
                .filter(|(k, _)| !plain_settings.iter().any(|(pk, _)| pk == k))
                .map(|(k, v)| format!("worker only: {k}={v}")),
        )
        .collect();
    let version = pgbench::psql(plain, &["-c", "select version()"]).await.ok();
    let as_map = |v: &[(String, String)]| {
        v.iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
    };
    let pgshard_toml = fs::read_to_string(opts.cluster_dir().join("pgshard.toml"))
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
        .map(|mut t| {
            t.remove("password");
            serde_json::to_value(t).unwrap_or_default()
        });
    json!({
        "version": version,
        "binaries": machine::postgres_versions(),
        "plain_settings": as_map(&plain_settings),
        "worker_settings": as_map(&worker_settings),
        "plain_vs_worker_differences": differences,
        "settings_file": fs::read_to_string(opts.plain_dir().join("data").join("pgshard.conf")).ok(),
        "pgshard_config": pgshard_toml,
    })
}

fn plain_node(opts: &Options, port: u16) -> Node {
    let dir = opts.plain_dir();
    Node {
        name: "plain PostgreSQL".into(),
        data_dir: dir.join("data"),
        listen_host: "127.0.0.1".into(),
        port,
        socket_dir: node::socket_dir_for(&dir),
        log_file: dir.join("logs").join("postgres.log"),
    }
}

/// `n` consecutive ports free on 127.0.0.1, from `from` on.
fn free_ports(from: u16, n: u16) -> Result<u16> {
    let mut base = from.max(1024);
    while base as u32 + n as u32 <= 65535 {
        if (base..base + n).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return Ok(base);
        }
        base += n;
    }
    bail!("no {n} consecutive free ports from {from} on")
}

/// Stops and deletes what an earlier run in OUT left (the directories we own only).
async fn remove_previous(opts: &Options, progress: &Progress) -> Result<()> {
    let cluster = opts.cluster_dir();
    if cluster.exists() {
        if cluster.join("cluster.toml").exists() {
            progress.say(format!(
                "stopping and removing the earlier {}",
                cluster.display()
            ));
            let _quiet = StdoutToStderr::new();
            let _ = cluster_down(&cluster).await;
        } else if fs::read_dir(&cluster)?.next().is_some() {
            bail!(
                "{} exists and is not a pgshard bench cluster: choose another --out",
                cluster.display()
            );
        }
        remove_all(&cluster)?;
    }
    let plain = opts.plain_dir();
    if plain.exists() {
        let ours = plain.join("data").exists() || plain.join("logs").exists();
        if !ours && fs::read_dir(&plain)?.next().is_some() {
            bail!(
                "{} exists and is not a pgshard bench server: choose another --out",
                plain.display()
            );
        }
        let n = plain_node(opts, 0);
        if n.running_pid().is_some() {
            progress.say(format!("stopping the earlier {}", plain.display()));
        }
        tokio::task::spawn_blocking(move || n.stop()).await??;
        remove_all(&plain)?;
    }
    let runs = opts.runs_dir();
    if runs.exists() {
        remove_all(&runs)?;
    }
    Ok(())
}

fn remove_all(dir: &Path) -> Result<()> {
    fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}

/// Stops pgshard, the cluster and the plain server; unless --keep, deletes their data
/// directories (logs stay).
async fn stop_everything(opts: &Options, started: &Started) -> Result<()> {
    let mut errors = Vec::new();
    if started.cluster && opts.cluster_dir().join("cluster.toml").exists() {
        let _quiet = StdoutToStderr::new();
        if let Err(e) = cluster_down(&opts.cluster_dir()).await {
            errors.push(format!("cluster down: {e:#}"));
        }
    }
    if let Some(n) = &started.plain {
        let n = n.clone();
        match tokio::task::spawn_blocking(move || n.stop()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => errors.push(format!("stopping the plain PostgreSQL: {e:#}")),
            Err(e) => errors.push(format!("stopping the plain PostgreSQL: {e}")),
        }
    }
    if !opts.keep && errors.is_empty() {
        for dir in [opts.cluster_dir(), opts.plain_dir()] {
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name();
                if name != "logs" && entry.path().is_dir() {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        if let Some(n) = &started.plain {
            if !n.socket_dir.starts_with(&opts.out) {
                let _ = fs::remove_dir_all(&n.socket_dir);
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        bail!("{}", errors.join("; "))
    }
}

/// While alive, whatever the process prints on stdout goes to stderr: `cluster_up` and
/// `cluster_down` report progress with println!, and stdout is for the table.
struct StdoutToStderr {
    saved: i32,
}

impl StdoutToStderr {
    fn new() -> Self {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let saved = unsafe { libc::dup(1) };
        if saved >= 0 {
            unsafe { libc::dup2(2, 1) };
        }
        StdoutToStderr { saved }
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if self.saved >= 0 {
            unsafe {
                libc::dup2(self.saved, 1);
                libc::close(self.saved);
            }
        }
    }
}
