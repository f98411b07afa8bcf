//! One run of a pgbench (W3: sysbench) workload against one target: its arguments,
//! the run with CPU snapshots around it, and the figures measured from its output.

use super::*;

/// pgbench's arguments for a run of `w` against `target`.
pub(super) fn pgbench_args(opts: &Options, w: &Workload, target: Target) -> Vec<String> {
    let mut a: Vec<String> = w.pgbench_options().iter().map(|s| s.to_string()).collect();
    match w.kind {
        Kind::Script {
            script: Script::TpcbOwnTwoPhase,
            ..
        } if target == Target::Pgshard => {}
        Kind::Script { .. } => a.extend(["-f".into(), script_path(opts, w).display().to_string()]),
        _ => {}
    }
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

/// One pgbench (sysbench for W3) run of `w` against `t`, with CPU snapshots around it.
pub(super) async fn run_once(
    opts: &Options,
    w: &Workload,
    t: &TargetCtx,
    repeat: u32,
    seq: u32,
) -> Result<Run> {
    // What pgbench does before a run unless -n; done here so that the CPU figures cover
    // only the run. Errors are ignored, as pgbench ignores them.
    let mut prep_errors = Vec::new();
    for sql in w.before_run() {
        if let Err(e) = pgbench::psql(&t.admin, &["-c", sql]).await {
            prep_errors.push(format!("{e:#}"));
        }
    }

    let name = format!("{seq:02}-{}-{}-r{repeat}", w.name, t.target.name());
    let prefix = opts.runs_dir().join(&name);
    let output_file = opts.runs_dir().join(format!("{name}-output.txt"));
    let sysbench = matches!(w.kind, Kind::Sysbench);
    let mut cmd;
    if sysbench {
        cmd = pgbench::command("sysbench", &t.client);
        cmd.args(sysbench_args(opts, Some(&t.client), "run"));
    } else {
        cmd = pgbench::command("pgbench", &t.client);
        cmd.args(pgbench_args(opts, w, t.target))
            .arg("--log")
            .arg(format!("--sampling-rate={SAMPLING_RATE}"))
            .arg(format!("--log-prefix={}", prefix.display()));
    }
    cmd.current_dir(opts.runs_dir());
    let loadavg_before = fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.trim().to_string());

    let before = t.probe.snapshot();
    let start = Instant::now();
    let timeout = Some(Duration::from_secs(opts.duration as u64 + 120));
    let spread = !sysbench && t.target == Target::Pgshard && opts.coordinators > 1;
    let (out, summed) = if spread {
        let (out, summary) = through_every_process(opts, w, t, &prefix, timeout).await?;
        (out, Some(summary))
    } else {
        (pgbench::run(cmd, timeout).await?, None)
    };
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
    let s = if sysbench {
        measured_sysbench(&out)
    } else {
        measured_pgbench(&out, &prefix, summed)
    };
    if !opts.keep {
        for f in pgbench::log_files(&prefix) {
            let _ = fs::remove_file(f);
        }
    }
    let error = s.error.clone();
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
        latency_p50_ms: s.p50_ms,
        latency_p95_ms: s.p95_ms,
        latency_p99_ms: s.p99_ms,
        latency_samples: s.samples,
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

/// The figures of one pgbench or sysbench run, and why it failed.
pub(super) struct Measured {
    pub(super) tps: Option<f64>,
    pub(super) transactions: Option<u64>,
    pub(super) failed: Option<u64>,
    pub(super) latency_avg_ms: Option<f64>,
    pub(super) p50_ms: Option<f64>,
    pub(super) p95_ms: Option<f64>,
    pub(super) p99_ms: Option<f64>,
    pub(super) samples: usize,
    pub(super) initial_connection_ms: Option<f64>,
    pub(super) error: Option<String>,
}

/// `--coordinators N`: one pgbench per pgshard process's port at once, with the
/// run's clients and threads divided among them (the first ones take the remainder),
/// all logging under `prefix` (their per-transaction logs differ by pid, so the
/// percentiles cover all). Returns their outputs joined and their summaries combined:
/// throughput and transactions summed, latency averaged over transactions.
async fn through_every_process(
    opts: &Options,
    w: &Workload,
    t: &TargetCtx,
    prefix: &Path,
    timeout: Option<Duration>,
) -> Result<(pgbench::Output, pgbench::Summary)> {
    let ports = crate::cluster::cluster_info(&opts.cluster_dir())?.pgshard_ports;
    let n = ports.len() as u32;
    let share = |total: u32, i: u32| (total / n + u32::from(i < total % n)).max(1);
    let mut runs = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let clients = share(opts.clients, i as u32);
        let threads = share(opts.threads, i as u32).min(clients);
        let mut env = t.client.clone();
        env.retain(|(k, _)| k != "PGPORT");
        env.push(("PGPORT".into(), port.to_string()));
        let mut args = pgbench_args(opts, w, t.target);
        for (flag, value) in [("-c", clients), ("-j", threads)] {
            if let Some(at) = args.iter().position(|a| a == flag) {
                args[at + 1] = value.to_string();
            }
        }
        let mut cmd = pgbench::command("pgbench", &env);
        cmd.args(args)
            .arg("--log")
            .arg(format!("--sampling-rate={SAMPLING_RATE}"))
            .arg(format!("--log-prefix={}", prefix.display()))
            .current_dir(opts.runs_dir());
        runs.push(pgbench::run(cmd, timeout));
    }
    let outs = futures_util::future::try_join_all(runs).await?;
    let mut summary = pgbench::Summary::default();
    let mut latency_weight = 0.0;
    for o in &outs {
        let s = pgbench::parse_summary(&o.stdout);
        let add = |a: Option<f64>, b: Option<f64>| Some(a.unwrap_or(0.0) + b?);
        summary.tps = add(summary.tps, s.tps);
        summary.transactions = s
            .transactions
            .map(|x| summary.transactions.unwrap_or(0) + x);
        summary.failed = s.failed.map(|x| summary.failed.unwrap_or(0) + x);
        if let (Some(l), Some(n)) = (s.latency_avg_ms, s.transactions) {
            let total = summary.latency_avg_ms.unwrap_or(0.0) * latency_weight + l * n as f64;
            latency_weight += n as f64;
            summary.latency_avg_ms = (latency_weight > 0.0).then(|| total / latency_weight);
        }
        summary.initial_connection_ms =
            match (summary.initial_connection_ms, s.initial_connection_ms) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
    }
    let out = pgbench::Output {
        code: outs
            .iter()
            .map(|o| o.code)
            .find(|c| *c != Some(0))
            .unwrap_or(Some(0)),
        stdout: outs
            .iter()
            .map(|o| o.stdout.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        stderr: outs
            .iter()
            .map(|o| o.stderr.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        timed_out: outs.iter().any(|o| o.timed_out),
    };
    Ok((out, summary))
}

/// pgbench's summary, and percentiles from its sampled per-transaction log. A run is
/// failed when pgbench failed, when any transaction failed, or when none completed:
/// never reported as if it had been measured.
pub(super) fn measured_pgbench(
    out: &pgbench::Output,
    prefix: &Path,
    summed: Option<pgbench::Summary>,
) -> Measured {
    let s = summed.unwrap_or_else(|| pgbench::parse_summary(&out.stdout));
    let pct = pgbench::percentiles(prefix);
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
    Measured {
        tps: s.tps,
        transactions: s.transactions,
        failed: s.failed,
        latency_avg_ms: s.latency_avg_ms,
        p50_ms: pct.p50_ms,
        p95_ms: pct.p95_ms,
        p99_ms: pct.p99_ms,
        samples: pct.samples,
        initial_connection_ms: s.initial_connection_ms,
        error,
    }
}

/// sysbench's summary: its 95th percentile, and the median and 99th percentile from its
/// latency histogram. Failed like a pgbench run; ignored errors count as failures.
pub(super) fn measured_sysbench(out: &pgbench::Output) -> Measured {
    let s = sysbench::parse(&out.stdout);
    let error = if let Some(fatal) = sysbench::fatal_line(&out.stdout, &out.stderr) {
        Some(format!(
            "{fatal} [exit code {}]",
            out.code.map_or("none".into(), |c| c.to_string())
        ))
    } else if !out.success() {
        Some(out.error_reason())
    } else if s.ignored_errors.unwrap_or(0) > 0 {
        Some(format!(
            "{} errors ignored by sysbench",
            s.ignored_errors.unwrap_or(0)
        ))
    } else if s.tps.is_none() || s.transactions.unwrap_or(0) == 0 {
        Some("sysbench reported no transactions".into())
    } else {
        None
    };
    Measured {
        tps: s.tps,
        transactions: s.transactions,
        failed: s.ignored_errors,
        latency_avg_ms: s.latency_avg_ms,
        p50_ms: s.percentile(50.0),
        p95_ms: s.latency_p95_ms,
        p99_ms: s.percentile(99.0),
        samples: s.samples() as usize,
        initial_connection_ms: None,
        error,
    }
}

/// `sysbench oltp_insert` with a target's connection (`env`; None: the password left
/// out, for the report) and the bench's options, then `command` (prepare, run, cleanup).
pub(super) fn sysbench_args(opts: &Options, env: Option<&Env>, command: &str) -> Vec<String> {
    let get = |k: &str| {
        env.and_then(|e| e.iter().find(|(n, _)| n == k))
            .map_or("…".to_string(), |(_, v)| v.clone())
    };
    vec![
        "oltp_insert".into(),
        "--db-driver=pgsql".into(),
        format!("--pgsql-host={}", get("PGHOST")),
        format!("--pgsql-port={}", get("PGPORT")),
        format!("--pgsql-user={}", get("PGUSER")),
        format!("--pgsql-password={}", get("PGPASSWORD")),
        format!("--pgsql-db={}", get("PGDATABASE")),
        "--tables=1".into(),
        format!("--table-size={SYSBENCH_TABLE_SIZE}"),
        "--auto_inc=off".into(),
        format!("--threads={}", opts.clients),
        format!("--time={}", opts.duration),
        "--report-interval=0".into(),
        "--histogram=on".into(),
        command.into(),
    ]
}

pub(super) fn script_path(opts: &Options, w: &Workload) -> PathBuf {
    opts.runs_dir().join(format!("{}.pgbench", w.name))
}

/// The statements pgshard refused, as a reason: SQLSTATE 0A000 (not supported) skips a
/// workload; anything else is an error.
pub(super) fn refusal(e: SqlError) -> (Status, String) {
    let status = if e.sqlstate.as_deref() == Some(crate::error::sqlstate::FEATURE_NOT_SUPPORTED) {
        Status::Skipped
    } else {
        Status::Error
    };
    (status, format!("through pgshard: {}", e.message))
}
