//! Running a join planned for broadcast / repartition (`planner::repartition`): the
//! strategy decided from the nodes' row estimates and the columns' types, each moved
//! table reference's rows streamed shard → pgshard → destination nodes with COPY
//! (`COPY (SELECT needed columns[, hash] FROM shard WHERE own conjuncts) TO STDOUT`,
//! each row routed by its hash to its destination shard, `COPY ... FROM STDIN` there),
//! never through the coordinator node; then indexes on the broadcast tables' join
//! columns and `ANALYZE` of every moved table; then the renamed statement as a
//! co-located join. The moved tables are shipped results (`shipped_results.rs`): unlogged tables
//! in `pgshard_intermediate`, made in the statement's transaction (pgshard's own block
//! in autocommit), dropped when it succeeds, gone with its rollback otherwise (error,
//! cancel, a client gone mid-query), never visible to another session.
//! `citus.enable_repartition_joins = off`, or no strategy: recursive planning's plan.

use super::subplans::Run;
use super::tasks::NodeTasks;
use super::*;
use crate::planner::repartition::{
    decide, estimate_query, keys_array, move_hash, source_copy, source_select, ColumnType,
    Decision, KeysFilter, Move, MoveKind, RepartitionPlan, SEMIJOIN_PARAMETER_MAX_KEYS,
};

/// A destination's rows are copied once this many bytes wait.
const FLUSH_BYTES: usize = 1 << 20;

/// A move reduced by a few keys (a parameter of `IN (SELECT unnest($1))`) reads this
/// many shards of a node in one statement: the keys parsed and hashed once (TPC-H
/// Q20's lineitem by 2,000 keys: 1.3 s a shard at a time with `= ANY`, 0.3 s). Not
/// for many keys (a keys table, a shard at a time): PostgreSQL guesses an array's
/// distinct count at 200 and probed each shard's index once per key (Q10's 42,509
/// customers: 1.2 s, against 0.15 s).
const REDUCED_SHARDS_PER_READ: usize = 8;

/// A moved reference's destination tables: (node, table as SQL), and which of them
/// each shard's rows go to.
pub(super) struct Destinations {
    pub(super) tables: Vec<(NodeAddr, String)>,
    /// Repartition: the destination of each shard of the moved table, by position.
    /// Broadcast: empty (every table gets every row).
    pub(super) by_shard: Vec<usize>,
}

