//! One client session: the simple and extended query protocols, the backend
//! connections the session holds (for one Sync batch in autocommit, for the whole
//! block inside BEGIN ... COMMIT), and the execution of every kind of plan.
//!
//! Ordering: responses must reach the client in the order of its messages. Messages
//! routed to one backend are pipelined; a queue of expected responses (`pending`)
//! says which backend answers next or which locally made reply comes next. Before a
//! batch moves to another backend the previous one is drained, so that an error on
//! one node stops the rest of the batch exactly as PostgreSQL would.

use super::combine;
#[path = "explain.rs"]
mod explain;
#[path = "multishard.rs"]
mod multishard;
#[path = "tasks.rs"]
mod tasks;
use super::shared::{
    CancelTargets, FunctionKind, PipelinedBatch, RunningBackends, Shared, FUNCTION_KINDS_TTL,
};
use super::statements::{backend_name, is_backend_name, MAX_PREPARED_PER_CONNECTION};
use crate::backend::{BackendConn, Credentials, NodeAddr, NodePool, PooledConn};
use crate::catalog::{Catalog, ShardId, ShardInterval};
use crate::commands::{self, CitusSettings};
use crate::error::{sqlstate, PgError, PgResult};
use crate::frontend::client_stream::ClientWrite;
use crate::frontend::messages::{self as msg, BindMsg, FieldDesc, Frame};
use crate::frontend::server::ClientReader;
use crate::planner::fastpath::{self, FastPlan, ShapeCache};
use crate::planner::multishard::Bound;
use crate::planner::{
    self, AggKind, MultiShardPlan, MultiShardShape, Plan, RouterPlan, SessionCommand, TxnCommand,
    UtilityArg, ValueSource,
};
use crate::sql::parse::{self, Statement};
use crate::sql::quote::{quote_ident, quote_literal};
use crate::transaction::deadlock;
use crate::transaction::distributed::{
    self, CommitServices, DistributedTransaction, Held, TxnState,
};
use bound::*;
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use tasks::{Describe, NodeTasks};
use tokio::io::AsyncWriteExt;

/// The node connections a session holds, the answers owed to the client.
mod backends;
/// A Bind's parameters, the distribution value routed from them.
mod bound;
/// Multi-row INSERTs and co-located INSERT ... SELECT across shards.
mod bulk;
/// A session's `citus.*` settings: starting values, SET, ALTER SYSTEM / ROLE /
/// DATABASE, typed copies.
pub mod citus_settings;
/// A client's query text into statements: string settings, PostgreSQL's parse errors.
mod client_text;
/// COPY into and out of distributed tables.
mod copy;
/// COPY rows given the values of their columns filled from a sequence.
mod copy_sequences;
/// CREATE TABLE AS / SELECT INTO reading distributed tables.
mod create_as;
/// DECLARE CURSOR over distributed tables.
mod cursor;
/// DDL on distributed tables inside a transaction block.
mod ddl_in_block;
/// The extended query protocol.
mod extended;
/// Calls of distributed functions: their statements run by pgshard.
mod function_call;
/// Who the session is on the nodes: its role's connections, its own coordinator-node
/// connection.
pub mod identity;
/// No session state crosses between clients through shared node connections.
mod isolation;
/// TRUNCATE / VACUUM / ANALYZE of distributed tables.
mod maintenance;
/// Statements with modifying CTEs: snapshots, CTEs, then the statement, atomically.
mod modifying_cte;
/// Routed reads through the thread's pipelined connection to a node.
mod pipelined;
/// Writes on reference tables: every placement, node by node.
mod reference_write;
/// Broadcast and repartition joins: table rows moved to the workers, then the join.
mod repartition;
/// Citus's `run_command_on_*`: a command on every node or shard, as the client's role.
pub mod run_command;
/// Each plan kind to the code that runs it.
mod run_plan;
/// Semijoin keys: a reduced move's, a staying reference's filter.
mod semijoin_keys;
/// Session commands: transaction control, settings, DISCARD, DEALLOCATE.
mod session_commands;
/// SET / SET LOCAL / SET TRANSACTION and `citus.*` values across the nodes of a session.
mod settings;
/// `citus_shards.shard_size`: the sizes read from the workers into the statement.
mod shard_sizes;
/// UPDATE / DELETE over intermediate results shipped to the workers.
mod shipped_results;
/// The simple query protocol.
mod simple;
/// SQL-level PREPARE / EXECUTE of statements on distributed tables.
mod sql_prepare;
/// Recursively planned statements: subplans into intermediate results, then the rest.
mod stats;
mod subplans;
/// A client's own PREPARE TRANSACTION / COMMIT PREPARED / ROLLBACK PREPARED.
mod two_phase;
/// INSERT ... SELECT into distributed tables through the coordinator node.
mod via_coordinator;
mod via_coordinator_rows;
// Stable functions evaluated once per statement on the coordinator node.
mod evaluate;
use settings::{begin_sequence, settings_replay_sql, CitusLocal, Savepoint, SettingsSnapshot};
/// The implicit transaction of a string of local statements with transaction control.
mod implicit;
mod names;
/// Client prepared statements on the client's own coordinator-node connection; result
/// shape checks of the others.
mod prepared;
/// statement_timeout while the client pauses inside an extended-protocol batch.
mod timeout;
/// Views over distributed tables: which names may be such views, their definitions.
mod views;
/// Flush results to the client once this much is buffered.
const CLIENT_FLUSH_AT: usize = 64 * 1024;

