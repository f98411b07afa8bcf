//! W5 (workloads.md, seed 002): the login / logout workload with synchronous
//! replication. Seed 002's pgbench scripts call `f_user_login(:userid)` (read a
//! `user_info` row, insert a `user_login_rec` row) and `f_user_logout(:userid)` (insert
//! a `user_logout_rec` row) with `-M extended`; pgshard does not run PL/pgSQL with
//! variables and INTO (0A000), so the scripts here send the functions' statements:
//! login as one transaction (BEGIN; the row read; the insert; END), logout as one
//! INSERT. Both targets run the same scripts.
//!
//! The five configurations of the seed, each with its own pair of workloads:
//! no standby (`w5-none-*`), two asynchronous standbys (`w5-async-*`), both with
//! `synchronous_commit = off` as in the seed; one synchronous and one potential standby
//! (`FIRST 1 (s1, s2)`) with `synchronous_commit` off, local and on
//! (`w5-sync-{off,local,on}-*`). The pgshard cluster gets two standbys per node
//! (`cluster up --standbys 2`) and the plain PostgreSQL two of its own, all made before
//! the first W5 workload; before each, every primary (the plain server, the
//! coordinator node, the workers) is put in its configuration
//! (`standby::apply_mode`: settings, standbys started or stopped, streaming).
//! `user_info` holds scale x 100,000 users (the seed: 50 M), distributed by `userid`
//! with the two record tables co-located. W5 runs only when named (`pgshard bench w5`).

use super::report::Status;
use super::{
    connect, refusal, simple, Kind, Options, Progress, Script, SqlError, TargetCtx, Workload,
    LOAD_TIMEOUT, SHARD_COUNT,
};
use crate::cluster::node::{Node, Settings};
use crate::cluster::standby::{self, ReplicationMode, SyncCommit};
use anyhow::{Context, Result};

/// Standbys of every primary (the seed's two).
pub(super) const STANDBYS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Topology {
    NoStandby,
    Async,
    /// One synchronous and one potential standby, with this `synchronous_commit`.
    Sync(SyncCommit),
}

