//! One local PostgreSQL 15 server of a pgshard cluster (also used by the tests for a
//! stand-alone server): initdb, configuration, start, stop and liveness.
//!
//! PostgreSQL refuses to run as root, so when we are root every server runs as the
//! `postgres` OS user and the files it needs are chowned to it.

use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The OS account a server runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
}

/// `Some(postgres)` when we are root, `None` (run as ourselves) otherwise.
pub fn server_account() -> Result<Option<Account>> {
    static ACCOUNT: OnceLock<Option<Account>> = OnceLock::new();
    if let Some(a) = ACCOUNT.get() {
        return Ok(*a);
    }
    let account = if unsafe { libc::geteuid() } == 0 {
        Some(Account {
            uid: id_of_postgres("-u")?,
            gid: id_of_postgres("-g")?,
        })
    } else {
        None
    };
    Ok(*ACCOUNT.get_or_init(|| account))
}

fn id_of_postgres(flag: &str) -> Result<u32> {
    let out = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .context("running `id postgres`")?;
    if !out.status.success() {
        bail!(
            "running as root, but there is no `postgres` OS user to run PostgreSQL as \
             (install postgresql-15 with scripts/setup.sh)"
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

/// The directory holding `initdb` and `pg_ctl` of PostgreSQL 15.
pub fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("PGSHARD_PG_BIN") {
        return Ok(dir.into());
    }
    let debian = Path::new("/usr/lib/postgresql/15/bin");
    if debian.join("pg_ctl").exists() {
        return Ok(debian.into());
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && dir.join("pg_ctl").exists() {
            return Ok(dir);
        }
    }
    bail!(
        "PostgreSQL 15 binaries not found in /usr/lib/postgresql/15/bin \
         (run scripts/setup.sh, or point PGSHARD_PG_BIN at them)"
    )
}

/// A random password for the `postgres` superuser: alphanumeric, so it needs no quoting
/// in TOML, shell or connection strings.
pub fn random_password() -> String {
    use rand::Rng;
    rand::thread_rng()
        .sample_iter(&rand::distributions::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect()
}

/// Creates `dir` (and parents) owned by the server account with `mode`.
pub fn server_dir(dir: &Path, mode: u32) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    give_to_server(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn give_to_server(path: &Path) -> Result<()> {
    if let Some(a) = server_account()? {
        std::os::unix::fs::chown(path, Some(a.uid), Some(a.gid))
            .with_context(|| format!("chown {} to postgres", path.display()))?;
    }
    Ok(())
}

/// Fails with a clear message when the server account cannot reach `dir` (for example a
/// directory under /root, which is mode 0700).
pub fn check_reachable(dir: &Path) -> Result<()> {
    let Some(a) = server_account()? else {
        return Ok(());
    };
    let ok = Command::new("test")
        .arg("-x")
        .arg(dir)
        .uid(a.uid)
        .gid(a.gid)
        .status()
        .context("running `test -x` as postgres")?
        .success();
    if !ok {
        bail!(
            "{} is not reachable by the `postgres` OS user that runs the PostgreSQL servers \
             (a parent directory lacks search permission, e.g. /root is mode 0700): \
             choose a directory elsewhere, or `chmod o+x` its parents",
            dir.display()
        );
    }
    Ok(())
}

/// `DIR/sockets`, or a new directory under /tmp when that path is too long for a Unix
/// socket (`DIR/sockets/.s.PGSQL.NNNNN` must fit in 107 bytes).
pub fn socket_dir_for(dir: &Path) -> PathBuf {
    let sockets = dir.join("sockets");
    if sockets.as_os_str().len() + 15 < 107 {
        sockets
    } else {
        PathBuf::from(format!("/tmp/pgshard-{}", &random_password()[..10]))
    }
}

/// Settings every node gets; `fast` trades durability for speed (tests).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Tests: fsync=off, full_page_writes=off, smaller shared_buffers.
    pub fast: bool,
    /// `synchronous_commit = off`, the reference benchmarks' setting. Off by default:
    /// a node with asynchronous commit may lose its last commits when it crashes (as one
    /// PostgreSQL would), and pgshard promises no more than its nodes keep.
    pub async_commit: bool,
    /// `max_parallel_workers_per_gather` when the server shares its host's cores with
    /// other nodes (`cluster::worker_settings`); None: PostgreSQL's default.
    pub parallel_workers_per_gather: Option<usize>,
}

/// One PostgreSQL server: where its files are and where it listens.
#[derive(Debug, Clone)]
pub struct Node {
    /// For messages: "coordinator node", "worker 1".
    pub name: String,
    /// Absolute.
    pub data_dir: PathBuf,
    /// `listen_addresses`.
    pub listen_host: String,
    pub port: u16,
    /// `unix_socket_directories`; must be short (socket paths are limited to 107 bytes).
    pub socket_dir: PathBuf,
    pub log_file: PathBuf,
}

impl Node {
    /// True once initdb and configuration finished (`create` renames into place last).
    pub fn exists(&self) -> bool {
        self.data_dir.join("PG_VERSION").exists()
    }

    /// initdb with the superuser `postgres` / `password` and configure.
    pub fn create(&self, password: &str, settings: Settings) -> Result<()> {
        let tmp = self.staging_dir()?;
        let pwfile = tmp.with_extension("pw");
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&pwfile)
            .and_then(|mut f| std::io::Write::write_all(&mut f, password.as_bytes()))
            .with_context(|| format!("writing {}", pwfile.display()))?;
        give_to_server(&pwfile)?;
        let mut cmd = self.pg_command("initdb")?;
        cmd.arg("-D")
            .arg(&tmp)
            .args(["-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8"])
            .args(["--auth-local=scram-sha-256", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display()));
        if settings.fast {
            cmd.arg("--no-sync");
        }
        let out = cmd.output().context("running initdb");
        let _ = fs::remove_file(&pwfile);
        let out = out?;
        if !out.status.success() {
            bail!(
                "initdb for {} failed:\n{}{}",
                self.name,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.finish_create(&tmp, settings)
    }

    /// Copy of `template`'s data directory (which must never have run: a fresh initdb is
    /// byte-identical for every node and copying it is much faster than another initdb).
    pub fn create_from(&self, template: &Node, settings: Settings) -> Result<()> {
        let tmp = self.staging_dir()?;
        fs::remove_dir(&tmp)?;
        let out = Command::new("cp")
            .arg("-a")
            .arg(&template.data_dir)
            .arg(&tmp)
            .output()
            .context("running cp")?;
        if !out.status.success() {
            bail!(
                "copying {} failed: {}",
                template.data_dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.finish_create(&tmp, settings)
    }

    /// An empty, server-owned `<data_dir>.tmp`; leftovers of an interrupted run go first.
    pub(crate) fn staging_dir(&self) -> Result<PathBuf> {
        let tmp = self.data_dir.with_extension("tmp");
        if tmp.exists() {
            fs::remove_dir_all(&tmp)?;
        }
        server_dir(&tmp, 0o700)?;
        Ok(tmp)
    }

    pub(crate) fn finish_create(&self, tmp: &Path, settings: Settings) -> Result<()> {
        self.configure(tmp, settings)?;
        fs::rename(tmp, &self.data_dir)
            .with_context(|| format!("renaming {} into place", tmp.display()))?;
        Ok(())
    }

    /// Our settings go to `pgshard.conf`, included from postgresql.conf, so that they are
    /// visible in one place and ALTER SYSTEM still overrides them.
    fn configure(&self, data: &Path, settings: Settings) -> Result<()> {
        let q = |s: &str| format!("'{}'", s.replace('\'', "''"));
        let mut conf = format!(
            "# Written by pgshard for the {name}.\n\
             listen_addresses = {host}\n\
             port = {port}\n\
             unix_socket_directories = {sockets}\n\
             max_connections = 400\n\
             # multi-shard writes commit with two-phase commit\n\
             max_prepared_transactions = 400\n\
             shared_buffers = {buffers}\n\
             password_encryption = 'scram-sha-256'\n\
             # bulk loads (pgbench -i) without a checkpoint every few seconds\n\
             max_wal_size = 2GB\n",
            name = self.name,
            host = q(&self.listen_host),
            port = self.port,
            sockets = q(&self.socket_dir.to_string_lossy()),
            buffers = if settings.fast { "256MB" } else { "512MB" },
        );
        if settings.async_commit {
            conf.push_str(
                "# the reference benchmarks' setting: recent commits may be lost in a crash\n\
                 synchronous_commit = off\n",
            );
        }
        if let Some(n) = settings.parallel_workers_per_gather {
            conf.push_str(&format!(
                "# this node's share of the host's cores (the workers share them)\n\
                 max_parallel_workers_per_gather = {n}\n"
            ));
        }
        if settings.fast {
            conf.push_str("# test cluster: durability off\nfsync = off\nfull_page_writes = off\n");
        }
        write_server_file(&data.join("pgshard.conf"), &conf)?;

        let main_conf = data.join("postgresql.conf");
        let mut text = fs::read_to_string(&main_conf)?;
        if !text.contains("include_if_exists = 'pgshard.conf'") {
            text.push_str("\ninclude_if_exists = 'pgshard.conf'\n");
            write_server_file(&main_conf, &text)?;
        }

        let mut hba = String::from(
            "# Written by pgshard: passwords (SCRAM) everywhere.\n\
             # TYPE  DATABASE     USER  ADDRESS       METHOD\n\
             local   all          all                 scram-sha-256\n\
             host    all          all   127.0.0.1/32  scram-sha-256\n\
             host    all          all   ::1/128       scram-sha-256\n\
             local   replication  all                 scram-sha-256\n\
             host    replication  all   127.0.0.1/32  scram-sha-256\n\
             host    replication  all   ::1/128       scram-sha-256\n",
        );
        for addr in hba_addresses(&self.listen_host) {
            hba.push_str(&format!(
                "host    all          all   {addr}  scram-sha-256\n"
            ));
            hba.push_str(&format!(
                "host    replication  all   {addr}  scram-sha-256\n"
            ));
        }
        write_server_file(&data.join("pg_hba.conf"), &hba)
    }

    /// The postmaster's pid if it runs. The pid in postmaster.pid is only trusted when
    /// that process's working directory is this data directory (the postmaster chdirs
    /// there), so a stale file whose pid was reused is not mistaken for a live server.
    pub fn running_pid(&self) -> Option<u32> {
        let pid = self.recorded_pid()?;
        (process_cwd(pid)? == fs::canonicalize(&self.data_dir).ok()?).then_some(pid)
    }

    /// The first line of postmaster.pid, whether or not that process still runs.
    fn recorded_pid(&self) -> Option<u32> {
        let text = fs::read_to_string(self.data_dir.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Starts the server unless it runs; returns the postmaster's pid.
    pub fn start(&self) -> Result<u32> {
        if let Some(pid) = self.running_pid() {
            return Ok(pid);
        }
        // After a crash (kill -9 of the postmaster) its children still hold the shared
        // memory for a moment and a new postmaster would refuse to start.
        self.reap_orphans();
        self.clear_stale_locks();
        let out = self
            .pg_command("pg_ctl")?
            .args(["start", "-w", "-t", "120", "-s", "-D"])
            .arg(&self.data_dir)
            .arg("-l")
            .arg(&self.log_file)
            .output()
            .context("running pg_ctl start")?;
        match self.running_pid() {
            Some(pid) if out.status.success() => Ok(pid),
            _ => bail!(
                "{} did not start on port {}: {}\n--- end of {} ---\n{}",
                self.name,
                self.port,
                String::from_utf8_lossy(&out.stderr).trim(),
                self.log_file.display(),
                tail(&self.log_file, 15)
            ),
        }
    }

    /// Removes the lock files of a postmaster that is provably gone, so that a new one
    /// starts at once: a killed postmaster stays a zombie until init reaps it (about a
    /// second here), and after a reboot its pid may belong to another process.
    fn clear_stale_locks(&self) {
        let Some(pid) = self.recorded_pid() else {
            return;
        };
        let ours = fs::canonicalize(&self.data_dir).ok();
        let gone = !process_exists(pid) || process_cwd(pid).is_some_and(|c| Some(c) != ours);
        if gone {
            let _ = fs::remove_file(self.data_dir.join("postmaster.pid"));
            let _ = fs::remove_file(self.socket_dir.join(format!(".s.PGSQL.{}.lock", self.port)));
        }
    }

    /// Fast shutdown (rolls back open transactions); tolerates a server that is down.
    /// Returns whether it was running.
    pub fn stop(&self) -> Result<bool> {
        let Some(pid) = self.running_pid() else {
            self.reap_orphans();
            return Ok(false);
        };
        let ok = self
            .pg_command("pg_ctl")?
            .args(["stop", "-m", "fast", "-w", "-t", "60", "-s", "-D"])
            .arg(&self.data_dir)
            .status()?
            .success();
        if !ok && self.running_pid().is_some() {
            // SIGQUIT = immediate shutdown: the server recovers from WAL on next start.
            unsafe { libc::kill(pid as i32, libc::SIGQUIT) };
        }
        self.reap_orphans();
        Ok(true)
    }

    /// Waits for (then kills) processes left in the data directory without a postmaster.
    fn reap_orphans(&self) {
        let Ok(dir) = fs::canonicalize(&self.data_dir) else {
            return;
        };
        let orphans = || -> Vec<u32> {
            let Ok(entries) = fs::read_dir("/proc") else {
                return vec![];
            };
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|&pid| process_cwd(pid).as_deref() == Some(dir.as_path()))
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = orphans();
            if pids.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                for pid in pids {
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PostgreSQL program run as the server account, from a directory it can read.
    pub(crate) fn pg_command(&self, program: &str) -> Result<Command> {
        let mut cmd = Command::new(bin_dir()?.join(program));
        cmd.current_dir("/")
            .env_remove("PGDATA")
            .stdin(Stdio::null());
        if let Some(a) = server_account()? {
            cmd.uid(a.uid).gid(a.gid);
        }
        Ok(cmd)
    }
}

/// pg_hba lines needed beyond loopback for clients reaching `listen_host`.
fn hba_addresses(listen_host: &str) -> Vec<String> {
    match listen_host {
        "" | "localhost" | "127.0.0.1" | "::1" => vec![],
        "*" | "0.0.0.0" | "::" => vec!["0.0.0.0/0".into(), "::/0".into()],
        h => match h.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(a)) => vec![format!("{a}/32")],
            Ok(std::net::IpAddr::V6(a)) => vec![format!("{a}/128")],
            Err(_) => vec![h.to_string()], // a host name: pg_hba matches it by DNS
        },
    }
}

pub(crate) fn write_server_file(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    give_to_server(path)
}

/// True while `pid` is a live process (not a zombie waiting to be reaped).
pub fn process_exists(pid: u32) -> bool {
    let alive = unsafe { libc::kill(pid as i32, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    let zombie = fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false);
    alive && !zombie
}

/// Working directory of a live process (None if it is gone or not ours to see).
pub fn process_cwd(pid: u32) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/cwd")).ok()
}

/// Last `n` lines of a log file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
