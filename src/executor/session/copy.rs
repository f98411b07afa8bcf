//! COPY of distributed tables inside one client session:
//! - COPY FROM STDIN: rows split by `sql::copy_format`, hashed, buffered per shard and
//!   sent in chunks (`COPY shard FROM STDIN` + data + CopyDone, pipelined) over the
//!   session's one connection per node, all in one distributed transaction;
//! - COPY TO STDOUT: one COPY per shard, outputs concatenated (one header/trailer).

use super::bulk::{binary_is_exact, error_with_context, null_key_error};
use super::copy_sequences::SequenceFill;
use super::*;
use crate::catalog::{DistTable, PartitionMethod};
use crate::planner::copy::{CopyInPlan, CopyOutPlan, CopyOutSource};
use crate::planner::distvalue::input_is_exact;
use crate::sharding::hash::{self};
use crate::sql::copy_format::{self as cf, CopyFormat, KeySpec, KeyValue, Next};
use crate::sql::quote::quote_qualified;

/// Rows buffered for one shard before they are sent.
const CHUNK_BYTES: usize = 512 * 1024;
/// Chunks sent to one node before pgshard waits for the oldest one's answer.
const MAX_IN_FLIGHT: usize = 3;
/// A log line every this many rows.
const PROGRESS_EVERY: u64 = 1_000_000;

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

