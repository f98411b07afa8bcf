//! Shared harness of the integration tests (`mod common;` in each test file).
//!
//! - `cluster()`: one real 2-worker pgshard cluster per test binary, created on first use
//!   through the `pgshard cluster up` CLI in `target/test-clusters/<binary>-<pid>/cluster`
//!   (under /tmp/pgshard-test-clusters when the `postgres` user cannot reach target/).
//! - `plain_postgres()`: one stand-alone PostgreSQL beside it, for oracle comparisons.
//!
//! Everything is stopped at process exit (an `atexit` hook: statics are never dropped);
//! the data directories are deleted then, the logs stay until the next run, which also
//! stops and removes whatever a killed run left behind. Set PGSHARD_KEEP_TEST_CLUSTERS=1
//! to leave servers and files as they are for debugging.

#![allow(dead_code)]

pub mod compare;
pub mod raw;
pub mod rng;
pub mod serve;

use pgshard::cluster::node::{self, Node, Settings};
use pgshard::cluster::ClusterInfo;
use std::net::TcpListener;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, Once, OnceLock};

pub const PGSHARD: &str = env!("CARGO_BIN_EXE_pgshard");

/// The shared cluster; derefs to its `ClusterInfo` (host, port, user, password,
/// database, coordinator_port, worker_ports, env_file, pg_env()).
pub struct TestCluster {
    pub dir: PathBuf,
    pub info: ClusterInfo,
}

impl Deref for TestCluster {
    type Target = ClusterInfo;
    fn deref(&self) -> &ClusterInfo {
        &self.info
    }
}

impl TestCluster {
    /// A connection through pgshard.
    pub async fn client(&self) -> tokio_postgres::Client {
        self.direct(self.port).await
    }

    /// A connection through pgshard whose startup packet carries `options`.
    pub async fn client_with_options(&self, options: &str) -> tokio_postgres::Client {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .password(&self.password)
            .dbname(&self.database)
            .options(options);
        connect_with(cfg).await
    }

    /// A connection to one PostgreSQL server of the cluster (coordinator node or worker).
    pub async fn direct(&self, port: u16) -> tokio_postgres::Client {
        connect(&self.host, port, &self.user, &self.password, &self.database).await
    }
}

/// The shared cluster of this test binary, started on first use.
pub fn cluster() -> &'static TestCluster {
    static CLUSTER: OnceLock<TestCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let dir = run_dir().join("cluster");
        teardown_at_exit(Teardown::Cluster(dir.clone()));
        cluster_up(&dir, alloc_ports(4));
        let info = pgshard::cluster::cluster_info(&dir).expect("cluster info");
        TestCluster { dir, info }
    })
}

/// A stand-alone PostgreSQL 15 with the cluster nodes' settings.
pub struct PlainPg {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: String,
    pub node: Node,
}

impl PlainPg {
    /// libpq environment for psql / pgbench against this server.
    pub fn pg_env(&self) -> Vec<(String, String)> {
        pgshard::cluster::pg_env(
            &self.host,
            self.port,
            &self.user,
            &self.password,
            &self.database,
        )
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        connect(
            &self.host,
            self.port,
            &self.user,
            &self.password,
            &self.database,
        )
        .await
    }
}

pub fn plain_postgres() -> &'static PlainPg {
    static PLAIN: OnceLock<PlainPg> = OnceLock::new();
    PLAIN.get_or_init(|| {
        let dir = run_dir().join("plain");
        std::fs::create_dir_all(&dir).unwrap();
        node::check_reachable(&dir).unwrap();
        node::server_dir(&dir.join("logs"), 0o755).unwrap();
        let socket_dir = node::socket_dir_for(&dir);
        node::server_dir(&socket_dir, 0o755).unwrap();
        let node = Node {
            name: "plain PostgreSQL".into(),
            data_dir: dir.join("data"),
            listen_host: "127.0.0.1".into(),
            port: alloc_ports(1),
            socket_dir,
            log_file: dir.join("logs").join("postgres.log"),
        };
        teardown_at_exit(Teardown::Node(node.clone()));
        let password = node::random_password();
        node.create(
            &password,
            Settings {
                fast: true,
                async_commit: false,
                parallel_workers_per_gather: None,
            },
        )
        .expect("initdb of the plain PostgreSQL");
        node.start().expect("start of the plain PostgreSQL");
        PlainPg {
            host: "127.0.0.1".into(),
            port: node.port,
            user: "postgres".into(),
            password,
            database: "postgres".into(),
            node,
        }
    })
}

pub async fn connect(
    host: &str,
    port: u16,
    user: &str,
    password: &str,
    database: &str,
) -> tokio_postgres::Client {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(host)
        .port(port)
        .user(user)
        .password(password)
        .dbname(database);
    connect_with(cfg).await
}

/// Connects with `cfg` (its connection task spawned).
pub async fn connect_with(cfg: tokio_postgres::Config) -> tokio_postgres::Client {
    let (host, port) = (cfg.get_hosts().to_vec(), cfg.get_ports().to_vec());
    let (client, conn) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {host:?}:{port:?}: {e}"));
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("connection to {port:?}: {e}");
        }
    });
    client
}

