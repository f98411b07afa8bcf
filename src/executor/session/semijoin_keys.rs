//! The keys of semijoins (`planner::repartition::semijoin`), read over their source's
//! shards: a reduced move's (its rows read only where they match, the keys a parameter
//! or a table on the nodes: `ship_keys`), and a staying reference's, put into the
//! renamed statement as a filter (`planner::repartition::staying`).

use super::repartition::Destinations;
use super::shipped_results::shipping_error;
use super::tasks::NodeTasks;
use super::*;
use crate::planner::repartition::{
    semijoin_key_select, Decision, RepartitionPlan, Semijoin, SEMIJOIN_MAX_KEYS,
    SEMIJOIN_MAX_KEY_BYTES, STAYING_FILTER_MAX_KEYS,
};

impl Session {
    /// The keys of each staying reference's filter (`decision.staying`), then the
    /// statement with them planned again in place of the unfiltered one. A source over
    /// `STAYING_FILTER_MAX_KEYS` keys filters nothing.
    pub(super) async fn filter_staying(
        &mut self,
        plan: &RepartitionPlan,
        decision: &mut Decision,
    ) -> PgResult<()> {
        if decision.staying.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut keys: Vec<Option<Vec<Bytes>>> = Vec::with_capacity(decision.staying.len());
        for (k, f) in decision.staying.iter().enumerate() {
            // One read per source (TPC-H Q2's partsupp and its correlated subquery's).
            let same = |other: &Semijoin| {
                other.source_rel.location == f.semijoin.source_rel.location
                    && other.source_column == f.semijoin.source_column
            };
            let read = match decision.staying[..k].iter().position(|o| same(&o.semijoin)) {
                Some(earlier) => keys[earlier].clone(),
                None => self
                    .semijoin_keys(&f.semijoin)
                    .await?
                    .filter(|k| k.len() <= STAYING_FILTER_MAX_KEYS),
            };
            keys.push(read);
        }
        if let Some((outer, outer_plan)) =
            decision.with_staying_keys(plan, &keys, &commands::is_utility_function)
        {
            decision.outer = outer;
            decision.outer_plan = outer_plan;
        }
        tracing::debug!(
            "staying references filtered by keys ({:?}) in {:?}",
            keys.iter()
                .map(|k| k.as_ref().map(|k| k.len()))
                .collect::<Vec<_>>(),
            started.elapsed()
        );
        Ok(())
    }

    /// A semijoin's distinct keys (as text) over its source's shards (each node's
    /// shards in one batch, all nodes at once); None over `SEMIJOIN_MAX_KEYS` keys or
    /// `SEMIJOIN_MAX_KEY_BYTES` bytes.
    pub(super) async fn semijoin_keys(&mut self, sj: &Semijoin) -> PgResult<Option<Vec<Bytes>>> {
        let catalog = self.shared.catalog.snapshot();
        let source = catalog.current(&sj.source_table);
        let mut tasks: Vec<NodeTasks> = Vec::new();
        let shards = match source.method {
            crate::catalog::PartitionMethod::Hash => &source.shards[..],
            _ => &source.shards[..source.shards.len().min(1)],
        };
        for shard in shards {
            let addr = placement_addr(&catalog, shard)?;
            NodeTasks::of(&mut tasks, &addr).push(semijoin_key_select(sj, shard.shard_id)?);
        }
        let mut keys: std::collections::HashSet<Bytes> = std::collections::HashSet::new();
        let mut bytes = 0usize;
        let mut over = false;
        let mut on_reply = |f: Frame, _: &mut ResultSink| -> PgResult<()> {
            if f.tag != b'D' || over {
                return Ok(());
            }
            if let Some(Some(k)) = msg::decode_data_row(&f.body)?.into_iter().next() {
                bytes += k.len() + 3;
                keys.insert(k);
                over = keys.len() > SEMIJOIN_MAX_KEYS || bytes > SEMIJOIN_MAX_KEY_BYTES;
            }
            Ok(())
        };
        self.run_own_tasks(&tasks, &mut on_reply).await?;
        if over {
            tracing::debug!("semijoin on {} given up: over the cap of keys", sj.column);
            return Ok(None);
        }
        Ok(Some(keys.into_iter().collect()))
    }

    /// A semijoin's keys as the table `pgshard_intermediate.<move>_keys (k <type>)` on
    /// each of `nodes` (made, copied and analyzed in the statement's transaction,
    /// dropped with the moved tables): the reduced reads join it, its statistics
    /// letting the nodes hash the keys once per read instead of probing an index once
    /// per key (an array parameter's distinct count is unknown: 200) or estimating
    /// `= ANY` key by key (40 ms a shard for 40,000 keys). Returns its name as SQL.
    pub(super) async fn ship_keys(
        &mut self,
        nodes: &[NodeAddr],
        move_name: &str,
        definition: &str,
        keys: &[Bytes],
        made: &mut Vec<(NodeAddr, String)>,
    ) -> PgResult<String> {
        let table = format!(
            "{}.{}",
            quote_ident(crate::planner::repartition::MOVED_SCHEMA),
            quote_ident(&format!("{move_name}_keys"))
        );
        let create = format!("CREATE UNLOGGED TABLE {table} (k {definition})");
        for addr in nodes {
            self.ensure_shipped_schema(addr).await?;
            let idx = self.bulk_conn(addr, true).await?;
            self.tx.held[idx]
                .conn
                .simple(&create)
                .await
                .map_err(|e| shipping_error(e, addr, &create))?;
            made.push((addr.clone(), table.clone()));
        }
        let mut rows = BytesMut::new();
        for k in keys {
            crate::sql::copy_format::write_text_row(&[Some(&k[..])], &mut rows);
        }
        let dest = Destinations {
            tables: nodes.iter().map(|a| (a.clone(), table.clone())).collect(),
            by_shard: Vec::new(),
        };
        self.flush_moved(&dest, &mut [rows], 0).await?;
        let mut tasks: Vec<NodeTasks> = Vec::new();
        for addr in nodes {
            NodeTasks::of(&mut tasks, addr).push(format!("ANALYZE {table}"));
        }
        self.run_tasks_quietly(&tasks).await?;
        Ok(table)
    }
}
