//! Loading rows into the new shards of a table: the worker connections that create
//! the shards, receive their rows by COPY and then add constraints, indexes and the
//! table's owner/ACL/policies (each connection one transaction, prepared by the
//! caller's 2PC), and the router that splits a COPY stream of `hash<TAB>row` lines by
//! shard. Used by `create_distributed_table` (rows of the local table) and
//! `alter_distributed_table` (rows of the old shards).

use super::distribute::{
    copy_in_sql, create_shard_table_sql, shard_post_load_sql, split_copy_line, NodeInfo, ShardPlan,
    TableDef,
};
use super::privileges::{self, TableSecurity};
use super::twopc::{self, Participant};
use super::{abbreviate, db_err};
use crate::backend::control;
use crate::catalog::{shard_table_name, GroupId, ShardInterval};
use crate::config::Config;
use crate::error::{sqlstate, PgError};
use crate::sharding::ranges::ShardIndexer;
use crate::sql::quote::quote_qualified;
use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

/// Connections (each its own prepared transaction) per worker for loading shards.
pub const COPY_CONNECTIONS_PER_WORKER: usize = 2;
/// Bytes of rows buffered per shard before they are sent as one COPY.
const FLUSH_BYTES: usize = 256 * 1024;
/// Chunks queued per worker connection (back-pressure on the reader).
const SLOT_QUEUE: usize = 8;
/// A progress NOTICE every this many rows.
const PROGRESS_ROWS: u64 = 100_000;

/// The work of one worker connection.
pub(crate) struct SlotPlan {
    host: String,
    port: u16,
    group: GroupId,
    shards: Vec<SlotShard>,
    security: Arc<TableSecurity>,
}

struct SlotShard {
    /// Index of the shard in the table's shard list.
    index: usize,
    shard_id: i64,
    qualified: String,
    create_sql: String,
    copy_sql: String,
    post_sql: Vec<String>,
}

/// Spreads each worker's shard placements over up to
/// `COPY_CONNECTIONS_PER_WORKER` connections; one per worker when the table has
/// foreign keys: adding a key locks its referenced shard in SHARE ROW EXCLUSIVE mode,
/// which conflicts with itself, so two connections of one load adding keys to the
/// same reference shard would wait on each other until the whole load commits.
pub(crate) fn plan_slots(
    def: &TableDef,
    shards: &[ShardPlan],
    nodes: &HashMap<GroupId, &NodeInfo>,
) -> Result<Vec<SlotPlan>, PgError> {
    let mut per_group: BTreeMap<GroupId, Vec<usize>> = BTreeMap::new();
    for (i, s) in shards.iter().enumerate() {
        for g in &s.groups {
            per_group.entry(*g).or_default().push(i);
        }
    }
    let mut slots = Vec::new();
    let security = Arc::new(def.security.clone());
    for (group, indexes) in per_group {
        let node = nodes[&group];
        let per_worker = if def.foreign_keys.is_empty() {
            COPY_CONNECTIONS_PER_WORKER
        } else {
            1
        };
        let count = indexes.len().min(per_worker);
        let mut group_slots: Vec<SlotPlan> = (0..count)
            .map(|_| SlotPlan {
                host: node.host.clone(),
                port: node.port,
                group,
                shards: Vec::new(),
                security: security.clone(),
            })
            .collect();
        for (j, i) in indexes.into_iter().enumerate() {
            let id = shards[i].shard_id;
            group_slots[j % count].shards.push(SlotShard {
                index: i,
                shard_id: id,
                qualified: quote_qualified(&def.schema, &shard_table_name(&def.name, id)),
                create_sql: create_shard_table_sql(def, id),
                copy_sql: copy_in_sql(def, id),
                post_sql: shard_post_load_sql(def, id)?,
            });
        }
        slots.extend(group_slots);
    }
    Ok(slots)
}

fn aborted() -> PgError {
    PgError::new(
        sqlstate::QUERY_CANCELED,
        "canceled because another part of the operation failed",
    )
}

fn statement_error(
    shard: &SlotShard,
    host: &str,
    port: u16,
    sql: &str,
    e: &tokio_postgres::Error,
) -> PgError {
    PgError::from_client_error(
        &format!(
            "shard {} (id {}) on node {host}:{port}, statement \"{}\"",
            shard.qualified,
            shard.shard_id,
            abbreviate(sql)
        ),
        e,
    )
}

