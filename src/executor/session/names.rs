//! The session's answers to "which relation does this unqualified name stand for"
//! (`planner::names`): looked up with `to_regclass` on the client's own coordinator-node
//! connection, which has the client's `search_path`, role (`$user`), temporary tables and
//! block, so PostgreSQL itself decides; kept per session until something may change them.
//!
//! The answers are dropped (and the epoch bumped, so prepared statements and cached
//! simple-query shapes are planned again) when the session runs a statement that may
//! change them (`planner::names::may_change_names`: SET search_path / ROLE, DDL, ...),
//! when a block in which such a statement ran ends or rolls back to a savepoint, when the
//! catalog changes, and when another session creates, renames, moves or drops a relation
//! named like a distributed table on the coordinator node (`catalog::cache` polls them).

use super::*;
use crate::catalog::Oid;
use crate::planner::names::{may_change_names, Names};

/// A session's looked-up names.
#[derive(Default)]
pub(super) struct NameCache {
    /// Bumped each time the answers are dropped: what was planned with another epoch
    /// is planned again.
    pub epoch: u64,
    /// The catalog version and the coordinator node's relation generation the
    /// answers were found under.
    seen: (i64, u64),
    found: HashMap<String, Option<Oid>>,
    /// Views looked up by the name as written (None: no view of that name).
    pub views: HashMap<super::views::ViewKey, Option<Arc<crate::planner::views::ViewDef>>>,
    /// The views this session created or renamed (kept: they are looked up as views).
    pub own_views: std::collections::HashSet<super::views::ViewKey>,
    /// A statement that may change names ran in the current block: its end (or a
    /// rollback to a savepoint) may change them again.
    changed_in_block: bool,
}

impl NameCache {
    pub fn invalidate(&mut self) {
        self.found.clear();
        self.views.clear();
        self.epoch += 1;
    }

    /// Drops the answers if the catalog or the coordinator node's relations changed.
    fn follow(&mut self, seen: (i64, u64)) {
        if seen != self.seen {
            self.seen = seen;
            if !self.found.is_empty() || !self.views.is_empty() {
                self.invalidate();
            } else {
                self.epoch += 1;
            }
        }
    }
}

impl Session {
    /// The epoch the session's names have now (for plans and shapes made with them).
    pub(super) fn names_epoch(&mut self, catalog: &Catalog) -> u64 {
        let seen = (catalog.version, self.shared.catalog.relation_generation());
        self.names.follow(seen);
        self.names.epoch
    }

    /// How `stmt`'s unqualified names that a distributed table carries resolve in this
    /// session; names not known yet are looked up in one query.
    pub(super) async fn names_for(
        &mut self,
        stmt: &Statement,
        catalog: &Catalog,
    ) -> PgResult<Names> {
        use pg_query::protobuf::node::Node as N;
        if catalog.is_empty()
            || matches!(
                stmt.node,
                None | Some(N::TransactionStmt(_))
                    | Some(N::VariableSetStmt(_))
                    | Some(N::VariableShowStmt(_))
            )
        {
            return Ok(Names::default());
        }
        let mut candidates: Vec<String> = Names::candidates(&stmt.text, catalog)
            .into_iter()
            .map(str::to_string)
            .collect();
        self.names_epoch(catalog);
        let views = self.views_for(&stmt.text, catalog, &mut candidates).await?;
        if candidates.is_empty() && views.is_empty() {
            return Ok(Names::default());
        }
        // In a failed block nothing runs but the statements that end it, which name
        // no table: nothing to look up (the node would refuse the lookup anyway).
        let missing: Vec<&str> = candidates
            .iter()
            .map(String::as_str)
            .filter(|n| !self.names.found.contains_key(*n))
            .collect();
        if !missing.is_empty() && self.tx.state != TxnState::Failed {
            let oids = self.look_up_names(&missing).await?;
            for (name, oid) in missing.iter().zip(oids) {
                self.names.found.insert(name.to_string(), oid);
            }
        }
        Ok(Names::from_lookups(
            candidates
                .iter()
                .map(|n| (n.to_string(), self.names.found.get(n).copied().flatten())),
        )
        .with_views(views))
    }

    /// `to_regclass` of each name (as an identifier, so case and quotes are kept) on
    /// the client's own coordinator-node connection: the names are parameters.
    async fn look_up_names(&mut self, names: &[&str]) -> PgResult<Vec<Option<Oid>>> {
        let columns: Vec<String> = (1..=names.len())
            .map(|i| {
                format!("pg_catalog.to_regclass(pg_catalog.quote_ident(${i}::pg_catalog.text))::pg_catalog.oid")
            })
            .collect();
        let sql = format!("SELECT {}", columns.join(", "));
        let row = self.home_row_with_params(&sql, names).await?;
        Ok(row
            .into_iter()
            .map(|v| v.and_then(|v| v.parse::<Oid>().ok()))
            .collect())
    }

