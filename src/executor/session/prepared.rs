//! A client's prepared statements as PostgreSQL keeps them.
//!
//! - A named statement (protocol Parse with a name) that runs on the coordinator node
//!   is prepared under the client's own name on the client's own coordinator-node
//!   connection: it shows in `pg_prepared_statements` there, SQL `EXECUTE` finds it,
//!   Close / `DEALLOCATE` / `DISCARD ALL` / the session's end drop it, and after DDL
//!   changing its result type PostgreSQL's plan cache refuses it (0A000 "cached plan
//!   must not change result type"), as for a client of PostgreSQL.
//! - Statements pgshard runs elsewhere (routed to a shard, multi-shard, ...) are
//!   described on the coordinator node at Parse. When the catalog changed since, the
//!   statement is described again before its next Bind, and a changed result shape
//!   gets the same 0A000 as PostgreSQL's, until the client prepares it again.

use super::*;

impl Session {
    /// Prepares `sql` as the client's statement `name` on the client's own
    /// coordinator-node connection and describes it.
    pub(super) async fn prepare_on_home(
        &mut self,
        name: &str,
        sql: &str,
        types: &[u32],
    ) -> PgResult<StatementMeta> {
        self.describe_named_on_coordinator(name, sql, types).await
    }

    /// Queues a Close of the client's statement `name` on its own coordinator-node
    /// connection (answered there: CloseComplete).
    pub(super) async fn close_on_home(&mut self, name: &str) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        let idx = self.join(&coord, false).await?;
        let h = &mut self.tx.held[idx];
        msg::write_close(&mut h.conn.wbuf, b'S', name);
        h.dirty = true;
        self.pending.push_back(Expect::One(coord));
        Ok(())
    }

    /// After a catalog change: `Err(0A000)` when the statement's result shape is no
    /// longer the one described at its Parse. The coordinator node's own statements
    /// are checked by PostgreSQL itself; a failed block cannot describe (the Bind
    /// gets 25P02 anyway).
    pub(super) async fn check_result_shape(&mut self, p: &Prepared, plan: &Plan) -> PgResult<()> {
        let described = described_on_coordinator(plan);
        let home = p.home_name.is_some() && matches!(plan, Plan::Local);
        if !described || home || self.tx.state == TxnState::Failed {
            return Ok(());
        }
        let now = self
            .describe_on_coordinator(&p.sql, &p.meta.param_types)
            .await?;
        if same_result_shape(p.meta.fields.as_deref(), now.fields.as_deref()) {
            Ok(())
        } else {
            Err(PgError::new(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "cached plan must not change result type",
            ))
        }
    }
}

/// Plans whose statement the coordinator node describes (its shell tables make the
/// description exact); pgshard describes the others itself.
pub(super) fn described_on_coordinator(plan: &Plan) -> bool {
    matches!(
        plan,
        Plan::Local
            | Plan::Router(_)
            | Plan::MultiShard(_)
            | Plan::InsertRows(_)
            | Plan::MultiShardModify(_)
            | Plan::Explain(_)
            | Plan::ReferenceWrite { .. }
            | Plan::InsertViaCoordinator(_)
            | Plan::InsertIntoLocal(_)
            | Plan::CreateTableAs(_)
            | Plan::InsertSelect(_)
            | Plan::Recursive(_)
            | Plan::Repartition(_)
            | Plan::FunctionCall(_)
            | Plan::ModifyRecursive(_)
            | Plan::ModifyingCte(_)
    )
}

/// PostgreSQL's test for a cached plan's result (`equalTupleDescs` on what a
/// RowDescription carries): the same columns, names, types and type modifiers.
fn same_result_shape(before: Option<&[FieldDesc]>, now: Option<&[FieldDesc]>) -> bool {
    match (before, now) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    x.name == y.name && x.type_oid == y.type_oid && x.type_mod == y.type_mod
                })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, type_oid: u32, type_mod: i32) -> FieldDesc {
        FieldDesc {
            type_mod,
            ..FieldDesc::computed(name, type_oid, 4, 0)
        }
    }

    #[test]
    fn result_shapes_compare_as_postgresql_does() {
        let ab = [field("a", 23, -1), field("b", 23, -1)];
        assert!(same_result_shape(Some(&ab), Some(&ab)));
        assert!(same_result_shape(None, None));
        assert!(!same_result_shape(Some(&ab), None));
        assert!(!same_result_shape(Some(&ab), Some(&ab[..1])));
        assert!(!same_result_shape(
            Some(&ab),
            Some(&[field("a", 23, -1), field("c", 23, -1)])
        ));
        assert!(!same_result_shape(
            Some(&ab),
            Some(&[field("a", 23, -1), field("b", 20, -1)])
        ));
        let varchar = [field("v", 1043, 14)];
        assert!(!same_result_shape(
            Some(&varchar),
            Some(&[field("v", 1043, 24)])
        ));
        // The format a portal asks for is not part of the statement's shape.
        let mut binary = field("v", 1043, 14);
        binary.format = 1;
        assert!(same_result_shape(Some(&varchar), Some(&[binary])));
    }
}
