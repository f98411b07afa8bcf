//! Streaming-replication standbys of a local PostgreSQL server (`cluster up --standbys N`,
//! and the plain PostgreSQL of `pgshard bench w5`): a base backup with `pg_basebackup -R`
//! over a replication slot of its own, the primary's synchronous replication settings
//! (`synchronous_standby_names = 'FIRST 1 (s1, s2, ...)'`, `synchronous_commit`), and
//! what `pg_stat_replication` says about them.
//!
//! A standby of the server in `DIR/worker1` lives in `DIR/worker1_s1`, connects with
//! `application_name = s1` (its name in `synchronous_standby_names`) through the slot
//! `pgshard_s1`, and has the primary's settings in its `pgshard.conf` (its own port).
//! The replication settings of a primary are in `pgshard_replication.conf`, included
//! after `pgshard.conf` so that its `synchronous_commit` wins; a server without standbys
//! and without `--sync` has no such file.

use super::node::{self, Node, Settings};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `synchronous_commit` of the primaries (`cluster up --sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SyncCommit {
    Off,
    Local,
    On,
    RemoteApply,
}

impl SyncCommit {
    /// The setting's value as PostgreSQL spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncCommit::Off => "off",
            SyncCommit::Local => "local",
            SyncCommit::On => "on",
            SyncCommit::RemoteApply => "remote_apply",
        }
    }

    pub fn parse(text: &str) -> Option<SyncCommit> {
        [
            SyncCommit::Off,
            SyncCommit::Local,
            SyncCommit::On,
            SyncCommit::RemoteApply,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// The name of standby `i` (1-based): its `application_name` in
/// `synchronous_standby_names`.
pub fn standby_name(i: usize) -> String {
    format!("s{i}")
}

/// The replication slot of a standby on its primary.
pub fn slot_name(standby: &str) -> String {
    format!("pgshard_{standby}")
}

/// `FIRST 1 (s1, s2, ...)`: the first listed standby that is connected is synchronous,
/// the others potential; empty (no synchronous standby) for no names.
pub fn synchronous_standby_names(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!("FIRST 1 ({})", names.join(", "))
    }
}

/// Standby `i` (1-based) of `primary`, listening on `port`: a sibling data directory
/// `<primary>_s<i>`, its own log.
pub fn standby_node(primary: &Node, i: usize, port: u16) -> Node {
    let name = standby_name(i);
    let suffix = |p: &PathBuf| -> PathBuf {
        let mut s = p.clone().into_os_string();
        s.push(format!("_{name}"));
        s.into()
    };
    let log_stem = primary
        .log_file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Node {
        name: format!("{} standby {name}", primary.name),
        data_dir: suffix(&primary.data_dir),
        listen_host: primary.listen_host.clone(),
        port,
        socket_dir: primary.socket_dir.clone(),
        log_file: primary
            .log_file
            .with_file_name(format!("{log_stem}_{name}.log")),
    }
}

/// What a primary's `pgshard_replication.conf` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replication {
    /// The standbys' names, for `synchronous_standby_names` (empty: all asynchronous).
    pub synchronous_standbys: Vec<String>,
    /// `synchronous_commit`, when set here.
    pub synchronous_commit: Option<SyncCommit>,
}

impl Replication {
    fn conf(&self, server: &str) -> String {
        let q = |s: &str| format!("'{}'", s.replace('\'', "''"));
        let mut conf = format!(
            "# Written by pgshard: the replication settings of the {server}.\n\
             synchronous_standby_names = {}\n",
            q(&synchronous_standby_names(&self.synchronous_standbys))
        );
        if let Some(s) = self.synchronous_commit {
            conf.push_str(&format!("synchronous_commit = {}\n", s.as_str()));
        }
        conf
    }
}

const REPLICATION_CONF: &str = "pgshard_replication.conf";

impl Node {
    /// Makes this node a standby of the running `primary` named `name`: `pg_basebackup
    /// -R` through a new replication slot (a stale slot of that name, left by a standby
    /// whose directory is gone, is dropped first), then this node's own `pgshard.conf`.
    /// Does not start it.
    pub fn create_standby(
        &self,
        primary: &Node,
        name: &str,
        password: &str,
        settings: Settings,
    ) -> Result<()> {
        let tmp = self.staging_dir()?;
        let slot = slot_name(name);
        let conninfo = format!(
            "host='{}' port={} user=postgres application_name={name}",
            primary.socket_dir.to_string_lossy().replace('\'', "\\'"),
            primary.port
        );
        let _ = self
            .pg_command("pg_receivewal")?
            .args(["--drop-slot", "--slot", &slot, "-d", &conninfo])
            .env("PGPASSWORD", password)
            .output();
        let mut cmd = self.pg_command("pg_basebackup")?;
        cmd.arg("-D")
            .arg(&tmp)
            .args(["-d", &conninfo, "-R", "-C", "-S", &slot])
            .args(["-X", "stream", "-c", "fast"])
            .env("PGPASSWORD", password);
        if settings.fast {
            cmd.arg("--no-sync");
        }
        let out = cmd.output().context("running pg_basebackup")?;
        if !out.status.success() {
            bail!(
                "pg_basebackup of the {} for {} failed:\n{}{}",
                primary.name,
                self.name,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The primary's replication settings mean nothing on a standby.
        let _ = fs::remove_file(tmp.join(REPLICATION_CONF));
        self.finish_create(&tmp, settings)
    }

    /// Writes `pgshard_replication.conf` (included after `pgshard.conf`) and makes a
    /// running server reload it; both settings take effect without a restart.
    pub fn write_replication(&self, replication: &Replication) -> Result<()> {
        node::write_server_file(
            &self.data_dir.join(REPLICATION_CONF),
            &replication.conf(&self.name),
        )?;
        let main_conf = self.data_dir.join("postgresql.conf");
        let mut text = fs::read_to_string(&main_conf)?;
        let include = format!("include_if_exists = '{REPLICATION_CONF}'");
        if !text.contains(&include) {
            text.push_str(&format!("{include}\n"));
            node::write_server_file(&main_conf, &text)?;
        }
        if self.running_pid().is_some() {
            let out = self
                .pg_command("pg_ctl")?
                .args(["reload", "-s", "-D"])
                .arg(&self.data_dir)
                .output()
                .context("running pg_ctl reload")?;
            if !out.status.success() {
                bail!(
                    "pg_ctl reload of the {} failed: {}",
                    self.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        Ok(())
    }
}

/// How a server's standbys take part (the configurations of W5, `pgshard bench w5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationMode {
    /// Standbys running (else stopped: no standby at all).
    pub standbys_running: bool,
    /// `synchronous_standby_names = 'FIRST 1 (...)'` (else empty: all asynchronous).
    pub synchronous: bool,
    pub synchronous_commit: SyncCommit,
}

/// Puts `primary` and its `standbys` in `mode`: the primary's settings first (so that no
/// commit waits for a standby being stopped), then the standbys started or stopped, then
/// a wait until running ones stream. Blocking; call it outside async code.
pub fn apply_mode(
    primary: &Node,
    standbys: &[Node],
    password: &str,
    mode: ReplicationMode,
) -> Result<()> {
    let names: Vec<String> = (1..=standbys.len()).map(standby_name).collect();
    primary.write_replication(&Replication {
        synchronous_standbys: if mode.synchronous {
            names.clone()
        } else {
            vec![]
        },
        synchronous_commit: Some(mode.synchronous_commit),
    })?;
    for sb in standbys {
        if mode.standbys_running {
            sb.start()?;
        } else {
            sb.stop()?;
        }
    }
    if mode.standbys_running {
        tokio::runtime::Handle::current().block_on(wait_streaming(
            primary,
            password,
            &names,
            Duration::from_secs(120),
        ))?;
    }
    Ok(())
}

/// A row of a primary's `pg_stat_replication`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicationRow {
    pub application_name: String,
    /// `streaming`, `catchup`, `backup`, ...
    pub state: String,
    /// `sync`, `potential`, `async`, `quorum`.
    pub sync_state: String,
    /// Bytes of WAL the standby has not replayed yet.
    pub replay_lag_bytes: Option<i64>,
    /// `replay_lag` as text (null once the standby is idle and caught up).
    pub replay_lag: Option<String>,
}

const REPLICATION_SQL: &str = "SELECT application_name, state, sync_state, \
     pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), replay_lsn)::int8, \
     replay_lag::text FROM pg_catalog.pg_stat_replication ORDER BY application_name";

/// `pg_stat_replication` of a running server, read as `postgres` through its socket.
pub async fn replication_rows(node: &Node, password: &str) -> Result<Vec<ReplicationRow>> {
    let client = connect(node, password).await?;
    let rows = client
        .query(REPLICATION_SQL, &[])
        .await
        .with_context(|| format!("reading pg_stat_replication of the {}", node.name))?;
    Ok(rows
        .iter()
        .map(|r| ReplicationRow {
            application_name: r.get(0),
            state: r.get::<_, Option<String>>(1).unwrap_or_default(),
            sync_state: r.get::<_, Option<String>>(2).unwrap_or_default(),
            replay_lag_bytes: r.get(3),
            replay_lag: r.get(4),
        })
        .collect())
}

/// Waits until every standby in `names` streams from `node` with nothing left to
/// replay (after creating or starting them, before measuring or relying on them).
pub async fn wait_streaming(
    node: &Node,
    password: &str,
    names: &[String],
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let rows = replication_rows(node, password).await?;
        let ready = names.iter().all(|n| {
            rows.iter().any(|r| {
                &r.application_name == n && r.state == "streaming" && r.replay_lag_bytes == Some(0)
            })
        });
        if ready {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the standbys {} of the {} do not stream after {} s (pg_stat_replication: {:?})",
                names.join(", "),
                node.name,
                timeout.as_secs(),
                rows
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A connection as `postgres` to a local server through its Unix socket.
pub async fn connect(node: &Node, password: &str) -> Result<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::Config::new()
        .host_path(&node.socket_dir)
        .port(node.port)
        .user("postgres")
        .password(password)
        .dbname("postgres")
        .connect(tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to the {} (port {})", node.name, node.port))?;
    tokio::spawn(conn);
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_named_standby_is_synchronous_the_others_potential() {
        let names: Vec<String> = (1..=3).map(standby_name).collect();
        assert_eq!(synchronous_standby_names(&names), "FIRST 1 (s1, s2, s3)");
        assert_eq!(synchronous_standby_names(&[]), "");
    }

    #[test]
    fn a_standby_lives_beside_its_primary() {
        let primary = Node {
            name: "worker 1".into(),
            data_dir: "/c/worker1".into(),
            listen_host: "127.0.0.1".into(),
            port: 6434,
            socket_dir: "/c/sockets".into(),
            log_file: "/c/logs/worker1.log".into(),
        };
        let s = standby_node(&primary, 2, 6440);
        assert_eq!(s.data_dir, PathBuf::from("/c/worker1_s2"));
        assert_eq!(s.log_file, PathBuf::from("/c/logs/worker1_s2.log"));
        assert_eq!(s.name, "worker 1 standby s2");
        assert_eq!(s.port, 6440);
    }

    #[test]
    fn replication_settings_are_quoted() {
        let r = Replication {
            synchronous_standbys: vec!["s1".into(), "s2".into()],
            synchronous_commit: Some(SyncCommit::RemoteApply),
        };
        let conf = r.conf("worker 1");
        assert!(conf.contains("synchronous_standby_names = 'FIRST 1 (s1, s2)'\n"));
        assert!(conf.contains("synchronous_commit = remote_apply\n"));
        assert_eq!(SyncCommit::parse("local"), Some(SyncCommit::Local));
    }
}