/// One worker connection: creates its shards, loads the chunks it receives, adds
/// constraints and indexes, and returns the connection still inside its transaction.
async fn run_slot(
    cfg: Arc<Config>,
    slot: SlotPlan,
    mut rx: mpsc::Receiver<(usize, Bytes)>,
    abort: Arc<AtomicBool>,
) -> Result<Participant, PgError> {
    let client = control::connect(&cfg, &slot.host, slot.port).await?;
    client
        .batch_execute("BEGIN")
        .await
        .map_err(db_err(&format!(
            "cannot begin on node {}:{}",
            slot.host, slot.port
        )))?;
    for shard in &slot.shards {
        if abort.load(Ordering::Relaxed) {
            return Err(aborted());
        }
        client
            .batch_execute(&shard.create_sql)
            .await
            .map_err(|e| statement_error(shard, &slot.host, slot.port, &shard.create_sql, &e))?;
    }
    let by_index: HashMap<usize, &SlotShard> = slot.shards.iter().map(|s| (s.index, s)).collect();
    while let Some((index, chunk)) = rx.recv().await {
        if abort.load(Ordering::Relaxed) {
            return Err(aborted());
        }
        let shard = by_index[&index];
        let copy = async {
            let sink = client.copy_in::<_, Bytes>(shard.copy_sql.as_str()).await?;
            futures_util::pin_mut!(sink);
            sink.send(chunk).await?;
            sink.finish().await
        };
        copy.await
            .map_err(|e| statement_error(shard, &slot.host, slot.port, &shard.copy_sql, &e))?;
    }
    for shard in &slot.shards {
        for sql in &shard.post_sql {
            if abort.load(Ordering::Relaxed) {
                return Err(aborted());
            }
            client
                .batch_execute(sql)
                .await
                .map_err(|e| statement_error(shard, &slot.host, slot.port, sql, &e))?;
        }
        privileges::secure_shard(&client, &slot.security, &shard.qualified)
            .await
            .map_err(|(sql, e)| statement_error(shard, &slot.host, slot.port, &sql, &e))?;
    }
    Ok(Participant {
        host: slot.host,
        port: slot.port,
        group_id: slot.group,
        client,
        gid: None,
    })
}

/// The worker connections of a load, running: each creates its shards, then loads
/// what the [`RowRouter`]s send it until the senders are dropped.
pub(crate) struct Loading {
    abort: Arc<AtomicBool>,
    /// Shard index -> the slots holding a placement of it.
    routes: Vec<Vec<usize>>,
    senders: Vec<mpsc::Sender<(usize, Bytes)>>,
    handles: Vec<JoinHandle<Result<Participant, PgError>>>,
}

impl Loading {
    /// Starts one task per slot.
    pub(crate) fn start(cfg: &Arc<Config>, slots: Vec<SlotPlan>, shard_count: usize) -> Loading {
        let abort = Arc::new(AtomicBool::new(false));
        let mut routes: Vec<Vec<usize>> = vec![Vec::new(); shard_count];
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        for (slot_id, slot) in slots.into_iter().enumerate() {
            for s in &slot.shards {
                routes[s.index].push(slot_id);
            }
            let (tx, rx) = mpsc::channel(SLOT_QUEUE);
            senders.push(tx);
            handles.push(tokio::spawn(run_slot(cfg.clone(), slot, rx, abort.clone())));
        }
        Loading {
            abort,
            routes,
            senders,
            handles,
        }
    }

    /// A router of rows into `shards` (the new table's, in index order); `table` names
    /// the table in messages, `dist_column` its distribution column.
    pub(crate) fn router<'a>(
        &'a self,
        shards: &[ShardPlan],
        table: &str,
        dist_column: &str,
    ) -> RowRouter<'a> {
        let intervals = ShardPlan::intervals(shards);
        let indexer = ShardIndexer::for_intervals(&intervals);
        RowRouter {
            loading: self,
            position: shards
                .iter()
                .enumerate()
                .map(|(i, s)| (s.shard_id, i))
                .collect(),
            intervals,
            indexer,
            buffers: vec![BytesMut::new(); shards.len()],
            rows: 0,
            table: table.to_string(),
            dist_column: dist_column.to_string(),
        }
    }

    /// Ends the load: waits for every connection; returns the participants ready to
    /// prepare, or the first error after rolling all of them back. `fed` is the outcome
    /// of sending the rows.
    pub(crate) async fn finish(
        self,
        fed: Result<(), CopyError>,
    ) -> Result<Vec<Participant>, PgError> {
        let Loading {
            abort,
            senders,
            handles,
            ..
        } = self;
        drop(senders);
        if fed.is_err() {
            abort.store(true, Ordering::Relaxed);
        }
        let mut participants = Vec::new();
        let mut slot_error: Option<PgError> = None;
        for h in handles {
            match h.await {
                Ok(Ok(p)) => participants.push(p),
                Ok(Err(e)) => {
                    abort.store(true, Ordering::Relaxed);
                    if slot_error.is_none()
                        || slot_error
                            .as_ref()
                            .is_some_and(|s| s.code == sqlstate::QUERY_CANCELED)
                    {
                        slot_error = Some(e);
                    }
                }
                Err(e) => {
                    abort.store(true, Ordering::Relaxed);
                    slot_error.get_or_insert_with(|| {
                        PgError::internal(format!("shard loading task failed: {e}"))
                    });
                }
            }
        }
        let error = match (fed, slot_error) {
            (Err(CopyError::Own(e)), _) => Some(e),
            (_, Some(e)) => Some(e),
            (Err(CopyError::SlotGone), None) => Some(PgError::internal(
                "a shard loading connection ended unexpectedly",
            )),
            (Ok(()), None) => None,
        };
        if let Some(e) = error {
            twopc::abort(&participants).await;
            return Err(e);
        }
        Ok(participants)
    }
}

