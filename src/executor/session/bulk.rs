//! Bulk writes and reads of distributed tables inside one client session:
//! - COPY FROM STDIN: rows split by `sql::copy_format`, hashed, buffered per shard and
//!   sent in chunks (`COPY shard FROM STDIN` + data + CopyDone, pipelined) over the
//!   session's one connection per node, all in one distributed transaction;
//! - COPY TO STDOUT: one COPY per shard, outputs concatenated (one header/trailer);
//! - multi-row INSERT: one INSERT per shard holding its rows, run in parallel;
//! - INSERT ... SELECT between co-located tables: one statement per shard index;
//! - writes on reference tables: the statement on every placement, node by node.
//!   When the session has no transaction block and several nodes are written, pgshard
//!   opens one of its own, committed with 2PC (or 1PC if the session chose it).

use super::*;
use crate::catalog::DistTable;
use crate::planner::copy::{CopyInPlan, CopyOutPlan, CopyOutSource};
use crate::planner::distvalue::{hash_param, input_is_exact, param_is_invalid};
use crate::planner::insert::{eval_int, InsertRowsPlan, RowKey};
use crate::planner::insert_select::{InsertSelectPlan, InsertViaCoordinatorPlan};
use crate::planner::template::ShardSqlTemplate;
use crate::planner::DefaultUse;
use crate::sharding::hash::{self, oid};
use crate::sql::copy_format::{self as cf, CopyFormat, KeySpec, KeyValue, Next};
use crate::sql::quote::quote_qualified;

/// Rows buffered for one shard before they are sent.
const CHUNK_BYTES: usize = 512 * 1024;
/// Chunks sent to one node before pgshard waits for the oldest one's answer.
const MAX_IN_FLIGHT: usize = 3;
/// A log line every this many rows.
const PROGRESS_EVERY: u64 = 1_000_000;

/// The nodes holding a reference table's placements, in group order.
pub(super) fn reference_nodes(catalog: &Catalog, table: &DistTable) -> PgResult<Vec<NodeAddr>> {
    let shard = table.shards.first().ok_or_else(|| {
        PgError::internal(format!("reference table \"{}\" has no shard", table.name))
    })?;
    let mut groups = shard.placement_groups.clone();
    groups.sort_unstable();
    let mut nodes = Vec::new();
    for g in groups {
        let n = catalog.placement_node(shard.shard_id, g)?;
        nodes.push(NodeAddr {
            host: n.host.clone(),
            port: n.port,
        });
    }
    Ok(nodes)
}

/// Rebuilds a server's ErrorResponse with `context` added to its CONTEXT field.
pub(super) fn error_with_context(raw: &[u8], context: &str) -> PgError {
    let mut fields: Vec<(u8, Vec<u8>)> = Vec::new();
    let mut rest = raw;
    while let Some((&t, tail)) = rest.split_first() {
        if t == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        fields.push((t, tail[..end].to_vec()));
        rest = tail.get(end + 1..).unwrap_or(&[]);
    }
    match fields.iter_mut().find(|(t, _)| *t == b'W') {
        Some((_, v)) => {
            v.push(b'\n');
            v.extend_from_slice(context.as_bytes());
        }
        None => fields.push((b'W', context.as_bytes().to_vec())),
    }
    let mut out = Vec::new();
    for (t, v) in fields {
        out.push(t);
        out.extend_from_slice(&v);
        out.push(0);
    }
    out.push(0);
    PgError::from_server_fields(Bytes::from(out))
}

/// The SQL name of a type pgshard routes by, for casts it generates.
fn type_sql_name(t: u32) -> Option<&'static str> {
    Some(match t {
        oid::INT2 => "pg_catalog.int2",
        oid::INT4 => "pg_catalog.int4",
        oid::INT8 => "pg_catalog.int8",
        oid::TEXT => "pg_catalog.text",
        oid::VARCHAR => "pg_catalog.varchar",
        oid::BPCHAR => "pg_catalog.bpchar",
        oid::UUID => "pg_catalog.uuid",
        oid::BOOL => "pg_catalog.bool",
        oid::NUMERIC => "pg_catalog.numeric",
        oid::DATE => "pg_catalog.date",
        oid::TIMESTAMP => "pg_catalog.timestamp",
        oid::TIMESTAMPTZ => "pg_catalog.timestamptz",
        oid::TIME => "pg_catalog.time",
        oid::TIMETZ => "pg_catalog.timetz",
        oid::INTERVAL => "pg_catalog.interval",
        oid::OID => "pg_catalog.oid",
        oid::NAME => "pg_catalog.name",
        oid::FLOAT4 => "pg_catalog.float4",
        oid::FLOAT8 => "pg_catalog.float8",
        _ => return None,
    })
}

/// Types whose binary form `hash::hash_binary_value_typmod` reads exactly (None from it
/// then means PostgreSQL refuses the value).
fn binary_is_exact(t: u32) -> bool {
    matches!(
        t,
        oid::INT2
            | oid::INT4
            | oid::INT8
            | oid::OID
            | oid::TEXT
            | oid::VARCHAR
            | oid::BPCHAR
            | oid::NAME
            | oid::CHAR
            | oid::BOOL
            | oid::UUID
            | oid::DATE
            | oid::TIMESTAMP
            | oid::TIMESTAMPTZ
            | oid::NUMERIC
    )
}

fn int_width(t: u32) -> Option<u8> {
    match t {
        oid::INT2 => Some(2),
        oid::INT4 => Some(4),
        oid::INT8 => Some(8),
        _ => None,
    }
}

pub(super) fn null_key_error(table: &DistTable) -> PgError {
    PgError::new(
        sqlstate::NOT_NULL_VIOLATION,
        format!(
            "the partition column of table {}.{} cannot be NULL",
            table.schema, table.name
        ),
    )
}

