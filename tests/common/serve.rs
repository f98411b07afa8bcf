//! A `pgshard serve` of its own in front of the shared cluster's nodes, with the
//! cluster's config changed by the test (several pgshard processes may serve one
//! cluster): for settings the shared listener does not have.

use super::{alloc_ports, cluster, run_dir, PGSHARD};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A `pgshard serve` of its own in front of the shared cluster's nodes (several
/// pgshard processes may serve one cluster), stopped when dropped.
pub struct Serve {
    pub child: Child,
    pub port: u16,
    pub socket_dir: PathBuf,
    pub log: PathBuf,
}

impl Serve {
    /// Starts pgshard with the cluster's config changed by `edit`; Err(its log) when
    /// it exits instead of listening.
    pub fn start(
        name: &str,
        edit: impl FnOnce(&mut pgshard::config::Config),
    ) -> Result<Serve, String> {
        Serve::start_with_toml(name, edit, "")
    }

    /// `start`, with `extra` (top-level `key = value` lines) set over the config's
    /// own: for settings a test sets by name.
    pub fn start_with_toml(
        name: &str,
        edit: impl FnOnce(&mut pgshard::config::Config),
        extra: &str,
    ) -> Result<Serve, String> {
        Serve::start_for(&cluster().dir, name, edit, extra)
    }

    /// `start_with_toml` in front of the cluster in `dir` (a test's own cluster).
    pub fn start_for(
        dir: &std::path::Path,
        name: &str,
        edit: impl FnOnce(&mut pgshard::config::Config),
        extra: &str,
    ) -> Result<Serve, String> {
        let mut cfg = pgshard::config::Config::load(&dir.join("pgshard.toml")).unwrap();
        let port = alloc_ports(1);
        let socket_dir = run_dir().join(format!("{name}-sockets"));
        std::fs::create_dir_all(&socket_dir).unwrap();
        cfg.listen_port = port;
        cfg.unix_socket_directory = Some(socket_dir.clone());
        cfg.recovery_interval_secs = 0;
        cfg.deadlock_detection_interval_ms = 0;
        edit(&mut cfg);
        let file = run_dir().join(format!("{name}.toml"));
        let mut text: toml::Table = toml::from_str(&cfg.to_toml()).unwrap();
        text.extend(toml::from_str::<toml::Table>(extra).unwrap());
        std::fs::write(&file, toml::to_string(&text).unwrap()).unwrap();
        let log = run_dir().join(format!("{name}.log"));
        let child = Command::new(PGSHARD)
            .args(["serve", "--config"])
            .arg(&file)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::options().append(true).open(&log).unwrap())
            .spawn()
            .unwrap();
        let mut serve = Serve {
            child,
            port,
            socket_dir,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(serve);
            }
            if serve.child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                return Err(std::fs::read_to_string(&serve.log).unwrap_or_default());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}