impl Topology {
    fn mode(self) -> ReplicationMode {
        let (standbys_running, synchronous, synchronous_commit) = match self {
            Topology::NoStandby => (false, false, SyncCommit::Off),
            Topology::Async => (true, false, SyncCommit::Off),
            Topology::Sync(s) => (true, true, s),
        };
        ReplicationMode {
            standbys_running,
            synchronous,
            synchronous_commit,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Login,
    Logout,
}

/// One W5 workload: a configuration and a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Variant {
    topology: Topology,
    action: Action,
}

const fn w5(
    name: &'static str,
    description: &'static str,
    topology: Topology,
    action: Action,
) -> Workload {
    Workload {
        name,
        description,
        kind: Kind::Script {
            mode: "extended",
            script: Script::W5(Variant { topology, action }),
        },
        reference: (None, None),
    }
}

/// The group `w5`, run only when named.
/// The group `w5`, run only when named.
pub(super) const WORKLOADS: &[Workload] = &[
    w5(
        "w5-none-login",
        "W5 (seed 002) login: BEGIN; SELECT the user_info row; INSERT INTO user_login_rec; \
         END (-M extended); no standby, synchronous_commit = off",
        Topology::NoStandby,
        Action::Login,
    ),
    w5(
        "w5-none-logout",
        "W5 (seed 002) logout: INSERT INTO user_logout_rec (-M extended); no standby, synchronous_commit = off",
        Topology::NoStandby,
        Action::Logout,
    ),
    w5(
        "w5-async-login",
        "W5 (seed 002) login: BEGIN; SELECT the user_info row; INSERT INTO user_login_rec; \
         END (-M extended); 2 asynchronous standbys per primary, synchronous_commit = off",
        Topology::Async,
        Action::Login,
    ),
    w5(
        "w5-async-logout",
        "W5 (seed 002) logout: INSERT INTO user_logout_rec (-M extended); 2 asynchronous standbys per primary, synchronous_commit = off",
        Topology::Async,
        Action::Logout,
    ),
    w5(
        "w5-sync-off-login",
        "W5 (seed 002) login: BEGIN; SELECT the user_info row; INSERT INTO user_login_rec; \
         END (-M extended); 1 synchronous + 1 potential standby per primary (FIRST 1 (s1, s2)), synchronous_commit = off",
        Topology::Sync(SyncCommit::Off),
        Action::Login,
    ),
    w5(
        "w5-sync-off-logout",
        "W5 (seed 002) logout: INSERT INTO user_logout_rec (-M extended); 1 synchronous + 1 potential standby per primary (FIRST 1 (s1, s2)), synchronous_commit = off",
        Topology::Sync(SyncCommit::Off),
        Action::Logout,
    ),
    w5(
        "w5-sync-local-login",
        "W5 (seed 002) login: BEGIN; SELECT the user_info row; INSERT INTO user_login_rec; \
         END (-M extended); 1 synchronous + 1 potential standby per primary (FIRST 1 (s1, s2)), synchronous_commit = local",
        Topology::Sync(SyncCommit::Local),
        Action::Login,
    ),
    w5(
        "w5-sync-local-logout",
        "W5 (seed 002) logout: INSERT INTO user_logout_rec (-M extended); 1 synchronous + 1 potential standby per primary (FIRST 1 (s1, s2)), synchronous_commit = local",
        Topology::Sync(SyncCommit::Local),
        Action::Logout,
    ),
    w5(
        "w5-sync-on-login",
        "W5 (seed 002) login: BEGIN; SELECT the user_info row; INSERT INTO user_login_rec; \
         END (-M extended); 1 synchronous + 1 potential standby per primary (FIRST 1 (s1, s2)), synchronous_commit = on",
        Topology::Sync(SyncCommit::On),
        Action::Login,
    ),
    w5(
        "w5-sync-on-logout",
        "W5 (seed 002) logout: INSERT INTO user_logout_rec (-M extended); 1 synchronous + 1 potential standby per primary (FIRST 1 (s1, s2)), synchronous_commit = on",
        Topology::Sync(SyncCommit::On),
        Action::Logout,
    ),
];

/// What the report says of a configuration (the workloads' descriptions are shared).
pub(super) fn describe(v: Variant) -> String {
    let setup = match v.topology {
        Topology::NoStandby => "no standby, synchronous_commit = off".to_string(),
        Topology::Async => "2 asynchronous standbys, synchronous_commit = off".to_string(),
        Topology::Sync(s) => format!(
            "1 synchronous + 1 potential standby (FIRST 1 (s1, s2)), synchronous_commit = {}",
            s.as_str()
        ),
    };
    format!("W5 (seed 002) on every primary: {setup}")
}

/// Users in `user_info` at pgbench scale `scale`.
fn users(scale: u32) -> u64 {
    scale as u64 * 100_000
}

/// The pgbench script of `v`.
pub(super) fn script(v: Variant, scale: u32) -> String {
    let set = format!("\\set userid random(1, {})\n", users(scale));
    let body = match v.action {
        Action::Login => {
            "BEGIN;\n\
             SELECT userid, engname, cnname, occupation, birthday, signname, email, qq \
             FROM user_info WHERE userid = :userid;\n\
             INSERT INTO user_login_rec (userid, login_time, ip) \
             VALUES (:userid, now(), inet_client_addr());\n\
             END;\n"
        }
        Action::Logout => {
            "INSERT INTO user_logout_rec (userid, logout_time, ip) \
             VALUES (:userid, now(), inet_client_addr());\n"
        }
    };
    format!("-- {}\n{set}{body}", describe(v))
}

/// Ports W5 needs beyond the bench's others: the standbys of the cluster's nodes
/// (coordinator node and workers) and of the plain server.
pub(super) fn extra_ports(workers: usize) -> u16 {
    (STANDBYS * (workers + 2)) as u16
}

/// The plain server's standbys, on the last of the bench's ports (`base`: the first;
/// the cluster's standbys take the ports after its own, which the cluster chooses).
pub(super) fn plain_standbys(plain: &Node, base: u16, workers: usize) -> Vec<Node> {
    let first = base + workers as u16 + 3 + (STANDBYS * (workers + 1)) as u16;
    (1..=STANDBYS)
        .map(|i| standby::standby_node(plain, i, first + i as u16 - 1))
        .collect()
}

const TABLES: [&str; 3] = [
    "create table user_info (userid int, engname text, cnname text, occupation text, \
     birthday date, signname text, email text, qq numeric, \
     crt_time timestamp without time zone, mod_time timestamp without time zone)",
    "create table user_login_rec (userid int, login_time timestamp without time zone, ip inet)",
    "create table user_logout_rec (userid int, logout_time timestamp without time zone, ip inet)",
];

/// The seed's rows (its text, `clock_timestamp()` per row).
fn insert_users(scale: u32) -> String {
    format!(
        "insert into user_info (userid, engname, cnname, occupation, birthday, signname, \
         email, qq, crt_time, mod_time) \
         select generate_series(1, {}), 'digoal.zhou', '德哥', 'DBA', '1970-01-01', \
         E'公益是一辈子的事, I\\'m Digoal.Zhou, Just do it!', 'digoal@126.com', 276732431, \
         clock_timestamp(), NULL",
        users(scale)
    )
}

/// W5 made ready: the tables and standbys, and why pgshard could not have them.
pub(super) struct W5Setup {
    plain: Node,
    plain_standbys: Vec<Node>,
    plain_password: String,
    cluster_dir: std::path::PathBuf,
    pub(super) error: Option<(Status, String)>,
}

/// Before the first W5 workload: the plain server's standbys (base backups, started),
/// the cluster's (`cluster up --standbys 2` on the running cluster), then the tables on
/// both targets: loaded on the plain server; through pgshard as local tables, loaded,
/// then distributed (`user_info` by userid with SHARD_COUNT shards, the record tables
/// co-located with it).
pub(super) async fn setup(
    opts: &Options,
    progress: &Progress,
    [plain, pgshard]: [&TargetCtx; 2],
    plain_node: &Node,
    plain_standbys: Vec<Node>,
) -> Result<W5Setup> {
    let password = plain
        .admin
        .iter()
        .find(|(k, _)| k == "PGPASSWORD")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    progress.say(format!(
        "W5: {STANDBYS} standbys of the plain PostgreSQL and of every node of the cluster"
    ));
    {
        let (primary, standbys, pw) =
            (plain_node.clone(), plain_standbys.clone(), password.clone());
        tokio::task::spawn_blocking(move || -> Result<()> {
            let settings = Settings {
                fast: false,
                async_commit: true,
                parallel_workers_per_gather: None,
            };
            for (i, sb) in standbys.iter().enumerate() {
                sb.create_standby(&primary, &standby::standby_name(i + 1), &pw, settings)?;
                sb.start()?;
            }
            Ok(())
        })
        .await??;
    }
    let cluster_info = crate::cluster::cluster_info(&opts.cluster_dir())?;
    {
        let _quiet = super::StdoutToStderr::new();
        crate::cluster::cluster_up(&crate::cluster::ClusterOptions {
            dir: opts.cluster_dir(),
            workers: opts.workers,
            port: cluster_info.port,
            listen_host: "127.0.0.1".into(),
            pgshard_exe: std::env::current_exe()?,
            fast: false,
            async_commit: true,
            standbys: STANDBYS,
            sync: Some(SyncCommit::Off),
            ..crate::cluster::ClusterOptions::default()
        })
        .await
        .context("adding the cluster's standbys")?;
    }

    progress.say(format!(
        "W5: user_info ({} users), user_login_rec, user_logout_rec on both targets",
        users(opts.scale)
    ));
    let load = |distribute: bool| {
        let mut sql: Vec<String> = TABLES.iter().map(|s| s.to_string()).collect();
        sql.push(insert_users(opts.scale));
        sql.push("alter table user_info add constraint pk_user_info primary key (userid)".into());
        if distribute {
            sql.push(format!("SET citus.shard_count = {SHARD_COUNT}"));
            sql.push("SELECT create_distributed_table('user_info', 'userid')".into());
            for t in ["user_login_rec", "user_logout_rec"] {
                sql.push(format!(
                    "SELECT create_distributed_table('{t}', 'userid', colocate_with => 'user_info')"
                ));
            }
        }
        sql.push("vacuum analyze user_info".into());
        sql
    };
    let run = |env: super::Env, sql: Vec<String>| async move {
        let client = connect(&env)
            .await
            .map_err(|e| SqlError::client(format!("{e:#}")))?;
        for s in &sql {
            simple(&client, s, LOAD_TIMEOUT)
                .await
                .map_err(|e| e.during(s))?;
        }
        Ok::<_, SqlError>(())
    };
    run(plain.admin.clone(), load(false))
        .await
        .map_err(|e| anyhow::anyhow!("W5's tables on the plain PostgreSQL: {}", e.message))?;
    let error = match run(pgshard.admin.clone(), load(true)).await {
        Ok(()) => None,
        Err(e) => {
            let (status, reason) = refusal(e);
            progress.say(format!("  failed: {reason}"));
            Some((status, reason))
        }
    };
    Ok(W5Setup {
        plain: plain_node.clone(),
        plain_standbys,
        plain_password: password,
        cluster_dir: opts.cluster_dir(),
        error,
    })
}

impl W5Setup {
    /// Before each W5 workload: every primary of both targets in the workload's
    /// configuration.
    pub(super) async fn apply(&self, v: Variant, progress: &Progress) -> Result<()> {
        progress.say(format!("  {}", describe(v)));
        let mode = v.topology.mode();
        let (primary, standbys, pw) = (
            self.plain.clone(),
            self.plain_standbys.clone(),
            self.plain_password.clone(),
        );
        tokio::task::spawn_blocking(move || standby::apply_mode(&primary, &standbys, &pw, mode))
            .await??;
        crate::cluster::set_replication_mode(&self.cluster_dir, mode).await
    }
}

/// Stops the plain server's standbys (the bench's clean-up).
pub(super) fn stop_standbys(standbys: &[Node]) -> Result<()> {
    for sb in standbys {
        sb.stop()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_s_configurations_in_order() {
        let names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
        assert_eq!(names.len(), 10);
        assert!(names.iter().all(|n| n.starts_with("w5-")));
        let on = Variant {
            topology: Topology::Sync(SyncCommit::On),
            action: Action::Logout,
        };
        assert_eq!(
            Topology::Sync(SyncCommit::On).mode(),
            ReplicationMode {
                standbys_running: true,
                synchronous: true,
                synchronous_commit: SyncCommit::On
            }
        );
        let text = script(on, 2);
        assert!(text.contains("random(1, 200000)"), "{text}");
        assert!(text.contains("INSERT INTO user_logout_rec"), "{text}");
    }
}