/// Runs the pgshard binary; panics with its output when it fails.
pub fn pgshard(args: &[&str]) -> Output {
    let out = Command::new(PGSHARD)
        .args(args)
        .output()
        .expect("running pgshard");
    if !out.status.success() {
        panic!(
            "pgshard {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// `pgshard cluster up` of a 2-worker test cluster in `dir` with ports `base..base+4`.
pub fn cluster_up(dir: &Path, base: u16) -> Output {
    let (dir, port) = (dir.to_str().unwrap(), base.to_string());
    let args = [
        "cluster",
        "up",
        "--dir",
        dir,
        "--workers",
        "2",
        "--port",
        &port,
    ];
    pgshard(&[&args[..], &["--fast"]].concat())
}

/// `target/test-clusters/<test binary>-<pid>`, after cleaning up dead runs.
pub fn run_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let mut root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .unwrap()
            .join("test-clusters");
        std::fs::create_dir_all(&root).unwrap();
        // The servers run as `postgres`, which cannot reach a checkout under /root.
        if node::check_reachable(&root).is_err() {
            root = PathBuf::from("/tmp/pgshard-test-clusters");
            std::fs::create_dir_all(&root).unwrap();
        }
        clean_dead_runs(&root);
        let exe = std::env::current_exe().unwrap();
        let stem = exe.file_stem().unwrap().to_string_lossy().into_owned();
        // Cargo names test binaries `<name>-<hash>`.
        let name = stem.rsplit_once('-').map_or(stem.as_str(), |(n, _)| n);
        let dir = root.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
    .clone()
}

/// Stops and deletes what runs whose process is gone left behind.
fn clean_dead_runs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .rsplit_once('-')
            .and_then(|(_, p)| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() as i32 || unsafe { libc::kill(pid, 0) } == 0 {
            continue; // still running (or us)
        }
        for sub in std::fs::read_dir(&path).into_iter().flatten().flatten() {
            stop_everything_in(&sub.path());
        }
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// Something to stop at exit.
#[derive(Clone)]
pub enum Teardown {
    /// A `pgshard cluster up` directory.
    Cluster(PathBuf),
    /// A stand-alone server.
    Node(Node),
}

static TEARDOWN: Mutex<Vec<Teardown>> = Mutex::new(Vec::new());

/// Stops `what` when the test binary exits.
pub fn teardown_at_exit(what: Teardown) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| unsafe {
        libc::atexit(teardown);
    });
    TEARDOWN.lock().unwrap().push(what);
}

extern "C" fn teardown() {
    if std::env::var_os("PGSHARD_KEEP_TEST_CLUSTERS").is_some() {
        return;
    }
    let items = std::mem::take(&mut *TEARDOWN.lock().unwrap_or_else(|e| e.into_inner()));
    for item in items {
        let dir = match item {
            Teardown::Cluster(dir) => {
                stop_everything_in(&dir);
                dir
            }
            Teardown::Node(node) => {
                let _ = node.stop();
                node.data_dir.parent().unwrap().to_path_buf()
            }
        };
        // Data directories are large; logs are kept for post-mortems.
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_name() != "logs" {
                let p = entry.path();
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
    }
}

/// Stops a cluster directory (pgshard + servers) or a plain server's directory.
fn stop_everything_in(dir: &Path) {
    if dir.join("cluster.toml").exists() {
        let _ = Command::new(PGSHARD)
            .args(["cluster", "down", "--dir"])
            .arg(dir)
            .output();
    }
    // Plain servers, and a safety net should `cluster down` itself be broken.
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().join("postmaster.pid").exists() {
            let _ = Node {
                name: entry.file_name().to_string_lossy().into_owned(),
                data_dir: entry.path(),
                listen_host: String::new(),
                port: 0,
                socket_dir: PathBuf::new(),
                log_file: PathBuf::new(),
            }
            .stop();
        }
    }
}

/// `n` consecutive free TCP ports on 127.0.0.1, never handed out twice in this process
/// nor to two test binaries at once (`reserve_port`: `run-tests.sh` runs two at a time,
/// and a port found free is not bound until its server starts). Blocks start at an
/// offset derived from the pid so that concurrent test binaries rarely probe the same
/// ports.
pub fn alloc_ports(n: u16) -> u16 {
    static NEXT: Mutex<u16> = Mutex::new(0);
    let mut next = NEXT.lock().unwrap();
    if *next == 0 {
        *next = 20000 + (std::process::id() % 1000) as u16 * 20;
    }
    loop {
        if *next + n > 40000 {
            *next = 20000;
        }
        let base = *next;
        *next += n;
        if (base..base + n).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok())
            && (base..base + n).all(reserve_port)
        {
            return base;
        }
    }
}

