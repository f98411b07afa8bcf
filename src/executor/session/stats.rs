//! A session's part in Citus's statistics views (`crate::stats`): counting its
//! distributed statements for `citus_stat_statements` (only while
//! `citus.stat_statements_track` is `all`), keeping its activity record current, and
//! gathering what `citus_stat_activity`, `citus_dist_stat_activity` and
//! `citus_lock_waits` show when a statement reads them: every session of this
//! process, the node backends they hold (each node's `pg_stat_activity`, read over
//! the deadlock detector's control connections as pgshard's role; the view then
//! shows the client only what its role may see), and the waits between them.

use super::*;
use crate::stats::{activity, statements, views};
use crate::transaction::deadlock::SessionBackends;

/// Citus's executor name for a plan that `citus_stat_statements` counts (None: not a
/// distributed statement: local tables, session commands, DDL, Citus functions).
fn executor_of(plan: &Plan) -> Option<&'static str> {
    match plan {
        Plan::InsertViaCoordinator(_) => Some(statements::INSERT_SELECT),
        Plan::Router(_)
        | Plan::MultiShard(_)
        | Plan::MultiShardModify(_)
        | Plan::InsertRows(_)
        | Plan::InsertSelect(_)
        | Plan::ReferenceWrite { .. }
        | Plan::Recursive(_)
        | Plan::Repartition(_)
        | Plan::ModifyRecursive(_)
        | Plan::ModifyingCte(_) => Some(statements::ADAPTIVE),
        _ => None,
    }
}

/// The routed distribution value as text: a constant of the statement, or a bound
/// parameter (text format, or a binary integer). None for anything else: several
/// shards, a reference table, NULL.
fn partition_key(plan: &Plan, bind: Option<(&BindMsg, &[u32])>) -> Option<String> {
    let Plan::Router(r) = plan else {
        return None;
    };
    if r.table.dist_column.is_none() || r.values.len() != 1 {
        return None;
    }
    match r.values[0] {
        ValueSource::Hash(_) => constant_text(&r.value_exprs.first()?.0),
        ValueSource::Param(i) => {
            let (bind, types) = bind?;
            let bytes = bind.params.get(i)?.as_ref()?;
            if bind.param_format(i) == 0 {
                return String::from_utf8(bytes.to_vec()).ok();
            }
            let b = bytes.as_ref();
            match (types.get(i).copied().unwrap_or(0), b.len()) {
                (21, 2) => Some(i16::from_be_bytes([b[0], b[1]]).to_string()),
                (23, 4) => Some(i32::from_be_bytes(b.try_into().ok()?).to_string()),
                (20, 8) => Some(i64::from_be_bytes(b.try_into().ok()?).to_string()),
                _ => None,
            }
        }
        _ => None,
    }
}

/// A constant's text (`5`, `'abc'`, `'x'::text`).
fn constant_text(node: &pg_query::protobuf::Node) -> Option<String> {
    use pg_query::protobuf::{a_const::Val, node::Node as N};
    match node.node.as_ref()? {
        N::AConst(c) => match c.val.as_ref()? {
            Val::Ival(i) => Some(i.ival.to_string()),
            Val::Fval(f) => Some(f.fval.clone()),
            Val::Sval(s) => Some(s.sval.clone()),
            Val::Bsval(s) => Some(s.bsval.clone()),
            Val::Boolval(b) => Some(if b.boolval { "true" } else { "false" }.to_string()),
        },
        N::TypeCast(t) => constant_text(t.arg.as_ref()?),
        _ => None,
    }
}

/// Who the session is for the counters, with `citus.stat_statements_max`.
pub(super) fn runner(creds: &Credentials, citus_start: &[String]) -> statements::Runner {
    let max = crate::citus_settings::SETTINGS
        .iter()
        .position(|s| s.name == "citus.stat_statements_max")
        .and_then(|i| citus_start.get(i))
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    statements::Runner {
        user: creds.user.as_str().into(),
        database: creds.database.as_str().into(),
        max,
    }
}

impl Session {
    /// Counts a statement of the simple protocol (its own text's shape).
    pub(super) fn count_statement(&self, stmt: &Statement, plan: &Plan) {
        let Some(executor) = executor_of(plan) else {
            return;
        };
        if let Some(shape) = statements::shape_of(&stmt.text) {
            statements::record(
                &shape,
                &self.stat_runner,
                executor,
                partition_key(plan, None),
            );
        }
    }

