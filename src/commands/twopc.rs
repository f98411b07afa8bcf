//! Two-phase commit of control-plane work across workers, anchored in the
//! coordinator node's transaction (Citus's protocol): the participants run the one
//! commit protocol of `transaction::two_phase_commit`; the decision records are
//! written in the command's own catalog transaction.
//!
//! Each participant (one worker connection inside `BEGIN`) does its work and then
//! `PREPARE TRANSACTION`s under a fresh gid. The commit decision is the set of
//! `pg_dist_transaction(groupid, gid)` rows inserted in the coordinator node's own
//! transaction together with the catalog change: its COMMIT is the commit point.
//! Afterwards every participant gets `COMMIT PREPARED` and the records are deleted.
//! Before that point any failure rolls every participant back. If the coordinator's
//! COMMIT is lost (connection dropped), the outcome is unknown: the prepared
//! transactions stay for `recover_prepared_transactions`, which commits those with a
//! record and rolls back the others.

use crate::error::{PgError, PgResult};
use crate::frontend::messages::Frame;
use crate::transaction::two_phase_commit::{self as tpc, RemoteTransaction};
use rand::Rng;
use tokio_postgres::Client;

/// One worker connection taking part in a distributed change.
pub struct Participant {
    pub host: String,
    pub port: u16,
    pub group_id: i32,
    pub client: Client,
    /// Set once the participant is prepared.
    pub gid: Option<String>,
}

impl Participant {
    pub fn node(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// A new gid prefix: `pgshard_<instance>_<kind>_<random>` (participant `n` appends
/// `_<n>`). The instance names the owning pgshard process for recovery
/// (`crate::transaction`), the random part this run of the command.
pub fn gid_prefix(kind: &str) -> String {
    let tag: u64 = rand::thread_rng().gen();
    format!(
        "pgshard_{}_{kind}_{tag:016x}",
        crate::transaction::instance_id()
    )
}

/// A command's worker client as the one commit protocol drives it
/// (`transaction::two_phase_commit`): always inside the command's `BEGIN`.
struct ClientTransaction<'a> {
    node: String,
    client: &'a Client,
}

impl RemoteTransaction for ClientTransaction<'_> {
    fn node(&self) -> String {
        self.node.clone()
    }
    fn in_block(&self) -> bool {
        true
    }
    fn run(
        &mut self,
        sql: &str,
        _kept: &mut Vec<Frame>,
    ) -> impl std::future::Future<Output = PgResult<()>> + Send {
        let (client, node, sql) = (self.client, self.node.clone(), sql.to_string());
        async move {
            client.batch_execute(&sql).await.map_err(|e| {
                PgError::from_client_error(&format!("cannot run {sql} on node {node}"), &e)
            })
        }
    }
}

/// The command's participants as the commit protocol's (every one a writer).
fn protocol_view(participants: &[Participant]) -> Vec<tpc::Participant<ClientTransaction<'_>>> {
    participants
        .iter()
        .map(|p| tpc::Participant {
            conn: ClientTransaction {
                node: p.node(),
                client: &p.client,
            },
            group_id: p.group_id,
            wrote: true,
            gid: p.gid.clone(),
        })
        .collect()
}

/// Prepares every participant (in parallel); on the first failure returns the error
/// (participants already prepared keep their gid so that [`abort`] can undo them).
pub async fn prepare_all(participants: &mut [Participant], prefix: &str) -> Result<(), PgError> {
    let mut view = protocol_view(participants);
    let r = tpc::prepare(&mut view, prefix, &mut Vec::new()).await;
    let gids: Vec<Option<String>> = view.into_iter().map(|p| p.gid).collect();
    for (p, gid) in participants.iter_mut().zip(gids) {
        p.gid = gid;
    }
    r
}