/// Whether a client encoding keeps ASCII bytes unambiguous (PostgreSQL's
/// "encoding embeds ASCII" ones do not: a trail byte may look like `\` or `,`).
pub(super) fn encoding_is_ascii_safe(enc: &str) -> bool {
    let e: String = enc
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_uppercase();
    !matches!(
        e.as_str(),
        "SJIS" | "SHIFTJIS2004" | "BIG5" | "GBK" | "UHC" | "GB18030" | "JOHAB"
    )
}

pub(super) fn encoding_is_utf8(enc: &str) -> bool {
    let e: String = enc
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_uppercase();
    matches!(e.as_str(), "UTF8" | "UNICODE")
}

/// One shard's rows waiting to be sent.
struct ShardBuffer {
    data: BytesMut,
    rows: u64,
}

/// A COPY of rows with `columns` into every shard of `table`, nothing sent yet.
pub(super) fn copy_state(
    table: &Arc<DistTable>,
    columns: &[String],
    with: &str,
    binary: bool,
    catalog: &Catalog,
) -> PgResult<CopyState> {
    let col_list: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
    Ok(CopyState {
        copy_sql: table
            .shards
            .iter()
            .map(|s| {
                format!(
                    "COPY {} ({}) FROM STDIN WITH {with}",
                    quote_qualified(&table.schema, &table.shard_name(s.shard_id)),
                    col_list.join(", ")
                )
            })
            .collect(),
        addrs: table
            .shards
            .iter()
            .map(|s| placement_addr(catalog, s))
            .collect::<PgResult<_>>()?,
        buffers: table
            .shards
            .iter()
            .map(|_| ShardBuffer {
                data: BytesMut::new(),
                rows: 0,
            })
            .collect(),
        conns: Vec::new(),
        copied: 0,
        error: None,
        binary,
        table: table.clone(),
    })
}

pub(super) struct CopyState {
    table: Arc<DistTable>,
    copy_sql: Vec<String>,
    addrs: Vec<NodeAddr>,
    buffers: Vec<ShardBuffer>,
    /// Held-connection index per node, and the shards of its chunks in flight.
    conns: Vec<(NodeAddr, usize, VecDeque<usize>)>,
    pub(super) copied: u64,
    pub(super) error: Option<PgError>,
    binary: bool,
}

impl Session {
    /// The session's client encoding (its startup parameter or last SET).
    pub(super) fn client_encoding(&self) -> String {
        let mut enc = "UTF8".to_string();
        for s in &self.settings {
            let lower = s.to_ascii_lowercase();
            if lower.contains("client_encoding") {
                if let Some(v) = s.rsplit('\'').nth(1) {
                    enc = v.to_string();
                } else if let Some(v) = s.split_whitespace().last() {
                    enc = v.trim_matches(';').to_string();
                }
            }
        }
        enc
    }

    /// The columns a COPY without a column list reads: every non-generated one.
    pub(super) async fn copy_columns(&mut self, table: &DistTable) -> PgResult<Vec<String>> {
        let coord = self.shared.coordinator.clone();
        let mut conn = self.shared.pools.node(&coord).acquire().await?;
        let sql = format!(
            "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = {} AND attnum > 0 \
             AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
            table.relid
        );
        conn.simple_column(&sql).await
    }

    /// Opens pgshard's own transaction block when the session has none.
    pub(super) async fn begin_own_block(&mut self) -> PgResult<bool> {
        if self.tx.state != TxnState::Idle {
            return Ok(false);
        }
        self.upgrade_to_implicit_block().await?;
        Ok(true)
    }

    /// Ends pgshard's own block: at once in the simple protocol; at Sync in the
    /// extended protocol (the block then ends with the client's batch).
    pub(super) async fn end_own_block(
        &mut self,
        own: bool,
        ok: bool,
        extended: bool,
    ) -> PgResult<()> {
        if !own || extended {
            return Ok(());
        }
        self.tx.implicit_block = false;
        self.finish_transaction(ok).await
    }

    /// The held connection to `addr` for a bulk operation, BEGIN (if any) answered.
    pub(super) async fn bulk_conn(&mut self, addr: &NodeAddr, write: bool) -> PgResult<usize> {
        let idx = self.join(addr, write).await?;
        self.drain_all().await?;
        if self.batch_error {
            return Err(aborted_error());
        }
        Ok(idx)
    }

    // ---- COPY FROM STDIN -------------------------------------------------

    pub(super) async fn copy_in(
        &mut self,
        plan: &CopyInPlan,
        extended: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let table = catalog.current(&plan.table);
        let col = table.dist_column.clone().expect("planned with a column");
        let opts = &plan.options;
        let columns = if plan.columns.is_empty() {
            self.copy_columns(&table).await?
        } else {
            for c in &plan.columns {
                if !table.columns.contains(c) {
                    return Err(PgError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!(
                            "column \"{c}\" of relation \"{}\" does not exist",
                            table.name
                        ),
                    ));
                }
            }
            plan.columns.clone()
        };
        let Some(key_index) = columns.iter().position(|c| *c == col.name) else {
            return Err(null_key_error(&table));
        };
        let enc = opts
            .encoding
            .clone()
            .unwrap_or_else(|| self.client_encoding());
        if !encoding_is_ascii_safe(&enc) {
            return Err(PgError::not_supported(format!(
                "pgshard does not support COPY into distributed tables in encoding {enc}"
            )));
        }
        let utf8 = encoding_is_utf8(&enc);
        let binary = opts.format == CopyFormat::Binary;
        // Every type routes: values pgshard does not read itself are hashed by
        // PostgreSQL on the coordinator node (`hash_on_coordinator`).
        let key = KeySpec {
            index: key_index,
            force_null: opts.force_null.contains(&col.name),
            force_not_null: opts.force_not_null.contains(&col.name),
        };
        let mut st = copy_state(
            &table,
            &columns,
            &opts.shard_options(false),
            binary,
            &catalog,
        )?;
        let own = self.begin_own_block().await?;
        // CopyInResponse: the client's format for every column.
        let mut g = BytesMut::new();
        g.extend_from_slice(&[binary as u8]);
        g.extend_from_slice(&(columns.len() as i16).to_be_bytes());
        for _ in &columns {
            g.extend_from_slice(&(binary as i16).to_be_bytes());
        }
        msg::write_raw(&mut self.out, b'G', &g);
        self.flush_client().await?;