    /// Counts an execution of a prepared statement with `bind`'s parameters.
    pub(super) fn count_prepared(&self, p: &Prepared, bind: &BindMsg) {
        let Some(executor) = executor_of(&p.plan) else {
            return;
        };
        if let Some(shape) = p.text.shape() {
            let key = partition_key(&p.plan, Some((bind, &p.meta.param_types)));
            statements::record(shape, &self.stat_runner, executor, key);
        }
    }

    /// A statement (or query string) of the client starts.
    pub(super) fn activity_started(&self, query: Arc<str>) {
        activity::started(&self.activity, query);
    }

    /// The session is ready for the client's next statement.
    pub(super) fn activity_ready(&self) {
        activity::ready(
            &self.activity,
            self.tx.state != TxnState::Idle,
            self.tx.state == TxnState::Failed,
        );
    }

    /// What the statistics views show, when one of `stmts` may read one of them.
    pub(super) async fn live_views_for(&mut self, stmts: &[Statement]) -> Option<views::Live> {
        if !stmts
            .iter()
            .any(|s| s.form == Default::default() && views::mentioned(&s.text))
        {
            return None;
        }
        Some(self.gather_live().await)
    }

    async fn gather_live(&mut self) -> views::Live {
        let catalog = self.shared.catalog.snapshot();
        let coordinator = self.shared.coordinator.clone();
        let coordinator_nodeid = catalog
            .workers
            .iter()
            .find(|w| w.group_id == 0)
            .map(|w| w.node_id)
            .unwrap_or(views::NODE_NOT_IN_METADATA);
        let nodeid_of = |addr: &NodeAddr| {
            if *addr == coordinator {
                return coordinator_nodeid;
            }
            catalog
                .workers
                .iter()
                .find(|w| w.host == addr.host && w.port == addr.port)
                .map_or(0, |w| w.node_id)
        };
        let targets: Vec<(i32, CancelTargets)> = {
            let keys = self.shared.cancel_keys.lock().unwrap();
            let mut v: Vec<_> = keys.iter().map(|(&(pid, _), t)| (pid, t.clone())).collect();
            v.sort_by_key(|(pid, _)| *pid);
            v
        };
        let mut live = views::Live {
            coordinator_nodeid,
            statements: statements::snapshot(),
            ..Default::default()
        };
        let mut held: SessionBackends = Vec::new();
        for (i, (pid, t)) in targets.iter().enumerate() {
            live.sessions.push(views::SessionRow {
                pid: *pid,
                activity: t.activity.lock().unwrap().clone(),
            });
            for (addr, backend_pid, _) in t.backends.lock().unwrap().iter() {
                held.push((i, addr.clone(), *backend_pid));
            }
        }
        let mut nodes: Vec<NodeAddr> = held.iter().map(|(_, a, _)| a.clone()).collect();
        nodes.sort();
        nodes.dedup();
        if nodes.is_empty() {
            return live;
        }
        let gpid = |session: usize| views::global_pid(coordinator_nodeid, targets[session].0);
        let cfg = self.shared.cfg.clone();
        let mut clients = HashMap::new();
        for addr in &nodes {
            let pids: Vec<i32> = held
                .iter()
                .filter(|(_, a, _)| a == addr)
                .map(|(_, _, p)| *p)
                .collect();
            let rows = match deadlock::client(&cfg, &mut clients, addr).await {
                Ok(c) => c
                    .query(
                        "SELECT a.pid, pg_catalog.row_to_json(a)::pg_catalog.text \
                         FROM pg_catalog.pg_stat_activity a WHERE a.pid = ANY($1)",
                        &[&pids],
                    )
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            let rows = rows.unwrap_or_else(|e| {
                tracing::debug!("citus_stat_activity skips node {addr}: {e}");
                Vec::new()
            });
            for row in rows {
                let pid: i32 = row.get(0);
                let Some((session, _, _)) = held.iter().find(|(_, a, p)| a == addr && *p == pid)
                else {
                    continue;
                };
                if *addr == coordinator && pid == targets[*session].0 {
                    // The session's own coordinator-node backend: its row is the
                    // session's.
                    continue;
                }
                live.node_backends.push(views::NodeBackendRow {
                    global_pid: gpid(*session),
                    nodeid: nodeid_of(addr),
                    row_json: row.get(1),
                });
            }
        }
        live.waits = deadlock::session_waits(&cfg, &mut clients, &nodes, &held)
            .await
            .into_iter()
            .map(|(w, b)| (gpid(w), gpid(b)))
            .collect();
        live
    }
}
