//! The `pgshard` command: `serve` runs the coordinator against existing PostgreSQL
//! servers; `cluster up|down|status` manages a local cluster of real PostgreSQL
//! servers with a pgshard listener in front; `bench` runs the benchmark suite.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "pgshard",
    version,
    about = "A distributed PostgreSQL coordinator, Citus-compatible"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the coordinator (production mode) with a TOML config.
    Serve {
        #[arg(long)]
        config: PathBuf,
    },
    /// Manage a local cluster of PostgreSQL servers behind a pgshard listener.
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
    /// Benchmark pgshard against one plain PostgreSQL (see docs/BENCHMARKS.md).
    Bench(pgshard::bench::BenchArgs),
}

#[derive(Subcommand)]
enum ClusterAction {
    /// Create (first time) or restart a local cluster; starts only what is not running.
    Up {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Port of the pgshard listener; the coordinator node and workers take the next ones.
        #[arg(long, default_value_t = 6432)]
        port: u16,
        #[arg(long, default_value = "127.0.0.1")]
        listen_host: String,
        /// Test settings (fsync off, smaller buffers).
        #[arg(long)]
        fast: bool,
        /// `synchronous_commit = off` on every node: faster commits, but a node that
        /// crashes may lose its last ones (as one PostgreSQL would).
        #[arg(long)]
        async_commit: bool,
        /// Streaming-replication standbys of every node (coordinator node and workers):
        /// one synchronous, the others potential (`FIRST 1 (s1, s2, ...)`).
        #[arg(long, default_value_t = 0)]
        standbys: usize,
        /// `synchronous_commit` of the primaries [default with standbys: on].
        #[arg(long, value_enum)]
        sync: Option<pgshard::cluster::standby::SyncCommit>,
        /// pgshard processes on the one catalog, each listening on a port of its own
        /// (the first on --port, the others on ports after the nodes'); each serves
        /// every statement.
        #[arg(long, default_value_t = 1)]
        coordinators: usize,
    },
    /// Stop every part of the local cluster.
    Down {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Tell what runs where.
    Status {
        #[arg(long)]
        dir: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PGSHARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => {
            let cfg = pgshard::config::Config::load(&config)?;
            pgshard::frontend::server::run(cfg)
        }
        Command::Bench(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(pgshard::bench::run(args))
        }
        Command::Cluster { action } => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                match action {
                    ClusterAction::Up {
                        dir,
                        workers,
                        port,
                        listen_host,
                        fast,
                        async_commit,
                        standbys,
                        sync,
                        coordinators,
                    } => {
                        let opts = pgshard::cluster::ClusterOptions {
                            dir,
                            workers,
                            port,
                            listen_host,
                            pgshard_exe: std::env::current_exe()?,
                            fast,
                            async_commit,
                            standbys,
                            sync,
                            coordinators,
                        };
                        pgshard::cluster::cluster_up(&opts).await?;
                        Ok(())
                    }
                    ClusterAction::Down { dir } => pgshard::cluster::cluster_down(&dir).await,
                    ClusterAction::Status { dir } => {
                        println!("{}", pgshard::cluster::cluster_status(&dir).await?);
                        Ok(())
                    }
                }
            })
        }
    }
}