        let r = self.copy_in_stream(&mut st, opts, key, utf8).await;
        let r = match r {
            Ok(()) => match st.error.take() {
                Some(e) => Err(e),
                None => Ok(()),
            },
            Err(e) => Err(e),
        };
        match r {
            Ok(()) => {
                self.end_own_block(own, true, extended).await?;
                sink.complete(&format!("COPY {}", st.copied));
                Ok(())
            }
            Err(e) => {
                self.end_own_block(own, false, extended).await.ok();
                Err(e)
            }
        }
    }

    /// Reads the client's data to its end, routing rows; on failure the rest of the
    /// data is read and dropped, then the error returned.
    async fn copy_in_stream(
        &mut self,
        st: &mut CopyState,
        opts: &cf::CopyOptions,
        key: KeySpec,
        utf8: bool,
    ) -> PgResult<()> {
        let mut pending = BytesMut::new();
        let mut header_left = opts.header;
        let mut binary_header = st.binary;
        let mut ended = false;
        let mut failure: Option<PgError> = None;
        let mut rows: u64 = 0;
        loop {
            let Some(f) = self.reader.frame().await? else {
                return Err(PgError::new(
                    sqlstate::CONNECTION_FAILURE,
                    "client connection lost during COPY",
                ));
            };
            let eof = match f.tag {
                b'd' => false,
                b'c' => true,
                b'f' => {
                    let m = String::from_utf8_lossy(f.body.strip_suffix(&[0]).unwrap_or(&f.body))
                        .into_owned();
                    failure.get_or_insert(PgError::new(
                        sqlstate::QUERY_CANCELED,
                        format!("COPY from stdin failed: {m}"),
                    ));
                    break;
                }
                b'H' | b'S' => continue,
                other => {
                    failure.get_or_insert(PgError::new(
                        sqlstate::PROTOCOL_VIOLATION,
                        format!("unexpected message type 0x{other:02x} during COPY from stdin"),
                    ));
                    break;
                }
            };
            if ended {
                if eof {
                    break;
                }
                continue;
            }
            pending.extend_from_slice(&f.body);
            let r = self
                .route_rows(
                    st,
                    &mut pending,
                    opts,
                    key,
                    utf8,
                    eof,
                    &mut header_left,
                    &mut binary_header,
                    &mut ended,
                    &mut rows,
                )
                .await;
            if let Err(e) = r {
                failure = Some(e);
            }
            if failure.is_some() || st.error.is_some() {
                // As PostgreSQL: the error goes to the client at once, without waiting
                // for the rest of the data (its remaining COPY messages are ignored).
                break;
            }
            if eof {
                if failure.is_none() && st.error.is_none() && binary_header && !pending.is_empty() {
                    failure = Some(PgError::new(
                        "22P04",
                        "invalid COPY file header (missing flags)",
                    ));
                }
                if failure.is_none() && st.error.is_none() && !pending.is_empty() && !ended {
                    failure = Some(PgError::new("22P04", "unexpected EOF in COPY data"));
                }
                break;
            }
        }
        self.finish_copy(st, failure).await
    }

    /// Sends the rows still buffered (unless something failed) and reads every
    /// node's answers, even after a failure (the connections stay usable); returns
    /// the first failure, pgshard's or a node's.
    pub(super) async fn finish_copy(
        &mut self,
        st: &mut CopyState,
        mut failure: Option<PgError>,
    ) -> PgResult<()> {
        if failure.is_none() && st.error.is_none() {
            for slot in 0..st.buffers.len() {
                if st.buffers[slot].rows > 0 {
                    if let Err(e) = self.send_chunk(st, slot).await {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        for c in 0..st.conns.len() {
            while !st.conns[c].2.is_empty() {
                self.read_chunk_reply(st, c).await?;
            }
        }
        match failure.or_else(|| st.error.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn route_rows(
        &mut self,
        st: &mut CopyState,
        pending: &mut BytesMut,
        opts: &cf::CopyOptions,
        key: KeySpec,
        utf8: bool,
        eof: bool,
        header_left: &mut bool,
        binary_header: &mut bool,
        ended: &mut bool,
        rows: &mut u64,
    ) -> PgResult<()> {
        let mut at = 0;
        let col_type = st
            .table
            .dist_column
            .as_ref()
            .map(|c| c.type_oid)
            .unwrap_or(0);
        let exact_text = input_is_exact(col_type);
        let col_typmod = st
            .table
            .dist_column
            .as_ref()
            .map(|c| c.typmod)
            .unwrap_or(-1);
        if *binary_header {
            match cf::binary_header_len(pending)? {
                Some(n) => {
                    at = n;
                    *binary_header = false;
                }
                None => return Ok(()),
            }
        }
        loop {
            let buf = &pending[at..];
            let next = match opts.format {
                CopyFormat::Text => cf::next_text_row(buf, eof, opts, key),
                CopyFormat::Csv => cf::next_csv_row(buf, eof, opts, key),
                CopyFormat::Binary => cf::next_binary_row(buf, key.index)?,
            };
            let (len, kv) = match next {
                Next::NeedMore => break,
                Next::End { .. } => {
                    *ended = true;
                    at = pending.len();
                    break;
                }
                Next::Row { len, key } => (len, key),
            };
            if *header_left {
                *header_left = false;
                at += len;
                continue;
            }
            let h = match kv {
                KeyValue::Null => return Err(null_key_error(&st.table)),
                // Malformed rows go to any one shard: PostgreSQL reports them exactly.
                KeyValue::Missing => i32::MIN,
                KeyValue::Value(v) => {
                    if !utf8 && !v.is_ascii() {
                        return Err(PgError::not_supported(
                            "pgshard routes COPY rows with non-ASCII distribution values only in UTF8",
                        ));
                    }
                    // COPY reads the value with the column's typmod (numeric(10,1) rounds).
                    let hashed = if st.binary {
                        hash::hash_binary_value_typmod(col_type, col_typmod, &v)
                    } else {
                        match std::str::from_utf8(&v) {
                            Ok(s) => hash::hash_text_value_typmod(col_type, col_typmod, s),
                            Err(_) => Some(i32::MIN),
                        }
                    };
                    let rust_is_exact = if st.binary {
                        binary_is_exact(col_type)
                    } else {
                        exact_text
                    };
                    match hashed {
                        Some(h) => h,
                        None if rust_is_exact => i32::MIN,
                        // Values pgshard does not read itself (timestamptz text, time,
                        // interval, other spellings): PostgreSQL hashes them.
                        None => {
                            let col = st.table.dist_column.clone().expect("routed by a column");
                            self.hash_on_coordinator(&col, &v, st.binary)
                                .await?
                                .unwrap_or(i32::MIN)
                        }
                    }
                }
            };
            let shard = st
                .table
                .shard_for_hash(h)
                .ok_or_else(|| PgError::internal(format!("no shard covers hash {h}")))?;
            let slot = st
                .table
                .shards
                .iter()
                .position(|s| s.shard_id == shard.shard_id)
                .expect("shard of the table");
            let b = &mut st.buffers[slot];
            if b.data.is_empty() && st.binary {
                b.data.extend_from_slice(cf::BINARY_SIGNATURE);
                b.data.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
            }
            b.data.extend_from_slice(&pending[at..at + len]);
            b.rows += 1;
            at += len;
            *rows += 1;
            if *rows % PROGRESS_EVERY == 0 {
                // Progress for the client (a NOTICE) and the log.
                let text = format!("{rows} rows routed to the shards of \"{}\"", st.table.name);
                tracing::info!("{text}");
                msg::write_notice(&mut self.out, &text);
                self.flush_client().await?;
            }
            if b.data.len() >= CHUNK_BYTES {
                // Earlier rows of `pending` are consumed before the (awaiting) send.
                let _ = pending.split_to(at);
                at = 0;
                self.send_chunk(st, slot).await?;
                if st.error.is_some() {
                    return Ok(());
                }
            }
        }
        let _ = pending.split_to(at.min(pending.len()));
        Ok(())
    }

    /// Sends one shard's buffered rows as a COPY on its node's connection.
    async fn send_chunk(&mut self, st: &mut CopyState, slot: usize) -> PgResult<()> {
        let addr = st.addrs[slot].clone();
        let c = match st.conns.iter().position(|(a, _, _)| *a == addr) {
            Some(c) => c,
            None => {
                let idx = self.bulk_conn(&addr, true).await?;
                st.conns.push((addr.clone(), idx, VecDeque::new()));
                st.conns.len() - 1
            }
        };
        let idx = st.conns[c].1;
        let mut data = std::mem::take(&mut st.buffers[slot].data);
        st.buffers[slot].rows = 0;
        if st.binary {
            data.extend_from_slice(&[0xff, 0xff]);
        }
        let h = &mut self.tx.held[idx];
        h.wrote = true;
        msg::write_query(&mut h.conn.wbuf, &st.copy_sql[slot]);
        for piece in data.chunks(256 * 1024) {
            msg::write_raw(&mut h.conn.wbuf, b'd', piece);
        }
        msg::write_raw(&mut h.conn.wbuf, b'c', &[]);
        h.conn.flush().await?;
        st.conns[c].2.push_back(slot);
        while st.conns[c].2.len() > MAX_IN_FLIGHT {
            self.read_chunk_reply(st, c).await?;
        }
        Ok(())
    }

    /// Reads the answer to the oldest chunk in flight on connection `c`.
    async fn read_chunk_reply(&mut self, st: &mut CopyState, c: usize) -> PgResult<()> {
        let idx = st.conns[c].1;
        let slot = st.conns[c].2.pop_front().expect("a chunk in flight");
        loop {
            let f = self.tx.held[idx].conn.read().await?;
            match f.tag {
                b'C' => {
                    st.copied += msg::command_rows(&f.body);
                }
                b'E' => {
                    if st.error.is_none() {
                        let shard = st.table.shards[slot].shard_id;
                        st.error = Some(error_with_context(
                            &f.body,
                            &format!(
                                "while copying into shard {} on node {}",
                                st.table.shard_name(shard),
                                st.conns[c].0
                            ),
                        ));
                    }
                }
                b'Z' => return Ok(()),
                _ => {}
            }
        }
    }

    // ---- COPY TO STDOUT ----------------------------------------------------

    pub(super) async fn copy_out(
        &mut self,
        plan: &CopyOutPlan,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let opts = &plan.options;
        let binary = opts.format == CopyFormat::Binary;
        // (node, COPY statement) per shard, in shard order.
        let mut work: Vec<(NodeAddr, String)> = Vec::new();
        let sql = |inner: String, first: bool| {
            format!("COPY {inner} TO STDOUT WITH {}", opts.shard_options(first))
        };
        match &plan.source {
            CopyOutSource::Table { table, columns } => {
                let table = catalog.current(&table);
                let cols = if columns.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({})",
                        columns
                            .iter()
                            .map(|c| quote_ident(c))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                for (i, s) in table.shards.iter().enumerate() {
                    let name = quote_qualified(&table.schema, &table.shard_name(s.shard_id));
                    work.push((
                        placement_addr(&catalog, s)?,
                        sql(format!("{name}{cols}"), i == 0),
                    ));
                }
            }
            CopyOutSource::Router(r) => {
                let shard = route_bound(r, &[], &BindMsg::default_empty(), &catalog)?;
                work.push((
                    placement_addr(&catalog, shard)?,
                    sql(format!("({})", r.template.for_shard(shard.shard_id)), true),
                ));
            }
            CopyOutSource::MultiShard(m) => {
                for (i, s) in m.table.shards.iter().enumerate() {
                    work.push((
                        placement_addr(&catalog, s)?,
                        sql(format!("({})", m.template.for_shard(s.shard_id)), i == 0),
                    ));
                }
            }
        }
        // Every node gets all its statements at once; answers are read in shard order.
        let mut idxs = Vec::with_capacity(work.len());
        for (addr, _) in &work {
            idxs.push(self.bulk_conn(addr, false).await?);
        }
        for ((_, q), &idx) in work.iter().zip(idxs.iter()) {
            msg::write_query(&mut self.tx.held[idx].conn.wbuf, q);
        }
        for &idx in &idxs {
            self.tx.held[idx].conn.flush().await?;
        }
        let mut err: Option<PgError> = None;
        let mut total: u64 = 0;
        for (i, &idx) in idxs.iter().enumerate() {
            // Binary: each shard's stream opens with a header (kept for the first shard
            // only) and ends with a trailer (dropped: one is added at the very end), so
            // one message is held back until the shard's CopyDone shows it is the last.
            let mut first_data = true;
            let mut held_back: Option<Bytes> = None;
            loop {
                let f = self.tx.held[idx].conn.read().await?;
                match f.tag {
                    b'H' if i == 0 && err.is_none() => msg::write_raw(&mut self.out, b'H', &f.body),
                    b'd' if err.is_none() && !binary => {
                        msg::write_raw(&mut self.out, b'd', &f.body);
                        if self.out.len() >= CLIENT_FLUSH_AT {
                            self.flush_client().await?;
                        }
                    }
                    b'd' if err.is_none() => {
                        let mut body = f.body;
                        if first_data {
                            first_data = false;
                            if i > 0 {
                                let n = cf::binary_header_len(&body)?.ok_or_else(|| {
                                    PgError::internal("binary COPY header split across messages")
                                })?;
                                body = body.slice(n..);
                            }
                        }
                        if let Some(prev) = held_back.replace(body) {
                            msg::write_raw(&mut self.out, b'd', &prev);
                        }
                        if self.out.len() >= CLIENT_FLUSH_AT {
                            self.flush_client().await?;
                        }
                    }
                    b'c' => {
                        if let Some(last) = held_back.take() {
                            let body = last.strip_suffix(&[0xff, 0xff]).unwrap_or(&last);
                            if !body.is_empty() {
                                msg::write_raw(&mut self.out, b'd', body);
                            }
                        }
                    }
                    b'C' => total += msg::command_rows(&f.body),
                    b'E' => {
                        if err.is_none() {
                            err = Some(error_with_context(
                                &f.body,
                                &format!("while copying from node {}", self.tx.held[idx].conn.addr),
                            ));
                        }
                    }
                    b'Z' => break,
                    _ => {}
                }
            }
        }
        for &idx in &idxs {
            self.tx.held[idx].in_batch = false;
        }
        if let Some(e) = err {
            return Err(e);
        }
        if binary {
            msg::write_raw(&mut self.out, b'd', &[0xff, 0xff]);
        }
        msg::write_raw(&mut self.out, b'c', &[]);
        sink.complete(&format!("COPY {total}"));
        Ok(())
    }

    // ---- multi-row INSERT ----------------------------------------------------

    /// The hash of each row's distribution value, and the text replacing the key
    /// expressions evaluated on the coordinator node.
    async fn insert_row_hashes(
        &mut self,
        plan: &InsertRowsPlan,
        params: &BoundParams<'_>,
    ) -> PgResult<(Vec<i32>, Vec<(usize, String)>)> {
        let table = &plan.table;
        let col = table
            .dist_column
            .clone()
            .expect("insert plans have a column");
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        let mut hashes = vec![0i32; plan.keys.len()];
        let mut evaluate: Vec<(usize, usize, usize)> = Vec::new();
        for (r, k) in plan.keys.iter().enumerate() {
            hashes[r] = match k {
                RowKey::Source(ValueSource::Hash(h)) => *h,
                RowKey::Source(ValueSource::Null) => return Err(null_key_error(table)),
                RowKey::Source(ValueSource::Invalid) => i32::MIN,
                RowKey::Source(ValueSource::Param(i)) => {
                    let Some(Some(bytes)) = bind.params.get(*i) else {
                        return Err(null_key_error(table));
                    };
                    let ptype = params.types.get(*i).copied().unwrap_or(0);
                    match hash_param(
                        col.type_oid,
                        col.typmod,
                        ptype,
                        bind.param_format(*i),
                        bytes,
                    ) {
                        Some(h) => h,
                        None if param_is_invalid(col.type_oid, ptype) => i32::MIN,
                        // Another type (a domain, time, interval...): PostgreSQL hashes it.
                        None => {
                            let bytes = bytes.clone();
                            self.hash_stored_on_coordinator(
                                &col,
                                &bytes,
                                bind.param_format(*i) == 1,
                                ptype,
                                true,
                            )
                            .await?
                            .unwrap_or(i32::MIN)
                        }
                    }
                }
                RowKey::Fold(e) => {
                    let param = |i: usize| -> Option<(u8, i64)> {
                        let w = int_width(params.types.get(i).copied()?)?;
                        let bytes = bind.params.get(i)?.as_ref()?;
                        let v = if bind.param_format(i) == 0 {
                            std::str::from_utf8(bytes).ok()?.trim().parse().ok()?
                        } else {
                            match bytes.len() {
                                2 => i16::from_be_bytes(bytes[..].try_into().ok()?) as i64,
                                4 => i32::from_be_bytes(bytes[..].try_into().ok()?) as i64,
                                8 => i64::from_be_bytes(bytes[..].try_into().ok()?),
                                _ => return None,
                            }
                        };
                        Some((w, v))
                    };
                    match eval_int(e, &param)? {
                        Some((_, v)) => {
                            let w = int_width(col.type_oid).expect("folded for integer columns");
                            match hash::hash_text_value(col.type_oid, &v.to_string()) {
                                Some(h) => h,
                                None => return Err(crate::planner::insert::out_of_range(w)),
                            }
                        }
                        None => {
                            // Not foldable with these values (NULL, other types): evaluate.
                            let items =
                                crate::planner::insert::item_spans(&plan.text, plan.rows[r]);
                            let (s, e) = items[plan.key_position];
                            evaluate.push((r, s, e));
                            0
                        }
                    }
                }
                RowKey::Evaluate { start, end } => {
                    evaluate.push((r, *start, *end));
                    0
                }
            };
        }
        let mut replace = Vec::new();
        if evaluate.is_empty() {
            return Ok((hashes, replace));
        }
        // The value as the bare type is what the shard's INSERT receives (it coerces it to
        // the column itself, errors included); the hash is PostgreSQL's own of the value
        // coerced to the column's type, typmod and domain (`OFFSET 0`: each expression
        // is evaluated once, volatile ones included).
        let tname = match (type_sql_name(col.type_oid), col.typmod) {
            (Some(t), _) => t.to_string(),
            (None, -1) if !col.type_sql.is_empty() => col.type_sql.clone(),
            _ => {
                return Err(PgError::not_supported(format!(
                    "pgshard cannot compute expressions for the distribution column \"{}\" of this type",
                    col.name
                )))
            }
        };
        let exprs: Vec<String> = evaluate
            .iter()
            .enumerate()
            .map(|(i, (_, s, e))| format!("CAST(({}) AS {tname}) AS v{i}", &plan.text[*s..*e]))
            .collect();
        let outputs: Vec<String> = (0..evaluate.len())
            .map(|i| {
                format!(
                    "v{i}::text, {}",
                    hash::hash_sql_expression(
                        col.type_oid,
                        &format!("CAST(v{i} AS {})", col.type_sql)
                    )
                )
            })
            .collect();
        let sql = format!(
            "SELECT {} FROM (SELECT {} OFFSET 0) AS pgshard_keys",
            outputs.join(", "),
            exprs.join(", ")
        );
        let values = self.evaluate_on_coordinator(&sql, params).await?;
        for (k, (r, _, _)) in evaluate.iter().enumerate() {
            let (Some(Some(v)), Some(Some(h))) = (values.get(2 * k), values.get(2 * k + 1)) else {
                return Err(null_key_error(table));
            };
            hashes[*r] = h.parse::<i32>().map_err(|_| {
                PgError::internal(format!("unexpected hash {h:?} from the coordinator node"))
            })?;
            replace.push((*r, format!("CAST({} AS {tname})", quote_literal(v))));
        }
        Ok((hashes, replace))
    }

    /// The hash PostgreSQL computes for a stored distribution value given in COPY text
    /// or binary form (cast to the column's type, typmod and domain as storing does).
    /// None: PostgreSQL refuses the value (any one shard then reports its own error).
    pub(super) async fn hash_on_coordinator(
        &mut self,
        col: &crate::catalog::DistColumn,
        value: &[u8],
        binary: bool,
    ) -> PgResult<Option<i32>> {
        let value_type = if binary { col.type_oid } else { oid::TEXT };
        self.hash_stored_on_coordinator(col, value, binary, value_type, true)
            .await
    }

    /// As `hash_on_coordinator`, for a value of type `value_type` (a bound parameter:
    /// a domain, a type pgshard does not read). `store: false`: the value is compared,
    /// not stored, and `value_type` is the column's base type: hashed as it is.
    pub(super) async fn hash_stored_on_coordinator(
        &mut self,
        col: &crate::catalog::DistColumn,
        value: &[u8],
        binary: bool,
        value_type: u32,
        store: bool,
    ) -> PgResult<Option<i32>> {
        let arg = if store {
            format!("CAST($1 AS {})", col.type_sql)
        } else {
            "$1".to_string()
        };
        let sql = format!("SELECT {}", hash::hash_sql_expression(col.type_oid, &arg));
        let types = [value_type];
        let bind = BindMsg {
            portal: String::new(),
            statement: String::new(),
            param_formats: vec![i16::from(binary)],
            params: vec![Some(Bytes::copy_from_slice(value))],
            result_formats: vec![],
        };
        let params = BoundParams {
            types: &types,
            bind: Some(&bind),
        };
        match self.evaluate_on_coordinator(&sql, &params).await {
            Ok(row) => Ok(row
                .first()
                .cloned()
                .flatten()
                .and_then(|h| h.parse::<i32>().ok())),
            // Data exceptions and constraint violations (a domain's CHECK): the value.
            Err(e) if e.code.starts_with("22") || e.code.starts_with("23") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Runs one row-returning statement on the coordinator node with the statement's
    /// parameters bound, returning the first row's values as text.
    async fn evaluate_on_coordinator(
        &mut self,
        sql: &str,
        params: &BoundParams<'_>,
    ) -> PgResult<Vec<Option<String>>> {
        let coord = self.shared.coordinator.clone();
        let mut conn = self.private_conn(&coord).await?;
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        msg::write_unnamed_run(&mut conn.wbuf, sql, params.types, bind, &[], false);
        msg::write_sync(&mut conn.wbuf);
        conn.flush().await?;
        let mut row = Vec::new();
        let mut err = None;
        loop {
            let f = conn.read().await?;
            match f.tag {
                b'D' => {
                    row = msg::decode_data_row(&f.body)?
                        .into_iter()
                        .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
                        .collect()
                }
                b'E' => err = Some(PgError::from_server_fields(f.body)),
                b'Z' => break,
                _ => {}
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(row),
        }
    }

    pub(super) async fn insert_rows(
        &mut self,
        plan: &InsertRowsPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let table = &plan.table;
        let (hashes, replace) = self.insert_row_hashes(plan, params).await?;
        // Rows per shard, in the order the shards first appear.
        let mut groups: Vec<(&ShardInterval, Vec<usize>)> = Vec::new();
        for (r, h) in hashes.iter().enumerate() {
            let s = table.shard_for_hash(*h).ok_or_else(|| {
                PgError::internal(format!("no shard of \"{}\" covers hash {h}", table.name))
            })?;
            match groups.iter_mut().find(|(g, _)| g.shard_id == s.shard_id) {
                Some((_, rows)) => rows.push(r),
                None => groups.push((s, vec![r])),
            }
        }
        let mut by_node: Vec<(NodeAddr, Vec<String>)> = Vec::new();
        for (s, rows) in &groups {
            let sql = if groups.len() == 1 && replace.is_empty() {
                plan.whole.for_shard(s.shard_id)
            } else {
                plan.shard_sql(s.shard_id, rows, &replace)
            };
            let addr = placement_addr(&catalog, s)?;
            match by_node.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, v)) => v.push(sql),
                None => by_node.push((addr, vec![sql])),
            }
        }
        let extended = params.bind.is_some();
        let own = if by_node.len() > 1 {
            self.begin_own_block().await?
        } else {
            false
        };
        let r = self
            .insert_on_nodes(&by_node, params, formats, describe, sink)
            .await;
        match r {
            Ok(total) => {
                self.end_own_block(own, true, extended).await?;
                sink.complete(&format!("INSERT 0 {total}"));
                Ok(())
            }
            Err(e) => {
                self.end_own_block(own, false, extended).await.ok();
                Err(e)
            }
        }
    }

    /// INSERT ... SELECT between co-located tables: one statement per shard index.
    pub(super) async fn insert_select(
        &mut self,
        plan: &InsertSelectPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        if self.calls_aggregate(&plan.functions).await? {
            return Err(PgError::not_supported(
                "pgshard does not support INSERT ... SELECT with aggregate or window functions across shards yet",
            ));
        }
        let catalog = self.shared.catalog.snapshot();
        let (target, source) = (&plan.tables[0], &plan.tables[1]);
        let mut by_node: Vec<(NodeAddr, Vec<String>)> = Vec::new();
        for i in 0..target.shards.len() {
            let addr = placement_addr(&catalog, &target.shards[i])?;
            if placement_addr(&catalog, &source.shards[i])? != addr {
                return Err(PgError::not_supported(format!(
                    "shards {} and {} of co-located tables are on different nodes",
                    target.shards[i].shard_id, source.shards[i].shard_id
                )));
            }
            let sql = plan.for_index(i);
            match by_node.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, v)) => v.push(sql),
                None => by_node.push((addr, vec![sql])),
            }
        }
        let extended = params.bind.is_some();
        let own = if by_node.len() > 1 {
            self.begin_own_block().await?
        } else {
            false
        };
        let r = self
            .insert_on_nodes(&by_node, params, formats, describe && plan.returning, sink)
            .await;
        match r {
            Ok(total) => {
                self.end_own_block(own, true, extended).await?;
                sink.complete(&format!("INSERT 0 {total}"));
                Ok(())
            }
            Err(e) => {
                self.end_own_block(own, false, extended).await.ok();
                Err(e)
            }
        }
    }

    /// A write on a reference table: the statement on every placement, one node after
    /// the other in group order, so that sessions writing the same rows queue on the
    /// first placement instead of deadlocking across nodes. It runs in the client's
    /// block or in pgshard's own; several placements commit with two-phase commit.
    /// RETURNING rows and the row count are the first placement's.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn reference_write(
        &mut self,
        table: &DistTable,
        template: &ShardSqlTemplate,
        tag: &str,
        (functions, defaults, evaluate_once): (
            &[String],
            &DefaultUse,
            Option<&InsertViaCoordinatorPlan>,
        ),
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let kinds = self.function_kinds(functions).await?;
        let non_immutable = functions
            .iter()
            .zip(&kinds)
            .find(|(_, k)| !k.is_some_and(|k| k.immutable));
        let volatile_default = match non_immutable {
            Some(_) => None,
            None => self.volatile_default(table, defaults).await?,
        };
        if let (Some(plan), true) = (
            evaluate_once,
            non_immutable.is_some() || volatile_default.is_some(),
        ) {
            // The rows computed once on the coordinator node, then copied to every
            // placement: the same values everywhere.
            return self
                .insert_via_coordinator(plan, params, formats, describe, sink)
                .await;
        }
        if let Some((name, _)) = non_immutable {
            return Err(PgError::not_supported(format!(
                "pgshard does not support calling the non-immutable function {name}() in a write \
                 to the reference table \"{}\": each placement would compute its own value",
                table.name
            )));
        }
        if let Some((column, name)) = volatile_default {
            return Err(PgError::not_supported(format!(
                "pgshard does not support a write to the reference table \"{}\" that fills \
                 column \"{column}\" with its default, which calls the non-immutable function \
                 {name}(): each placement would compute its own value; give the column a value",
                table.name
            )));
        }
        let catalog = self.shared.catalog.snapshot();
        let nodes = reference_nodes(&catalog, table)?;
        let shard = table.shards.first().expect("reference_nodes found it");
        let sql = template.for_shard(shard.shard_id);
        let extended = params.bind.is_some();
        let own = if nodes.len() > 1 {
            self.begin_own_block().await?
        } else {
            false
        };
        let mut count = None;
        let mut result = Ok(());
        for addr in nodes {
            let one = [(addr, vec![sql.clone()])];
            let r = if count.is_none() {
                self.insert_on_nodes(&one, params, formats, describe, sink)
                    .await
            } else {
                let mut ignored = ResultSink::default();
                self.insert_on_nodes(&one, params, formats, false, &mut ignored)
                    .await
            };
            match r {
                Ok(n) => {
                    count.get_or_insert(n);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if let Err(e) = result {
            self.end_own_block(own, false, extended).await.ok();
            return Err(e);
        }
        self.end_own_block(own, true, extended).await?;
        let n = count.unwrap_or(0);
        sink.complete(&if tag == "INSERT" {
            format!("INSERT 0 {n}")
        } else {
            format!("{tag} {n}")
        });
        Ok(())
    }

    /// A column the write may fill with a default that is not immutable, with the
    /// first such function its default calls.
    async fn volatile_default(
        &mut self,
        table: &DistTable,
        defaults: &DefaultUse,
    ) -> PgResult<Option<(String, String)>> {
        if *defaults == DefaultUse::Nothing {
            return Ok(None);
        }
        // Defaults (not generation expressions: PostgreSQL makes those immutable), with
        // each column's position among the live ones.
        let sql = format!(
            "SELECT x.n::text, x.attname::text, x.def FROM (\
               SELECT row_number() OVER (ORDER BY a.attnum) AS n, a.attname, a.attgenerated, \
                      pg_catalog.pg_get_expr(d.adbin, d.adrelid) AS def \
               FROM pg_catalog.pg_attribute a \
               LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
               WHERE a.attrelid = {} AND a.attnum > 0 AND NOT a.attisdropped) x \
             WHERE x.def IS NOT NULL AND x.attgenerated = ''",
            table.relid
        );
        let coord = self.shared.coordinator.clone();
        let rows = {
            let mut conn = self.shared.pools.node(&coord).acquire().await?;
            conn.simple_rows(&sql).await?
        };
        for row in rows {
            let (Some(n), Some(column), Some(def)) = (&row[0], &row[1], &row[2]) else {
                continue;
            };
            let position: usize = n.parse().unwrap_or(0);
            let used = match defaults {
                DefaultUse::Nothing => false,
                DefaultUse::Any => true,
                DefaultUse::AllExcept(given) => !given.contains(column),
                DefaultUse::AllAfter(k) => position > *k,
            };
            if !used {
                continue;
            }
            let names = match parse::parse(&format!("SELECT {def}")) {
                Ok(stmts) => stmts
                    .first()
                    .and_then(|s| s.node.as_ref())
                    .map(crate::sql::parse::function_calls)
                    .unwrap_or_default(),
                Err(_) => vec![def.clone()],
            };
            let kinds = self.function_kinds(&names).await?;
            if let Some((name, _)) = names
                .iter()
                .zip(&kinds)
                .find(|(_, k)| !k.is_some_and(|k| k.immutable))
            {
                return Ok(Some((column.clone(), name.clone())));
            }
        }
        Ok(None)
    }

    /// Runs each node's statements pipelined on the session's connection to it (all
    /// nodes at once, `tasks.rs`), RETURNING rows into `sink`; returns the rows the
    /// statements report. Errors name the node and statement.
    pub(super) async fn insert_on_nodes(
        &mut self,
        by_node: &[(NodeAddr, Vec<String>)],
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<u64> {
        let tasks: Vec<NodeTasks> = by_node
            .iter()
            .map(|(addr, sql)| NodeTasks {
                addr: addr.clone(),
                sql: sql.clone(),
            })
            .collect();
        let describe = match describe {
            true => Describe::FirstTask,
            false => Describe::None,
        };
        let mut on_reply = |f: Frame, sink: &mut ResultSink| -> PgResult<()> {
            if matches!(f.tag, b'T' | b'D') {
                sink.push_frame(f.tag, f.body);
            }
            Ok(())
        };
        self.run_tasks(&tasks, true, params, formats, describe, sink, &mut on_reply)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::error_with_context;

    #[test]
    fn context_is_added_to_server_errors() {
        let raw = b"SERROR\0C22P02\0Minvalid input\0WCOPY t_1, line 3\0\0";
        let e = error_with_context(raw, "while copying into shard t_1 on node h:1");
        assert_eq!(e.code, "22P02");
        let text = String::from_utf8_lossy(e.raw.as_ref().unwrap()).into_owned();
        assert!(text.contains("WCOPY t_1, line 3\nwhile copying into shard t_1 on node h:1\0"));
        let e = error_with_context(b"SERROR\0C23505\0Mdup\0\0", "ctx");
        assert!(String::from_utf8_lossy(e.raw.as_ref().unwrap()).contains("Wctx\0"));
    }
}