/// Inserts the commit records of the prepared participants into the coordinator
/// node's open transaction.
pub async fn record_decisions(coord: &Client, participants: &[Participant]) -> Result<(), PgError> {
    let groups: Vec<i32> = participants
        .iter()
        .filter(|p| p.gid.is_some())
        .map(|p| p.group_id)
        .collect();
    let gids: Vec<String> = participants.iter().filter_map(|p| p.gid.clone()).collect();
    if gids.is_empty() {
        return Ok(());
    }
    coord
        .execute(
            "INSERT INTO pg_catalog.pg_dist_transaction (groupid, gid) \
             SELECT * FROM unnest($1::int4[], $2::text[])",
            &[&groups, &gids],
        )
        .await
        .map_err(|e| PgError::from_client_error("cannot record the commit decision", &e))?;
    Ok(())
}

/// Commits the coordinator node's transaction (the commit point). Returns
/// `Err((error, definitely_aborted))`.
pub async fn commit_coordinator(coord: &Client) -> Result<(), (PgError, bool)> {
    // The commit point must be durable whatever the node's synchronous_commit.
    match coord
        .batch_execute("SET LOCAL synchronous_commit TO on; COMMIT")
        .await
    {
        Ok(()) => Ok(()),
        Err(e) => {
            let definite = e.as_db_error().is_some();
            let mut err = PgError::from_client_error("cannot commit on the coordinator node", &e);
            if !definite {
                err = err.with_detail(
                    "The outcome is unknown; prepared transactions on the workers are left \
                     for recover_prepared_transactions() to resolve.",
                );
            }
            Err((err, definite))
        }
    }
}

/// After the commit point: `COMMIT PREPARED` everywhere (in parallel), then deletes
/// the records of the participants that committed. Failures are logged: the records
/// stay and recovery finishes the job.
pub async fn finish_commit(coord: Option<&Client>, participants: &[Participant]) {
    let gids = tpc::commit_prepared(&mut protocol_view(participants)).await;
    if let (Some(coord), false) = (coord, gids.is_empty()) {
        if let Err(e) = coord
            .execute(
                "DELETE FROM pg_catalog.pg_dist_transaction WHERE gid = ANY($1)",
                &[&gids],
            )
            .await
        {
            tracing::warn!("cannot delete commit records: {e}");
        }
    }
}

/// Undoes every participant: `ROLLBACK PREPARED` for the prepared ones, `ROLLBACK` for
/// the others. Failures are logged (recovery rolls back unrecorded transactions).
pub async fn abort(participants: &[Participant]) {
    tpc::abort(&mut protocol_view(participants)).await;
}

/// The full protocol for participants that have finished their work: prepare all,
/// run `coord_work` in the coordinator node's open transaction, record the decision,
/// commit there, then commit the participants. Any failure before the commit point
/// rolls back everything (the coordinator transaction too) and returns the error.
pub async fn commit_distributed<F, Fut>(
    coord: &Client,
    participants: &mut [Participant],
    kind: &str,
    coord_work: F,
) -> Result<(), PgError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), PgError>>,
{
    let prefix = gid_prefix(kind);
    // Recovery leaves the transaction alone until it is committed or aborted here.
    let _in_flight = crate::transaction::InFlight::register(prefix.clone());
    let before_commit = async {
        prepare_all(participants, &prefix).await?;
        coord_work().await?;
        record_decisions(coord, participants).await
    }
    .await;
    if let Err(e) = before_commit {
        let _ = coord.batch_execute("ROLLBACK").await;
        abort(participants).await;
        return Err(e);
    }
    match commit_coordinator(coord).await {
        Ok(()) => {
            finish_commit(Some(coord), participants).await;
            Ok(())
        }
        Err((e, true)) => {
            abort(participants).await;
            Err(e)
        }
        Err((e, false)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_are_unique_and_tagged() {
        let a = gid_prefix("cdt");
        let b = gid_prefix("cdt");
        assert_ne!(a, b);
        let gid = format!("{a}_3");
        let (instance, prefix) = crate::transaction::parse_gid(&gid).expect("a pgshard gid");
        assert_eq!(instance, crate::transaction::instance_id());
        assert_eq!(prefix, a);
        // Prepared transaction gids are limited to 200 bytes.
        assert!(a.len() + 10 < 200);
    }
}
