//! The query workloads of `pgshard bench`: W4's table loaded on both targets (and its
//! shards vacuumed), one query timed on each target (warm-up, timed executions, median,
//! answers compared: W4, w4q, TPC-H), and `w4-copy` (psql's `\copy` timed).

use super::*;

/// Loads W4's table `test` on both targets, one after the other, then `vacuum analyze`
/// (the plain table; the shards on the workers) and a checkpoint on every server. A
/// failure on the plain server fails the bench; one through pgshard is recorded and the
/// W4 workloads report it.
pub(super) async fn load_w4(
    opts: &Options,
    progress: &Progress,
    plain: &TargetCtx,
    pgshard: &TargetCtx,
    cluster: &ClusterInfo,
) -> Result<QueryLoad> {
    let rows = opts.w4_rows;
    let insert = w4_insert(rows);
    let mut load = QueryLoad {
        rows,
        ..Default::default()
    };
    let n = report::thousands(rows as f64);

    progress.say(format!("W4: loading {n} rows into the plain PostgreSQL"));
    let client = connect(&plain.admin).await?;
    let t = Instant::now();
    for sql in [W4_CREATE, "begin", W4_SEED, insert.as_str(), "commit"] {
        simple(&client, sql, LOAD_TIMEOUT)
            .await
            .map_err(|e| anyhow!("W4 load on the plain PostgreSQL: {}", e.during(sql).message))?;
    }
    let plain_s = t.elapsed().as_secs_f64();
    load.plain_s = Some(plain_s);
    let t = Instant::now();
    for sql in VACUUM_PREPARE.iter().chain(&["vacuum analyze test"]) {
        simple(&client, sql, LOAD_TIMEOUT)
            .await
            .map_err(|e| anyhow!("{sql} on the plain PostgreSQL: {}", e.message))?;
    }
    load.plain_vacuum_s = Some(t.elapsed().as_secs_f64());
    let visible = simple(&client, &all_visible_query("^test$"), LOAD_TIMEOUT)
        .await
        .map_err(|e| {
            anyhow!(
                "reading relallvisible on the plain PostgreSQL: {}",
                e.message
            )
        })?;
    load.plain_all_visible = parse_pages(&visible.first().cloned().unwrap_or_default());
    drop(client);
    progress.say(format!("  loaded in {plain_s:.1} s"));

    progress.say(format!(
        "W4: loading {n} rows through pgshard as a local table, then \
         create_distributed_table('test', 'id') ({SHARD_COUNT} shards)"
    ));
    match load_w4_pgshard(&pgshard.admin, &insert, &mut load).await {
        Ok(()) => {
            progress.say(format!(
                "  loaded in {:.1} s (local insert {:.1} s + create_distributed_table {:.1} s)",
                load.pgshard_s.unwrap_or(0.0),
                load.pgshard_insert_s.unwrap_or(0.0),
                load.pgshard_distribute_s.unwrap_or(0.0)
            ));
            let t = Instant::now();
            load.pgshard_all_visible = vacuum_shards(cluster, "test").await?;
            load.pgshard_vacuum_s = Some(t.elapsed().as_secs_f64());
        }
        Err(e) => {
            progress.say(format!("  failed: {}", e.message));
            load.error = Some(e.message);
            load.sqlstate = e.sqlstate;
        }
    }
    progress.say("checkpoint on every server");
    checkpoint_all(cluster, &plain.admin).await?;
    Ok(load)
}

/// W4's load through pgshard: local table on the coordinator node, then distributed.
pub(super) async fn load_w4_pgshard(
    env: &Env,
    insert: &str,
    load: &mut QueryLoad,
) -> Result<(), SqlError> {
    let client = connect(env)
        .await
        .map_err(|e| SqlError::client(format!("{e:#}")))?;
    let t = Instant::now();
    for sql in [W4_CREATE, "begin", W4_SEED, insert, "commit"] {
        simple(&client, sql, LOAD_TIMEOUT)
            .await
            .map_err(|e| e.during(sql))?;
    }
    let insert_s = t.elapsed().as_secs_f64();
    load.pgshard_insert_s = Some(insert_s);
    let t = Instant::now();
    for sql in [
        format!("SET citus.shard_count = {SHARD_COUNT}"),
        "SELECT create_distributed_table('test', 'id')".to_string(),
    ] {
        simple(&client, &sql, LOAD_TIMEOUT)
            .await
            .map_err(|e| e.during(&sql))?;
    }
    let distribute_s = t.elapsed().as_secs_f64();
    load.pgshard_distribute_s = Some(distribute_s);
    load.pgshard_s = Some(insert_s + distribute_s);
    Ok(())
}

