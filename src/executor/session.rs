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
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use tasks::{Describe, NodeTasks};
use tokio::io::AsyncWriteExt;

/// COPY into/out of distributed tables and multi-row INSERTs across shards.
mod bulk;
/// A client's query text into statements: string settings, PostgreSQL's parse errors.
mod client_text;
/// CREATE TABLE AS / SELECT INTO reading distributed tables.
mod create_as;
/// DECLARE CURSOR over distributed tables.
mod cursor;
/// DDL on distributed tables inside a transaction block.
mod ddl_in_block;
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
/// Recursively planned statements: subplans into intermediate results, then the rest.
mod repartition;
/// Session commands: transaction control, settings, DISCARD, DEALLOCATE.
mod session_commands;
/// SET / SET LOCAL / SET TRANSACTION and `citus.*` values across the nodes of a session.
mod settings;
/// UPDATE / DELETE over intermediate results shipped to the workers.
mod shipped_results;
/// SQL-level PREPARE / EXECUTE of statements on distributed tables.
mod sql_prepare;
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
/// Citus's default `citus.max_intermediate_result_size`: 1 GB.
const DEFAULT_MAX_INTERMEDIATE_KB: i64 = 1024 * 1024;

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
    client: ClientWrite,
    pub reader: ClientReader,
    pub out: BytesMut,
    /// SET statements replayed on every backend connection this session uses.
    settings: Vec<String>,
    /// How many of `settings` come from the startup packet (its parameters and
    /// `options`): what RESET ALL keeps, as PostgreSQL resets to them.
    startup_settings: usize,
    /// `citus.*` settings given in the startup packet's `options`.
    startup_citus: Vec<(String, String)>,
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
    /// The session's distributed transaction: the node connections it holds and
    /// its block (`transaction::distributed`).
    tx: DistributedTransaction,
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
        let cfg = shared.cfg.clone();
        Session {
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
            startup_citus: Vec::new(),
            startup_variables: startup
                .iter()
                .map(|(k, _)| k.to_ascii_lowercase())
                .filter(|k| !matches!(k.as_str(), "user" | "database" | "options" | "replication"))
                .chain(std::iter::once("application_name".to_string()))
                .collect(),
            settings,
            citus: CitusSettings {
                shard_count: cfg.citus.shard_count,
                shard_replication_factor: cfg.citus.shard_replication_factor,
            },
            commit_protocol: cfg.citus.multi_shard_commit_protocol.clone(),
            explain_all_tasks: false,
            max_intermediate_kb: DEFAULT_MAX_INTERMEDIATE_KB,
            enable_repartition_joins: true,
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
            shapes: ShapeCache::default(),
            names: names::NameCache::default(),
            own_pools: Mutex::new(None),
            client_ends_at: None,
            pending_notifications: Vec::new(),
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
                    Ok(sql) => self.simple_query(&sql).await?,
                    Err(e) => msg::write_error(&mut self.out, &e),
                }
                self.write_ready_for_query();
            }
            b'B' if !self.skipping => {
                // A routed read arriving whole may go through a pipelined connection.
                let r = match msg::decode_bind(&frame.body) {
                    Ok(bind) => match self.pipelined_read(bind).await? {
                        // The whole batch, Sync included, went through.
                        None => {
                            self.stop_batch_clock();
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

    fn held_index(&self, addr: &NodeAddr) -> Option<usize> {
        self.tx.held.iter().position(|h| h.conn.addr == *addr)
    }

    /// The connection to `addr` for this batch / block, joining it if needed: a new
    /// connection gets the session's settings and, inside a block, BEGIN.
    async fn join(&mut self, addr: &NodeAddr, write: bool) -> PgResult<usize> {
        self.join_with(addr, write, false).await
    }

    /// `join`; with `extended`, the caller goes on with extended-protocol messages
    /// that the batch's Sync ends, and BEGIN is queued as one of them (`write_begin`).
    async fn join_with(&mut self, addr: &NodeAddr, write: bool, extended: bool) -> PgResult<usize> {
        if self.tx.state == TxnState::Idle && write {
            // One Sync batch is one implicit transaction. Once it writes on a second
            // node it becomes a transaction block, committed (with 2PC) at Sync.
            let other_wrote = self
                .tx
                .held
                .iter()
                .any(|h| h.in_batch && h.wrote && h.conn.addr != *addr);
            if other_wrote {
                self.upgrade_to_implicit_block().await?;
            }
        }
        let idx = match self.held_index(addr) {
            Some(i) => i,
            None => {
                let conn = self.client_conn(addr).await?;
                self.running.lock().unwrap().push((
                    conn.addr.clone(),
                    conn.process_id,
                    conn.secret_key,
                ));
                self.tx.held.push(Held {
                    conn,
                    wrote: false,
                    in_batch: false,
                    dirty: false,
                    errored: false,
                });
                self.tx.held.len() - 1
            }
        };
        if !self.tx.held[idx].in_batch {
            // Before anything of this batch goes to the connection.
            let fp = self.settings_fp;
            let h = &mut self.tx.held[idx];
            h.in_batch = true;
            h.errored = false;
            if h.conn.settings_fingerprint != fp {
                let locals: &[(String, String)] = if h.conn.txn_status != b'I' {
                    &self.local_settings
                } else {
                    &[]
                };
                let sql = settings_replay_sql(&self.creds, &self.settings, locals);
                msg::write_query(&mut h.conn.wbuf, &sql);
                h.conn.settings_fingerprint = fp;
                h.dirty = true;
                self.pending.push_back(Expect::SimpleSilent(addr.clone()));
            }
            if h.conn.prepared.len() > MAX_PREPARED_PER_CONNECTION {
                // Only pgshard's own: the client's own coordinator connection holds
                // the client's prepared statements too.
                let sql = if *addr == self.shared.coordinator {
                    h.conn
                        .prepared
                        .iter()
                        .map(|id| format!("DEALLOCATE {}", quote_ident(&backend_name(*id))))
                        .collect::<Vec<_>>()
                        .join("; ")
                } else {
                    "DEALLOCATE ALL".to_string()
                };
                msg::write_query(&mut h.conn.wbuf, &sql);
                h.conn.prepared.clear();
                h.dirty = true;
                self.pending.push_back(Expect::SimpleSilent(addr.clone()));
            }
            if self.tx.state != TxnState::Idle && h.conn.txn_status == b'I' {
                if extended && self.savepoints.is_empty() && self.local_settings.is_empty() {
                    self.write_begin(idx);
                } else {
                    let begin =
                        begin_sequence(&self.tx.begin_text, &self.savepoints, &self.local_settings);
                    msg::write_query(&mut h.conn.wbuf, &begin);
                    h.dirty = true;
                    self.pending.push_back(Expect::SimpleSilent(addr.clone()));
                }
            }
        }
        // Drain whatever another backend still owes before this one gets work.
        let other_dirty = self
            .tx
            .held
            .iter()
            .enumerate()
            .any(|(i, h)| i != idx && h.dirty);
        if other_dirty || self.pending.iter().any(|e| matches!(e, Expect::One(a) | Expect::Execute(a) | Expect::ParseSilent(a) | Expect::OneSilent(a) if a != addr)) {
            self.drain_all().await?;
        }
        if write {
            self.tx.held[idx].wrote = true;
        }
        Ok(idx)
    }

    /// Queues the block's BEGIN on held connection `idx` as a prepared statement
    /// without Sync: it travels in the same write as the batch's first statement and
    /// is answered together with it. A simple-query BEGIN would be answered (and
    /// flushed, waking pgshard) on its own: one send and one wake-up more per node and
    /// transaction.
    fn write_begin(&mut self, idx: usize) {
        let id = match &self.tx.begin_statement {
            Some((text, id)) if *text == self.tx.begin_text => *id,
            _ => {
                let id = self.shared.statements.id(&self.tx.begin_text, &[], 0);
                self.tx.begin_statement = Some((self.tx.begin_text.clone(), id));
                id
            }
        };
        let h = &mut self.tx.held[idx];
        let name = backend_name(id);
        if !h.conn.prepared.contains(&id) {
            msg::write_parse(&mut h.conn.wbuf, &name, &self.tx.begin_text, &[]);
            h.conn.prepared.insert(id);
            self.pending
                .push_back(Expect::ParseSilent(h.conn.addr.clone()));
        }
        msg::write_bind(&mut h.conn.wbuf, "", &name, &[], &[], &[]);
        msg::write_execute(&mut h.conn.wbuf, "", 0);
        // In a block from here on, as far as anything sent after it is concerned (the
        // batch's ReadyForQuery tells the truth).
        h.conn.txn_status = b'T';
        h.dirty = true;
        let addr = &h.conn.addr;
        self.pending.push_back(Expect::OneSilent(addr.clone()));
        self.pending.push_back(Expect::OneSilent(addr.clone()));
    }

    /// Turns the current autocommit batch into a transaction block of pgshard's own
    /// (committed, with 2PC where several nodes wrote, when the batch or statement ends).
    async fn upgrade_to_implicit_block(&mut self) -> PgResult<()> {
        self.drain_all().await?;
        if self.batch_error {
            return Err(aborted_error());
        }
        for h in self.tx.held.iter_mut().filter(|h| h.in_batch) {
            // BEGIN inside the implicit transaction turns it into a block.
            msg::write_query(&mut h.conn.wbuf, "BEGIN");
            h.dirty = true;
            self.pending
                .push_back(Expect::SimpleSilent(h.conn.addr.clone()));
        }
        self.tx.state = TxnState::InBlock;
        self.tx.begin_text = "BEGIN".into();
        self.tx.implicit_block = true;
        self.tx.txn_serial = self
            .shared
            .next_transaction
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Sends what is buffered (with Flush) and reads every expected reply in order.
    async fn drain_all(&mut self) -> PgResult<()> {
        for h in self.tx.held.iter_mut() {
            if h.dirty {
                msg::write_flush(&mut h.conn.wbuf);
                h.dirty = false;
                h.conn.flush().await?;
            }
        }
        self.drain_pending().await
    }

    async fn drain_pending(&mut self) -> PgResult<()> {
        while let Some(item) = self.pending.pop_front() {
            let (addr, kind) = match item {
                Expect::Local(b) => {
                    if !self.batch_error {
                        self.out.extend_from_slice(&b);
                    }
                    continue;
                }
                Expect::ParseSilent(a) => (a, 0),
                Expect::One(a) => (a, 1),
                Expect::Execute(a) => (a, 2),
                Expect::SimpleSilent(a) => (a, 3),
                Expect::OneSilent(a) => (a, 4),
            };
            let Some(idx) = self.held_index(&addr) else {
                continue;
            };
            if self.tx.held[idx].errored {
                continue;
            }
            loop {
                let f = self.tx.held[idx].conn.read().await?;
                match f.tag {
                    b'E' => {
                        if kind == 3 {
                            // pgshard's own statement failed: the client sees it, the
                            // connection answers nothing more until the ReadyForQuery.
                            self.tx.held[idx].conn.drain_to_ready().await.ok();
                        } else {
                            self.tx.held[idx].errored = true;
                        }
                        if !self.batch_error {
                            self.forward_backend_error(idx, f.body);
                        }
                        self.fail();
                        self.skipping = true;
                        break;
                    }
                    // After an error the client hears nothing more until ReadyForQuery.
                    _ if self.batch_error && kind != 3 => {
                        if matches!(
                            (kind, f.tag),
                            (0, b'1') | (1, _) | (2, b'C' | b'I' | b's') | (4, b'2' | b'C')
                        ) {
                            break;
                        }
                    }
                    // pgshard's own Parse of a statement the client's Parse was
                    // answered for already: its notices (string-literal warnings)
                    // reached the client then.
                    b'N' if kind == 0 => {}
                    b'N' | b'A' | b'S' if kind != 3 => {
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        if self.out.len() >= CLIENT_FLUSH_AT {
                            self.flush_client().await?;
                        }
                    }
                    b'A' if kind == 3 => msg::write_raw(&mut self.out, f.tag, &f.body),
                    b'Z' if kind == 3 => break,
                    _ if kind == 3 => {}
                    b'1' if kind == 0 => break,
                    b'2' | b'C' if kind == 4 => break,
                    _ if kind == 1 => {
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        break;
                    }
                    b'C' | b'I' | b's' if kind == 2 => {
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        break;
                    }
                    b'G' if kind == 2 => {
                        // COPY FROM STDIN through the extended protocol.
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        self.flush_client().await?;
                        self.relay_copy_in(idx, true).await?;
                    }
                    _ if kind == 2 => {
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        if self.out.len() >= CLIENT_FLUSH_AT {
                            self.flush_client().await?;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Ends the batch: Sync to every connection it touched, and in autocommit the
    /// connections go back to their pools. True when something in the batch failed.
    async fn end_batch(&mut self) -> bool {
        let mut result = Ok(());
        for h in self.tx.held.iter_mut() {
            if h.in_batch {
                msg::write_sync(&mut h.conn.wbuf);
                h.dirty = false;
                if let Err(e) = h.conn.flush().await {
                    result = Err(e);
                }
            }
        }
        if result.is_ok() {
            result = self.drain_pending().await;
        }
        self.pending.clear();
        for i in 0..self.tx.held.len() {
            if self.tx.held[i].in_batch {
                self.tx.held[i].in_batch = false;
                if self.tx.held[i].conn.broken {
                    // Lost, or ended by a FATAL the client heard already.
                    continue;
                }
                if let Err(e) = self.tx.held[i].conn.drain_to_ready().await {
                    // A lost connection, or an error of the implicit transaction's
                    // commit at Sync (a deferred constraint): the client hears it,
                    // unless it heard an error of the batch already.
                    if result.is_ok()
                        && (e.code == sqlstate::CONNECTION_FAILURE || !self.batch_error)
                    {
                        result = Err(e);
                    }
                }
            }
        }
        let failed = result.is_err() || self.batch_error;
        if let Err(e) = result {
            if !self.batch_error {
                self.write_client_error(&e);
            }
            self.fail();
        }
        if let Some(i) = self.held_index(&self.shared.coordinator) {
            self.absorb_held_reports(i);
        }
        if self.tx.state == TxnState::Idle {
            self.release_all();
        }
        self.batch_error = false;
        failed
    }

    /// A backend's ErrorResponse as the client should see it: forwarded unchanged,
    /// except a cancellation by the distributed deadlock detector, which becomes 40P01.
    fn backend_error(&mut self, idx: usize, body: Bytes) -> PgError {
        let e = PgError::from_server_fields(body);
        if e.code == sqlstate::QUERY_CANCELED {
            let conn = &self.tx.held[idx].conn;
            if let Some(text) = deadlock::take_victim(&conn.addr, conn.process_id) {
                self.tx.deadlocked = true;
                return PgError::new(deadlock::DEADLOCK_DETECTED, text);
            }
        }
        let conn = &self.tx.held[idx].conn;
        if conn.addr == self.shared.coordinator {
            // The client's own backend: its words are the client's, FATAL included
            // (the session ends with it).
            return e;
        }
        going_away(e, &conn.addr)
    }

    fn forward_backend_error(&mut self, idx: usize, body: Bytes) {
        let e = self.backend_error(idx, body);
        self.write_client_error(&e);
    }

    /// Writes an error for the client. A FATAL ends the client's connection: nothing
    /// written after it reaches the client (`flush_client`), as nothing follows a
    /// FATAL of PostgreSQL's.
    pub(crate) fn write_client_error(&mut self, e: &PgError) {
        msg::write_error(&mut self.out, e);
        if e.is_fatal() && self.client_ends_at.is_none() {
            self.client_ends_at = Some(self.out.len());
        }
    }

    /// Whether the client was sent a FATAL: its connection is to be closed.
    pub fn client_ended(&self) -> bool {
        self.client_ends_at.is_some()
    }

    /// After a distributed deadlock the victim's transaction releases its locks at
    /// once, as PostgreSQL's victim does (the block stays failed until ROLLBACK):
    /// every node of the block rolls back now, unless savepoints may still be rolled
    /// back to.
    async fn release_deadlock_victim(&mut self) {
        if !std::mem::take(&mut self.tx.deadlocked) || !self.savepoints.is_empty() {
            return;
        }
        for h in self.tx.held.iter_mut() {
            if h.conn.txn_status != b'I' && !h.conn.broken {
                h.conn.simple("ROLLBACK").await.ok();
            }
        }
    }

    /// Runs one of pgshard's transaction statements (savepoints) on every node the
    /// block uses.
    async fn on_every_held(&mut self, sql: &str) -> PgResult<()> {
        self.on_every_held_but(usize::MAX, sql).await
    }

    /// Runs `sql` on every connection of the block except the held one at `skip`.
    async fn on_every_held_but(&mut self, skip: usize, sql: &str) -> PgResult<()> {
        self.drain_all().await?;
        for (i, h) in self.tx.held.iter_mut().enumerate() {
            if i != skip && h.conn.txn_status != b'I' {
                h.conn
                    .simple(sql)
                    .await
                    .map_err(|e| with_node(e, &h.conn.addr))?;
            }
        }
        Ok(())
    }

    fn release_all(&mut self) {
        // A transaction's end may change reported settings (SET LOCAL, set_config
        // with is_local): the other nodes follow the client's own backend.
        if let Some(i) = self.held_index(&self.shared.coordinator) {
            self.absorb_held_reports(i);
        }
        self.tx.held.clear();
        self.running.lock().unwrap().clear();
        self.portals.clear();
        self.names_after_block(true);
    }

    // ---- planning --------------------------------------------------------

    /// Plans `stmt`, its unqualified table names resolved with the session's path.
    async fn plan_statement(&mut self, stmt: &Statement, catalog: &Catalog) -> PgResult<Plan> {
        let names = self.names_for(stmt, catalog).await?;
        let plan = planner::plan(stmt, catalog, &names, &commands::is_utility_function)?;
        let plan = self.sql_execute_plan(stmt, plan);
        Ok(client_text::only_as_written(stmt, plan))
    }

    /// Describes a statement on the coordinator node (its shell tables make this exact),
    /// on the client's own connection there: inside its block, it sees the block's
    /// uncommitted DDL, as PostgreSQL's Parse would.
    async fn describe_on_coordinator(
        &mut self,
        sql: &str,
        types: &[u32],
    ) -> PgResult<StatementMeta> {
        self.describe_named_on_coordinator("", sql, types).await
    }

    /// Parses `sql` as statement `name` on the client's own coordinator-node
    /// connection and describes it.
    async fn describe_named_on_coordinator(
        &mut self,
        name: &str,
        sql: &str,
        types: &[u32],
    ) -> PgResult<StatementMeta> {
        let coord = self.shared.coordinator.clone();
        if let Some(i) = self.held_index(&coord) {
            self.drain_all().await?;
            // A statement of the batch failed meanwhile: the node skips to Sync and
            // would answer nothing (the client is told once, already).
            if self.batch_error {
                return Err(aborted_error());
            }
            let in_batch = self.tx.held[i].in_batch;
            let r = describe_on(&mut self.tx.held[i].conn, name, sql, types, in_batch).await;
            self.absorb_held_reports(i);
            if in_batch && r.is_err() {
                self.tx.held[i].errored = true;
            }
            return r;
        }
        let mut conn = self.home_with_settings().await?;
        let meta = describe_on(&mut conn, name, sql, types, false).await;
        self.absorb_home_reports(&mut conn);
        meta
    }

    fn meta_without_backend(plan: &Plan, declared: &[u32]) -> StatementMeta {
        let mut n_params = declared.len();
        if let Plan::Utility { args, .. } = plan {
            for (_, a) in args {
                if let UtilityArg::Param(i) = a {
                    n_params = n_params.max(i + 1);
                }
            }
        }
        let mut param_types = declared.to_vec();
        param_types.resize(n_params, 25);
        for t in param_types.iter_mut() {
            if *t == 0 {
                *t = 25;
            }
        }
        let fields = match plan {
            Plan::Session(SessionCommand::ShowCitus { name }) => {
                Some(vec![FieldDesc::computed(name, 25, -1, 0)])
            }
            Plan::Utility { name, .. } => Some(
                commands::result_columns(name)
                    .iter()
                    .map(|(n, t)| FieldDesc::computed(n, *t, -1, 0))
                    .collect(),
            ),
            _ => None,
        };
        StatementMeta {
            param_types,
            fields,
        }
    }

    // ---- extended protocol -----------------------------------------------

    async fn parse_message(&mut self, p: msg::ParseMsg) -> PgResult<()> {
        if !p.name.is_empty() && self.statements.contains_key(&p.name) {
            return Err(PgError::new(
                sqlstate::DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement \"{}\" already exists", p.name),
            ));
        }
        let prepared = self.prepare(&p.name, p.query, &p.param_types).await?;
        let mut b = BytesMut::new();
        for w in Self::string_warnings(&prepared.stmt, false) {
            client_text::write_warning(&mut b, w);
        }
        self.statements.insert(p.name, prepared);
        msg::write_parse_complete(&mut b);
        self.pending.push_back(Expect::Local(b.freeze()));
        Ok(())
    }

    /// Plans and describes a statement the client prepares as `name` ("" = unnamed).
    async fn prepare(
        &mut self,
        name: &str,
        sql: String,
        declared: &[u32],
    ) -> PgResult<Arc<Prepared>> {
        let mut stmts = self.parse_client(&sql).await?;
        if stmts.len() > 1 {
            return Err(PgError::new(
                sqlstate::SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let stmt = stmts.remove(0);
        let catalog = self.shared.catalog.snapshot();
        let plan = self.plan_statement(&stmt, &catalog).await?;
        let names_epoch = self.names_epoch(&catalog);
        if self.tx.state == TxnState::Failed && !plan.ends_failed_block() {
            return Err(aborted_error());
        }
        if let Plan::Unsupported(e) = &plan {
            return Err(e.clone());
        }
        self.isolate_if_stateful(&stmt, &plan).await?;
        let mut home_name = None;
        let meta = match &plan {
            Plan::Local if !name.is_empty() => {
                let meta = self.prepare_on_home(name, &sql, declared).await?;
                home_name = Some(name.to_string());
                meta
            }
            p if prepared::described_on_coordinator(p) => {
                self.describe_on_coordinator(&sql, declared).await?
            }
            _ => Self::meta_without_backend(&plan, declared),
        };
        let evaluates = self.prepared_evaluates(&stmt, &plan).await;
        Ok(Arc::new(Prepared {
            sql,
            stmt,
            plan,
            catalog_version: catalog.version,
            names_epoch,
            meta,
            home_name,
            shard_sql: Mutex::new(HashMap::new()),
            evaluates,
            evaluated: false,
        }))
    }

    /// The statement, re-planned if the catalog changed since it was prepared.
    async fn current_statement(&mut self, name: &str) -> PgResult<Arc<Prepared>> {
        let Some(p) = self.statements.get(name).cloned() else {
            return Err(PgError::new(
                sqlstate::INVALID_SQL_STATEMENT_NAME,
                format!("prepared statement \"{name}\" does not exist"),
            ));
        };
        let catalog = self.shared.catalog.snapshot();
        if catalog.version == p.catalog_version && self.names_epoch(&catalog) == p.names_epoch {
            return Ok(p);
        }
        let plan = self.plan_statement(&p.stmt, &catalog).await?;
        let names_epoch = self.names_epoch(&catalog);
        self.isolate_if_stateful(&p.stmt, &plan).await?;
        // As PostgreSQL's plan cache: a statement whose result shape the DDL changed
        // fails until the client prepares it again (0A000).
        self.check_result_shape(&p, &plan).await?;
        let evaluates = self.prepared_evaluates(&p.stmt, &plan).await;
        let fresh = Arc::new(Prepared {
            sql: p.sql.clone(),
            stmt: p.stmt.clone(),
            plan,
            catalog_version: catalog.version,
            names_epoch,
            meta: p.meta.clone(),
            home_name: p.home_name.clone(),
            shard_sql: Mutex::new(HashMap::new()),
            evaluates,
            evaluated: false,
        });
        self.statements.insert(name.to_string(), fresh.clone());
        Ok(fresh)
    }

    async fn bind_message(&mut self, bind: BindMsg) -> PgResult<()> {
        let stmt = self.current_statement(&bind.statement).await?;
        self.note_names_change(&stmt.stmt);
        if bind.params.len() != stmt.meta.param_types.len() {
            return Err(PgError::new(
                sqlstate::PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{}\" requires {}",
                    bind.params.len(),
                    bind.statement,
                    stmt.meta.param_types.len()
                ),
            ));
        }
        if !bind.portal.is_empty() && self.portals.contains_key(&bind.portal) {
            return Err(PgError::new(
                sqlstate::INVALID_CURSOR_NAME,
                format!("portal \"{}\" already exists", bind.portal),
            ));
        }
        if self.tx.state == TxnState::Failed && !stmt.plan.ends_failed_block() {
            return Err(aborted_error());
        }
        let catalog = self.shared.catalog.snapshot();
        let stmt = match stmt.evaluates {
            true => match self.evaluate_once(&stmt.stmt, &stmt.plan, &catalog).await? {
                Some((s, plan)) => Arc::new(Prepared {
                    sql: s.text.clone(),
                    stmt: s,
                    plan,
                    catalog_version: stmt.catalog_version,
                    names_epoch: stmt.names_epoch,
                    meta: stmt.meta.clone(),
                    home_name: None,
                    shard_sql: Mutex::new(HashMap::new()),
                    evaluates: false,
                    evaluated: true,
                }),
                None => stmt,
            },
            false => stmt,
        };
        let target = match &stmt.plan {
            Plan::Local => {
                let coord = self.shared.coordinator.clone();
                let write = !is_read_only_local(&stmt.stmt);
                let target = match &stmt.home_name {
                    Some(name) => BackendStatement::Home(name),
                    None => BackendStatement::Unnamed(&stmt.sql),
                };
                self.bind_on_backend(&coord, target, &stmt.meta.param_types, &bind, write)
                    .await?;
                PortalTarget::Backend(coord)
            }
            Plan::Router(r) => {
                let hashed = self
                    .hash_params_on_coordinator(r, &stmt.meta.param_types, &bind)
                    .await?;
                let shard = route_bound_with(r, &stmt.meta.param_types, &bind, &hashed)?;
                let addr = placement_addr(&catalog, shard)?;
                let (id, sql) = if stmt.evaluated {
                    (0, r.template.for_shard(shard.shard_id).into())
                } else {
                    self.shard_statement(&stmt, r, shard.shard_id, catalog.version as u64)
                };
                let target = if stmt.evaluated {
                    BackendStatement::Unnamed(&sql)
                } else {
                    BackendStatement::Shared(id, &sql)
                };
                self.bind_on_backend(&addr, target, &stmt.meta.param_types, &bind, !r.read_only)
                    .await?;
                PortalTarget::Backend(addr)
            }
            _ => {
                let mut b = BytesMut::new();
                msg::write_bind_complete(&mut b);
                self.pending.push_back(Expect::Local(b.freeze()));
                PortalTarget::Virtual
            }
        };
        self.portals
            .insert(bind.portal.clone(), Portal { stmt, bind, target });
        Ok(())
    }

    fn shard_statement(
        &self,
        stmt: &Prepared,
        r: &RouterPlan,
        shard: ShardId,
        catalog_version: u64,
    ) -> (u64, Arc<str>) {
        let mut cache = stmt.shard_sql.lock().unwrap();
        if let Some(v) = cache.get(&shard) {
            return v.clone();
        }
        let sql: Arc<str> = r.template.for_shard(shard).into();
        let id = self
            .shared
            .statements
            .id(&sql, &stmt.meta.param_types, catalog_version);
        cache.insert(shard, (id, sql.clone()));
        (id, sql)
    }

    async fn bind_on_backend(
        &mut self,
        addr: &NodeAddr,
        statement: BackendStatement<'_>,
        types: &[u32],
        bind: &BindMsg,
        write: bool,
    ) -> PgResult<()> {
        let idx = self.join_with(addr, write, true).await?;
        let h = &mut self.tx.held[idx];
        let name = match statement {
            // Prepared there under the client's name at its Parse: PostgreSQL's own
            // plan cache (and its 0A000 after DDL changing the result type).
            BackendStatement::Home(name) => name.to_string(),
            // The unnamed one, parsed at each Bind: nothing of pgshard's shows in
            // the client's pg_prepared_statements, and a plan never outlives the
            // client's DDL.
            BackendStatement::Unnamed(sql) => {
                msg::write_parse(&mut h.conn.wbuf, "", sql, types);
                self.pending.push_back(Expect::ParseSilent(addr.clone()));
                String::new()
            }
            BackendStatement::Shared(id, sql) => {
                if !h.conn.prepared.contains(&id) {
                    msg::write_parse(&mut h.conn.wbuf, &backend_name(id), sql, types);
                    h.conn.prepared.insert(id);
                    self.pending.push_back(Expect::ParseSilent(addr.clone()));
                }
                backend_name(id)
            }
        };
        msg::write_bind(
            &mut h.conn.wbuf,
            &bind.portal,
            &name,
            &bind.param_formats,
            &bind.params,
            &bind.result_formats,
        );
        h.dirty = true;
        self.pending.push_back(Expect::One(addr.clone()));
        Ok(())
    }

    async fn describe_message(&mut self, kind: u8, name: &str) -> PgResult<()> {
        if kind == b'S' {
            let stmt = self.current_statement(name).await?;
            let mut b = BytesMut::new();
            msg::write_parameter_description(&mut b, &stmt.meta.param_types);
            match &stmt.meta.fields {
                Some(f) => msg::write_row_description(&mut b, f),
                None => msg::write_no_data(&mut b),
            }
            self.pending.push_back(Expect::Local(b.freeze()));
            return Ok(());
        }
        let target = match self.portals.get(name) {
            Some(portal) => portal.target.clone(),
            // A cursor DECLAREd in the block is a portal of the block's coordinator
            // connection (drivers describe it by name before they FETCH).
            None if self.held_index(&self.shared.coordinator).is_some() => {
                PortalTarget::Backend(self.shared.coordinator.clone())
            }
            None => {
                return Err(PgError::new(
                    sqlstate::INVALID_CURSOR_NAME,
                    format!("portal \"{name}\" does not exist"),
                ))
            }
        };
        match target {
            PortalTarget::Backend(addr) => {
                let idx = self.join(&addr, false).await?;
                let h = &mut self.tx.held[idx];
                msg::write_describe(&mut h.conn.wbuf, b'P', name);
                h.dirty = true;
                self.pending.push_back(Expect::One(addr));
            }
            PortalTarget::Virtual => {
                let portal = &self.portals[name];
                let fields = portal.stmt.meta.fields.clone();
                let formats = portal.bind.result_formats.clone();
                let mut b = BytesMut::new();
                match fields {
                    Some(mut f) => {
                        for (i, fd) in f.iter_mut().enumerate() {
                            fd.format = result_format(&formats, i);
                        }
                        msg::write_row_description(&mut b, &f);
                    }
                    None => msg::write_no_data(&mut b),
                }
                self.pending.push_back(Expect::Local(b.freeze()));
            }
        }
        Ok(())
    }

    async fn execute_message(&mut self, name: &str, max_rows: i32) -> PgResult<()> {
        let Some(portal) = self.portals.get_mut(name) else {
            return Err(PgError::new(
                sqlstate::INVALID_CURSOR_NAME,
                format!("portal \"{name}\" does not exist"),
            ));
        };
        match &mut portal.target {
            PortalTarget::Backend(addr) => {
                let addr = addr.clone();
                if matches!(portal.stmt.plan, Plan::Local)
                    && !isolation::set_config_calls(&portal.stmt.stmt.text).is_empty()
                {
                    self.set_config_to_follow.push(portal.stmt.stmt.clone());
                }
                let copies_in = is_copy_from_stdin(&portal.stmt.stmt);
                let idx = self.join(&addr, false).await?;
                let h = &mut self.tx.held[idx];
                msg::write_execute(&mut h.conn.wbuf, name, max_rows);
                h.dirty = true;
                self.pending.push_back(Expect::Execute(addr));
                if copies_in {
                    // The client's COPY data follows this Execute (a Sync it sent before
                    // the data is ignored, as PostgreSQL ignores it): relayed now.
                    self.drain_all().await?;
                }
                Ok(())
            }
            PortalTarget::Virtual => {
                self.drain_all().await?;
                let frames = self.run_virtual(name, false).await?;
                for f in frames {
                    msg::write_raw(&mut self.out, f.tag, &f.body);
                }
                Ok(())
            }
        }
    }

    async fn close_message(&mut self, kind: u8, name: &str) -> PgResult<()> {
        if kind == b'S' {
            let removed = self.statements.remove(name);
            if removed.is_some_and(|p| p.home_name.is_some()) {
                return self.close_on_home(name).await;
            }
        } else if let Some(p) = self.portals.remove(name) {
            if let PortalTarget::Backend(addr) = p.target {
                if let Some(idx) = self.held_index(&addr) {
                    if self.tx.held[idx].in_batch {
                        let idx = self.join(&addr, false).await?;
                        let h = &mut self.tx.held[idx];
                        msg::write_close(&mut h.conn.wbuf, b'P', name);
                        h.dirty = true;
                        self.pending.push_back(Expect::One(addr));
                        return Ok(());
                    }
                }
            }
        }
        let mut b = BytesMut::new();
        msg::write_close_complete(&mut b);
        self.pending.push_back(Expect::Local(b.freeze()));
        Ok(())
    }

    /// SQL `DEALLOCATE`: drops a statement the client prepared with Parse, as
    /// PostgreSQL does (one namespace for both kinds). Others are SQL-level statements
    /// of local tables, prepared on the coordinator node: it goes there, and so does
    /// `DEALLOCATE ALL` (which keeps the unnamed statement, as in PostgreSQL).
    async fn deallocate(
        &mut self,
        stmt: &Statement,
        name: Option<&str>,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        match name.map(|n| (n, self.statements.remove(n))) {
            // Prepared on the client's own coordinator connection too: it goes
            // there (below).
            Some((_, Some(p))) if p.home_name.is_some() => {}
            Some((_, Some(_))) => {
                sink.complete("DEALLOCATE");
                return Ok(());
            }
            Some((n, None)) if is_backend_name(n) => {
                return Err(PgError::new(
                    sqlstate::INVALID_SQL_STATEMENT_NAME,
                    format!("prepared statement \"{n}\" does not exist"),
                ))
            }
            Some(_) => {}
            None => self.statements.retain(|name, _| name.is_empty()),
        }
        let coord = self.shared.coordinator.clone();
        let idx = self
            .simple_on_backend_into(&coord, &stmt.text, false, Some(sink))
            .await?;
        if name.is_none() {
            // pgshard's own statements on that connection went too.
            self.tx.held[idx].conn.prepared.clear();
        }
        Ok(())
    }

    async fn sync_message(&mut self) {
        let follow = std::mem::take(&mut self.set_config_to_follow);
        self.sync_batch().await;
        // `set_config` calls of the batch, now that they ran on the coordinator node.
        if self.tx.state != TxnState::Failed {
            for stmt in &follow {
                if let Err(e) = self.follow_set_config(stmt).await {
                    msg::write_error(&mut self.out, &e);
                    break;
                }
            }
        }
    }

    async fn sync_batch(&mut self) {
        if self.tx.implicit_block {
            // A batch that wrote on several nodes: committed as a whole, or not at all.
            self.tx.implicit_block = false;
            if let Err(e) = self.drain_all().await {
                self.on_extended_result(Err(e)).await;
            }
            let mut failed = self.batch_error;
            if !failed {
                let r = self.finish_transaction(true).await;
                for f in self.take_end_messages() {
                    msg::write_raw(&mut self.out, f.tag, &f.body);
                }
                if let Err(e) = r {
                    self.write_client_error(&e);
                    failed = true;
                }
            } else {
                self.end_batch().await;
                let _ = self.finish_transaction(false).await;
            }
            self.end_implicit_settings(failed);
            self.implicit_txn = false;
            self.tx.state = TxnState::Idle;
            self.batch_error = false;
            self.pending.clear();
            self.skipping = false;
            self.portals.clear();
            return;
        }
        let failed = self.end_batch().await;
        self.end_implicit_settings(failed);
        self.implicit_txn = false;
        self.release_deadlock_victim().await;
        self.skipping = false;
        // Portals live until their transaction ends: at Sync in autocommit, with
        // COMMIT/ROLLBACK inside a block.
        if self.tx.state == TxnState::Idle {
            self.portals.clear();
        }
    }

    /// Runs a virtual portal (pgshard's own plans). With `describe`, the frames
    /// start with the RowDescription.
    async fn run_virtual(&mut self, name: &str, describe: bool) -> PgResult<Vec<Frame>> {
        let portal = self.portals.get(name).expect("portal checked");
        let stmt = portal.stmt.clone();
        let bind = portal.bind.clone();
        let mut out = ResultSink::default();
        let params = BoundParams {
            types: &stmt.meta.param_types,
            bind: Some(&bind),
        };
        let formats = bind.result_formats.clone();
        self.run_plan(
            &stmt.plan, &stmt.stmt, &params, &formats, describe, &mut out,
        )
        .await?;
        Ok(out.frames)
    }

    // ---- simple protocol -------------------------------------------------

    async fn simple_query(&mut self, sql: &str) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        // Statements differing from an earlier one only in constants reuse its plan.
        let scanned = if self.tx.state != TxnState::Failed && !self.strings_matter(sql) {
            fastpath::scan(sql)
        } else {
            None
        };
        if let Some(sc) = &scanned {
            let version = (catalog.version, self.names_epoch(&catalog));
            if let Some(fast) = self.shapes.lookup(version, sc, sql) {
                let r = match fast {
                    FastPlan::Local { write } => {
                        let coord = self.shared.coordinator.clone();
                        self.simple_on_backend(&coord, sql, write).await
                    }
                    FastPlan::Router {
                        table,
                        hash,
                        shard_sql,
                        read_only,
                    } => match table.shard_for_hash(hash) {
                        Some(shard) => match placement_addr(&catalog, shard) {
                            Ok(addr)
                                if read_only
                                    && self
                                        .pipelined_simple_read(&addr, &shard_sql(shard.shard_id))
                                        .await =>
                            {
                                Ok(())
                            }
                            Ok(addr) => {
                                self.simple_on_backend(
                                    &addr,
                                    &shard_sql(shard.shard_id),
                                    !read_only,
                                )
                                .await
                            }
                            Err(e) => Err(e),
                        },
                        None => Err(PgError::internal(format!(
                            "no shard of \"{}\" covers hash {hash}",
                            table.name
                        ))),
                    },
                };
                self.finish_simple(r).await;
                return Ok(());
            }
        }
        let stmts = match self.parse_client(sql).await {
            Ok(s) => s,
            Err(e) => {
                self.write_client_error(&e);
                self.fail();
                self.batch_error = false;
                return Ok(());
            }
        };
        let mut plans = Vec::with_capacity(stmts.len());
        let mut planned_names = self.names_epoch(&catalog);
        for s in &stmts {
            match self.plan_statement(s, &catalog).await {
                Ok(p) => plans.push(p),
                Err(e) => {
                    self.write_client_error(&e);
                    self.fail();
                    self.batch_error = false;
                    return Ok(());
                }
            }
        }
        for (stmt, plan) in stmts.iter().zip(&plans) {
            for w in Self::string_warnings(stmt, matches!(plan, Plan::Local)) {
                client_text::write_warning(&mut self.out, w);
            }
        }
        let mut stateful = false;
        for (stmt, plan) in stmts.iter().zip(&plans) {
            match self.isolate_if_stateful(stmt, plan).await {
                Ok(s) => stateful |= s,
                Err(e) => {
                    msg::write_error(&mut self.out, &e);
                    self.fail();
                    self.batch_error = false;
                    return Ok(());
                }
            }
        }
        // A shape that may leave session state is checked again each time it runs, and
        // a `set_config` on the coordinator node is followed each time.
        let sets_config = stmts
            .iter()
            .any(|s| !isolation::set_config_calls(&s.text).is_empty());
        if let (Some(sc), [stmt], [plan], false) = (
            scanned,
            stmts.as_slice(),
            plans.as_slice(),
            stateful || sets_config,
        ) {
            if let (Some(node), false) = (&stmt.node, planner::names::may_change_names(stmt)) {
                // A routed statement whose functions are evaluated on the coordinator
                // node is planned each time (a shape would send them to the shard).
                if matches!(plan, Plan::Local) || !self.evaluates_once(node).await {
                    let version = (catalog.version, planned_names);
                    self.shapes
                        .remember(version, sc, node, plan, !is_read_only_local(stmt));
                }
            }
        }
        if stmts.len() > 1
            && plans.iter().all(|p| matches!(p, Plan::Local))
            && self.tx.state != TxnState::Failed
            && !sets_config
        {
            // Only the coordinator node: the string goes there whole, keeping
            // PostgreSQL's own multi-statement semantics.
            let coord = self.shared.coordinator.clone();
            let r = self
                .simple_on_backend(&coord, sql, !stmts.iter().all(is_read_only_local))
                .await;
            for stmt in &stmts {
                self.note_names_change(stmt);
            }
            self.finish_simple(r).await;
            return Ok(());
        }
        if stmts.len() > 1 && self.tx.state == TxnState::Idle && self.tx.held.is_empty() {
            if let Some(begin) = implicit::local_with_transaction_control(&plans) {
                let r = self.local_with_transaction_control(sql, begin).await;
                for stmt in &stmts {
                    self.note_names_change(stmt);
                }
                return r;
            }
        }
        let planned_with = catalog.version;
        let mut catalog = catalog;
        // Several statements run as one implicit transaction in PostgreSQL.
        self.implicit_txn = stmts.len() > 1;
        let mut failed = false;
        for (i, stmt) in stmts.iter().enumerate() {
            // A statement before this one may have changed the catalog (e.g.
            // create_distributed_table): this one and the rest are planned again.
            let replanned;
            let current = (i > 0).then(|| self.shared.catalog.snapshot());
            // ... and likewise after one that may have changed what names stand for
            // (`set search_path = s2; select * from t`).
            let current = current
                .filter(|c| c.version != planned_with || self.names_epoch(c) != planned_names);
            let plan = if let Some(current) = current {
                catalog = current;
                let planned = match self.plan_statement(stmt, &catalog).await {
                    Ok(p) => self.isolate_if_stateful(stmt, &p).await.map(|_| p),
                    Err(e) => Err(e),
                };
                planned_names = self.names_epoch(&catalog);
                match planned {
                    Ok(p) => {
                        replanned = p;
                        &replanned
                    }
                    Err(e) => {
                        self.write_client_error(&e);
                        self.fail();
                        self.batch_error = false;
                        failed = true;
                        break;
                    }
                }
            } else {
                &plans[i]
            };
            if self.tx.state == TxnState::Failed && !plan.ends_failed_block() {
                let e = aborted_error();
                self.write_client_error(&e);
                failed = true;
                break;
            }
            if stmts.len() > 1
                && self.tx.state == TxnState::Idle
                && !matches!(plan, Plan::Session(SessionCommand::Transaction(_)))
                && !(implicit::needs_own_transaction(plan)
                    && implicit::alone_in_implicit_transaction(&plans[i + 1..]))
            {
                self.begin_string_block();
            }
            // Stable functions evaluated once, here, and their values sent to the shards.
            let evaluated = match self.evaluate_once(stmt, plan, &catalog).await {
                Ok(e) => e,
                Err(e) => {
                    self.finish_simple(Err(e)).await;
                    failed = true;
                    break;
                }
            };
            let (stmt, plan) = match &evaluated {
                Some((s, p)) => (s, p),
                None => (stmt, plan),
            };
            let mut sink = ResultSink::default();
            let params = BoundParams {
                types: &[],
                bind: None,
            };
            self.note_names_change(stmt);
            let r = match plan {
                Plan::Local => {
                    // A query string of one statement goes as the client wrote it
                    // (comments and `;` too): PostgreSQL keeps it whole as the
                    // statement's text (pg_prepared_statements, pg_cursors,
                    // pg_stat_activity).
                    let text = if stmts.len() == 1 {
                        sql
                    } else {
                        stmt.client_text()
                    };
                    let coord = self.shared.coordinator.clone();
                    let r = self
                        .simple_on_backend(&coord, text, !is_read_only_local(stmt))
                        .await;
                    if r.is_ok() && !self.batch_error {
                        self.follow_set_config(stmt).await
                    } else {
                        r
                    }
                }
                Plan::Router(r) => match route_bound(r, &[], &BindMsg::default_empty(), &catalog) {
                    Ok(shard) => match placement_addr(&catalog, shard) {
                        Ok(addr) => {
                            let sql = r.template.for_shard(shard.shard_id);
                            self.simple_on_backend(&addr, &sql, !r.read_only).await
                        }
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                },
                _ => {
                    self.run_plan(plan, stmt, &params, &[], true, &mut sink)
                        .await
                }
            };
            for f in sink.frames.drain(..) {
                msg::write_raw(&mut self.out, f.tag, &f.body);
            }
            failed = r.is_err() || self.batch_error;
            self.finish_simple(r).await;
            if failed {
                break;
            }
        }
        if self.tx.string_block {
            failed = self.end_string_block(failed).await;
        }
        self.end_implicit_settings(failed);
        self.implicit_txn = false;
        Ok(())
    }

    async fn finish_simple(&mut self, r: PgResult<()>) {
        if let Err(e) = r {
            if !self.batch_error {
                self.write_client_error(&e);
            }
            self.fail();
        }
        self.release_deadlock_victim().await;
        self.batch_error = false;
        for h in self.tx.held.iter_mut() {
            h.in_batch = false;
        }
        if self.tx.state == TxnState::Idle {
            self.release_all();
        }
    }

    /// Runs SQL on one backend with the simple protocol, forwarding its replies.
    async fn simple_on_backend(&mut self, addr: &NodeAddr, sql: &str, write: bool) -> PgResult<()> {
        self.simple_on_backend_into(addr, sql, write, None)
            .await
            .map(|_| ())
    }

    /// Runs SQL on one backend with the simple protocol. Its replies go to the client,
    /// or into `sink` when one is given (an error is then only returned). Returns the
    /// backend's index in `held`.
    async fn simple_on_backend_into(
        &mut self,
        addr: &NodeAddr,
        sql: &str,
        write: bool,
        mut sink: Option<&mut ResultSink>,
    ) -> PgResult<usize> {
        let idx = self.join(addr, write).await?;
        self.drain_all().await?;
        let h = &mut self.tx.held[idx];
        msg::write_query(&mut h.conn.wbuf, sql);
        h.conn.flush().await?;
        let mut err = None;
        loop {
            let f = self.tx.held[idx].conn.read().await?;
            match (f.tag, sink.as_deref_mut()) {
                (b'Z', _) => break,
                (b'E', to_sink) => {
                    let e = self.backend_error(idx, f.body);
                    if to_sink.is_none() {
                        self.write_client_error(&e);
                    }
                    err = Some(e);
                    if self.tx.held[idx].conn.broken {
                        // A FATAL: the connection closes, no ReadyForQuery follows.
                        break;
                    }
                }
                (_, Some(to_sink)) => to_sink.push_frame(f.tag, f.body),
                (b'G', None) => {
                    // COPY FROM STDIN: the client's data streams through to this backend.
                    msg::write_raw(&mut self.out, f.tag, &f.body);
                    self.flush_client().await?;
                    self.relay_copy_in(idx, false).await?;
                }
                (_, None) => {
                    msg::write_raw(&mut self.out, f.tag, &f.body);
                    if self.out.len() >= CLIENT_FLUSH_AT {
                        self.flush_client().await?;
                    }
                }
            }
        }
        self.tx.held[idx].in_batch = false;
        self.absorb_held_reports(idx);
        if let Some(e) = err {
            self.fail();
            self.batch_error = sink.is_none();
            return Err(e);
        }
        Ok(idx)
    }

    /// Relays CopyData from the client to a backend until CopyDone or CopyFail. What
    /// the backend sends meanwhile (NOTICEs raised per row) reaches the client at once,
    /// and writes to the backend never wait without reading it (both sides' buffers
    /// full would hang for good). An ErrorResponse ends the relay at once: the caller
    /// forwards it and ReadyForQuery, as PostgreSQL sends them without waiting for the
    /// rest of the data, and the client's remaining COPY messages are ignored.
    /// `extended`: the COPY came through the extended protocol, where the node holds
    /// its CommandComplete until a Flush (or the client's Sync, which pgshard reads later).
    async fn relay_copy_in(&mut self, idx: usize, extended: bool) -> PgResult<()> {
        loop {
            while let Some(tag) = self.tx.held[idx].conn.buffered_tag() {
                if !matches!(tag, b'N' | b'A' | b'S') {
                    return Ok(());
                }
                let f = self.tx.held[idx].conn.read().await?;
                msg::write_raw(&mut self.out, f.tag, &f.body);
            }
            if !self.out.is_empty() {
                self.flush_client().await?;
            }
            let conn = &mut self.tx.held[idx].conn;
            // Small messages are batched while the client's next one is already here.
            if !conn.wbuf.is_empty()
                && (conn.wbuf.len() >= CLIENT_FLUSH_AT || !self.reader.has_frame())
            {
                conn.flush().await?;
                if conn.buffered_tag().is_some() {
                    continue;
                }
            }
            let f = if self.reader.has_frame() {
                self.reader.frame().await?
            } else {
                let reader = &mut self.reader;
                tokio::select! {
                    r = conn.receive() => {
                        r?;
                        continue;
                    }
                    f = reader.frame() => f?,
                }
            };
            let Some(f) = f else {
                let h = &mut self.tx.held[idx];
                msg::write_raw(&mut h.conn.wbuf, b'f', b"client connection lost\0");
                h.conn.flush().await?;
                return Err(PgError::new(
                    sqlstate::CONNECTION_FAILURE,
                    "client connection lost during COPY",
                ));
            };
            let h = &mut self.tx.held[idx];
            match f.tag {
                b'd' => msg::write_raw(&mut h.conn.wbuf, b'd', &f.body),
                b'c' | b'f' => {
                    msg::write_raw(&mut h.conn.wbuf, f.tag, &f.body);
                    if extended {
                        msg::write_flush(&mut h.conn.wbuf);
                    }
                    h.conn.flush().await?;
                    return Ok(());
                }
                b'H' | b'S' => {}
                other => {
                    let m = format!("unexpected message type 0x{other:02x} during COPY from stdin");
                    let mut body = Vec::new();
                    body.extend_from_slice(m.as_bytes());
                    body.push(0);
                    msg::write_raw(&mut h.conn.wbuf, b'f', &body);
                    h.conn.flush().await?;
                    return Ok(());
                }
            }
        }
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
            if name.starts_with("citus.") {
                self.set_citus(name, Some(value))?;
                self.startup_citus.push((name.clone(), value.clone()));
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

    async fn run_plan(
        &mut self,
        plan: &Plan,
        stmt: &Statement,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        match plan {
            Plan::Session(c) => self.session_command(c, stmt, describe, sink).await,
            Plan::Unsupported(e) => Err(e.clone()),
            Plan::Utility { name, args } => self.utility(name, args, params, describe, sink).await,
            Plan::UtilityInline { calls } => {
                if params.bind.is_some() {
                    return Err(PgError::not_supported(
                        "Citus functions inside expressions are supported in simple queries only",
                    ));
                }
                let mut text = String::new();
                let mut at = 0;
                for c in calls {
                    let mut one = ResultSink::default();
                    self.utility(&c.name, &c.args, params, true, &mut one)
                        .await?;
                    if let Some(alias) = &c.from_item {
                        let columns: Vec<(String, u32)> = one
                            .frames
                            .iter()
                            .find(|f| f.tag == b'T')
                            .and_then(|f| msg::decode_row_description(&f.body).ok())
                            .map(|fs| fs.into_iter().map(|f| (f.name, f.type_oid)).collect())
                            .unwrap_or_default();
                        let rows: Vec<Vec<Option<String>>> = one
                            .frames
                            .iter()
                            .filter(|f| f.tag == b'D')
                            .filter_map(|f| msg::decode_data_row(&f.body).ok())
                            .map(|r| {
                                r.into_iter()
                                    .map(|v| v.map(|v| String::from_utf8_lossy(&v).into_owned()))
                                    .collect()
                            })
                            .collect();
                        text.push_str(&stmt.text[at..c.start]);
                        text.push_str(&commands::result_as_from_item(&columns, &rows, alias));
                        at = c.end;
                        continue;
                    }
                    let value = one.frames.iter().find(|f| f.tag == b'D').and_then(|f| {
                        msg::decode_data_row(&f.body)
                            .ok()
                            .and_then(|v| v.into_iter().next().flatten())
                    });
                    let type_oid = one
                        .frames
                        .iter()
                        .find(|f| f.tag == b'T')
                        .and_then(|f| msg::decode_row_description(&f.body).ok())
                        .and_then(|f| f.first().map(|x| x.type_oid))
                        .unwrap_or(25);
                    let type_name = match type_oid {
                        20 => "int8",
                        23 => "int4",
                        16 => "bool",
                        _ => "text",
                    };
                    text.push_str(&stmt.text[at..c.start]);
                    match value {
                        Some(v) => text.push_str(&format!(
                            "CAST({} AS {type_name})",
                            quote_literal(&String::from_utf8_lossy(&v))
                        )),
                        None => text.push_str(&format!("CAST(NULL AS {type_name})")),
                    }
                    at = c.end;
                }
                text.push_str(&stmt.text[at..]);
                let coord = self.shared.coordinator.clone();
                self.simple_on_backend(&coord, &text, false).await
            }
            Plan::MultiShard(m) => self.multi_shard(m, params, formats, describe, sink).await,
            Plan::InsertRows(p) => self.insert_rows(p, params, formats, describe, sink).await,
            Plan::InsertSelect(p) => self.insert_select(p, params, formats, describe, sink).await,
            Plan::InsertViaCoordinator(p) => {
                self.insert_via_coordinator(p, params, formats, describe, sink)
                    .await
            }
            Plan::InsertIntoLocal(p) => {
                self.insert_into_local(p, params, formats, describe, sink)
                    .await
            }
            Plan::CreateTableAs(p) => self.create_table_as(p, params, sink).await,
            Plan::SqlPrepare(p) => self.sql_prepare(p, sink).await,
            Plan::SqlExecute(p) => self.sql_execute(p, params, sink).await,
            Plan::FunctionCall(p) => self.function_call(p, params, formats, describe, sink).await,
            Plan::CopyIn(p) => self.copy_in(p, params.bind.is_some(), sink).await,
            Plan::CopyOut(p) => self.copy_out(p, sink).await,
            Plan::MultiShardModify(m) => {
                self.multi_shard_modify(m, params, formats, describe, sink)
                    .await
            }
            Plan::Explain(e) => self.explain(e, params, formats, describe, sink).await,
            Plan::DropTables { tables } => {
                if self.tx.string_block {
                    return Err(implicit::refused_in_string(
                        "DROP TABLE of a distributed table",
                    ));
                }
                if self.tx.state != TxnState::Idle {
                    return Err(PgError::not_supported("DROP TABLE of a distributed table inside a transaction block is not supported yet"));
                }
                // Shards, catalog rows and the shell go in one catalog transaction.
                let caller = self.caller().await?;
                for t in tables {
                    commands::drop_distributed_table(&self.shared.catalog, t.relid, true, &caller)
                        .await?;
                }
                self.shared.catalog.reload().await;
                sink.complete("DROP TABLE");
                Ok(())
            }
            Plan::Ddl(d) => {
                let caller = self.caller().await?;
                if self.tx.state != TxnState::Idle {
                    if let Some(why) = d.not_in_block() {
                        if self.tx.string_block {
                            return Err(if d.concurrent {
                                // PostgreSQL's own refusal in an implicit transaction.
                                PgError::new(sqlstate::ACTIVE_SQL_TRANSACTION, why)
                            } else {
                                implicit::refused_in_string(&format!(
                                    "{why} on a distributed table"
                                ))
                            });
                        }
                        return Err(PgError::not_supported(format!(
                            "pgshard does not support {why} on a distributed table inside a transaction block yet"
                        )));
                    }
                    self.ddl_in_block(&d.for_caller(&caller)).await?;
                    sink.complete(&d.tag);
                    return Ok(());
                }
                let search_path = self.search_path().await?;
                let caller = commands::ddl::Caller {
                    role: &caller,
                    search_path: &search_path,
                };
                commands::ddl::propagate_ddl(&self.shared.catalog, d, &caller).await?;
                sink.complete(&d.tag);
                Ok(())
            }
            Plan::ReferenceWrite {
                table,
                template,
                tag,
                functions,
                defaults,
            } => {
                self.reference_write(
                    table, template, tag, functions, defaults, params, formats, describe, sink,
                )
                .await
            }
            Plan::DropIndexes { stmt: d, indexes } => {
                if self.tx.string_block {
                    return Err(implicit::refused_in_string(
                        "DROP INDEX of a distributed table",
                    ));
                }
                if self.tx.state != TxnState::Idle {
                    return Err(PgError::not_supported("DROP INDEX of a distributed table inside a transaction block is not supported by pgshard yet"));
                }
                let caller = self.caller().await?;
                let search_path = self.search_path().await?;
                let caller = commands::ddl::Caller {
                    role: &caller,
                    search_path: &search_path,
                };
                commands::ddl::drop_indexes(&self.shared.catalog, d, &stmt.text, indexes, &caller)
                    .await?;
                self.shared.catalog.reload().await;
                sink.complete("DROP INDEX");
                Ok(())
            }
            Plan::Propagate(p) => self.maintenance(p, params.bind.is_some(), sink).await,
            // Role and privilege statements run in the session's block (pgshard's own
            // one in autocommit): on the client's own backend first, with its settings
            // (search_path, password_encryption) and NOTICEs, then on the workers; one
            // commit (2PC) for all.
            Plan::Role(p) => {
                let caller = self.caller().await?;
                let own = self.begin_own_block().await?;
                let done = self.role_in_block(p, &caller, sink).await;
                self.end_own_block(own, done.is_ok(), params.bind.is_some())
                    .await?;
                done
            }
            Plan::Grant(p) => {
                let caller = self.caller().await?;
                let p = p.for_caller(&caller)?;
                let own = self.begin_own_block().await?;
                let done = self.grant_in_block(&p, sink).await;
                if p.drops_tables && done.is_ok() {
                    self.tx.catalog_changed = true;
                }
                self.end_own_block(own, done.is_ok(), params.bind.is_some())
                    .await?;
                done
            }
            Plan::DeclareCursor(p) => self.declare_cursor(p, params, sink).await,
            Plan::Recursive(p) => self.recursive(p, params, formats, describe, sink).await,
            Plan::Repartition(p) => self.repartition(p, params, formats, describe, sink).await,
            Plan::ModifyRecursive(p) => {
                self.modify_recursive(p, params, formats, describe, sink)
                    .await
            }
            Plan::ModifyingCte(p) => {
                self.modifying_ctes(p, params, formats, describe, sink)
                    .await
            }
            Plan::Local | Plan::Router(_) => Err(PgError::internal("plan runs on a backend")),
        }
    }
    async fn utility(
        &mut self,
        name: &str,
        args: &[(Option<String>, UtilityArg)],
        params: &BoundParams<'_>,
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        if self.tx.string_block && !commands::utility_reads_only(name) {
            return Err(implicit::refused_in_string(&format!("{name}()")));
        }
        if self.tx.state != TxnState::Idle && !self.tx.string_block {
            return Err(PgError::not_supported(format!(
                "{name}() cannot run inside a transaction block in pgshard yet"
            )));
        }
        let arg_names = commands::utility_arg_names(name);
        let mut values: Vec<Option<String>> = Vec::new();
        let mut positional = 0;
        for (arg_name, arg) in args {
            let value = match arg {
                UtilityArg::Const(v) => v.clone(),
                UtilityArg::Param(i) => params.text(*i)?,
            };
            let pos = match arg_name {
                None => {
                    positional += 1;
                    positional - 1
                }
                Some(n) => arg_names.iter().position(|a| a == n).ok_or_else(|| {
                    PgError::new(
                        sqlstate::UNDEFINED_FUNCTION,
                        format!("function {name} has no argument named \"{n}\""),
                    )
                })?,
            };
            if values.len() <= pos {
                values.resize(pos + 1, None);
            }
            values[pos] = value;
        }
        // Table arguments are `regclass`: PostgreSQL reads them with the caller's path.
        let mut relids = vec![None; values.len()];
        for (i, v) in values.iter().enumerate() {
            if let Some(v) = v.as_deref().filter(|v| commands::is_table_arg(name, i, v)) {
                relids[i] = self.regclass(v).await?;
            }
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let shared = self.shared.clone();
        let settings = self.citus;
        let call_name = name.to_string();
        let caller = self.caller().await?;
        let mut task = tokio::spawn(async move {
            let call = commands::UtilityCall {
                name: &call_name,
                args: values,
                relids,
            };
            commands::call_utility(&shared.catalog, &settings, call, tx, &caller).await
        });
        let result = loop {
            tokio::select! {
                r = &mut task => break r.map_err(|e| PgError::internal(format!("{name}() failed: {e}")))?,
                Some(n) = rx.recv() => {
                    msg::write_notice(&mut self.out, &n);
                    let _ = self.flush_client().await;
                }
            }
        };
        while let Ok(n) = rx.try_recv() {
            msg::write_notice(&mut self.out, &n);
        }
        let result = result?;
        if describe {
            let fields: Vec<FieldDesc> = result
                .columns
                .iter()
                .map(|(n, t)| FieldDesc::computed(n, *t, -1, 0))
                .collect();
            sink.row_description(&fields);
        }
        for row in &result.rows {
            let vals: Vec<Option<&[u8]>> = row
                .iter()
                .map(|v| v.as_deref().map(str::as_bytes))
                .collect();
            sink.data_row(&vals);
        }
        sink.complete(&format!("SELECT {}", result.rows.len()));
        Ok(())
    }

    // ---- transactions ----------------------------------------------------

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

/// A size setting in kB: `-1`, `512`, `64kB`, `10MB`, `1GB`.
fn parse_kb(v: &str) -> Option<i64> {
    let v = v.trim();
    let digits_end = v
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || (*i == 0 && *c == '-')))
        .map_or(v.len(), |(i, _)| i);
    let n: i64 = v[..digits_end].parse().ok()?;
    let unit = v[digits_end..].trim();
    let kb = match unit {
        "" | "kB" => n,
        "MB" => n.checked_mul(1024)?,
        "GB" => n.checked_mul(1024 * 1024)?,
        "TB" => n.checked_mul(1024 * 1024 * 1024)?,
        _ => return None,
    };
    (kb >= -1).then_some(kb)
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

/// Parameters of an execution: their types and the Bind holding their values.
struct BoundParams<'a> {
    types: &'a [u32],
    bind: Option<&'a BindMsg>,
}

impl BoundParams<'_> {
    fn text(&self, i: usize) -> PgResult<Option<String>> {
        let bind = self.bind.ok_or_else(|| {
            PgError::new(
                sqlstate::PROTOCOL_VIOLATION,
                format!("there is no parameter ${}", i + 1),
            )
        })?;
        let v = bind.params.get(i).ok_or_else(|| {
            PgError::new(
                sqlstate::PROTOCOL_VIOLATION,
                format!("there is no parameter ${}", i + 1),
            )
        })?;
        match v {
            None => Ok(None),
            Some(b) if bind.param_format(i) == 0 => {
                Ok(Some(String::from_utf8_lossy(b).into_owned()))
            }
            Some(_) => Err(PgError::not_supported(
                "binary parameters are not supported for this statement in pgshard yet",
            )),
        }
    }
}

impl BindMsg {
    fn default_empty() -> BindMsg {
        BindMsg {
            portal: String::new(),
            statement: String::new(),
            param_formats: vec![],
            params: vec![],
            result_formats: vec![],
        }
    }
}

/// The shard a routed statement goes to, with its values bound.
fn route_bound<'a>(
    r: &'a RouterPlan,
    types: &[u32],
    bind: &BindMsg,
    _catalog: &Catalog,
) -> PgResult<&'a ShardInterval> {
    route_bound_with(r, types, bind, &[])
}

/// The parameters of the distribution value that pgshard does not hash itself
/// (a domain's, time's, interval's...): whether `hash_param` reads them.
fn params_for_postgres(r: &RouterPlan, types: &[u32], bind: &BindMsg) -> Vec<usize> {
    let Some(col) = r.table.dist_column.as_ref() else {
        return Vec::new();
    };
    let usage = if r.is_insert {
        crate::planner::distvalue::ValueUse::Store
    } else {
        crate::planner::distvalue::ValueUse::Compare
    };
    r.values
        .iter()
        .filter_map(|v| match *v {
            ValueSource::Param(i) => {
                let bytes = bind.params.get(i)?.as_ref()?;
                let ptype = types.get(i).copied().unwrap_or(0);
                // A compared parameter of another type is left to the router's error.
                if !r.is_insert && ptype != col.type_oid {
                    return None;
                }
                let known = crate::planner::distvalue::hash_param(
                    col.type_oid,
                    usage.typmod(col),
                    ptype,
                    bind.param_format(i),
                    bytes,
                )
                .is_some()
                    || crate::planner::distvalue::param_is_invalid(col.type_oid, ptype);
                (!known).then_some(i)
            }
            _ => None,
        })
        .collect()
}

impl Session {
    /// Hashes computed by PostgreSQL for the parameters `params_for_postgres` names.
    async fn hash_params_on_coordinator(
        &mut self,
        r: &RouterPlan,
        types: &[u32],
        bind: &BindMsg,
    ) -> PgResult<Vec<(usize, i32)>> {
        let mut out = Vec::new();
        for i in params_for_postgres(r, types, bind) {
            let (Some(col), Some(Some(bytes))) = (r.table.dist_column.as_ref(), bind.params.get(i))
            else {
                continue;
            };
            let ptype = types.get(i).copied().unwrap_or(0);
            let h = self
                .hash_stored_on_coordinator(
                    col,
                    bytes,
                    bind.param_format(i) == 1,
                    ptype,
                    r.is_insert,
                )
                .await?
                .unwrap_or(i32::MIN);
            out.push((i, h));
        }
        Ok(out)
    }
}

/// As `route_bound`, with the hashes of some parameters already computed (`hashed`).
fn route_bound_with<'a>(
    r: &'a RouterPlan,
    types: &[u32],
    bind: &BindMsg,
    hashed: &[(usize, i32)],
) -> PgResult<&'a ShardInterval> {
    // Reference tables are routed with a fixed hash and have no column.
    let no_column;
    let col = match r.table.dist_column.as_ref() {
        Some(c) => c,
        None => {
            no_column = crate::catalog::DistColumn {
                name: String::new(),
                attnum: 0,
                type_oid: 0,
                collation: 0,
                typmod: -1,
                type_sql: String::new(),
            };
            &no_column
        }
    };
    let mut shard: Option<&ShardInterval> = None;
    for v in &r.values {
        let hash = match *v {
            ValueSource::Hash(h) => h,
            ValueSource::Null => {
                if r.is_insert {
                    return Err(PgError::new(
                        sqlstate::NOT_NULL_VIOLATION,
                        format!(
                            "cannot perform an INSERT with NULL in the partition column \"{}\"",
                            col.name
                        ),
                    ));
                }
                // `column = NULL` matches no row: any one shard answers that.
                i32::MIN
            }
            // PostgreSQL refuses the value: any one shard gives its exact error.
            ValueSource::Invalid => i32::MIN,
            ValueSource::Param(i) => {
                let Some(Some(bytes)) = bind.params.get(i) else {
                    if r.is_insert {
                        return Err(PgError::new(
                            sqlstate::NOT_NULL_VIOLATION,
                            format!(
                                "cannot perform an INSERT with NULL in the partition column \"{}\"",
                                col.name
                            ),
                        ));
                    }
                    shard = shard.or(r.table.shards.first());
                    continue;
                };
                if let Some((_, h)) = hashed.iter().find(|(p, _)| *p == i) {
                    *h
                } else {
                    let ptype = types.get(i).copied().unwrap_or(0);
                    let usage = if r.is_insert {
                        crate::planner::distvalue::ValueUse::Store
                    } else {
                        crate::planner::distvalue::ValueUse::Compare
                    };
                    match crate::planner::distvalue::hash_param(col.type_oid, usage.typmod(col), ptype, bind.param_format(i), bytes) {
                    Some(h) => h,
                    None if crate::planner::distvalue::param_is_invalid(col.type_oid, ptype) => i32::MIN,
                    None => {
                        return Err(PgError::not_supported(format!(
                            "pgshard cannot route a parameter of type {ptype} for the distribution column \"{}\" (type {})",
                            col.name, col.type_oid
                        )))
                    }
                }
                }
            }
        };
        let s = r.table.shard_for_hash(hash).ok_or_else(|| {
            PgError::internal(format!(
                "no shard of \"{}\" covers hash {hash}",
                r.table.name
            ))
        })?;
        match shard {
            Some(prev) if prev.shard_id != s.shard_id => {
                return Err(PgError::not_supported(
                    "pgshard does not support an INSERT whose rows go to several shards yet",
                ))
            }
            _ => shard = Some(s),
        }
    }
    shard.ok_or_else(|| PgError::internal("statement has no shard"))
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
