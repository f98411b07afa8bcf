//! Set-up of the pgbench and sysbench workloads of `pgshard bench`: W1's tables
//! (`pgbench -i`, then distributed through pgshard), W2's table and the script of each
//! variant, TPC-B's scripts, W3's sysbench table.

use super::*;

/// W2's table on both targets: `w2 (id int)`, distributed by id with SHARD_COUNT shards
/// through pgshard; the shards' hash ranges, to choose the ids of each variant.
pub(super) struct W2Setup {
    pub(super) ranges: Vec<(i32, i32)>,
    /// Why the table could not be made through pgshard.
    pub(super) error: Option<(Status, String)>,
}

pub(super) async fn setup_w2(
    progress: &Progress,
    [plain, pgshard]: [&TargetCtx; 2],
) -> Result<W2Setup> {
    progress.say(format!(
        "W2: table w2 (id int) on both targets, distributed by id through pgshard \
         ({SHARD_COUNT} shards)"
    ));
    pgbench::psql(&plain.admin, &["-c", "create table w2 (id int)"])
        .await
        .context("W2's table on the plain PostgreSQL")?;
    let made = async {
        let client = connect(&pgshard.admin)
            .await
            .map_err(|e| SqlError::client(format!("{e:#}")))?;
        let mut ranges = Vec::new();
        for sql in [
            "create table w2 (id int)".to_string(),
            format!("SET citus.shard_count = {SHARD_COUNT}"),
            "SELECT create_distributed_table('w2', 'id')".into(),
            "select shardminvalue, shardmaxvalue from pg_dist_shard \
             where logicalrelid = 'w2'::regclass order by shardminvalue::int"
                .into(),
        ] {
            let rows = simple(&client, &sql, LOAD_TIMEOUT)
                .await
                .map_err(|e| e.during(&sql))?;
            ranges = rows
                .iter()
                .filter_map(|r| {
                    let v = |i: usize| r.get(i)?.as_deref()?.parse::<i32>().ok();
                    Some((v(0)?, v(1)?))
                })
                .collect();
        }
        Ok::<_, SqlError>(ranges)
    }
    .await;
    Ok(match made {
        Ok(ranges) => W2Setup {
            ranges,
            error: None,
        },
        Err(e) => {
            let (status, reason) = refusal(e);
            progress.say(format!("  failed: {reason}"));
            W2Setup {
                ranges: vec![],
                error: Some((status, reason)),
            }
        }
    })
}

/// pgbench's TPC-B transaction (its built-in script) at `scale`, after `before`, ended
/// by `commit`.
pub(super) fn tpcb_script(scale: u32, before: &str, commit: &str) -> String {
    let s = scale as u64;
    format!(
        "\\set aid random(1, {})\n\\set bid random(1, {s})\n\\set tid random(1, {})\n\
         \\set delta random(-5000, 5000)\n\
         {before}\
         BEGIN;\n\
         UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n\
         SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n\
         UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;\n\
         UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;\n\
         INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
         VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);\n\
         {commit}",
        100_000 * s,
        10 * s
    )
}

/// Writes the pgbench script of `w`; for W2, then checks that pgshard runs its
/// statements (in a transaction rolled back): the text of the script, and why the
/// workload is not run.
pub(super) async fn write_script(
    opts: &Options,
    w: &Workload,
    script: Script,
    w2_setup: Option<&W2Setup>,
    pgshard: &Env,
) -> (Option<String>, Option<(Status, String)>) {
    let mut probe = None;
    let text = match script {
        Script::Tpcb { protocol } => tpcb_script(
            opts.scale,
            &format!("SET citus.multi_shard_commit_protocol = '{protocol}';\n"),
            "END;\n",
        ),
        // pgbench substitutes :client_id inside the quotes (simple mode only).
        Script::TpcbOwnTwoPhase => tpcb_script(
            opts.scale,
            "",
            "PREPARE TRANSACTION 'pgbench_client_:client_id';\n\
             COMMIT PREPARED 'pgbench_client_:client_id';\n",
        ),
        Script::W5(variant) => super::w5::script(variant, opts.scale),
        Script::W2 { spread, protocol } => {
            let setup = w2_setup.expect("W2 set up before its scripts");
            if let Some(e) = &setup.error {
                return (None, Some(e.clone()));
            }
            let Some(ids) = w2::choose_ids(&setup.ranges, spread) else {
                let why = format!(
                    "w2 has {} shards: too few for {spread:?}",
                    setup.ranges.len()
                );
                return (None, Some((Status::Error, why)));
            };
            let statements = w2::statements(&ids, protocol);
            probe = Some(statements.clone());
            format!(
                "-- rows on {} shard(s) of {}\n{};\n",
                w2::shards_touched(&setup.ranges, &ids),
                setup.ranges.len(),
                statements.join(";\n")
            )
        }
    };
    if let Err(e) = fs::write(script_path(opts, w), &text) {
        return (
            Some(text),
            Some((Status::Error, format!("writing the script: {e}"))),
        );
    }
    let Some(statements) = probe else {
        return (Some(text), None);
    };
    let client = match connect(pgshard).await {
        Ok(c) => c,
        Err(e) => {
            let why = format!("through pgshard: {e:#}");
            return (Some(text), Some((Status::Error, why)));
        }
    };
    for sql in ["begin"]
        .into_iter()
        .chain(statements.iter().map(String::as_str))
        .chain(["rollback"])
    {
        if let Err(e) = simple(&client, sql, QUERY_TIMEOUT).await {
            let _ = simple(&client, "rollback", QUERY_TIMEOUT).await;
            return (Some(text), Some(refusal(e.during(sql))));
        }
    }
    (Some(text), None)
}