/// Claims `port` for this process across test binaries: a file named after it holding
/// the pid, created only if absent (or left by a process that is gone).
fn reserve_port(port: u16) -> bool {
    let dir = std::env::temp_dir().join("pgshard-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(port.to_string());
    let me = std::process::id().to_string();
    let claim = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, me.as_bytes()))
            .is_ok()
    };
    if claim() {
        return true;
    }
    let owner = std::fs::read_to_string(&path).unwrap_or_default();
    if owner == me {
        return true;
    }
    let gone = owner.parse::<u32>().map_or(true, |pid| {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });
    gone && std::fs::remove_file(&path).is_ok() && claim()
}

/// Runs the real `psql` with `env`, returning trimmed stdout; panics on failure.
pub fn psql(env: &[(String, String)], args: &[&str]) -> String {
    let out = Command::new("psql")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-tA"])
        .args(args)
        .output()
        .expect("running psql");
    if !out.status.success() {
        panic!(
            "psql {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The rows of a simple-protocol answer as text (NULL: None), sorted: multi-shard
/// reads come in shard order.
pub fn sorted_simple_rows(msgs: &[tokio_postgres::SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    let mut rows: Vec<Vec<Option<String>>> = msgs
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect();
    rows.sort();
    rows
}

/// Asserts that no server of the shared cluster (coordinator node and workers) holds a
/// prepared transaction of pgshard's. Tests of one binary share the cluster and run
/// concurrently, so another test's 2PC may sit between PREPARE and COMMIT PREPARED for a
/// moment: one look finding none on a server is enough for it, while a transaction left
/// behind stays and fails the assertion after 10 s (recovery runs every 30 s, so it
/// cannot hide a leak).
pub async fn assert_no_prepared_xacts() {
    let cl = cluster();
    let sql = "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'pgshard%'";
    for port in std::iter::once(cl.coordinator_port).chain(cl.worker_ports.iter().copied()) {
        let c = cl.direct(port).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let n: i64 = c.query_one(sql, &[]).await.unwrap().get(0);
            if n == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{n} prepared transaction(s) left on the server at port {port}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// An error's SQLSTATE and message; `connection` and the error's text when no server
/// answered it.
pub fn sqlstate_and_message(e: &tokio_postgres::Error) -> (String, String) {
    match e.as_db_error() {
        Some(db) => (db.code().code().to_string(), db.message().to_string()),
        None => ("connection".into(), e.to_string()),
    }
}

/// A statement's rows over the simple protocol, every value as text.
#[allow(dead_code)]
pub async fn simple_rows(
    c: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, tokio_postgres::Error> {
    let mut out = Vec::new();
    for m in c.simple_query(sql).await? {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            out.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
        }
    }
    Ok(out)
}

/// The same rows in the same order through pgshard and on the plain PostgreSQL, and at
/// least one: a statement that answers nothing proves nothing.
#[allow(dead_code)]
pub async fn assert_same_rows(
    shard: &tokio_postgres::Client,
    plain: &tokio_postgres::Client,
    sql: &str,
) {
    let a = simple_rows(shard, sql)
        .await
        .unwrap_or_else(|e| panic!("pgshard: {sql}: {e:?}"));
    let b = simple_rows(plain, sql)
        .await
        .unwrap_or_else(|e| panic!("plain: {sql}: {e:?}"));
    assert_eq!(a, b, "{sql}");
    assert!(!b.is_empty(), "{sql} returned nothing");
}

/// A statement's answer as text (simple protocol): its rows and command tags, or its
/// error's SQLSTATE.
pub async fn outcome(c: &tokio_postgres::Client, sql: &str) -> String {
    match c.simple_query(sql).await {
        Ok(msgs) => msgs
            .iter()
            .map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    let vals: Vec<&str> =
                        (0..r.len()).map(|i| r.get(i).unwrap_or("NULL")).collect();
                    format!("({})", vals.join(","))
                }
                tokio_postgres::SimpleQueryMessage::CommandComplete(n) => format!("ok {n}"),
                _ => String::new(),
            })
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
        Err(e) => format!(
            "error {}",
            e.code()
                .map(|c| c.code().to_string())
                .unwrap_or_else(|| e.to_string())
        ),
    }
}

/// Two values above `from` of `table`'s int distribution column whose shards lie on
/// different workers.
pub async fn keys_on_two_workers_from(
    c: &tokio_postgres::Client,
    table: &str,
    from: i32,
) -> (i32, i32) {
    let mut first: Option<(i32, String)> = None;
    for k in from + 1..from + 200 {
        let port = scalar(
            c,
            &format!(
                "SELECT nodeport::int8 FROM pg_dist_shard_placement WHERE shardid = \
                 (SELECT get_shard_id_for_distribution_column('{table}', {k}))"
            ),
        )
        .await;
        match first {
            None => first = Some((k, port)),
            Some((k0, ref p0)) if *p0 != port => return (k0, k),
            _ => {}
        }
    }
    panic!("no two keys of {table} on different workers");
}

/// The first value of `sql`'s first row as text ("" for NULL or no row); panics on error.
pub async fn scalar(c: &tokio_postgres::Client, sql: &str) -> String {
    let rows = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("").to_string()),
            _ => None,
        })
        .unwrap_or_default()
}