/// Parameter and result description of a prepared statement.
#[derive(Debug, Clone)]
struct StatementMeta {
    param_types: Vec<u32>,
    /// None = NoData.
    fields: Option<Vec<FieldDesc>>,
}

/// A client's prepared statement.
struct Prepared {
    sql: String,
    /// The client's text, and its shape for `citus_stat_statements`, computed once.
    text: Arc<crate::stats::statements::PreparedText>,
    stmt: Statement,
    plan: Plan,
    catalog_version: i64,
    /// The session's names epoch it was planned with (`names.rs`): planned again
    /// when the names may stand for other tables, as PostgreSQL analyses a prepared
    /// statement again after `SET search_path`.
    names_epoch: u64,
    meta: StatementMeta,
    /// The client's name for it on the client's own coordinator-node connection, where
    /// a named statement running there is prepared as PostgreSQL would (`prepared.rs`).
    home_name: Option<String>,
    /// Shard -> (backend statement id, shard SQL), built on first use.
    shard_sql: Mutex<HashMap<ShardId, (u64, Arc<str>)>>,
    /// It has functions evaluated once per execution on the coordinator node
    /// (`session/evaluate.rs`): each Bind plans it again with their values.
    evaluates: bool,
    /// One Bind's statement with those values: its shard SQL is not kept.
    evaluated: bool,
}

#[derive(Clone)]
enum PortalTarget {
    /// Bound on a backend: Describe/Execute/Close go there.
    Backend(NodeAddr),
    /// Executed by pgshard itself.
    Virtual,
}