/// Run before `vacuum analyze` in the same session, on both targets, so that it sets
/// hint bits and marks every page all-visible. With `synchronous_commit = off` (the
/// benchmarks' setting) a commit record may not be flushed yet, and PostgreSQL sets no
/// hint bit for a transaction whose commit (or any later asynchronous commit of the
/// same group of 32 xids, such as the ANALYZE of the previous table) is not flushed, so
/// vacuum leaves those pages not all-visible, and every later scan checks each row's
/// visibility. Without this, how much ended all-visible depended on when the WAL writer
/// flushed (once the plain table 72 % and the shards 6 %, another time the shards 75 %).
pub(super) const VACUUM_PREPARE: [&str; 2] = ["checkpoint", "set synchronous_commit = on"];

/// Pages and all-visible pages of the tables whose names match `pattern`, as one
/// `pages|all_visible` row.
pub(super) fn all_visible_query(pattern: &str) -> String {
    format!(
        "select coalesce(sum(c.relpages), 0)::int8 || '|' || coalesce(sum(c.relallvisible), 0)::int8 \
         from pg_class c where c.relkind = 'r' and c.relname ~ {}",
        crate::sql::quote::quote_literal(pattern)
    )
}

pub(super) fn parse_pages(row: &[Option<String>]) -> Option<(u64, u64)> {
    let text = row.first()?.as_deref()?;
    let (pages, visible) = text.split_once('|')?;
    Some((pages.trim().parse().ok()?, visible.trim().parse().ok()?))
}

/// The shards of `table` (`table_<shardid>`) on the server of `env`, as a list of
/// quoted names for one statement ("" when it holds none).
pub(super) async fn shard_tables(env: &Env, table: &str) -> Result<String> {
    let query = format!(
        "select string_agg(format('%I.%I', n.nspname, c.relname), ', ') \
         from pg_class c join pg_namespace n on n.oid = c.relnamespace \
         where c.relkind = 'r' and c.relname ~ {}",
        crate::sql::quote::quote_literal(&format!("^{table}_[0-9]+$"))
    );
    pgbench::psql(env, &["-c", &query]).await
}

/// `vacuum analyze` of the shards of `table` (`table_<shardid>`) on every worker;
/// returns their pages and all-visible pages summed over the workers.
pub(super) async fn vacuum_shards(
    cluster: &ClusterInfo,
    table: &str,
) -> Result<Option<(u64, u64)>> {
    let mut total = Some((0, 0));
    for env in node_envs(cluster).into_iter().skip(1) {
        let shards = shard_tables(&env, table).await?;
        if !shards.is_empty() {
            let vacuum = format!("vacuum analyze {shards}");
            let mut args = Vec::new();
            for sql in VACUUM_PREPARE.iter().copied().chain([vacuum.as_str()]) {
                args.extend(["-c", sql]);
            }
            pgbench::psql(&env, &args).await?;
        }
        let visible = pgbench::psql(
            &env,
            &["-c", &all_visible_query(&format!("^{table}_[0-9]+$"))],
        )
        .await?;
        total = match (total, parse_pages(&[Some(visible)])) {
            (Some((p, v)), Some((p2, v2))) => Some((p + p2, v + v2)),
            _ => None,
        };
    }
    Ok(total)
}

/// An answer as the comparison sees it.
pub(super) fn comparable(compare: Compare, answer: &Answer) -> Answer {
    match compare {
        Compare::Rows => answer.clone(),
        Compare::LastColumn => {
            let mut v: Answer = answer
                .iter()
                .map(|r| vec![r.last().cloned().flatten()])
                .collect();
            v.sort();
            v
        }
    }
}

