//! `pgshard cluster up|status|down` end to end, against real PostgreSQL servers: what
//! `up` creates, that the servers take password logins from the real psql, that a second
//! `up` restarts only a killed part, and that `down` stops everything. Also checks the
//! shared test harness (`common`) itself.

mod common;

use common::{alloc_ports, cluster_up, pgshard, psql, run_dir, teardown_at_exit, Teardown};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn postmaster_pid(data_dir: &Path) -> u32 {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).unwrap();
    text.lines().next().unwrap().trim().parse().unwrap()
}

/// Zombies count as dead: init reaps a killed server only after a moment.
fn alive(pid: u32) -> bool {
    pgshard::cluster::node::process_exists(pid)
}

fn status(dir: &str) -> String {
    let out = pgshard(&["cluster", "status", "--dir", dir]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Lines of `cluster status` for the parts, and whether each says up.
fn part_states(status: &str) -> Vec<(String, bool)> {
    status
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| {
            (
                l.trim().to_string(),
                l.split_whitespace().any(|w| w == "up"),
            )
        })
        .collect()
}

#[test]
fn cluster_up_restart_and_down() {
    // Its own cluster rather than the shared one: this test kills and stops it.
    let dir = run_dir().join("cli");
    teardown_at_exit(Teardown::Cluster(dir.clone()));
    let base = alloc_ports(4);
    cluster_up(&dir, base);
    let d = dir.to_str().unwrap();

    // connection.env: owner-only, the five libpq variables, pointing at pgshard.
    let env_file = dir.join("connection.env");
    let mode = std::fs::metadata(&env_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "connection.env mode");
    let text = std::fs::read_to_string(&env_file).unwrap();
    for var in ["PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE"] {
        assert!(
            text.contains(&format!("export {var}=")),
            "{var} in:\n{text}"
        );
    }
    assert!(text.contains(&format!("export PGPORT={base}\n")), "{text}");
    let info = pgshard::cluster::cluster_info(&dir).unwrap();
    assert_eq!(info.port, base);
    assert_eq!(info.coordinator_port, base + 1);
    assert_eq!(info.worker_ports, vec![base + 2, base + 3]);
    assert!(dir.join("pgshard.toml").exists());

    // The real psql logs in with the password, over TCP and over the Unix socket.
    let mut env = info.pg_env();
    let mut ports = vec![info.coordinator_port];
    ports.extend(&info.worker_ports);
    for &port in &ports {
        env.retain(|(k, _)| k != "PGPORT");
        env.push(("PGPORT".into(), port.to_string()));
        let got = psql(&env, &["-c", "select current_setting('port')"]);
        assert_eq!(got, port.to_string());
    }
    let sockets = dir.join("sockets");
    let got = psql(
        &env,
        &["-h", sockets.to_str().unwrap(), "-c", "select 'socket ok'"],
    );
    assert_eq!(got, "socket ok");
    // A wrong password is refused (the servers do not trust anyone).
    let mut bad = env.clone();
    bad.retain(|(k, _)| k != "PGPASSWORD");
    bad.push(("PGPASSWORD".into(), "wrong".into()));
    let out = std::process::Command::new("psql")
        .envs(bad)
        .args(["-X", "-c", "select 1"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "wrong password accepted");

    let coordinator = dir.join("coordinator");
    let (w1, w2) = (dir.join("worker1"), dir.join("worker2"));
    // PostgreSQL refuses root: when we are root the servers run as `postgres`.
    if unsafe { libc::geteuid() } == 0 {
        let st = std::fs::read_to_string(format!("/proc/{}/status", postmaster_pid(&w1))).unwrap();
        let uid = st.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(!uid.split_whitespace().any(|f| f == "0"), "{uid}");
    }

    let st = status(d);
    let parts = part_states(&st);
    assert_eq!(parts.len(), 4, "pgshard + coordinator + 2 workers:\n{st}");
    assert!(parts.iter().all(|(_, up)| *up), "all up:\n{st}");

    // Through pgshard: `up` registered both workers.
    let nodes = psql(
        &info.pg_env(),
        &[
            "-c",
            "select nodename, nodeport from pg_dist_node order by nodeport",
        ],
    );
    let want: Vec<String> = info
        .worker_ports
        .iter()
        .map(|p| format!("{}|{p}", info.node_host))
        .collect();
    assert_eq!(nodes, want.join("\n"));

    // pgshard's own Unix socket, beside the nodes' ones: the same password login, and
    // the same refusal of a wrong one.
    let socket_env = |password: &str| {
        let mut e = info.pg_env();
        e.retain(|(k, _)| k != "PGHOST" && k != "PGPASSWORD");
        e.push(("PGHOST".into(), sockets.to_str().unwrap().into()));
        e.push(("PGPASSWORD".into(), password.into()));
        e
    };
    assert!(sockets.join(format!(".s.PGSQL.{base}")).exists());
    let got = psql(
        &socket_env(&info.password),
        &["-c", "select count(*) from pg_dist_node"],
    );
    assert_eq!(got, "2");
    let out = std::process::Command::new("psql")
        .envs(socket_env("wrong"))
        .args(["-X", "-c", "select 1"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "wrong password accepted over the socket"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("password authentication failed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // kill -9 one worker's postmaster; a second `up` restarts only it.
    let before_coord = postmaster_pid(&coordinator);
    let before_w1 = postmaster_pid(&w1);
    let before_w2 = postmaster_pid(&w2);
    let pgshard_pid: u32 = std::fs::read_to_string(dir.join("pgshard.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    unsafe { libc::kill(before_w1 as i32, libc::SIGKILL) };
    let t = std::time::Instant::now();
    while alive(before_w1) {
        assert!(t.elapsed().as_secs() < 10, "killed postmaster still alive");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let st = status(d);
    let down: Vec<_> = part_states(&st).into_iter().filter(|(_, up)| !up).collect();
    assert_eq!(down.len(), 1, "{st}");
    assert!(down[0].0.starts_with("worker 1"), "{st}");

    let out = cluster_up(&dir, base);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("started worker 1"), "{said}");
    let after_w1 = postmaster_pid(&w1);
    assert_ne!(after_w1, before_w1);
    assert!(alive(after_w1));
    assert_eq!(postmaster_pid(&coordinator), before_coord, "{said}");
    assert_eq!(postmaster_pid(&w2), before_w2, "{said}");
    let pid_again: u32 = std::fs::read_to_string(dir.join("pgshard.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pid_again, pgshard_pid, "pgshard kept running:\n{said}");
    let st = status(d);
    assert!(part_states(&st).iter().all(|(_, up)| *up), "{st}");
    // The restarted worker still has its data and password.
    env.retain(|(k, _)| k != "PGPORT");
    env.push(("PGPORT".into(), info.worker_ports[0].to_string()));
    assert_eq!(psql(&env, &["-c", "select 1"]), "1");

    // pgshard killed with -9 leaves its socket file behind: the restarted one replaces
    // it and serves on it.
    unsafe { libc::kill(pgshard_pid as i32, libc::SIGKILL) };
    let t = std::time::Instant::now();
    while alive(pgshard_pid) {
        assert!(t.elapsed().as_secs() < 10, "killed pgshard still alive");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(sockets.join(format!(".s.PGSQL.{base}")).exists());
    cluster_up(&dir, base);
    let pgshard_pid: u32 = std::fs::read_to_string(dir.join("pgshard.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let got = psql(&socket_env(&info.password), &["-c", "select 'again'"]);
    assert_eq!(got, "again");

    // down stops every part; a second down is harmless. pgshard, stopped by SIGTERM,
    // takes its socket file with it, as PostgreSQL does.
    let t = std::time::Instant::now();
    pgshard(&["cluster", "down", "--dir", d]);
    for pid in [before_coord, after_w1, before_w2, pgshard_pid] {
        assert!(!alive(pid), "pid {pid} still alive after down");
    }
    assert!(
        !sockets.join(format!(".s.PGSQL.{base}")).exists(),
        "pgshard's socket file outlived it"
    );
    // Not the SIGKILL after 10 s: pgshard exits on SIGTERM.
    assert!(t.elapsed().as_secs() < 9, "down took {:?}", t.elapsed());
    let st = status(d);
    assert!(part_states(&st).iter().all(|(_, up)| !up), "{st}");
    pgshard(&["cluster", "down", "--dir", d]);
}

/// The shared harness: direct connections to the cluster's servers and the plain
/// PostgreSQL used as an oracle.
#[tokio::test]
async fn harness_shared_cluster_and_plain_postgres() {
    let c = common::cluster();
    for &port in std::iter::once(&c.coordinator_port).chain(&c.worker_ports) {
        let client = c.direct(port).await;
        let row = client
            .query_one("select current_setting('port')::int", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), port as i32);
    }
    let through = c.client().await;
    let row = through.query_one("select 40 + 2", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);

    let plain = common::plain_postgres();
    let client = plain.client().await;
    let row = client.query_one("select hashint4(1)", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), -1905060026);
    assert_eq!(
        psql(&plain.pg_env(), &["-c", "show fsync"]),
        "off",
        "plain PostgreSQL runs with the fast settings"
    );
}