/// The statement a Bind names on a node connection.
enum BackendStatement<'a> {
    /// The client's own statement on its coordinator-node connection, by its name.
    Home(&'a str),
    /// The client's text as the unnamed statement, parsed with the Bind.
    Unnamed(&'a str),
    /// pgshard's statement shared by every session (id, text), prepared on first use.
    Shared(u64, &'a str),
}

struct Portal {
    stmt: Arc<Prepared>,
    bind: BindMsg,
    target: PortalTarget,
}

/// What a backend (or pgshard itself) answers next.
enum Expect {
    Local(Bytes),
    /// A ParseComplete for a Parse pgshard added: swallowed.
    ParseSilent(NodeAddr),
    /// One reply forwarded (BindComplete, CloseComplete, RowDescription/NoData).
    One(NodeAddr),
    /// Rows until CommandComplete / EmptyQuery / PortalSuspended.
    Execute(NodeAddr),
    /// A simple query pgshard sent for itself (BEGIN, settings): read to ReadyForQuery.
    SimpleSilent(NodeAddr),
    /// One reply to an extended-protocol message pgshard added (the BindComplete or
    /// CommandComplete of its BEGIN): swallowed.
    OneSilent(NodeAddr),
}

pub struct Session {
    shared: Arc<Shared>,
    /// Who the client is on every node: its node connections log in as its role.
    creds: Arc<Credentials>,
    /// The client's own coordinator-node connection, for its whole life
    /// (`identity.rs`): its local statements, temporary tables, locks, LISTENs.
    home: Arc<NodePool>,
    /// The values of the followed reported settings as the client's own backend last
    /// reported them (`identity::absorb_home_reports`).
    reported: HashMap<String, String>,
    /// ParameterStatus reports no answer carried yet: sent before ReadyForQuery, as
    /// PostgreSQL sends its own.
    pending_reports: Vec<(String, String)>,
    /// Notifications of the client's own backend that pgshard read on its own
    /// (`BackendConn::unforwarded_notifications`): sent before ReadyForQuery.
    pending_notifications: Vec<Frame>,
    /// Times `out` was written to the client (a statement run again after a moved
    /// shard must have sent nothing yet: `simple.rs`).
    client_flushes: u64,
    client: ClientWrite,
    pub reader: ClientReader,
    pub out: BytesMut,
    /// SET statements replayed on every backend connection this session uses.
    settings: Vec<String>,
    /// How many of `settings` come from the startup packet (its parameters and
    /// `options`): what RESET ALL keeps, as PostgreSQL resets to them.
    startup_settings: usize,
    /// The `citus.*` values the session started with (`SETTINGS` order): what RESET
    /// returns the typed copies to.
    citus_start: Vec<String>,
    /// The block ran an ALTER ... SET of a `citus.*` setting: sessions starting after
    /// its commit read the stored values again.
    citus_stored_in_block: bool,
    /// The variables the startup packet set (lower case), `options` included.
    startup_variables: Vec<String>,
    settings_fp: u64,
    citus: CitusSettings,
    commit_protocol: String,
    explain_all_tasks: bool,
    /// `citus.max_intermediate_result_size` in kB (-1: no limit): most data shards
    /// send to a combine step on the coordinator node.
    max_intermediate_kb: i64,
    /// `citus.enable_repartition_joins` (on by default: such joins are exact).
    enable_repartition_joins: bool,
    /// Active savepoints of the block, oldest first: replayed after BEGIN on a node
    /// that joins later, so that ROLLBACK TO works on every node.
    savepoints: Vec<Savepoint>,
    /// The block's `SET LOCAL`s (variable, statement), oldest first: run on every node
    /// of the block, also on one that joins it later.
    local_settings: Vec<(String, String)>,
    /// Local statements calling `set_config` executed in the extended protocol since
    /// the last Sync: followed on the other node connections once the batch is done.
    set_config_to_follow: Vec<Statement>,
    /// The session's settings as the block found them, taken at the block's first
    /// change of them: what a rollback of the block restores.
    block_settings: Option<Box<SettingsSnapshot>>,
    /// Between the first statement of a multi-statement simple query or an extended
    /// batch and its end: PostgreSQL's implicit transaction.
    implicit_txn: bool,
    /// The session's settings as the implicit transaction found them, taken at its
    /// first SET: what its failure restores.
    implicit_settings: Option<Box<SettingsSnapshot>>,
    /// Set by `SET LOCAL citus.*` in the block (see `settings::CitusLocal`).
    citus_local: Option<CitusLocal>,
    statements: HashMap<String, Arc<Prepared>>,
    portals: HashMap<String, Portal>,
    skipping: bool,
    pending: VecDeque<Expect>,
    batch_error: bool,
    running: RunningBackends,
    /// The session's batch on a pipelined connection, for CancelRequest.
    pipelined: PipelinedBatch,
    shapes: ShapeCache,
    /// What unqualified table names stand for in this session (`names.rs`).
    names: names::NameCache,
    /// Temporary tables made for cursors over distributed tables (`cursor.rs`), for
    /// their names.
    cursor_tables: u64,
    /// Once a statement may have left session state on a node connection: the
    /// session's own pools per node, which no other session takes from
    /// (`isolation.rs`).
    own_pools: Mutex<Option<HashMap<NodeAddr, Arc<NodePool>>>>,
    /// Where in `out` the FATAL sent to the client ends (`write_client_error`):
    /// nothing after it is sent, and the client's connection is closed.
    client_ends_at: Option<usize>,
    /// PostgreSQL's statement timer between the messages of a batch (`timeout.rs`).
    batch_clock: timeout::BatchClock,
    /// When the client's current round trip (a query, or extended-protocol messages up
    /// to Sync) began: the latency metric.
    round_trip_started: Option<std::time::Instant>,
    /// The session's distributed transaction: the node connections it holds and
    /// its block (`transaction::distributed`).
    tx: DistributedTransaction,
    /// What the session is doing, as `citus_stat_activity` shows it (`stats.rs`).
    activity: crate::stats::activity::SessionActivity,
    /// `citus.stat_statements_track = all`: its distributed statements are counted.
    stat_track: bool,
    /// Who the session is for `citus_stat_statements`.
    stat_runner: crate::stats::statements::Runner,
}

/// A node connection's settings fingerprint when they are not known (a SET ran on
/// it): never equal to a session's (`fingerprint` gives 0 or an odd number), so the
/// connection is brought to the session's settings before its next use.
const STALE_SETTINGS: u64 = 2;

fn fingerprint(settings: &[String]) -> u64 {
    if settings.is_empty() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    settings.hash(&mut h);
    h.finish() | 1
}

impl Session {
    pub fn new(
        shared: Arc<Shared>,
        identity: identity::ClientIdentity,
        client: ClientWrite,
        reader: ClientReader,
        startup: &[(String, String)],
        cancel: CancelTargets,
    ) -> Session {
        let mut settings = Vec::new();
        for (k, v) in startup {
            if matches!(k.as_str(), "user" | "database" | "options" | "replication") {
                continue;
            }
            settings.push(format!("SET {} TO {}", quote_ident(k), quote_literal(v)));
        }
        // The node connections' own application_name is pgshard's: a client that gave
        // none has an empty one, as on PostgreSQL.
        if !startup.iter().any(|(k, _)| k == "application_name") {
            settings.push("SET application_name TO ''".to_string());
        }
        let typed = citus_settings::Typed::from_values(&identity.citus_start);
        let stat_runner = stats::runner(&identity.creds, &identity.citus_start);
        Session {
            activity: cancel.activity,
            stat_track: typed.stat_statements_track,
            stat_runner,
            shared,
            creds: identity.creds,
            home: identity.home,
            pending_reports: Vec::new(),
            reported: identity.reported,
            client,
            reader,
            out: BytesMut::with_capacity(16 * 1024),
            settings_fp: fingerprint(&settings),
            startup_settings: settings.len(),
            citus_start: identity.citus_start,
            citus_stored_in_block: false,
            startup_variables: startup
                .iter()
                .map(|(k, _)| k.to_ascii_lowercase())
                .filter(|k| !matches!(k.as_str(), "user" | "database" | "options" | "replication"))
                .chain(std::iter::once("application_name".to_string()))
                .collect(),
            settings,
            citus: typed.citus,
            commit_protocol: typed.commit_protocol,
            explain_all_tasks: typed.explain_all_tasks,
            max_intermediate_kb: typed.max_intermediate_kb,
            enable_repartition_joins: typed.enable_repartition_joins,
            savepoints: Vec::new(),
            local_settings: Vec::new(),
            tx: DistributedTransaction::default(),
            set_config_to_follow: Vec::new(),
            block_settings: None,
            implicit_txn: false,
            implicit_settings: None,
            citus_local: None,
            statements: HashMap::new(),
            portals: HashMap::new(),
            skipping: false,
            pending: VecDeque::new(),
            batch_error: false,
            running: cancel.backends,
            pipelined: cancel.pipelined,
            cursor_tables: 0,
            batch_clock: timeout::BatchClock::default(),
            round_trip_started: None,
            shapes: ShapeCache::default(),
            names: names::NameCache::default(),
            own_pools: Mutex::new(None),
            client_ends_at: None,
            pending_notifications: Vec::new(),
            client_flushes: 0,
        }
    }

    pub async fn flush_client(&mut self) -> PgResult<()> {
        if let Some(end) = self.client_ends_at {
            // Nothing after the FATAL (a lost connection's error, ReadyForQuery).
            self.out.truncate(end);
            self.client_ends_at = Some(0);
        }
        if self.out.is_empty() {
            return Ok(());
        }
        self.client_flushes += 1;
        // flush: TLS may hold encrypted bytes back otherwise (no-op on plain sockets).
        let r = match self.client.write_all(&self.out).await {
            Ok(()) => self.client.flush().await,
            Err(e) => Err(e),
        };
        self.out.clear();
        r.map_err(|e| {
            PgError::new(
                sqlstate::CONNECTION_FAILURE,
                format!("client connection lost: {e}"),
            )
        })
    }

    fn status_byte(&self) -> u8 {
        match self.tx.state {
            TxnState::Idle => b'I',
            TxnState::InBlock => b'T',
            TxnState::Failed => b'E',
        }
    }

    /// Handles one client message. Returns false on Terminate.
    pub async fn handle(&mut self, frame: Frame) -> PgResult<bool> {
        if self.round_trip_started.is_none() && matches!(frame.tag, b'Q' | b'P' | b'B') {
            self.round_trip_started = Some(std::time::Instant::now());
        }
        match frame.tag {
            b'P' | b'B' | b'D' | b'E' | b'C'
                if !self.skipping && self.timed_out_between_messages() =>
            {
                self.stop_batch_clock();
                self.on_extended_result(Err(timeout::statement_timeout_error()))
                    .await;
            }
            b'Q' => {
                self.stop_batch_clock();
                match msg::decode_query(&frame.body) {
                    Ok(sql) => self.simple_query_retrying(&sql).await?,
                    Err(e) => self.write_client_error(&e),
                }
                self.write_ready_for_query();
                self.round_trip_ended();
            }
            b'B' if !self.skipping => {
                // A routed read arriving whole may go through a pipelined connection.
                let r = match msg::decode_bind(&frame.body) {
                    Ok(bind) => match self.pipelined_read(bind).await? {
                        // The whole batch, Sync included, went through.
                        None => {
                            self.stop_batch_clock();
                            crate::metrics::statement(crate::metrics::StatementKind::Router);
                            self.round_trip_ended();
                            return Ok(true);
                        }
                        Some(bind) => self.bind_message(bind).await,
                    },
                    Err(e) => Err(e),
                };
                self.on_extended_result(r).await;
            }
            b'P' | b'B' | b'D' | b'E' | b'C' => {
                // After an error, everything up to Sync is skipped.
                if !self.skipping {
                    let r = self.extended_message(&frame).await;
                    self.on_extended_result(r).await;
                }
                if frame.tag == b'E' {
                    // Its statement ran (or was sent off): the timer stops.
                    self.stop_batch_clock();
                }
            }
            b'S' => {
                self.stop_batch_clock();
                self.sync_message().await;
                self.write_ready_for_query();
                self.round_trip_ended();
            }
            b'H' => {
                if let Err(e) = self.drain_all().await {
                    self.on_extended_result(Err(e)).await;
                }
                self.flush_client().await?;
            }
            b'X' => return Ok(false),
            b'd' | b'c' | b'f' => {} // stray COPY data outside COPY: ignored as PostgreSQL does
            other => {
                let e = PgError::new(
                    sqlstate::PROTOCOL_VIOLATION,
                    format!("invalid frontend message type {}", other),
                );
                self.write_client_error(&e);
                self.flush_client().await?;
                return Err(PgError::fatal(sqlstate::PROTOCOL_VIOLATION, e.message));
            }
        }
        if self.out.len() >= CLIENT_FLUSH_AT || matches!(frame.tag, b'Q' | b'S') {
            self.flush_client().await?;
        }
        Ok(true)
    }

    /// The client's round trip ended (its ReadyForQuery is written).
    fn round_trip_ended(&mut self) {
        if let Some(started) = self.round_trip_started.take() {
            crate::metrics::round_trip(started);
        }
    }

    async fn extended_message(&mut self, frame: &Frame) -> PgResult<()> {
        // Until Sync, PostgreSQL runs the batch as one implicit transaction.
        self.implicit_txn = true;
        match frame.tag {
            b'P' => self.parse_message(msg::decode_parse(&frame.body)?).await,
            b'B' => self.bind_message(msg::decode_bind(&frame.body)?).await,
            b'D' => {
                let (kind, name) = msg::decode_target(&frame.body, "Describe")?;
                self.describe_message(kind, &name).await
            }
            b'E' => {
                let (portal, max_rows) = msg::decode_execute(&frame.body)?;
                self.execute_message(&portal, max_rows).await
            }
            _ => {
                let (kind, name) = msg::decode_target(&frame.body, "Close")?;
                self.close_message(kind, &name).await
            }
        }
    }

    /// An error in the extended protocol: reported in order, then everything up to Sync is skipped.
    async fn on_extended_result(&mut self, r: PgResult<()>) {
        if let Err(e) = r {
            let _ = self.drain_all().await;
            if !self.batch_error {
                self.write_client_error(&e);
            }
            self.fail();
            self.skipping = true;
        }
    }

    fn fail(&mut self) {
        self.batch_error = true;
        if self.tx.state == TxnState::InBlock {
            self.tx.state = TxnState::Failed;
        }
    }

    // ---- backend connections -------------------------------------------

    /// Plans `stmt`, its unqualified table names resolved with the session's path.
    async fn plan_statement(&mut self, stmt: &Statement, catalog: &Catalog) -> PgResult<Plan> {
        let names = self.names_for(stmt, catalog).await?;
        let plan = planner::plan(stmt, catalog, &names, &commands::is_utility_function)?;
        let plan = self.sql_execute_plan(stmt, plan);
        Ok(client_text::only_as_written(stmt, plan))
    }

    /// The settings of the startup packet's `options` (`PGOPTIONS`): `citus.*` ones are
    /// the session's own; the others join the settings replayed on every node connection,
    /// after one check on the coordinator node so that a bad name or value fails the
    /// connection, as PostgreSQL would. `set_config` takes the value as `options` gives
    /// it (a list such as `search_path=a,b` stays a list).
    ///
    /// Returns the values the client must be told of in ParameterStatus: those
    /// PostgreSQL reports, as the coordinator node shows them (`-c datestyle=iso,dmy`
    /// is reported as `ISO, DMY`).
    pub async fn apply_startup_options(
        &mut self,
        options: &[(String, String)],
    ) -> PgResult<Vec<(String, String)>> {
        let mut from_options = Vec::new();
        for (name, value) in options {
            if crate::citus_settings::is_citus_name(name) {
                // Checked and given to the client's own backend by `open_home`.
                continue;
            } else {
                self.startup_variables.push(name.to_ascii_lowercase());
                from_options.push(format!(
                    "SELECT pg_catalog.set_config({}, {}, false)",
                    quote_literal(name),
                    quote_literal(value)
                ));
            }
        }
        let mut reported = Vec::new();
        // The client's own backend took them at its login, as pgshard's role for a
        // trusted client: checked once more as the client's role (the replay on a
        // private connection), so that it sets only what the client may.
        let trusted = matches!(
            self.creds.secret,
            crate::backend::conn::Secret::TrustedAs { .. }
        );
        if !from_options.is_empty() || trusted {
            // Before the startup packet's own parameters: PostgreSQL applies `options`
            // first, so a parameter given both ways takes the packet's value.
            self.startup_settings += from_options.len();
            self.settings.splice(0..0, from_options);
            self.settings_fp = fingerprint(&self.settings);
            let coord = self.shared.coordinator.clone();
            let mut conn = self.private_conn(&coord).await?;
            let mut names: Vec<&str> = options
                .iter()
                .filter_map(|(name, _)| reported_parameter(name))
                .collect();
            names.sort_unstable();
            names.dedup();
            if !names.is_empty() {
                let columns: Vec<String> = names
                    .iter()
                    .map(|n| format!("pg_catalog.current_setting({})", quote_literal(n)))
                    .collect();
                let sql = format!("SELECT {}", columns.join(", "));
                if let Some(row) = conn.simple_rows(&sql).await?.into_iter().next() {
                    reported = names
                        .iter()
                        .zip(row)
                        .filter_map(|(n, v)| Some((n.to_string(), v?)))
                        .collect();
                }
            }
        }
        Ok(reported)
    }

    // ---- pgshard's own plans ---------------------------------------------

    /// Ends the block on every node it used: COMMIT where one node wrote, two-phase
    /// commit where several did (unless the session chose 1PC), ROLLBACK otherwise.
    async fn finish_transaction(&mut self, commit: bool) -> PgResult<()> {
        let catalog_changed = std::mem::take(&mut self.tx.catalog_changed);
        let roles = std::mem::take(&mut self.tx.roles_to_sync);
        let r = self.end_transaction(commit).await;
        if catalog_changed && commit && r.is_ok() {
            self.announce_catalog_change().await;
        }
        if commit && r.is_ok() {
            // Role statements of the block: the workers' copies made exact (password
            // verifiers), as outside blocks (`ddl_in_block::role_in_block`).
            for role in roles {
                if let Err(e) = commands::roles::sync_role(&self.shared.catalog, &role).await {
                    tracing::warn!(
                        "copying role \"{role}\" to the workers after its block failed: {e}"
                    );
                }
            }
        }
        r
    }

    async fn end_transaction(&mut self, commit: bool) -> PgResult<()> {
        self.tx.end_messages.clear();
        self.drain_all().await.ok();
        let mut held = std::mem::take(&mut self.tx.held);
        self.tx.state = TxnState::Idle;
        self.savepoints.clear();
        self.running.lock().unwrap().clear();
        let services = CommitServices {
            catalog: &self.shared.catalog,
            decisions: &self.shared.decisions,
            pools: &self.shared.pools,
            coordinator: &self.shared.coordinator,
            instance_id: &self.shared.instance_id,
            txn_serial: self.tx.txn_serial,
            delete_records: self.shared.cfg.recovery_interval_secs == 0,
        };
        let result = distributed::end(
            &mut held,
            commit,
            self.commit_protocol == "1pc",
            &services,
            &mut self.tx.end_messages,
        )
        .await;
        self.end_block_settings(commit && result.is_ok(), &mut held);
        // The block's end changes the client's reported settings back (SET LOCAL,
        // set_config with is_local): the other nodes follow its own backend.
        for h in held.iter_mut() {
            if h.conn.addr == self.shared.coordinator {
                self.absorb_home_reports(&mut h.conn);
            }
        }
        drop(held);
        result
    }
    /// Called when the client goes away: held connections inside a transaction are
    /// closed (PostgreSQL rolls them back), never returned to a pool mid-transaction.
    pub fn close(&mut self) {
        for h in self.tx.held.iter_mut() {
            if h.conn.txn_status != b'I' || h.in_batch || h.dirty {
                h.conn.broken = true;
            }
        }
        self.tx.held.clear();
        self.running.lock().unwrap().clear();
    }
}

/// Parse and Describe of `sql` as the unnamed statement on `conn` (the client's own
/// connection: nothing of pgshard's stays prepared there), ended with Sync.
/// Parses `sql` as statement `name` on `conn` and describes it: one Sync batch, or
/// with `in_batch` (the connection is inside the client's Sync batch, whose implicit
/// transaction a Sync would end) up to a Flush; after an error there the connection
/// skips to the batch's Sync.
async fn describe_on(
    conn: &mut BackendConn,
    name: &str,
    sql: &str,
    types: &[u32],
    in_batch: bool,
) -> PgResult<StatementMeta> {
    msg::write_parse(&mut conn.wbuf, name, sql, types);
    msg::write_describe(&mut conn.wbuf, b'S', name);
    if in_batch {
        msg::write_flush(&mut conn.wbuf);
    } else {
        msg::write_sync(&mut conn.wbuf);
    }
    conn.flush().await?;
    let mut meta = StatementMeta {
        param_types: Vec::new(),
        fields: None,
    };
    let mut err = None;
    loop {
        let f = conn.read().await?;
        let tag = f.tag;
        match tag {
            b't' => meta.param_types = msg::decode_parameter_description(&f.body)?,
            b'E' if conn.broken => return Err(PgError::from_server_fields(f.body)),
            b'E' => err = Some(PgError::from_server_fields(f.body)),
            b'T' => meta.fields = Some(msg::decode_row_description(&f.body)?),
            b'A' => conn.keep_notification(f),
            b'Z' => break,
            _ => {}
        }
        if in_batch && (matches!(tag, b'T' | b'n') || err.is_some()) {
            break;
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(meta),
    }
}

/// The name PostgreSQL reports a setting under in ParameterStatus, for the settings a
/// client may change that it reports (GUC_REPORT); None for every other setting.
fn reported_parameter(name: &str) -> Option<&'static str> {
    const REPORTED: [&str; 7] = [
        "application_name",
        "client_encoding",
        "DateStyle",
        "default_transaction_read_only",
        "IntervalStyle",
        "standard_conforming_strings",
        "TimeZone",
    ];
    REPORTED.into_iter().find(|r| r.eq_ignore_ascii_case(name))
}

/// A node's error, with the node named (a lost connection already names it).
fn with_node(mut e: PgError, addr: &NodeAddr) -> PgError {
    if e.code != sqlstate::CONNECTION_FAILURE {
        e.raw = None;
        e.message = format!("{} (node {addr})", e.message);
    }
    e
}

/// A worker's (or pgshard's private connection's) FATAL or PANIC: that connection
/// ends (terminated, shut down, crashed), the client's does not, so the client gets
/// it as an ERROR naming the node. Every other error of a node passes unchanged,
/// whatever its SQLSTATE (an ERROR 08001 of CREATE SUBSCRIPTION is the statement's).
fn going_away(mut e: PgError, addr: &NodeAddr) -> PgError {
    if e.is_fatal() {
        e.severity = "ERROR";
        e.raw = None;
        e.message = format!("{} (node {})", e.message, addr);
    }
    e
}

fn aborted_error() -> PgError {
    PgError::new(
        sqlstate::IN_FAILED_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

fn result_format(formats: &[i16], i: usize) -> i16 {
    match formats.len() {
        0 => 0,
        1 => formats[0],
        _ => formats.get(i).copied().unwrap_or(0),
    }
}

/// Whether a statement for the coordinator node only reads (SELECT without locking
/// or data-modifying parts); anything else counts as a write.
fn is_read_only_local(stmt: &Statement) -> bool {
    use pg_query::protobuf::node::Node as N;
    match &stmt.node {
        Some(N::SelectStmt(s)) => {
            // Only a top-level CTE may modify (PostgreSQL refuses them anywhere else).
            let ctes_read_only = s.with_clause.as_ref().map_or(true, |w| {
                w.ctes.iter().all(|c| match &c.node {
                    Some(N::CommonTableExpr(c)) => matches!(
                        c.ctequery.as_deref().and_then(|q| q.node.as_ref()),
                        Some(N::SelectStmt(_))
                    ),
                    _ => false,
                })
            });
            s.locking_clause.is_empty() && s.into_clause.is_none() && ctes_read_only
        }
        Some(N::VariableShowStmt(_)) | Some(N::VariableSetStmt(_)) | Some(N::ExplainStmt(_)) => {
            true
        }
        None => true,
        _ => false,
    }
}

fn placement_addr(catalog: &Catalog, shard: &ShardInterval) -> PgResult<NodeAddr> {
    let group = *shard
        .placement_groups
        .first()
        .ok_or_else(|| PgError::internal(format!("shard {} has no placement", shard.shard_id)))?;
    let node = catalog.node_for_group(group).ok_or_else(|| {
        PgError::internal(format!(
            "shard {} is placed on group {group}, which has no active node",
            shard.shard_id
        ))
    })?;
    Ok(NodeAddr {
        host: node.host.clone(),
        port: node.port,
    })
}

/// Result messages pgshard makes itself, collected in order.
#[derive(Default)]
struct ResultSink {
    frames: Vec<Frame>,
    /// Keeps every frame for pgshard's own use: never spilled to the client.
    capture: bool,
}

impl ResultSink {
    fn push_frame(&mut self, tag: u8, body: Bytes) {
        self.frames.push(Frame { tag, body });
    }

    fn push_bytes(&mut self, mut b: BytesMut) {
        while let Ok(Some(f)) = msg::decode_frame(&mut b, usize::MAX >> 1) {
            self.frames.push(f);
        }
    }

    fn row_description(&mut self, fields: &[FieldDesc]) {
        let mut b = BytesMut::new();
        msg::write_row_description(&mut b, fields);
        self.push_bytes(b);
    }

    fn data_row(&mut self, values: &[Option<&[u8]>]) {
        let mut b = BytesMut::new();
        msg::write_data_row(&mut b, values);
        self.push_bytes(b);
    }

    fn complete(&mut self, tag: &str) {
        let mut b = BytesMut::new();
        msg::write_command_complete(&mut b, tag);
        self.push_bytes(b);
    }

    fn notice_warning(&mut self, text: &str) {
        let w = PgError {
            severity: "WARNING",
            ..PgError::new("25001", text)
        };
        let mut b = BytesMut::new();
        msg::write_report(&mut b, b'N', &w);
        self.push_bytes(b);
    }

    /// A sink whose frames pgshard reads itself.
    fn capturing() -> ResultSink {
        ResultSink {
            frames: Vec::new(),
            capture: true,
        }
    }

    /// Whether enough is collected to pass it on to the client now.
    fn should_spill(&self) -> bool {
        !self.capture && self.frames.len() > 512
    }

    fn spill(&mut self, frames: Vec<Frame>, out: &mut BytesMut) {
        for f in frames {
            msg::write_raw(out, f.tag, &f.body);
        }
    }
}

/// `COPY ... FROM STDIN`: after its Execute the client sends the data.
fn is_copy_from_stdin(stmt: &Statement) -> bool {
    use pg_query::protobuf::node::Node as N;
    matches!(&stmt.node, Some(N::CopyStmt(c)) if c.is_from && c.filename.is_empty())
}