/// An answer on one line (shortened).
pub(super) fn answer_text(answer: &Answer) -> String {
    let s = answer
        .iter()
        .map(|r| {
            r.iter()
                .map(|v| v.as_deref().unwrap_or("NULL"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join("; ");
    let short: String = s.chars().take(200).collect();
    if short.len() < s.len() {
        format!("[{short}...]")
    } else {
        format!("[{short}]")
    }
}

/// A query workload of W4: R repetitions, pgshard and plain alternating as for pgbench;
/// its answers compared in every repetition.
pub(super) async fn run_query_workload(
    timing: QueryTiming,
    progress: &Progress,
    w: &Workload,
    (sql, compare): (&'static str, Compare),
    load: &QueryLoad,
    [plain_target, pgshard_target]: [&TargetCtx; 2],
    seq: &mut u32,
) -> WorkloadResult {
    let mut runs: Vec<QueryRun> = Vec::new();
    let mut status = Status::Ok;
    let mut reason = None;
    let mut answers_equal = None;
    let not_supported = |code: &Option<String>| {
        code.as_deref() == Some(crate::error::sqlstate::FEATURE_NOT_SUPPORTED)
    };
    if let Some(e) = &load.error {
        status = if not_supported(&load.sqlstate) {
            Status::Skipped
        } else {
            Status::Error
        };
        let r = format!("loading W4 through pgshard: {e}");
        progress.say(format!("{}: {r}", w.name));
        reason = Some(r);
    } else {
        'repeats: for rep in 1..=timing.repeat {
            // As for pgbench: pgshard first in odd repetitions; the first run is
            // pgshard's, so a query it refuses is skipped at once.
            let order = if rep % 2 == 1 {
                [pgshard_target, plain_target]
            } else {
                [plain_target, pgshard_target]
            };
            for t in order {
                *seq += 1;
                progress.say(format!(
                    "{} {}/{} {}: {} ({} warm-up + {} timed)",
                    w.name,
                    rep,
                    timing.repeat,
                    t.target.name(),
                    one_line(sql),
                    timing.warmup,
                    timing.timed
                ));
                let run = run_query(t, sql, rep, *seq, timing).await;
                match (&run.error, run.median_ms) {
                    (None, Some(ms)) => progress.say(format!(
                        "  median {ms:.1} ms (timed: {})",
                        run.times_ms
                            .iter()
                            .map(|v| format!("{v:.1}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    (e, _) => {
                        progress.say(format!("  failed: {}", e.as_deref().unwrap_or("no time")))
                    }
                }
                let failed = (!run.ok).then(|| {
                    (
                        run.error.clone().unwrap_or_else(|| "no time".into()),
                        run.sqlstate.clone(),
                    )
                });
                runs.push(run);
                if let Some((e, code)) = failed {
                    (status, reason) = match t.target {
                        Target::Pgshard if not_supported(&code) => {
                            (Status::Skipped, Some(format!("through pgshard: {e}")))
                        }
                        Target::Pgshard => (Status::Error, Some(format!("through pgshard: {e}"))),
                        Target::Plain => (Status::Error, Some(format!("plain PostgreSQL: {e}"))),
                    };
                    break 'repeats;
                }
            }
            let answer = |target: Target| {
                runs.iter()
                    .find(|r| r.repeat == rep && r.target == target)
                    .map(|r| r.answer.clone())
                    .unwrap_or_default()
            };
            let (a, b) = (answer(Target::Plain), answer(Target::Pgshard));
            if comparable(compare, &a) != comparable(compare, &b) {
                answers_equal = Some(false);
                status = Status::Error;
                let r = format!(
                    "the answers differ (repetition {rep}): plain {} vs pgshard {}",
                    answer_text(&a),
                    answer_text(&b)
                );
                progress.say(format!("  {r}"));
                reason = Some(r);
                break 'repeats;
            }
            answers_equal = Some(true);
        }
    }
    let ok = status == Status::Ok;
    let plain = report::summarize_queries(&runs, Target::Plain).filter(|_| ok);
    let pgshard = report::summarize_queries(&runs, Target::Pgshard).filter(|_| ok);
    let ratio = match (&plain, &pgshard) {
        (Some(p), Some(s)) if s.median_ms > 0.0 => Some(p.median_ms / s.median_ms),
        _ => None,
    };
    WorkloadResult {
        name: w.name.into(),
        description: w.description.into(),
        kind: report::Kind::Query,
        pgbench_args: vec![],
        script: None,
        status,
        reason,
        plain: None,
        pgshard: None,
        ratio,
        ratio_per_repeat: report::query_ratios_per_repeat(&runs),
        reference: Reference {
            citus_ratio: w.reference.0,
            goal_ratio: w.reference.1,
        },
        runs: vec![],
        query: Some(QueryFigures {
            sql: sql.into(),
            table_rows: load.rows,
            warmup: timing.warmup,
            timed: timing.timed,
            plain,
            pgshard,
            answers_equal,
            answer: runs
                .iter()
                .find(|r| r.target == Target::Plain && r.ok)
                .map(|r| r.answer.clone()),
            runs,
        }),
    }
}

/// W4's load by COPY: W4's rows exported once from the plain server to a CSV file, then
/// in each repetition, on each target (pgshard first in odd repetitions), `truncate
/// test_copy` and one timed `\copy test_copy from FILE` by psql (its wall clock: the
/// whole COPY as a client sees it); the rows then counted on both. pgshard refusing the
/// COPY (0A000) skips the workload with its message.
pub(super) async fn run_copy_workload(
    opts: &Options,
    progress: &Progress,
    w: &Workload,
    load: &QueryLoad,
    [plain, pgshard]: [&TargetCtx; 2],
    cluster: &ClusterInfo,
    seq: &mut u32,
) -> Result<WorkloadResult> {
    let file = opts.runs_dir().join("w4-rows.csv");
    let copy = format!(
        "\\copy test_copy from {} with (format csv)",
        crate::sql::quote::quote_literal(&file.display().to_string())
    );
    let mut runs: Vec<QueryRun> = Vec::new();
    let mut status = Status::Ok;
    let mut reason: Option<String> = None;
    let mut answers_equal = None;

    progress.say(format!(
        "W4 copy: exporting test's {} rows from the plain PostgreSQL to {}",
        report::thousands(load.rows as f64),
        file.display()
    ));
    pgbench::psql(
        &plain.admin,
        &[
            "-c",
            &format!(
                "\\copy test to {} with (format csv)",
                crate::sql::quote::quote_literal(&file.display().to_string())
            ),
        ],
    )
    .await
    .context("exporting W4's rows")?;
    let create = W4_CREATE.replacen("create table test ", "create table test_copy ", 1);
    pgbench::psql(&plain.admin, &["-c", &create])
        .await
        .context("test_copy on the plain PostgreSQL")?;
    let made = async {
        let client = connect(&pgshard.admin)
            .await
            .map_err(|e| SqlError::client(format!("{e:#}")))?;
        for sql in [
            create.clone(),
            format!("SET citus.shard_count = {SHARD_COUNT}"),
            "SELECT create_distributed_table('test_copy', 'id')".into(),
        ] {
            simple(&client, &sql, LOAD_TIMEOUT)
                .await
                .map_err(|e| e.during(&sql))?;
        }
        Ok::<_, SqlError>(())
    }
    .await;
    if let Err(e) = made {
        let (s, r) = refusal(e);
        progress.say(format!("  failed: {r}"));
        (status, reason) = (s, Some(r));
    } else {
        grant_client(opts, [plain, pgshard], cluster, "test_copy").await?;
    }

    'repeats: for rep in (1..=opts.repeat).filter(|_| status == Status::Ok) {
        let order = if rep % 2 == 1 {
            [pgshard, plain]
        } else {
            [plain, pgshard]
        };
        for t in order {
            *seq += 1;
            progress.say(format!(
                "{} {}/{} {}: {copy}",
                w.name,
                rep,
                opts.repeat,
                t.target.name()
            ));
            let run = run_copy(t, &copy, rep, *seq).await;
            match (&run.error, run.median_ms) {
                (None, Some(ms)) => progress.say(format!(
                    "  {ms:.0} ms, {} rows/s",
                    report::thousands(load.rows as f64 / (ms / 1e3))
                )),
                (e, _) => progress.say(format!("  failed: {}", e.as_deref().unwrap_or("no time"))),
            }
            let failed = (!run.ok).then(|| {
                (
                    run.error.clone().unwrap_or_else(|| "no time".into()),
                    run.sqlstate.clone(),
                )
            });
            let count = run.answer.clone();
            runs.push(run);
            if let Some((e, code)) = failed {
                (status, reason) = match t.target {
                    Target::Pgshard
                        if code.as_deref()
                            == Some(crate::error::sqlstate::FEATURE_NOT_SUPPORTED) =>
                    {
                        (Status::Skipped, Some(format!("through pgshard: {e}")))
                    }
                    Target::Pgshard => (Status::Error, Some(format!("through pgshard: {e}"))),
                    Target::Plain => (Status::Error, Some(format!("plain PostgreSQL: {e}"))),
                };
                break 'repeats;
            }
            let want = vec![vec![Some(load.rows.to_string())]];
            if count != want {
                status = Status::Error;
                let r = format!(
                    "{} has {} rows after the COPY, not {}",
                    t.target.name(),
                    answer_text(&count),
                    load.rows
                );
                progress.say(format!("  {r}"));
                reason = Some(r);
                answers_equal = Some(false);
                break 'repeats;
            }
            answers_equal = Some(true);
        }
    }
    if !opts.keep {
        let _ = fs::remove_file(&file);
    }
    let ok = status == Status::Ok;
    let summary = |target| {
        report::summarize_queries(&runs, target)
            .filter(|_| ok)
            .map(|mut s| {
                s.rows_per_s = Some(load.rows as f64 / (s.median_ms / 1e3).max(1e-9));
                s
            })
    };
    let (plain_s, pgshard_s) = (summary(Target::Plain), summary(Target::Pgshard));
    let ratio = match (&plain_s, &pgshard_s) {
        (Some(p), Some(s)) if s.median_ms > 0.0 => Some(p.median_ms / s.median_ms),
        _ => None,
    };
    Ok(WorkloadResult {
        name: w.name.into(),
        description: w.description.into(),
        kind: report::Kind::Copy,
        pgbench_args: vec![],
        script: None,
        status,
        reason,
        plain: None,
        pgshard: None,
        ratio,
        ratio_per_repeat: report::query_ratios_per_repeat(&runs),
        reference: Reference {
            citus_ratio: w.reference.0,
            goal_ratio: w.reference.1,
        },
        runs: vec![],
        query: Some(QueryFigures {
            sql: copy.clone(),
            table_rows: load.rows,
            warmup: 0,
            timed: 1,
            plain: plain_s,
            pgshard: pgshard_s,
            answers_equal,
            answer: Some(vec![vec![Some(load.rows.to_string())]]),
            runs,
        }),
    })
}

/// One timed COPY into an emptied `test_copy` by psql, with CPU snapshots around it;
/// the answer is the table's row count afterwards.
pub(super) async fn run_copy(t: &TargetCtx, copy: &str, repeat: u32, seq: u32) -> QueryRun {
    let mut run = QueryRun {
        target: t.target,
        repeat,
        sequence: seq,
        ok: false,
        error: None,
        sqlstate: None,
        warmup_ms: vec![],
        times_ms: vec![],
        median_ms: None,
        answer: vec![],
        pgshard_cpu_ms_per_query: None,
        server_cpu_ms_per_query: None,
    };
    if let Err(e) = pgbench::psql(&t.admin, &["-c", "truncate test_copy"]).await {
        run.error = Some(format!("{e:#}"));
        return run;
    }
    let mut cmd = pgbench::command("psql", &t.client);
    cmd.args([
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        "\\set VERBOSITY verbose",
        "-c",
        copy,
    ]);
    let before = t.probe.snapshot();
    let start = Instant::now();
    let out = match pgbench::run(cmd, Some(LOAD_TIMEOUT)).await {
        Ok(o) => o,
        Err(e) => {
            run.error = Some(format!("{e:#}"));
            return run;
        }
    };
    let ms = start.elapsed().as_secs_f64() * 1e3;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let usage = cpu::usage(&t.probe, &before, &t.probe.snapshot());
    if !out.success() {
        // "ERROR:  0A000: message" with VERBOSITY verbose.
        let line = out
            .stderr
            .lines()
            .find(|l| l.contains("ERROR:"))
            .unwrap_or("")
            .trim()
            .to_string();
        let rest = line
            .split_once("ERROR:")
            .map(|(_, r)| r.trim())
            .unwrap_or("");
        let code = rest
            .split_once(':')
            .map(|(c, _)| c.trim())
            .filter(|c| c.len() == 5 && c.chars().all(|ch| ch.is_ascii_alphanumeric()));
        run.sqlstate = code.map(str::to_string);
        run.error = Some(if line.is_empty() {
            out.error_reason()
        } else {
            line
        });
        return run;
    }
    run.times_ms.push(ms);
    run.median_ms = Some(ms);
    run.pgshard_cpu_ms_per_query = usage.pgshard_s.map(|s| s * 1e3);
    run.server_cpu_ms_per_query = Some(usage.servers_s.iter().map(|(_, s)| s).sum::<f64>() * 1e3);
    match pgbench::psql(&t.client, &["-c", "select count(*) from test_copy"]).await {
        Ok(n) => {
            run.answer = vec![vec![Some(n)]];
            run.ok = true;
        }
        Err(e) => run.error = Some(format!("counting the rows: {e:#}")),
    }
    run
}

/// A statement on one line, shortened, for progress lines.
pub(super) fn one_line(sql: &str) -> String {
    let s = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    let short: String = s.chars().take(200).collect();
    if short.len() < s.len() {
        format!("{short}...")
    } else {
        short
    }
}

/// One run of a query against one target, on a new connection: the timing's untimed
/// executions, then its timed ones with CPU snapshots around them.
pub(super) async fn run_query(
    t: &TargetCtx,
    sql: &str,
    repeat: u32,
    seq: u32,
    timing: QueryTiming,
) -> QueryRun {
    let mut run = QueryRun {
        target: t.target,
        repeat,
        sequence: seq,
        ok: false,
        error: None,
        sqlstate: None,
        warmup_ms: vec![],
        times_ms: vec![],
        median_ms: None,
        answer: vec![],
        pgshard_cpu_ms_per_query: None,
        server_cpu_ms_per_query: None,
    };
    let client = match connect(&t.client).await {
        Ok(c) => c,
        Err(e) => {
            run.error = Some(format!("{e:#}"));
            return run;
        }
    };
    let mut wait = timing.timeout;
    if timing.statement_timeout {
        let set = format!("SET statement_timeout = {}", timing.timeout.as_millis());
        if let Err(e) = simple(&client, &set, QUERY_TIMEOUT).await {
            let e = e.during(&set);
            run.error = Some(e.message);
            run.sqlstate = e.sqlstate;
            return run;
        }
        wait += Duration::from_secs(30);
    }
    let mut before = None;
    let mut timed = timing.timed;
    let mut i = 0;
    while i < timing.warmup + timed {
        if i == timing.warmup {
            before = Some(t.probe.snapshot());
        }
        let start = Instant::now();
        match simple(&client, sql, wait).await {
            Ok(rows) => {
                let ms = start.elapsed().as_secs_f64() * 1e3;
                if i < timing.warmup {
                    if timing
                        .one_timed_after
                        .is_some_and(|long| start.elapsed() > long)
                    {
                        timed = timed.min(1);
                    }
                    run.warmup_ms.push(ms);
                } else {
                    run.times_ms.push(ms);
                }
                run.answer = rows;
            }
            Err(e) => {
                if e.sqlstate.is_none() {
                    // The client gave up: stop the query on the server too.
                    let _ = client
                        .cancel_token()
                        .cancel_query(tokio_postgres::NoTls)
                        .await;
                }
                run.error = Some(e.message);
                run.sqlstate = e.sqlstate;
                return run;
            }
        }
        i += 1;
    }
    // Let parallel workers exit and be reaped into the postmaster's cutime.
    tokio::time::sleep(Duration::from_millis(200)).await;
    if let Some(before) = before {
        let usage = cpu::usage(&t.probe, &before, &t.probe.snapshot());
        let n = run.times_ms.len().max(1) as f64;
        run.pgshard_cpu_ms_per_query = usage.pgshard_s.map(|s| s * 1e3 / n);
        run.server_cpu_ms_per_query =
            Some(usage.servers_s.iter().map(|(_, s)| s).sum::<f64>() * 1e3 / n);
    }
    run.median_ms = report::median(&run.times_ms);
    run.ok = run.median_ms.is_some();
    run
}
