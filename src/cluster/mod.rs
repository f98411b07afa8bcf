//! A local pgshard cluster on one machine (`pgshard cluster up|down|status`): a
//! coordinator node and N worker PostgreSQL servers under one directory, plus a
//! detached `pgshard serve` in front of them, with the workers registered through it.
//!
//! Layout of DIR:
//! ```text
//! cluster.toml      ports and password chosen on the first run (0600)
//! pgshard.toml      config of `pgshard serve` (written once; edits are kept)
//! server.crt        self-signed TLS certificate of the listener (made once)
//! server.key        its private key (0600)
//! connection.env    `export PG...=` lines for psql/pgbench (0600)
//! pgshard.pid       pid of the detached `pgshard serve`
//! pgshard-2.toml/.pid  the second pgshard process (`--coordinators N`, listeners.rs)
//! coordinator/      data directory of the coordinator node
//! worker1/ ...      data directories of the workers
//! worker1_s1/ ...   data directories of their standbys (`--standbys N`, replication.rs)
//! sockets/ logs/
//! ```

pub mod certificate;
mod listeners;
pub mod node;
mod replication;
pub mod standby;

pub use replication::set_replication_mode;

use anyhow::{bail, Context, Result};
use node::{Node, Settings};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub dir: PathBuf,
    pub workers: usize,
    /// The pgshard listener; the coordinator node gets `port + 1`, workers the next ones.
    pub port: u16,
    pub listen_host: String,
    /// The binary to spawn as `pgshard_exe serve --config DIR/pgshard.toml`.
    pub pgshard_exe: PathBuf,
    /// Tests: fsync=off, full_page_writes=off, smaller shared_buffers.
    pub fast: bool,
    /// `synchronous_commit = off` on every node (the reference benchmarks' setting).
    pub async_commit: bool,
    /// Streaming-replication standbys of every node (at least; `up` removes none).
    pub standbys: usize,
    /// `synchronous_commit` of the primaries when given (kept for later runs); with
    /// standbys and never given: `on`.
    pub sync: Option<standby::SyncCommit>,
    /// pgshard processes serving the cluster, each on a port of its own (at least;
    /// `up` removes none).
    pub coordinators: usize,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            dir: "pgshard-cluster".into(),
            workers: 2,
            port: 6432,
            listen_host: "127.0.0.1".into(),
            pgshard_exe: std::env::current_exe().unwrap_or_else(|_| "pgshard".into()),
            fast: false,
            async_commit: false,
            standbys: 0,
            sync: None,
            coordinators: 1,
        }
    }
}

/// How to reach a running cluster.
#[derive(Debug, Clone)]
pub struct ClusterInfo {
    /// Where clients connect (the first pgshard listener).
    pub host: String,
    pub port: u16,
    /// Every pgshard listener's port (`port` first): one per pgshard process.
    pub pgshard_ports: Vec<u16>,
    pub user: String,
    pub password: String,
    pub database: String,
    pub coordinator_port: u16,
    pub worker_ports: Vec<u16>,
    /// Ports of each node's standbys: the coordinator node's first, then each worker's.
    pub standby_ports: Vec<Vec<u16>>,
    /// The host pgshard reaches the nodes by (`pg_dist_node.nodename`): a socket
    /// directory for a loopback-only cluster, else the TCP host.
    pub node_host: String,
    /// Directory of pgshard's Unix-domain socket (and the nodes' sockets).
    pub socket_dir: PathBuf,
    pub env_file: PathBuf,
    /// The listener's certificate when pgshard.toml has TLS on with it: what clients
    /// give as `sslrootcert` for `sslmode=verify-full`.
    pub tls_root_cert: Option<PathBuf>,
}

impl ClusterInfo {
    /// libpq environment for psql / pgbench / sysbench against pgshard.
    pub fn pg_env(&self) -> Vec<(String, String)> {
        pg_env(
            &self.host,
            self.port,
            &self.user,
            &self.password,
            &self.database,
        )
    }
}