/// Why sending rows stopped.
pub(crate) enum CopyError {
    /// The reader's own failure (NULL distribution value, source error).
    Own(PgError),
    /// A worker connection stopped receiving: its own error explains why.
    SlotGone,
}

impl From<PgError> for CopyError {
    fn from(e: PgError) -> Self {
        CopyError::Own(e)
    }
}

/// Splits `hash<TAB>row` COPY lines by the shard covering the hash and sends them,
/// in chunks per shard, to the connections holding that shard.
pub(crate) struct RowRouter<'a> {
    loading: &'a Loading,
    intervals: Vec<ShardInterval>,
    indexer: ShardIndexer,
    position: HashMap<i64, usize>,
    buffers: Vec<BytesMut>,
    rows: u64,
    table: String,
    dist_column: String,
}

impl RowRouter<'_> {
    /// Rows routed so far.
    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    async fn flush(&mut self, index: usize) -> Result<(), CopyError> {
        if self.buffers[index].is_empty() {
            return Ok(());
        }
        let chunk = self.buffers[index].split().freeze();
        for &slot in &self.loading.routes[index] {
            self.loading.senders[slot]
                .send((index, chunk.clone()))
                .await
                .map_err(|_| CopyError::SlotGone)?;
        }
        Ok(())
    }

    /// Sends what is still buffered.
    pub(crate) async fn flush_all(&mut self) -> Result<(), CopyError> {
        for index in 0..self.buffers.len() {
            self.flush(index).await?;
        }
        Ok(())
    }

    /// Reads `sql` (a `COPY (SELECT hash, cols ...) TO STDOUT`) from `source` and routes
    /// its rows; `what` names the source in errors. A progress NOTICE every
    /// `PROGRESS_ROWS` rows goes to `notices`.
    pub(crate) async fn route_copy(
        &mut self,
        source: &Client,
        sql: &str,
        what: &str,
        notices: &mpsc::UnboundedSender<String>,
    ) -> Result<(), CopyError> {
        let read_err = |e: tokio_postgres::Error| {
            PgError::from_client_error(&format!("cannot read {what}"), &e)
        };
        let stream = source.copy_out(sql).await.map_err(read_err)?;
        futures_util::pin_mut!(stream);
        let mut carry = BytesMut::new();
        while let Some(chunk) = stream.next().await {
            carry.extend_from_slice(&chunk.map_err(read_err)?);
            let mut start = 0;
            while let Some(nl) = carry[start..].iter().position(|&b| b == b'\n') {
                let line = &carry[start..start + nl + 1];
                start += nl + 1;
                let (hash, row) = split_copy_line(line)?;
                let hash = hash.ok_or_else(|| {
                    PgError::new(
                        sqlstate::NOT_NULL_VIOLATION,
                        format!(
                            "the partition column of table {} cannot be NULL",
                            self.table
                        ),
                    )
                    .with_detail(format!(
                        "A row of {what} has NULL in column \"{}\".",
                        self.dist_column
                    ))
                })?;
                let index = self
                    .indexer
                    .find(&self.intervals, hash)
                    .and_then(|s| self.position.get(&s.shard_id).copied())
                    .ok_or_else(|| {
                        PgError::internal(format!(
                            "no shard of {} covers hash value {hash}",
                            self.table
                        ))
                    })?;
                self.buffers[index].extend_from_slice(row);
                self.rows += 1;
                if self.buffers[index].len() >= FLUSH_BYTES {
                    // `carry` is borrowed by `line` only up to here.
                    self.flush(index).await?;
                }
                if self.rows % PROGRESS_ROWS == 0 {
                    let _ = notices.send(format!("Copied {} rows...", self.rows));
                }
            }
            let _ = carry.split_to(start);
        }
        Ok(())
    }
}

/// Streams the local rows of `def` (the coordinator node's table, read by `coord`)
/// into the load's shards.
pub(crate) async fn copy_local_rows(
    loading: &Loading,
    coord: &Client,
    sql: &str,
    shards: &[ShardPlan],
    table: &str,
    dist_column: &str,
    notices: &mpsc::UnboundedSender<String>,
) -> Result<(), CopyError> {
    let started = Instant::now();
    let mut router = loading.router(shards, table, dist_column);
    router
        .route_copy(coord, sql, &format!("the rows of {table}"), notices)
        .await?;
    router.flush_all().await?;
    let _ = notices.send(format!(
        "Copied {} rows from local table {table} in {:.1} s",
        router.rows(),
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}