    /// The first row of `sql` with `params` (text) on the client's own
    /// coordinator-node connection, in its block if it is in one (inside the client's
    /// batch, ended by Flush so that the batch's implicit transaction goes on).
    pub(super) async fn home_row_with_params(
        &mut self,
        sql: &str,
        params: &[&str],
    ) -> PgResult<Vec<Option<String>>> {
        let coord = self.shared.coordinator.clone();
        if let Some(i) = self.held_index(&coord) {
            self.drain_all().await?;
            if self.batch_error {
                return Err(aborted_error());
            }
            let in_batch = self.tx.held[i].in_batch;
            let r = row_with_params(&mut self.tx.held[i].conn, sql, params, in_batch).await;
            self.absorb_held_reports(i);
            if in_batch && r.is_err() {
                self.tx.held[i].errored = true;
            }
            return r;
        }
        let mut conn = self.home_with_settings().await?;
        let r = row_with_params(&mut conn, sql, params, false).await;
        self.absorb_home_reports(&mut conn);
        r
    }

    /// `text::regclass` on the client's own connection: the relation a Citus
    /// function's table argument names, with PostgreSQL's error when there is none.
    pub(super) async fn regclass(&mut self, text: &str) -> PgResult<Option<Oid>> {
        let row = self
            .home_row_with_params(
                "SELECT $1::pg_catalog.text::pg_catalog.regclass::pg_catalog.oid",
                &[text],
            )
            .await?;
        Ok(row
            .into_iter()
            .next()
            .flatten()
            .and_then(|v| v.parse().ok()))
    }

    /// The client's `search_path` as its own backend has it now.
    pub(super) async fn search_path(&mut self) -> PgResult<String> {
        self.home_column("SELECT pg_catalog.current_setting('search_path')")
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| PgError::internal("current_setting('search_path') gave no row"))
    }

    /// Before `stmt` runs: when it may change names, they are dropped (and again when
    /// its block ends).
    pub(super) fn note_names_change(&mut self, stmt: &Statement) {
        self.note_own_view(stmt);
        if may_change_names(stmt) {
            self.names.invalidate();
            if self.tx.state != TxnState::Idle || self.implicit_txn {
                self.names.changed_in_block = true;
            }
        }
    }

    /// A block ended, or rolled back to a savepoint (`ended`: false).
    pub(super) fn names_after_block(&mut self, ended: bool) {
        if self.names.changed_in_block {
            self.names.invalidate();
            self.names.changed_in_block = !ended;
        }
    }
}

const NAMES_PORTAL: &str = "pgshard_names";

/// Runs `sql` with text parameters through a portal of its own and returns its first
/// row (empty if none); `in_batch`: Flush instead of Sync, read up to the Close.
async fn row_with_params(
    conn: &mut BackendConn,
    sql: &str,
    params: &[&str],
    in_batch: bool,
) -> PgResult<Vec<Option<String>>> {
    let values: Vec<Option<Bytes>> = params
        .iter()
        .map(|p| Some(Bytes::copy_from_slice(p.as_bytes())))
        .collect();
    msg::write_parse(&mut conn.wbuf, "", sql, &[]);
    msg::write_bind(&mut conn.wbuf, NAMES_PORTAL, "", &[], &values, &[]);
    msg::write_execute(&mut conn.wbuf, NAMES_PORTAL, 0);
    msg::write_close(&mut conn.wbuf, b'P', NAMES_PORTAL);
    if in_batch {
        msg::write_flush(&mut conn.wbuf);
    } else {
        msg::write_sync(&mut conn.wbuf);
    }
    conn.flush().await?;
    let mut row = None;
    let mut err = None;
    loop {
        let f = conn.read().await?;
        match f.tag {
            b'D' if row.is_none() => {
                row = Some(
                    msg::decode_data_row(&f.body)?
                        .into_iter()
                        .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
                        .collect(),
                )
            }
            b'E' => {
                err = Some(PgError::from_server_fields(f.body));
                if in_batch {
                    break;
                }
            }
            // CloseComplete: the last answer before Flush.
            b'3' if in_batch => break,
            b'Z' => break,
            b'S' => {}
            b'A' => conn.keep_notification(f),
            _ => {}
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(row.unwrap_or_default()),
    }
}
