//! The pgshard processes of a local cluster (`cluster up --coordinators N`): N
//! detached `pgshard serve` on one catalog, each on a port of its own and each serving
//! every statement (pgshard keeps no state beyond caches; see docs/ARCHITECTURE.md,
//! "Several pgshard processes"). The first listens on the cluster's port with
//! `pgshard.toml`, `pgshard.pid` and `logs/pgshard.log`; listener `i` (2, 3, ...) on
//! `layout.pgshard_ports[i - 2]` with `pgshard-<i>.toml` (pgshard.toml with its own port,
//! rewritten at each start so that edits of pgshard.toml apply to all),
//! `pgshard-<i>.pid` and `logs/pgshard-<i>.log`.

use super::{node, port_accepts, stop_process, Cluster};
use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One pgshard process of the cluster.
pub(super) struct Listener {
    /// 1 for the first (the cluster's port), then 2, 3, ...
    pub index: usize,
    pub port: u16,
    dir: PathBuf,
}

impl Listener {
    fn suffix(&self) -> String {
        if self.index == 1 {
            String::new()
        } else {
            format!("-{}", self.index)
        }
    }

    pub fn name(&self) -> String {
        format!("pgshard{}", self.suffix())
    }

    /// The config it runs with: pgshard.toml for the first.
    pub fn config_file(&self) -> PathBuf {
        self.dir.join(format!("pgshard{}.toml", self.suffix()))
    }

    pub fn pid_file(&self) -> PathBuf {
        self.dir.join(format!("pgshard{}.pid", self.suffix()))
    }

    pub fn log(&self) -> PathBuf {
        self.dir
            .join("logs")
            .join(format!("pgshard{}.log", self.suffix()))
    }

    /// The pid of this `pgshard serve` if it runs: the pid file's process must still
    /// be a `serve` of this listener's config (pids get reused).
    pub fn pid(&self) -> Option<u32> {
        let pid: u32 = fs::read_to_string(self.pid_file())
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let config = self.config_file();
        let config = config.to_string_lossy();
        cmdline
            .split(|&b| b == 0)
            .any(|arg| arg == config.as_bytes())
            .then_some(pid)
    }
}

impl Cluster {
    /// Every pgshard process of the cluster, the first one first.
    pub(super) fn listeners(&self) -> Vec<Listener> {
        std::iter::once(self.layout.port)
            .chain(self.layout.pgshard_ports.iter().copied())
            .enumerate()
            .map(|(i, port)| Listener {
                index: i + 1,
                port,
                dir: self.dir.clone(),
            })
            .collect()
    }

    /// Gives the cluster at least `n` pgshard processes (new ports after all others;
    /// `up` removes none).
    pub(super) fn allocate_pgshard_ports(&mut self, n: usize) {
        while 1 + self.layout.pgshard_ports.len() < n {
            let port = self.next_port();
            self.layout.pgshard_ports.push(port);
        }
    }

    pub(super) fn accepts(&self, port: u16) -> bool {
        port_accepts(&self.connect_host(), port)
    }

    /// Starts every pgshard process not running yet; the first before the others (it
    /// installs the catalog on a new cluster).
    pub(super) fn start_listeners(&self, exe: &Path) -> Result<()> {
        for l in self.listeners() {
            if l.index > 1 {
                self.write_listener_config(&l)?;
            }
            self.start_listener(&l, exe)?;
        }
        Ok(())
    }

    /// pgshard.toml with listener `l`'s port.
    fn write_listener_config(&self, l: &Listener) -> Result<()> {
        let mut cfg = crate::config::Config::load(&self.config_file())?;
        cfg.listen_port = l.port;
        super::write_private(&l.config_file(), &cfg.to_toml())
    }

    fn start_listener(&self, l: &Listener, exe: &Path) -> Result<()> {
        let host = self.connect_host();
        let name = l.name();
        if let Some(pid) = l.pid() {
            self.wait_for_listener(l, None)?;
            println!("{name} already running on {host}:{} (pid {pid})", l.port);
            return Ok(());
        }
        if self.accepts(l.port) {
            bail!(
                "port {} on {host} is taken by another process: pgshard cannot listen there",
                l.port
            );
        }
        let log_path = l.log();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        // Own process group: Ctrl-C in the shell that ran `cluster up` must not reach it.
        let mut child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(l.config_file())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        fs::write(l.pid_file(), format!("{}\n", child.id()))?;
        self.wait_for_listener(l, Some(&mut child))?;
        println!("started {name} on {host}:{} (pid {})", l.port, child.id());
        Ok(())
    }

    /// Waits until listener `l` accepts connections; fails early if `child` exits.
    fn wait_for_listener(
        &self,
        l: &Listener,
        mut child: Option<&mut std::process::Child>,
    ) -> Result<()> {
        let log = l.log();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.accepts(l.port) {
            if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!(
                    "pgshard exited right after starting ({status}); see {}:\n{}",
                    log.display(),
                    node::tail(&log, 15)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "pgshard does not accept connections on {}:{} after 60 s; see {}",
                    self.connect_host(),
                    l.port,
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stops every pgshard process (those already down are fine).
    pub(super) fn stop_listeners(&self) {
        for l in self.listeners() {
            match l.pid() {
                Some(pid) => {
                    stop_process(pid);
                    println!("stopped {} (pid {pid})", l.name());
                }
                None => println!("{} was not running", l.name()),
            }
            let _ = fs::remove_file(l.pid_file());
        }
    }

    /// `cluster status` lines of the pgshard processes.
    pub(super) fn listener_status_lines(&self) -> String {
        self.listeners()
            .iter()
            .map(|l| {
                let pid = l.pid();
                super::status_line(
                    &l.name(),
                    &format!("{}:{}", self.connect_host(), l.port),
                    pid,
                    pid.is_some() && self.accepts(l.port),
                    &l.log(),
                )
            })
            .collect()
    }
}