/// A COPY of rows with `columns` into every shard of `table`, nothing sent yet. A
/// reference table has one slot per placement (every row goes to each), in the order
/// its writes take the placements (`reference_nodes`).
pub(super) fn copy_state(
    table: &Arc<DistTable>,
    columns: &[String],
    with: &str,
    binary: bool,
    catalog: &Catalog,
) -> PgResult<CopyState> {
    let col_list: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
    let sql = |shard_id| {
        format!(
            "COPY {} ({}) FROM STDIN WITH {with}",
            quote_qualified(&table.schema, &table.shard_name(shard_id)),
            col_list.join(", ")
        )
    };
    let reference = table.method == PartitionMethod::Reference;
    let (copy_sql, addrs): (Vec<String>, Vec<NodeAddr>) = if reference {
        let shard = table.shards.first().ok_or_else(|| {
            PgError::internal(format!("reference table \"{}\" has no shard", table.name))
        })?;
        let nodes = super::reference_write::reference_nodes(catalog, table)?;
        (vec![sql(shard.shard_id); nodes.len()], nodes)
    } else {
        (
            table.shards.iter().map(|s| sql(s.shard_id)).collect(),
            table
                .shards
                .iter()
                .map(|s| placement_addr(catalog, s))
                .collect::<PgResult<_>>()?,
        )
    };
    Ok(CopyState {
        buffers: addrs
            .iter()
            .map(|_| ShardBuffer {
                data: BytesMut::new(),
                rows: 0,
            })
            .collect(),
        copy_sql,
        addrs,
        conns: Vec::new(),
        copied: 0,
        error: None,
        binary,
        reference,
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
    /// A reference table: every row to every slot (placement); rows counted once.
    reference: bool,
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

    // ---- COPY FROM STDIN -------------------------------------------------

    pub(super) async fn copy_in(
        &mut self,
        plan: &CopyInPlan,
        extended: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let table = catalog.current(&plan.table);
        let reference = table.method == PartitionMethod::Reference;
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
        // Columns filled from a sequence: their values appended to each row.
        let mut fill = self.copy_sequence_fill(&table, &columns, opts).await?;
        let client_columns = columns.len();
        let mut columns = columns;
        if let Some(f) = &fill {
            columns.extend(f.columns.iter().cloned());
        }
        // A reference table's rows go to every placement as they are: a column left
        // to a non-immutable default would differ between placements.
        if reference {
            let used = crate::planner::DefaultUse::AllExcept(columns.clone());
            if let Some((column, name)) = self.volatile_default(&table, &used).await? {
                return Err(PgError::not_supported(format!(
                    "pgshard does not support COPY into the reference table \"{}\" that fills \
                     column \"{column}\" with its default, which calls the non-immutable \
                     function {name}(): each placement would compute its own value; give the \
                     column a value",
                    table.name
                )));
            }
        }
        // Reference tables have no distribution column: rows are split, not routed.
        let key_index = match &table.dist_column {
            Some(col) => match columns.iter().position(|c| *c == col.name) {
                Some(i) => i,
                None => return Err(null_key_error(&table)),
            },
            None => 0,
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
        let key_name = table.dist_column.as_ref().map(|c| c.name.as_str());
        let key = KeySpec {
            index: key_index,
            force_null: key_name.is_some_and(|n| opts.force_null.iter().any(|f| f == n)),
            force_not_null: key_name.is_some_and(|n| opts.force_not_null.iter().any(|f| f == n)),
        };
        let own = self.begin_own_block().await?;
        let st = match reference {
            false => copy_state(
                &table,
                &columns,
                &opts.shard_options(false),
                binary,
                &catalog,
            ),
            true => {
                self.reference_copy_state(&plan.table, &columns, &opts.shard_options(false), binary)
                    .await
            }
        };
        let mut st = match st {
            Ok(st) => st,
            Err(e) => {
                self.end_own_block(own, false, extended).await.ok();
                return Err(e);
            }
        };
        // CopyInResponse: the client's format for every column.
        let mut g = BytesMut::new();
        g.extend_from_slice(&[binary as u8]);
        g.extend_from_slice(&(client_columns as i16).to_be_bytes());
        for _ in 0..client_columns {
            g.extend_from_slice(&(binary as i16).to_be_bytes());
        }
        msg::write_raw(&mut self.out, b'G', &g);
        self.flush_client().await?;

        let r = self
            .copy_in_stream(&mut st, opts, key, utf8, fill.as_mut())
            .await;
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

    /// The COPY state of a reference table, its placements read after the first one
    /// is locked (ROW EXCLUSIVE, as the COPY takes it): `replicate_reference_tables`
    /// holds that placement EXCLUSIVE while it copies the table to a new node, until
    /// every pgshard process has the new placement, so a COPY that gets the lock sees
    /// it.
    async fn reference_copy_state(
        &mut self,
        table: &Arc<DistTable>,
        columns: &[String],
        with: &str,
        binary: bool,
    ) -> PgResult<CopyState> {
        let catalog = self.shared.catalog.snapshot();
        let table = catalog.current(table);
        let first = super::reference_write::reference_nodes(&catalog, &table)?
            .into_iter()
            .next()
            .ok_or_else(|| {
                PgError::internal(format!(
                    "reference table \"{}\" has no placement",
                    table.name
                ))
            })?;
        let shard = table.shards.first().expect("reference_nodes found it");
        let lock = format!(
            "LOCK TABLE {} IN ROW EXCLUSIVE MODE",
            quote_qualified(&table.schema, &table.shard_name(shard.shard_id))
        );
        let idx = self.bulk_conn(&first, true).await?;
        self.tx.held[idx].wrote = true;
        self.tx.held[idx].conn.simple(&lock).await.map_err(|e| {
            e.in_context(&format!(
                "while locking shard {} on node {first}",
                shard.shard_id
            ))
        })?;
        let catalog = self.shared.catalog.snapshot();
        copy_state(&catalog.current(&table), columns, with, binary, &catalog)
    }

    /// Reads the client's data to its end, routing rows; on failure the rest of the
    /// data is read and dropped, then the error returned.
    async fn copy_in_stream(
        &mut self,
        st: &mut CopyState,
        opts: &cf::CopyOptions,
        key: KeySpec,
        utf8: bool,
        mut fill: Option<&mut SequenceFill>,
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
            let r = match fill.as_deref_mut() {
                Some(fill) => {
                    self.fill_copy_rows(fill, &f.body, &mut pending, opts, eof)
                        .await
                }
                None => {
                    pending.extend_from_slice(&f.body);
                    Ok(())
                }
            };
            if let Err(e) = r {
                failure = Some(e);
                break;
            }
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
            // The slots the row goes to: its shard's, or every placement's.
            let (first, last) = if st.reference {
                (0, st.buffers.len())
            } else {
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
                (slot, slot + 1)
            };
            for b in &mut st.buffers[first..last] {
                if b.data.is_empty() && st.binary {
                    b.data.extend_from_slice(cf::BINARY_SIGNATURE);
                    b.data.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
                }
                b.data.extend_from_slice(&pending[at..at + len]);
                b.rows += 1;
            }
            at += len;
            *rows += 1;
            if *rows % PROGRESS_EVERY == 0 {
                // Progress for the client (a NOTICE) and the log.
                let text = format!("{rows} rows routed to the shards of \"{}\"", st.table.name);
                tracing::info!("{text}");
                msg::write_notice(&mut self.out, &text);
                self.flush_client().await?;
            }
            if st.buffers[first].data.len() >= CHUNK_BYTES {
                // Earlier rows of `pending` are consumed before the (awaiting) send.
                let _ = pending.split_to(at);
                at = 0;
                for slot in first..last {
                    self.send_chunk(st, slot).await?;
                    if st.error.is_some() {
                        return Ok(());
                    }
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
                // A reference table's rows are counted on its first placement.
                b'C' if !st.reference || slot == 0 => {
                    st.copied += msg::command_rows(&f.body);
                }
                b'E' => {
                    if st.error.is_none() {
                        let shard = st.table.shards[if st.reference { 0 } else { slot }].shard_id;
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
}
