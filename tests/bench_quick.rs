//! `pgshard bench --quick` end to end: it starts a plain PostgreSQL and a pgshard
//! cluster, loads W1, runs every W1 workload once for 3 s against both, every W2 variant
//! and W3 (sysbench oltp_insert) the same way (or reports them skipped with pgshard's
//! reason), loads W4's table (100,000 rows), times its two queries and its COPY on both,
//! writes bench.json and bench.svg, and stops everything it started.

mod common;

use common::{alloc_ports, run_dir, teardown_at_exit, Teardown, PGSHARD};
use serde_json::Value;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A minimal XML well-formedness check: every tag closes, in order, and nothing follows
/// the root element.
fn well_formed(xml: &str) -> Result<(), String> {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = xml.trim();
    let mut seen_root = false;
    while let Some(i) = rest.find('<') {
        if !rest[..i].trim().is_empty() && stack.is_empty() {
            return Err(format!("text outside the root: {:?}", &rest[..i]));
        }
        let end = rest[i..]
            .find('>')
            .ok_or_else(|| "unclosed '<'".to_string())?
            + i;
        let tag = &rest[i + 1..end];
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else if !tag.starts_with('?') && !tag.starts_with('!') {
            if stack.is_empty() && seen_root {
                return Err("a second root element".into());
            }
            seen_root = true;
            let name = tag
                .split(|c: char| c.is_whitespace() || c == '/')
                .next()
                .unwrap_or("");
            if name.is_empty() {
                return Err(format!("empty tag <{tag}>"));
            }
            if !tag.ends_with('/') {
                stack.push(name.to_string());
            }
        }
        rest = &rest[end + 1..];
    }
    if !stack.is_empty() {
        return Err(format!("unclosed elements {stack:?}"));
    }
    if !rest.trim().is_empty() {
        return Err(format!("text after the root: {rest:?}"));
    }
    Ok(())
}