/// W3's table on both targets: `sysbench oltp_insert ... prepare` (creates sbtest1 and
/// its index k_1), then through pgshard `create_distributed_table('sbtest1', 'id')`
/// (SHARD_COUNT shards), as a Citus user does it. A failure on the plain server fails
/// the bench; one through pgshard is the workload's reason not to run.
pub(super) async fn setup_w3(
    opts: &Options,
    progress: &Progress,
    [plain, pgshard]: [&TargetCtx; 2],
) -> Result<Option<(Status, String)>> {
    let mut cmd = pgbench::command("sysbench", &vec![]);
    cmd.arg("--version");
    if !pgbench::run(cmd, None).await.is_ok_and(|o| o.success()) {
        progress.say("W3: sysbench is not installed (scripts/setup.sh installs it)");
        return Ok(Some((
            Status::Skipped,
            "sysbench is not installed (scripts/setup.sh installs it)".into(),
        )));
    }
    for t in [plain, pgshard] {
        progress.say(format!(
            "W3: sysbench oltp_insert prepare on {}",
            t.target.name()
        ));
        let mut cmd = pgbench::command("sysbench", &t.admin);
        cmd.args(sysbench_args(opts, Some(&t.admin), "prepare"))
            .current_dir(opts.runs_dir());
        let out = pgbench::run(cmd, Some(Duration::from_secs(600))).await?;
        let file = opts
            .runs_dir()
            .join(format!("w3-prepare-{}-output.txt", t.target.name()));
        fs::write(&file, out.text())?;
        let failed = sysbench::fatal_line(&out.stdout, &out.stderr)
            .or_else(|| (!out.success()).then(|| out.error_reason()));
        match (failed, t.target) {
            (Some(e), Target::Plain) => bail!("sysbench prepare on the plain PostgreSQL: {e}"),
            (Some(e), Target::Pgshard) => {
                let status = if e.contains("not support") {
                    Status::Skipped
                } else {
                    Status::Error
                };
                let r = format!("sysbench prepare through pgshard: {e}");
                progress.say(format!("  failed: {r}"));
                return Ok(Some((status, r)));
            }
            (None, _) => {}
        }
    }
    let client = connect(&pgshard.admin).await?;
    for sql in [
        format!("SET citus.shard_count = {SHARD_COUNT}"),
        "SELECT create_distributed_table('sbtest1', 'id')".into(),
    ] {
        if let Err(e) = simple(&client, &sql, LOAD_TIMEOUT).await {
            let r = refusal(e.during(&sql));
            progress.say(format!("  failed: {}", r.1));
            return Ok(Some(r));
        }
    }
    Ok(None)
}

/// `pgbench -i -s S`; its output goes to `OUT/runs/NAME-output.txt`.
pub(super) async fn pgbench_init(opts: &Options, env: &Env, name: &str) -> Result<()> {
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
/// psql session through pgshard (one `-c` each: pgshard runs a Citus function that
/// writes only as a query string of its own), then `vacuum analyze` of each table (pgbench -i's last
/// step, which ran on the local tables before they moved into new shard tables; without
/// it autovacuum and autoanalyze of the shards run during the first measurements).
pub(super) async fn distribute(opts: &Options, env: &Env) -> Result<()> {
    let mut statements = vec![format!("SET citus.shard_count = {SHARD_COUNT}")];
    for (table, column) in W1_TABLES {
        statements.push(format!(
            "SELECT create_distributed_table('{table}', '{column}')"
        ));
    }
    let sql = statements.join(";\n");
    let mut cmd = pgbench::command("psql", env);
    cmd.args(["-X", "-v", "ON_ERROR_STOP=1"]);
    for statement in &statements {
        cmd.args(["-c", statement]);
    }
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
    // One -c each: VACUUM cannot run inside the implicit block of a multi-statement string.
    let vacuums: Vec<String> = W1_TABLES
        .iter()
        .map(|(table, _)| format!("vacuum analyze {table}"))
        .collect();
    let args: Vec<&str> = vacuums.iter().flat_map(|v| ["-c", v.as_str()]).collect();
    pgbench::psql(env, &args).await?;
    Ok(())
}