/// libpq environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE) for one server.
pub fn pg_env(
    host: &str,
    port: u16,
    user: &str,
    password: &str,
    database: &str,
) -> Vec<(String, String)> {
    [
        ("PGHOST", host.to_string()),
        ("PGPORT", port.to_string()),
        ("PGUSER", user.to_string()),
        ("PGPASSWORD", password.to_string()),
        ("PGDATABASE", database.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// What the first `up` chose, so that later runs find the same ports and password.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Layout {
    listen_host: String,
    port: u16,
    coordinator_port: u16,
    worker_ports: Vec<u16>,
    password: String,
    socket_dir: PathBuf,
    /// Ports of each node's standbys (coordinator node first, then the workers).
    #[serde(default)]
    standby_ports: Vec<Vec<u16>>,
    /// `synchronous_commit` of the primaries, as given with `--sync`.
    #[serde(default)]
    synchronous_commit: Option<String>,
    /// Ports of the pgshard processes after the first (`--coordinators N`).
    #[serde(default)]
    pgshard_ports: Vec<u16>,
}

/// A cluster directory and its layout.
struct Cluster {
    dir: PathBuf,
    layout: Layout,
}

const USER: &str = "postgres";
const DATABASE: &str = "postgres";

impl Cluster {
    fn layout_file(dir: &Path) -> PathBuf {
        dir.join("cluster.toml")
    }

    fn load(dir: &Path) -> Result<Cluster> {
        // Canonical, as `up` made it: the pgshard process is recognised by its config path.
        let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let file = Self::layout_file(&dir);
        let text = fs::read_to_string(&file).with_context(|| {
            format!(
                "no pgshard cluster in {} (missing {}); create one with `pgshard cluster up`",
                dir.display(),
                file.display()
            )
        })?;
        let layout =
            toml::from_str(&text).with_context(|| format!("invalid {}", file.display()))?;
        Ok(Cluster { dir, layout })
    }

    fn save(&self) -> Result<()> {
        let text = toml::to_string_pretty(&self.layout)?;
        write_private(&Self::layout_file(&self.dir), &text)
    }

    /// A host clients can connect to: the listen address unless it is a wildcard.
    fn connect_host(&self) -> String {
        match self.layout.listen_host.as_str() {
            "*" | "0.0.0.0" | "" => "127.0.0.1".into(),
            "::" => "::1".into(),
            h => h.into(),
        }
    }

    /// How pgshard reaches the nodes (worker registrations and the coordinator node in
    /// pgshard.toml): their Unix-socket directory when the cluster listens on loopback
    /// only (nothing outside this host can use the nodes then, and a local socket costs
    /// pgshard less per message than loopback TCP); otherwise the TCP host.
    fn node_host(&self) -> String {
        match self.layout.listen_host.as_str() {
            "localhost" | "127.0.0.1" | "::1" => self.layout.socket_dir.to_string_lossy().into(),
            _ => self.connect_host(),
        }
    }

    fn node(&self, name: &str, subdir: &str, port: u16) -> Node {
        Node {
            name: name.into(),
            data_dir: self.dir.join(subdir),
            listen_host: self.layout.listen_host.clone(),
            port,
            socket_dir: self.layout.socket_dir.clone(),
            log_file: self.dir.join("logs").join(format!("{subdir}.log")),
        }
    }

    fn coordinator(&self) -> Node {
        self.node(
            "coordinator node",
            "coordinator",
            self.layout.coordinator_port,
        )
    }

    fn workers(&self) -> Vec<Node> {
        let ports = &self.layout.worker_ports;
        (1..=ports.len())
            .map(|i| self.node(&format!("worker {i}"), &format!("worker{i}"), ports[i - 1]))
            .collect()
    }

    fn nodes(&self) -> Vec<Node> {
        let mut all = vec![self.coordinator()];
        all.extend(self.workers());
        all
    }

    fn config_file(&self) -> PathBuf {
        self.dir.join("pgshard.toml")
    }
    fn pgshard_log(&self) -> PathBuf {
        self.dir.join("logs").join("pgshard.log")
    }
    fn env_file(&self) -> PathBuf {
        self.dir.join("connection.env")
    }

    fn info(&self) -> ClusterInfo {
        ClusterInfo {
            host: self.connect_host(),
            port: self.layout.port,
            pgshard_ports: self.listeners().iter().map(|l| l.port).collect(),
            user: USER.into(),
            password: self.layout.password.clone(),
            database: DATABASE.into(),
            coordinator_port: self.layout.coordinator_port,
            worker_ports: self.layout.worker_ports.clone(),
            standby_ports: self.layout.standby_ports.clone(),
            node_host: self.node_host(),
            socket_dir: self.layout.socket_dir.clone(),
            env_file: self.env_file(),
            tls_root_cert: self.tls_root_cert(),
        }
    }

    /// The cluster's own certificate, if pgshard.toml serves TLS with it.
    fn tls_root_cert(&self) -> Option<PathBuf> {
        let cfg = crate::config::Config::load(&self.config_file()).ok()?;
        let (cert, _) = certificate::files(&self.dir);
        (cfg.ssl && cfg.ssl_cert_file.as_deref() == Some(cert.as_path()) && cert.exists())
            .then_some(cert)
    }
}

/// Creates what is missing and starts what is not running (see the module comment).
pub async fn cluster_up(opts: &ClusterOptions) -> Result<ClusterInfo> {
    let opts = opts.clone();
    let cluster = tokio::task::spawn_blocking(move || up_local(&opts)).await??;
    register_workers(&cluster).await?;
    let info = cluster.info();
    println!(
        "pgshard cluster up: pgshard on {}:{} (coordinator node {}, workers {})",
        info.host,
        info.pgshard_ports
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        info.coordinator_port,
        info.worker_ports
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("connect with:  source {} && psql", info.env_file.display());
    let socket = crate::frontend::client_stream::socket_path(&info.socket_dir, info.port);
    if socket.exists() {
        println!(
            "or through pgshard's Unix socket (cheaper for clients on this host):  \
             source {} && psql -h {}",
            info.env_file.display(),
            info.socket_dir.display()
        );
    }
    if let Some(cert) = &info.tls_root_cert {
        println!(
            "TLS: trust pgshard's self-signed certificate with  sslrootcert={} sslmode=verify-full  \
             (or PGSSLROOTCERT={} PGSSLMODE=verify-full)",
            cert.display(),
            cert.display()
        );
    }
    Ok(info)
}

/// Stops pgshard and every server; parts already down are fine.
pub async fn cluster_down(dir: &Path) -> Result<()> {
    let cluster = Cluster::load(dir)?;
    tokio::task::spawn_blocking(move || down_local(&cluster)).await?
}

/// What runs where, one line per part.
pub async fn cluster_status(dir: &Path) -> Result<String> {
    let cluster = Cluster::load(dir)?;
    tokio::task::spawn_blocking(move || status_local(&cluster)).await?
}

/// Connection details of an existing cluster directory, from its recorded layout.
pub fn cluster_info(dir: &Path) -> Result<ClusterInfo> {
    Ok(Cluster::load(dir)?.info())
}

fn up_local(opts: &ClusterOptions) -> Result<Cluster> {
    let dir = std::path::absolute(&opts.dir)
        .with_context(|| format!("resolving {}", opts.dir.display()))?;
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = fs::canonicalize(&dir)?;
    node::check_reachable(&dir)?;
    node::bin_dir()?;

    let mut cluster = if Cluster::layout_file(&dir).exists() {
        let c = Cluster::load(&dir)?;
        if c.layout.port != opts.port {
            println!(
                "note: {} was created with port {}; keeping it",
                dir.display(),
                c.layout.port
            );
        }
        c
    } else {
        let socket_dir = node::socket_dir_for(&dir);
        Cluster {
            dir: dir.clone(),
            layout: Layout {
                listen_host: opts.listen_host.clone(),
                port: opts.port,
                coordinator_port: opts.port + 1,
                worker_ports: vec![],
                password: node::random_password(),
                socket_dir,
                standby_ports: vec![],
                synchronous_commit: None,
                pgshard_ports: vec![],
            },
        }
    };
    let have = cluster.layout.worker_ports.len();
    if opts.workers < have {
        println!("note: the cluster has {have} workers; `up` never removes any");
    }
    while cluster.layout.worker_ports.len() < opts.workers {
        let next = cluster.next_port();
        cluster.layout.worker_ports.push(next);
    }
    cluster.allocate_standby_ports(opts.standbys);
    cluster.allocate_pgshard_ports(opts.coordinators);
    if let Some(sync) = opts.sync {
        cluster.layout.synchronous_commit = Some(sync.as_str().into());
    }
    cluster.save()?;

    node::server_dir(&dir.join("logs"), 0o755)?;
    node::server_dir(&cluster.layout.socket_dir, 0o755)?;

    let settings = Settings {
        fast: opts.fast,
        async_commit: opts.async_commit,
        parallel_workers_per_gather: None,
    };
    let workers_settings = worker_settings(settings, cluster.layout.worker_ports.len());
    let settings_of = |n: &Node| match cluster.layout.worker_ports.contains(&n.port) {
        true => workers_settings,
        false => settings,
    };
    // The first node initdb'd in this run has never run: the others copy it.
    let mut template: Option<Node> = None;
    for n in cluster.nodes().into_iter().filter(|n| !n.exists()) {
        match &template {
            Some(t) => {
                println!("creating {} (copy of a fresh initdb) ...", n.name);
                n.create_from(t, settings_of(&n))?;
            }
            None => {
                println!("initdb {} ...", n.name);
                n.create(&cluster.layout.password, settings_of(&n))?;
                template = Some(n);
            }
        }
    }

    start_nodes(&cluster)?;
    replication::ensure_standbys(&cluster, &settings_of)?;
    if certificate::ensure(&dir, &cluster.layout.listen_host, &cluster.connect_host())? {
        println!(
            "made a self-signed TLS certificate for pgshard: {}",
            certificate::files(&dir).0.display()
        );
    }
    write_serve_config(&cluster)?;
    cluster.start_listeners(&opts.pgshard_exe)?;
    write_env_file(&cluster)?;
    Ok(cluster)
}

/// Starts the servers that are not running.
/// The settings of a local cluster's workers: they share this host's cores, so each
/// one's parallel query gets its share (the cores over the workers, less the backend
/// itself, at most PostgreSQL's default of 2). pgshard runs a node's shard tasks one
/// after the other on one connection: 2 workers of a 2-core host each starting 2
/// parallel processes per task ran 6 processes on 2 cores, and the parallel plans
/// chose to scan whole shards where one process probes an index (TPC-H SF1 through
/// pgshard, 2 workers here: Q8 1.8 s → 0.85 s, Q21 1.9 s → 1.55 s; W4 group-by 0.87 →
/// 1.14 of plain PostgreSQL).
fn worker_settings(settings: Settings, workers: usize) -> Settings {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Settings {
        parallel_workers_per_gather: Some((cores / workers.max(1)).saturating_sub(1).min(2)),
        ..settings
    }
}

fn start_nodes(cluster: &Cluster) -> Result<()> {
    on_each_node(cluster, |n| {
        let addr = format!("{}:{}", n.listen_host, n.port);
        if let Some(pid) = n.running_pid() {
            println!("{} already running on {addr} (pid {pid})", n.name);
            return Ok(());
        }
        let pid = n.start()?;
        println!("started {} on {addr} (pid {pid})", n.name);
        Ok(())
    })
}

/// Runs `f` on every node at once (pg_ctl waits are the slow part); the first error wins.
fn on_each_node(cluster: &Cluster, f: impl Fn(&Node) -> Result<()> + Sync) -> Result<()> {
    on_each_server(cluster.nodes(), f)
}

/// Runs `f` on each of `nodes` at once; the first error wins.
fn on_each_server(nodes: Vec<Node>, f: impl Fn(&Node) -> Result<()> + Sync) -> Result<()> {
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes.iter().map(|n| s.spawn(|| f(n))).collect();
        let results: Vec<Result<()>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        results.into_iter().collect()
    })
}

/// The coordinator node's standbys as pgshard.toml lists them (`coordinator_standbys`).
fn coordinator_standbys(cluster: &Cluster) -> Vec<crate::config::ServerAddr> {
    let host = cluster.node_host();
    cluster
        .layout
        .standby_ports
        .first()
        .map(|ports| {
            ports
                .iter()
                .map(|&port| crate::config::ServerAddr {
                    host: host.clone(),
                    port,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// pgshard.toml is written once: later edits by hand are kept, except that standbys
/// of the coordinator node added by this `up` are appended to `coordinator_standbys`.
fn write_serve_config(cluster: &Cluster) -> Result<()> {
    let path = cluster.config_file();
    let standbys = coordinator_standbys(cluster);
    if path.exists() {
        let mut cfg = crate::config::Config::load(&path)?;
        let missing: Vec<_> = standbys
            .into_iter()
            .filter(|s| !cfg.coordinator_standbys.contains(s))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        cfg.coordinator_standbys.extend(missing);
        return write_private(&path, &cfg.to_toml());
    }
    // Built as a value and deserialised so that Config's own serde defaults fill the rest.
    let (cert, key) = certificate::files(&cluster.dir);
    let value = serde_json::json!({
        "ssl": true,
        "ssl_cert_file": cert,
        "ssl_key_file": key,
        "listen_host": cluster.layout.listen_host,
        "listen_port": cluster.layout.port,
        "auth": crate::config::AuthMethod::ScramSha256,
        "database": DATABASE,
        "user": USER,
        "password": cluster.layout.password,
        "coordinator": { "host": cluster.node_host(), "port": cluster.layout.coordinator_port },
        "coordinator_standbys": standbys,
        "unix_socket_directory": cluster.layout.socket_dir,
        "worker_threads": local_serving_threads(
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
    });
    let config: crate::config::Config =
        serde_json::from_value(value).context("building pgshard.toml")?;
    write_private(&path, &config.to_toml())
}

/// Serving threads of a local cluster's pgshard: half the cores, at least one. Here
/// pgshard shares the host with every node's PostgreSQL and usually the clients; one
/// thread per core then makes each thread sleep and wake for a few messages at a time,
/// where fewer threads handle more per wake-up and pipeline larger batches to the
/// nodes (measured on 2 cores, pgbench -S -M prepared: one thread 16-19 µs of
/// pgshard CPU per lookup and more TPS, two threads 20-40 µs). `pgshard serve` on a
/// host of its own keeps one thread per core.
fn local_serving_threads(cores: usize) -> usize {
    (cores / 2).max(1)
}

fn write_env_file(cluster: &Cluster) -> Result<()> {
    let mut text = String::new();
    for (k, v) in cluster.info().pg_env() {
        text.push_str(&format!("export {k}={}\n", shell_quote(&v)));
    }
    write_private(&cluster.env_file(), &text)
}

/// Registers, through pgshard, every worker its catalog does not list yet.
async fn register_workers(cluster: &Cluster) -> Result<()> {
    let host = cluster.connect_host();
    let node_host = cluster.node_host();
    let log = cluster.pgshard_log();
    let work = async {
        let (client, conn) = tokio_postgres::Config::new()
            .host(&host)
            .port(cluster.layout.port)
            .user(USER)
            .password(&cluster.layout.password)
            .dbname(DATABASE)
            .connect(tokio_postgres::NoTls)
            .await
            .context("connecting to pgshard")?;
        tokio::spawn(conn);
        let mut listed = Vec::new();
        for msg in client
            .simple_query("select nodename, nodeport from pg_dist_node")
            .await
            .context("listing pg_dist_node")?
        {
            if let tokio_postgres::SimpleQueryMessage::Row(row) = msg {
                listed.push((
                    row.get(0).unwrap_or_default().to_string(),
                    row.get(1).unwrap_or_default().parse::<u16>().unwrap_or(0),
                ));
            }
        }
        for w in cluster.workers() {
            // Clusters made before node_host() registered their workers by TCP host.
            if listed
                .iter()
                .any(|(h, p)| (*h == host || *h == node_host) && *p == w.port)
            {
                continue;
            }
            let sql = format!(
                "SELECT citus_add_node({}, {})",
                crate::sql::quote::quote_literal(&node_host),
                w.port
            );
            client
                .simple_query(&sql)
                .await
                .with_context(|| format!("{sql} failed"))?;
            println!(
                "registered {} ({node_host}:{}) with pgshard",
                w.name, w.port
            );
        }
        replication::register_standbys(cluster, &client).await?;
        anyhow::Ok(())
    };
    match tokio::time::timeout(Duration::from_secs(60), work).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.context(format!(
            "registering the workers through pgshard (see {})",
            log.display()
        ))),
        Err(_) => bail!(
            "registering the workers through pgshard timed out (see {})",
            log.display()
        ),
    }
}

fn down_local(cluster: &Cluster) -> Result<()> {
    cluster.stop_listeners();
    let mut servers = cluster.nodes();
    servers.extend(cluster.standby_nodes());
    on_each_server(servers, |n| {
        if n.stop()? {
            println!("stopped {}", n.name);
        } else {
            println!("{} was not running", n.name);
        }
        Ok(())
    })
}

/// SIGTERM, up to 10 s for a clean exit, then SIGKILL.
fn stop_process(pid: u32) {
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while node::process_exists(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if node::process_exists(pid) {
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

fn status_local(cluster: &Cluster) -> Result<String> {
    let mut out = format!("pgshard cluster in {}\n", cluster.dir.display());
    out.push_str(&cluster.listener_status_lines());
    for (n, standbys) in cluster.groups() {
        let pid = n.running_pid();
        out.push_str(&status_line(
            &n.name,
            &format!("{}:{}", n.listen_host, n.port),
            pid,
            pid.is_some(),
            &n.data_dir,
        ));
        out.push_str(&replication::status_lines(cluster, &n, &standbys));
    }
    out.push_str(&format!("connection: {}\n", cluster.env_file().display()));
    Ok(out)
}

fn status_line(name: &str, addr: &str, pid: Option<u32>, up: bool, path: &Path) -> String {
    let pid = pid.map_or("-".to_string(), |p| format!("pid {p}"));
    let state = if up { "up" } else { "down" };
    format!(
        "  {name:<18} {addr:<22} {pid:<11} {state:<5} {}\n",
        path.display()
    )
}

fn port_accepts(host: &str, port: u16) -> bool {
    let Ok(addrs) = (host, port).to_socket_addrs() else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
}

/// Files holding the password: owner-only.
fn write_private(path: &Path, text: &str) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.set_permissions(fs::Permissions::from_mode(0o600))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

fn shell_quote(v: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._:/@%+-,=".contains(c);
    if !v.is_empty() && v.chars().all(plain) {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::local_serving_threads;

    #[test]
    fn a_local_cluster_leaves_half_the_cores_to_its_nodes() {
        assert_eq!(local_serving_threads(1), 1);
        assert_eq!(local_serving_threads(2), 1);
        assert_eq!(local_serving_threads(3), 1);
        assert_eq!(local_serving_threads(8), 4);
    }
}