#[test]
fn svg_checker_works() {
    assert!(well_formed(r#"<svg a="1"><g><rect/></g><text>x</text></svg>"#).is_ok());
    assert!(well_formed("<svg><g></svg>").is_err());
    assert!(well_formed("<svg></svg><svg></svg>").is_err());
}

#[test]
fn bench_quick_runs_both_targets() {
    let out = run_dir();
    // Safety net should the bench itself die without cleaning up.
    teardown_at_exit(Teardown::Cluster(out.join("cluster")));
    let port = alloc_ports(5).to_string();
    let started = Instant::now();
    let mut child = Command::new(PGSHARD)
        .args(["bench", "--quick", "--port", &port, "--out"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting pgshard bench");
    // Read both pipes on threads so that neither fills up.
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (out_t, err_t) = (read(Box::new(stdout)), read(Box::new(stderr)));
    let deadline = started + Duration::from_secs(400);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            // SIGINT: the bench stops its servers on Ctrl-C.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            std::thread::sleep(Duration::from_secs(60));
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "pgshard bench --quick did not finish in 400 s:\n{}",
                err_t.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (stdout, stderr) = (out_t.join().unwrap(), err_t.join().unwrap());
    let elapsed = started.elapsed();
    eprintln!("pgshard bench --quick took {elapsed:?}\n{stdout}");
    assert!(
        status.success(),
        "pgshard bench --quick failed ({status}):\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("w1-select-prepared"), "table:\n{stdout}");
    assert!(stdout.contains("w4-count"), "table:\n{stdout}");
    assert!(
        stdout.contains("plain time / pgshard time (>1: pgshard faster)"),
        "table:\n{stdout}"
    );
    assert!(
        stdout.contains("W4 load of 100,000 rows"),
        "table:\n{stdout}"
    );

    // bench.json: one entry per workload, both targets measured.
    let text = std::fs::read_to_string(out.join("bench.json")).expect("bench.json");
    let doc: Value = serde_json::from_str(&text).expect("bench.json parses");
    let workloads = doc["workloads"].as_array().expect("workloads array");
    let names: Vec<&str> = workloads
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "w1-select-prepared",
            "w1-select-simple",
            "w1-tpcb",
            "w1-tpcb-simple",
            "w1-tpcb-vs-own-2pc",
            "w1-tpcb-1pc",
            "w2-9shards-2pc",
            "w2-9shards-1pc",
            "w2-2shards-2pc",
            "w2-2shards-1pc",
            "w2-1shard",
            "w2-1row",
            "w3-sysbench-insert",
            "w4-count",
            "w4-groupby",
            "w4q-cte-groups",
            "w4q-from-limit",
            "w4q-union",
            "w4q-cte-join",
            "w4q-in-subquery",
            "w4-copy",
        ],
        "{text}"
    );
    // One PostgreSQL's own 2PC: the plain server ran PREPARE TRANSACTION + COMMIT
    // PREPARED, pgshard pgbench's built-in script; the report compares the two with the
    // plain server's one-phase TPC-B.
    let own = workloads
        .iter()
        .find(|w| w["name"] == "w1-tpcb-vs-own-2pc")
        .unwrap();
    let script = own["script"].as_str().unwrap_or("");
    assert!(
        script.contains("PREPARE TRANSACTION 'pgbench_client_:client_id';\nCOMMIT PREPARED"),
        "{own:#}"
    );
    if own["status"] == "ok" {
        let note = doc["own_two_phase"].as_str().unwrap_or("");
        assert!(note.starts_with("2PC on one PostgreSQL"), "{text}");
        assert!(stdout.contains(note), "{stdout}");
    }
    let throughput = |w: &&Value| w["kind"] == "pgbench" || w["kind"] == "sysbench";
    for w in workloads.iter().filter(throughput) {
        let name = w["name"].as_str().unwrap();
        // Every workload is in the terminal table, measured or with its reason.
        assert!(stdout.contains(name), "no {name} in the table:\n{stdout}");
        if name.starts_with("w3-") {
            assert_eq!(w["kind"], "sysbench", "{w:#}");
        }
        if name.starts_with("w2-") {
            // The script says where its rows land; the name says where they must.
            let shards = match name {
                "w2-9shards-2pc" | "w2-9shards-1pc" => 9,
                "w2-2shards-2pc" | "w2-2shards-1pc" => 2,
                _ => 1,
            };
            let script = w["script"].as_str().unwrap_or("");
            assert!(
                script.starts_with(&format!("-- rows on {shards} shard(s) of 32\n")),
                "{w:#}"
            );
        }
        match w["status"].as_str().unwrap() {
            "ok" => {
                for target in ["plain", "pgshard"] {
                    let tps = w[target]["tps_median"].as_f64().unwrap_or(0.0);
                    assert!(tps > 0.0, "{name} {target}: tps {tps}\n{w:#}");
                    let run = w["runs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|r| r["target"] == target)
                        .unwrap_or_else(|| panic!("{name}: no {target} run"));
                    assert!(run["transactions"].as_u64().unwrap() > 0, "{run:#}");
                    assert!(run["latency_avg_ms"].as_f64().unwrap() > 0.0, "{run:#}");
                    assert!(run["latency_p95_ms"].as_f64().is_some(), "{run:#}");
                    assert!(run["server_cpu_us_per_txn"].as_f64().is_some(), "{run:#}");
                }
                assert!(w["ratio"].as_f64().unwrap() > 0.0, "{w:#}");
                let cpu = w["pgshard"]["pgshard_cpu_us_per_txn_median"].as_f64();
                assert!(cpu.is_some_and(|c| c >= 0.0), "{w:#}");
                assert!(
                    w["plain"]["latency_p50_ms_median"].as_f64().is_some(),
                    "{w:#}"
                );
            }
            // TPC-B, sysbench's INSERT and W2 may be skipped while pgshard cannot run
            // them, with pgshard's reason (W2: its SQLSTATE 0A000).
            "skipped" if name.starts_with("w1-tpcb") || name.starts_with("w3-") => {
                assert!(!w["reason"].as_str().unwrap_or("").is_empty(), "{w:#}");
            }
            "skipped" if name.starts_with("w2-") => {
                let reason = w["reason"].as_str().unwrap_or("");
                assert!(reason.contains("0A000"), "{w:#}");
                assert!(w["runs"].as_array().unwrap().is_empty(), "{w:#}");
            }
            other => panic!("{name}: status {other}\n{w:#}"),
        }
    }

    // W4: loaded on both sides; count(*) measured on both with the same answer; the GROUP
    // BY measured, or skipped with pgshard's reason.
    let load = &doc["load"]["w4"];
    assert_eq!(load["rows"], 100_000, "{load:#}");
    for key in [
        "plain_s",
        "pgshard_insert_s",
        "pgshard_distribute_s",
        "pgshard_s",
    ] {
        assert!(
            load[key].as_f64().is_some_and(|v| v > 0.0),
            "{key}: {load:#}"
        );
    }
    assert!(load["error"].is_null(), "{load:#}");
    let w4 = |name: &str| {
        workloads
            .iter()
            .find(|w| w["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let count = w4("w4-count");
    assert_eq!(count["kind"], "query", "{count:#}");
    assert_eq!(count["status"], "ok", "{count:#}");
    let q = &count["query"];
    for target in ["plain", "pgshard"] {
        let ms = q[target]["median_ms"].as_f64().unwrap_or(0.0);
        assert!(ms > 0.0, "w4-count {target}: {ms} ms\n{count:#}");
        let run = q["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["target"] == target)
            .unwrap_or_else(|| panic!("w4-count: no {target} run"));
        assert_eq!(run["times_ms"].as_array().unwrap().len(), 3, "{run:#}");
        assert_eq!(run["warmup_ms"].as_array().unwrap().len(), 1, "{run:#}");
        assert_eq!(run["answer"], serde_json::json!([["100000"]]), "{run:#}");
    }
    assert_eq!(q["answers_equal"], true, "{count:#}");
    assert!(count["ratio"].as_f64().unwrap() > 0.0, "{count:#}");
    let groupby = w4("w4-groupby");
    match groupby["status"].as_str().unwrap() {
        "ok" => {
            let q = &groupby["query"];
            for target in ["plain", "pgshard"] {
                assert!(
                    q[target]["median_ms"].as_f64().unwrap_or(0.0) > 0.0,
                    "{q:#}"
                );
            }
            assert_eq!(q["answers_equal"], true, "{groupby:#}");
            assert_eq!(q["answer"].as_array().unwrap().len(), 10, "{groupby:#}");
        }
        "skipped" => {
            let reason = groupby["reason"].as_str().unwrap_or("");
            assert!(reason.contains("0A000"), "{groupby:#}");
            assert!(stdout.contains(reason), "table:\n{stdout}");
        }
        other => panic!("w4-groupby: status {other}\n{groupby:#}"),
    }

    // W4 by COPY: measured on both (same row count, rows/s), or skipped with pgshard's
    // refusal (0A000).
    let copy = w4("w4-copy");
    assert_eq!(copy["kind"], "copy", "{copy:#}");
    match copy["status"].as_str().unwrap() {
        "ok" => {
            let q = &copy["query"];
            for target in ["plain", "pgshard"] {
                assert!(
                    q[target]["rows_per_s"].as_f64().unwrap_or(0.0) > 0.0,
                    "{q:#}"
                );
            }
            assert_eq!(q["answers_equal"], true, "{copy:#}");
            assert!(copy["ratio"].as_f64().unwrap() > 0.0, "{copy:#}");
        }
        "skipped" => {
            let reason = copy["reason"].as_str().unwrap_or("");
            assert!(reason.contains("0A000"), "{copy:#}");
        }
        other => panic!("w4-copy: status {other}\n{copy:#}"),
    }

    assert!(doc["machine"]["nproc"].as_u64().unwrap() > 0);
    assert!(doc["machine"]["mem_total_kb"].as_u64().unwrap() > 0);
    assert!(
        doc["postgresql"]["version"]
            .as_str()
            .unwrap()
            .contains("PostgreSQL 15"),
        "{:#}",
        doc["postgresql"]
    );
    assert_eq!(doc["options"]["w4_rows"], 100_000);
    assert_eq!(
        doc["postgresql"]["plain_settings"]["synchronous_commit"],
        "off"
    );
    // The one difference: a worker's share of the host's cores for parallel query
    // (`cluster::worker_settings`), shown in the JSON.
    let differences = doc["postgresql"]["plain_vs_worker_differences"]
        .as_array()
        .expect("differences");
    assert!(
        differences.iter().all(|d| d
            .as_str()
            .is_some_and(|d| d.starts_with("worker only: max_parallel_workers_per_gather="))),
        "{differences:?}"
    );
    assert!(doc["command"].as_str().unwrap().contains("bench --quick"));
    assert!(doc["date"].as_str().unwrap().starts_with("20"));

    // bench.svg: well formed, a bar per measured workload.
    let svg = std::fs::read_to_string(out.join("bench.svg")).expect("bench.svg");
    assert!(svg.starts_with("<svg"), "{svg}");
    well_formed(&svg).unwrap_or_else(|e| panic!("bench.svg: {e}\n{svg}"));
    for w in workloads {
        let name = w["name"].as_str().unwrap();
        let mark = if w["status"] == "ok" {
            format!(r#"<rect class="bar" data-workload="{name}""#)
        } else {
            format!(r#"class="skipped" data-workload="{name}""#)
        };
        assert!(svg.contains(&mark), "no {mark} in bench.svg:\n{svg}");
    }

    // Everything it started is stopped.
    let ports = &doc["options"]["ports"];
    let mut all: Vec<u64> = vec![
        ports["plain"].as_u64().unwrap(),
        ports["pgshard"].as_u64().unwrap(),
        ports["coordinator"].as_u64().unwrap(),
    ];
    all.extend(
        ports["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_u64().unwrap()),
    );
    for p in all {
        assert!(
            TcpStream::connect(("127.0.0.1", p as u16)).is_err(),
            "port {p} still accepts connections after the bench"
        );
    }
    assert!(
        !out.join("plain").join("data").exists(),
        "the plain data directory was not removed"
    );
}