impl Session {
    /// `Plan::Repartition`: the strategy, the moves, the join, cleanup.
    pub(super) fn repartition<'a>(
        &'a mut self,
        plan: &'a RepartitionPlan,
        params: &'a BoundParams<'a>,
        formats: &'a [i16],
        describe: bool,
        sink: &'a mut ResultSink,
    ) -> Run<'a> {
        Box::pin(async move {
            if !self.enable_repartition_joins {
                return self
                    .plan_into(&plan.fallback, &plan.stmt, params, formats, describe, sink)
                    .await;
            }
            let extended = params.bind.is_some();
            let own = self.begin_own_block().await?;
            let mut made: Vec<(NodeAddr, String)> = Vec::new();
            let mut done = self
                .repartition_in_block(plan, params, formats, describe, sink, &mut made)
                .await;
            if done.is_ok() {
                let made: Vec<(NodeAddr, &str)> =
                    made.iter().map(|(a, t)| (a.clone(), t.as_str())).collect();
                done = self.drop_shipped(&made).await;
            }
            let ended = self.end_own_block(own, done.is_ok(), extended).await;
            done.and(ended)
        })
    }

    async fn repartition_in_block(
        &mut self,
        plan: &RepartitionPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
        made: &mut Vec<(NodeAddr, String)>,
    ) -> PgResult<()> {
        let started = std::time::Instant::now();
        let Some((mut decision, types)) = self.repartition_strategy(plan).await? else {
            return self
                .plan_into(&plan.fallback, &plan.stmt, params, formats, describe, sink)
                .await;
        };
        let decided = started.elapsed();
        for m in &decision.moves {
            self.run_move(plan, m, &types, made).await?;
        }
        let moved = started.elapsed();
        self.index_and_analyze_moved(plan, &decision.moves, made)
            .await?;
        self.filter_staying(plan, &mut decision).await?;
        let analyzed = started.elapsed();
        let joined = self
            .plan_into(
                &decision.outer_plan,
                &decision.outer,
                params,
                formats,
                describe,
                sink,
            )
            .await;
        tracing::debug!(
            "repartition join: strategy {decided:?}, moves {:?}, analyze and filters {:?}, join {:?}",
            moved - decided,
            analyzed - moved,
            started.elapsed() - analyzed
        );
        joined
    }

    /// The run-time strategy and the columns' types it was decided with (None: the
    /// fallback runs).
    pub(super) async fn repartition_strategy(
        &mut self,
        plan: &RepartitionPlan,
    ) -> PgResult<Option<(Decision, HashMap<(u32, String), ColumnType>)>> {
        let types = self.join_column_types(plan).await?;
        let est = self.estimate_join_rows(plan).await?;
        let catalog = self.shared.catalog.snapshot();
        let type_of = |i: usize, c: &str| {
            types
                .get(&(plan.rels[i].table.relid, c.to_string()))
                .cloned()
        };
        Ok(decide(
            plan,
            &est,
            &type_of,
            &catalog,
            &commands::is_utility_function,
        )
        .map(|d| (d, types)))
    }

    /// Every column of the joined tables: base type, definition, hashability, read
    /// from the coordinator node's catalog (the shells) in one query.
    async fn join_column_types(
        &mut self,
        plan: &RepartitionPlan,
    ) -> PgResult<HashMap<(u32, String), ColumnType>> {
        let mut oids: Vec<String> = plan
            .rels
            .iter()
            .map(|r| r.table.relid.to_string())
            .collect();
        oids.sort();
        oids.dedup();
        let sql = format!(
            "SELECT a.attrelid, a.attname, a.atttypid, \
             pg_catalog.format_type(a.atttypid, a.atttypmod) || \
             CASE WHEN a.attcollation <> t.typcollation \
             THEN ' COLLATE ' || a.attcollation::pg_catalog.regcollation::pg_catalog.text \
             ELSE '' END, \
             t.typtype <> 'd' \
             AND (a.attcollation = 0 OR (SELECT c.collisdeterministic FROM pg_catalog.pg_collation c \
                  WHERE c.oid = a.attcollation)) \
             AND EXISTS (SELECT 1 FROM pg_catalog.pg_opclass oc WHERE oc.opcmethod = 405 \
                  AND oc.opcdefault AND (oc.opcintype = a.atttypid \
                  OR (oc.opcintype = 25 AND a.atttypid = 1043) \
                  OR (oc.opcintype = 3500 AND t.typtype = 'e'))), \
             t.typarray, \
             EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = a.attrelid \
                  AND i.indkey[0] = a.attnum) \
             FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid IN ({}) AND a.attnum > 0 AND NOT a.attisdropped",
            oids.join(", ")
        );
        let coord = self.shared.coordinator.clone();
        let idx = self.bulk_conn(&coord, false).await?;
        let rows = self.tx.held[idx].conn.simple_rows(&sql).await?;
        let mut out = HashMap::new();
        for row in rows {
            let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
            out.insert(
                (text(0).parse().unwrap_or(0), text(1)),
                ColumnType {
                    type_oid: text(2).parse().unwrap_or(0),
                    definition: text(3),
                    hashable: text(4) == "t",
                    array_oid: text(5).parse().unwrap_or(0),
                    indexed: text(6) == "t",
                },
            );
        }
        Ok(out)
    }

    /// Each reference's estimated rows: its first shard's EXPLAIN row estimate (its
    /// own conjuncts applied) times its shard count; reference tables are not moved.
    async fn estimate_join_rows(&mut self, plan: &RepartitionPlan) -> PgResult<Vec<f64>> {
        let catalog = self.shared.catalog.snapshot();
        let mut est = vec![0.0; plan.rels.len()];
        for (i, r) in plan.rels.iter().enumerate() {
            if r.table.method != crate::catalog::PartitionMethod::Hash {
                continue;
            }
            let (Some(q), Some(first)) = (estimate_query(plan, i)?, r.table.shards.first()) else {
                continue;
            };
            let addr = placement_addr(&catalog, first)?;
            let idx = self.bulk_conn(&addr, false).await?;
            let sql = format!("EXPLAIN {q}");
            let lines = self.tx.held[idx]
                .conn
                .simple_column(&sql)
                .await
                .map_err(|e| shipping_error(e, &addr, &sql))?;
            let rows = lines
                .first()
                .and_then(|l| l.split("rows=").nth(1))
                .and_then(|s| s.split_whitespace().next())
                .and_then(|n| n.parse::<f64>().ok())
                .unwrap_or(f64::MAX / 1e6);
            est[i] = rows * r.table.shards.len() as f64;
        }
        Ok(est)
    }

    /// Indexes on a broadcast table's join columns, then `ANALYZE` of the moved
    /// tables, each node's statements in one batch, all nodes at once. A broadcast
    /// table is read by every shard's task of the join: hashing all of it again for
    /// each shard (TPC-H Q5, Q8, Q10: 150,000 customers, 16 times per node) cost more
    /// than looking up the few rows a shard's own filtered side joins. Tables made in
    /// the transaction have no statistics, and PostgreSQL's default guesses (a few
    /// thousand rows) made it join millions of rows by nested loops (Q8: 29 s).
    pub(super) async fn index_and_analyze_moved(
        &mut self,
        plan: &RepartitionPlan,
        moves: &[Move],
        made: &[(NodeAddr, String)],
    ) -> PgResult<()> {
        let mut tasks: Vec<NodeTasks> = Vec::new();
        for m in moves {
            // A broadcast table is read whole by every shard's task: its join columns
            // are looked up. Any moved table is probed per outer row by the columns a
            // correlated subquery compares (`JoinRel::probed`, TPC-H Q17 / Q20).
            let mut columns: Vec<&str> =
                plan.rels[m.rel].probed.iter().map(String::as_str).collect();
            // Only the join columns a staying distributed reference's rows look up: a
            // reference table or another moved one is hashed whole anyway (TPC-H Q5's
            // and Q8's `c_nationkey`: 150,000 rows indexed for nothing).
            let looked_up_by = |other: usize| {
                plan.rels[other].table.method == crate::catalog::PartitionMethod::Hash
                    && moves.iter().all(|o| o.rel != other)
            };
            if m.kind == MoveKind::Broadcast {
                columns.extend(plan.equalities.iter().filter_map(|e| {
                    match (e.a.0 == m.rel, e.b.0 == m.rel) {
                        (true, false) if looked_up_by(e.b.0) => Some(e.a.1.as_str()),
                        (false, true) if looked_up_by(e.a.0) => Some(e.b.1.as_str()),
                        _ => None,
                    }
                }));
            }
            columns.retain(|c| m.table.columns.iter().any(|t| t == c));
            columns.sort_unstable();
            columns.dedup();
            for shard in &m.table.shards {
                let table = format!(
                    "{}.{}",
                    quote_ident(&m.table.schema),
                    quote_ident(&m.table.shard_name(shard.shard_id))
                );
                for addr in made.iter().filter(|(_, t)| *t == table).map(|(a, _)| a) {
                    let sql = NodeTasks::of(&mut tasks, addr);
                    for c in &columns {
                        sql.push(format!("CREATE INDEX ON {table} ({})", quote_ident(c)));
                    }
                }
            }
        }
        for (addr, table) in made {
            let sql = NodeTasks::of(&mut tasks, addr);
            match sql.last_mut() {
                Some(last) if last.starts_with("ANALYZE ") => last.push_str(&format!(", {table}")),
                _ => sql.push(format!("ANALYZE {table}")),
            }
        }
        self.run_tasks_quietly(&tasks).await
    }

    /// One moved reference: its destination tables made, its rows copied there. A
    /// move reduced by a semijoin reads its source's keys first and then only the rows
    /// matching them (a few keys a parameter, more a table on each source node:
    /// `ship_keys`); over the cap of keys it reads every row.
    pub(super) async fn run_move(
        &mut self,
        plan: &RepartitionPlan,
        m: &Move,
        types: &HashMap<(u32, String), ColumnType>,
        made: &mut Vec<(NodeAddr, String)>,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let source = catalog.current(&plan.rels[m.rel].table);
        let started = std::time::Instant::now();
        let dest = self.make_destinations(m, types, made).await?;
        let made_at = started.elapsed();
        let keys = match &m.semijoin {
            Some(sj) => self.semijoin_keys(sj).await?,
            None => None,
        };
        let keys_at = started.elapsed();
        if keys.as_ref().is_some_and(|k| k.is_empty()) {
            // No key: no row of the moved reference matters.
            return Ok(());
        }
        let (mut reading_time, mut rows) = (std::time::Duration::ZERO, 0usize);
        let mut buffers: Vec<BytesMut> = match m.kind {
            MoveKind::Broadcast => vec![BytesMut::new()],
            MoveKind::Repartition { .. } => dest.tables.iter().map(|_| BytesMut::new()).collect(),
        };
        let position: HashMap<i64, usize> = m
            .table
            .shards
            .iter()
            .enumerate()
            .map(|(i, s)| (s.shard_id, i))
            .collect();
        // The buffer a row goes to by its hash's text (NULL keys match nothing: any
        // shard keeps them).
        let target = |hash: Option<&[u8]>| -> usize {
            if dest.by_shard.is_empty() {
                return 0;
            }
            let at = hash
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| h.parse::<i32>().ok())
                .and_then(|h| m.table.shard_for_hash(h))
                .and_then(|s| position.get(&s.shard_id).copied())
                .unwrap_or(0);
            dest.by_shard[at]
        };
        let hashed = matches!(m.kind, MoveKind::Repartition { .. });
        // A few keys are a parameter (typed: `IN (SELECT unnest($1))` over
        // `REDUCED_SHARDS_PER_READ` shards at once; untyped: `= ANY ($1)`); more go
        // into a keys table on every source node (`ship_keys`).
        let few = keys
            .as_ref()
            .filter(|k| k.len() <= SEMIJOIN_PARAMETER_MAX_KEYS);
        let array_oid = match (few, &m.semijoin) {
            (Some(_), Some(sj)) => types
                .get(&(m.source_relid, sj.column.clone()))
                .map_or(0, |t| t.array_oid),
            _ => 0,
        };
        let per_read = match array_oid {
            0 => 1,
            _ => REDUCED_SHARDS_PER_READ,
        };
        // The source shards by node, in order: round `r` reads every node's `r`-th
        // read (a shard, or `per_read` of them) at once (memory: a read per node, then
        // the buffers are flushed).
        let mut by_node: Vec<(NodeAddr, Vec<Vec<i64>>)> = Vec::new();
        for shard in &source.shards {
            let addr = placement_addr(&catalog, shard)?;
            let reads = match by_node.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, reads)) => reads,
                None => {
                    by_node.push((addr, Vec::new()));
                    &mut by_node.last_mut().expect("pushed").1
                }
            };
            match reads.last_mut() {
                Some(ids) if ids.len() < per_read => ids.push(shard.shard_id),
                _ => reads.push(vec![shard.shard_id]),
            }
        }
        let reduction = match (&keys, few, &m.semijoin) {
            (_, Some(k), Some(sj)) => Some((
                sj,
                Reduction::Param {
                    bind: BindMsg {
                        portal: String::new(),
                        statement: String::new(),
                        param_formats: vec![],
                        params: vec![Some(keys_array(k))],
                        result_formats: vec![],
                    },
                    array_oid,
                },
            )),
            (Some(k), None, Some(sj)) => {
                let nodes: Vec<NodeAddr> = by_node.iter().map(|(a, _)| a.clone()).collect();
                // The source column's type: the keys are its values.
                let source_relid = plan.rels[sj.source].table.relid;
                let definition = types
                    .get(&(source_relid, sj.source_column.clone()))
                    .map_or("text", |t| t.definition.as_str())
                    .to_string();
                let table = self
                    .ship_keys(&nodes, &m.table.name, &definition, k, made)
                    .await?;
                Some((sj, Reduction::Table(table)))
            }
            _ => None,
        };
        let rounds = by_node.iter().map(|(_, r)| r.len()).max().unwrap_or(0);
        for round in 0..rounds {
            let mut reading: Vec<(usize, NodeAddr, String)> = Vec::new();
            for (addr, reads) in &by_node {
                let Some(shard_ids) = reads.get(round) else {
                    continue;
                };
                let read = |filter| {
                    source_select(
                        plan,
                        m.rel,
                        &m.table.columns,
                        move_hash(m),
                        shard_ids,
                        filter,
                    )
                };
                let sql = match &reduction {
                    Some((sj, Reduction::Param { array_oid, .. })) => {
                        read(Some(KeysFilter::Param {
                            column: &sj.column,
                            declared: *array_oid != 0,
                        }))?
                    }
                    Some((sj, Reduction::Table(table))) => format!(
                        "COPY ({}) TO STDOUT",
                        read(Some(KeysFilter::Query(
                            &sj.column,
                            format!("SELECT k FROM {table}")
                        )))?
                    ),
                    None => source_copy(plan, m, shard_ids[0])?,
                };
                let idx = self.bulk_conn(addr, false).await?;
                reading.push((idx, addr.clone(), sql));
            }
            for (idx, _, sql) in &reading {
                let conn = &mut self.tx.held[*idx].conn;
                match &reduction {
                    Some((_, Reduction::Param { bind, array_oid })) => {
                        let declared: &[u32] = match array_oid {
                            0 => &[],
                            _ => std::slice::from_ref(array_oid),
                        };
                        msg::write_unnamed_run(&mut conn.wbuf, sql, declared, bind, &[], false);
                        msg::write_sync(&mut conn.wbuf);
                    }
                    _ => msg::write_query(&mut conn.wbuf, sql),
                }
                conn.flush().await?;
            }
            // Every node's rows read at once, each into buffers of its own.
            let read_started = std::time::Instant::now();
            let idxs: Vec<usize> = reading.iter().map(|(i, _, _)| *i).collect();
            let reads = self
                .tx
                .held
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| idxs.contains(i))
                .map(|(i, h)| {
                    let target = &target;
                    let count = buffers.len();
                    async move {
                        let mut own: Vec<BytesMut> = (0..count).map(|_| BytesMut::new()).collect();
                        let read = read_moved_rows(&mut h.conn, hashed, target, &mut own).await;
                        (i, own, read)
                    }
                });
            for (i, own, read) in futures_util::future::join_all(reads).await {
                let (_, addr, sql) = reading.iter().find(|(x, _, _)| *x == i).expect("read");
                let (read_rows, failure) = read?;
                if let Some(e) = failure {
                    return Err(shipping_error(e, addr, sql));
                }
                rows += read_rows;
                for (b, o) in buffers.iter_mut().zip(own) {
                    b.unsplit(o);
                }
            }
            reading_time += read_started.elapsed();
            self.flush_moved(&dest, &mut buffers, FLUSH_BYTES).await?;
        }
        self.flush_moved(&dest, &mut buffers, 0).await?;
        tracing::debug!(
            "move of {} ({rows} rows): tables {made_at:?}, keys {:?}, reads {reading_time:?}, \
             total {:?}",
            m.table.name,
            keys_at - made_at,
            started.elapsed()
        );
        Ok(())
    }

    /// The destination tables of a move, made empty on their nodes (one statement
    /// per node), recorded in `made` for the drop.
    pub(super) async fn make_destinations(
        &mut self,
        m: &Move,
        types: &HashMap<(u32, String), ColumnType>,
        made: &mut Vec<(NodeAddr, String)>,
    ) -> PgResult<Destinations> {
        let snapshot = self.shared.catalog.snapshot();
        let catalog = &*snapshot;
        let definitions: Vec<String> = m
            .table
            .columns
            .iter()
            .map(|c| {
                let t = types.get(&(m.source_relid, c.clone()));
                format!(
                    "{} {}",
                    quote_ident(c),
                    t.map(|t| t.definition.as_str()).unwrap_or("text")
                )
            })
            .collect();
        let definitions = definitions.join(", ");
        let table_sql = |shard_id: i64| {
            format!(
                "{}.{}",
                quote_ident(&m.table.schema),
                quote_ident(&m.table.shard_name(shard_id))
            )
        };
        let mut tables: Vec<(NodeAddr, String)> = Vec::new();
        let mut by_shard = Vec::new();
        match m.kind {
            MoveKind::Broadcast => {
                let shard = &m.table.shards[0];
                for g in &shard.placement_groups {
                    let node = catalog.placement_node(shard.shard_id, *g)?;
                    let addr = NodeAddr {
                        host: node.host.clone(),
                        port: node.port,
                    };
                    if !tables.iter().any(|(a, _)| *a == addr) {
                        tables.push((addr, table_sql(shard.shard_id)));
                    }
                }
            }
            MoveKind::Repartition { .. } => {
                for shard in &m.table.shards {
                    by_shard.push(tables.len());
                    tables.push((placement_addr(catalog, shard)?, table_sql(shard.shard_id)));
                }
            }
        }
        let mut per_node: Vec<(NodeAddr, String)> = Vec::new();
        for (addr, table) in &tables {
            let create = format!("CREATE UNLOGGED TABLE {table} ({definitions});");
            match per_node.iter_mut().find(|(a, _)| a == addr) {
                Some((_, sql)) => sql.push_str(&create),
                None => per_node.push((addr.clone(), create)),
            }
        }
        for (addr, sql) in per_node {
            self.ensure_shipped_schema(&addr).await?;
            let idx = self.bulk_conn(&addr, true).await?;
            self.tx.held[idx]
                .conn
                .simple(&sql)
                .await
                .map_err(|e| shipping_error(e, &addr, &sql))?;
            made.extend(tables.iter().filter(|(a, _)| *a == addr).cloned());
        }
        Ok(Destinations { tables, by_shard })
    }

    /// Copies the buffered rows holding more than `min` bytes into their tables
    /// (a broadcast's one buffer into every node's table): every node's COPYs written
    /// one after the other without waiting, then their answers read.
    pub(super) async fn flush_moved(
        &mut self,
        dest: &Destinations,
        buffers: &mut [BytesMut],
        min: usize,
    ) -> PgResult<()> {
        let mut copies: Vec<(NodeAddr, String, Bytes)> = Vec::new();
        for (b, buffer) in buffers.iter_mut().enumerate() {
            if buffer.is_empty() || buffer.len() < min {
                continue;
            }
            let data = buffer.split().freeze();
            let targets: Vec<(NodeAddr, String)> = if dest.by_shard.is_empty() {
                dest.tables.clone()
            } else {
                vec![dest.tables[b].clone()]
            };
            for (addr, table) in targets {
                copies.push((addr, format!("COPY {table} FROM STDIN"), data.clone()));
            }
        }
        // Per node: its connection and the COPYs it answers, in order.
        let mut nodes: Vec<(usize, NodeAddr, Vec<String>)> = Vec::new();
        for (addr, sql, data) in copies {
            let idx = self.bulk_conn(&addr, true).await?;
            let conn = &mut self.tx.held[idx].conn;
            // A COPY the node refuses (before taking its data) ignores the data that
            // follows, as the protocol says.
            msg::write_query(&mut conn.wbuf, &sql);
            for chunk in data.chunks(256 * 1024) {
                msg::write_raw(&mut conn.wbuf, b'd', chunk);
                conn.flush().await?;
            }
            msg::write_raw(&mut conn.wbuf, b'c', &[]);
            conn.flush().await?;
            match nodes.iter_mut().find(|(i, _, _)| *i == idx) {
                Some((_, _, sqls)) => sqls.push(sql),
                None => nodes.push((idx, addr, vec![sql])),
            }
        }
        let mut failure: Option<PgError> = None;
        for (idx, addr, sqls) in nodes {
            let conn = &mut self.tx.held[idx].conn;
            for sql in &sqls {
                loop {
                    let f = conn.read().await?;
                    match f.tag {
                        b'E' if failure.is_none() => {
                            let e = PgError::from_server_fields(f.body);
                            failure = Some(shipping_error(e, &addr, sql));
                        }
                        b'Z' => break,
                        _ => {}
                    }
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// How a move's reads are reduced to a semijoin's keys.
enum Reduction {
    /// A few keys, the array parameter of every read (`array_oid` its declared type,
    /// 0: undeclared).
    Param { bind: BindMsg, array_oid: u32 },
    /// More keys, in this table on every source node (`ship_keys`).
    Table(String),
}

/// One source read's answer on `conn` (a COPY's rows, or a read with the keys as a
/// parameter's DataRows), each row into `buffers[target(its hash)]` in COPY's text
/// format (the hash, last when `hashed`, left out), up to ReadyForQuery. Returns the
/// rows read and the node's error, if any.
async fn read_moved_rows(
    conn: &mut crate::backend::PooledConn,
    hashed: bool,
    target: &(dyn Fn(Option<&[u8]>) -> usize + Sync),
    buffers: &mut [BytesMut],
) -> PgResult<(usize, Option<PgError>)> {
    let (mut rows, mut failure) = (0, None);
    loop {
        let f = conn.read().await?;
        match f.tag {
            // A COPY row: its text, the hash last.
            b'd' if failure.is_none() => {
                rows += 1;
                let row: &[u8] = &f.body;
                let body = row.strip_suffix(b"\n").unwrap_or(row);
                let (line, hash) = match hashed {
                    true => {
                        let tab = body.iter().rposition(|b| *b == b'\t').unwrap_or(0);
                        (&body[..tab], Some(&body[tab + 1..]))
                    }
                    false => (body, None),
                };
                let b = &mut buffers[target(hash)];
                b.extend_from_slice(line);
                b.extend_from_slice(b"\n");
            }
            // A row of a read with the keys as a parameter: its values, the hash last.
            b'D' if failure.is_none() => {
                rows += 1;
                let values = msg::decode_data_row(&f.body)?;
                let (values, hash) = match hashed {
                    true => match values.split_last() {
                        Some((h, v)) => (v, h.as_deref()),
                        None => (&values[..], None),
                    },
                    false => (&values[..], None),
                };
                let fields: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
                crate::sql::copy_format::write_text_row(&fields, &mut buffers[target(hash)]);
            }
            b'E' => {
                failure.get_or_insert(PgError::from_server_fields(f.body));
            }
            b'Z' => break,
            _ => {}
        }
    }
    Ok((rows, failure))
}

use super::shipped_results::shipping_error;
