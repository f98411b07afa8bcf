//! `create_distributed_function` and calls of distributed functions, compared with one
//! plain PostgreSQL running the same functions: a PL/pgSQL and a SQL function whose
//! statements write routed and multi-shard, called alone (own transaction) and inside
//! a rolled-back block; a failure in a later statement undoes the earlier ones; the
//! call's answer (`void`) and Citus's errors for a missing function, an invalid
//! distribution argument and types that cannot co-locate; bodies pgshard cannot run
//! refused with 0A000.

mod common;

use common::{cluster, plain_postgres, sqlstate_and_message};
use tokio_postgres::{Client, SimpleQueryMessage};

async fn rows(c: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, tokio_postgres::Error> {
    let mut out = Vec::new();
    for m in c.simple_query(sql).await? {
        if let SimpleQueryMessage::Row(r) = m {
            out.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
        }
    }
    Ok(out)
}

const TABLES: &str = "DROP TABLE IF EXISTS df_orders, df_lines; \
    CREATE TABLE df_orders (tenant bigint, id int, amount int CHECK (amount >= 0), PRIMARY KEY (tenant, id)); \
    CREATE TABLE df_lines (tenant bigint, order_id int, qty int)";

const DATA: &str = "INSERT INTO df_orders SELECT i % 5, i, i * 10 FROM generate_series(1, 40) i; \
    INSERT INTO df_lines SELECT i % 5, i, i FROM generate_series(1, 40) i";

const FUNCTIONS: &str = "CREATE OR REPLACE FUNCTION df_drop_order(tenant int, order_id int) \
      RETURNS void LANGUAGE plpgsql AS $fn$ BEGIN \
        DELETE FROM df_orders WHERE id = $2 AND df_orders.tenant = $1; \
        DELETE FROM df_lines WHERE df_lines.order_id = $2 AND df_lines.tenant = $1; \
      END; $fn$; \
    CREATE OR REPLACE FUNCTION df_charge(t bigint, delta int) RETURNS void LANGUAGE sql AS $fn$ \
        UPDATE df_lines SET qty = qty + 1 WHERE tenant = $1; \
        UPDATE df_orders SET amount = amount - $2 WHERE tenant = $1; \
      $fn$; \
    CREATE OR REPLACE FUNCTION df_named(tenant int) RETURNS void LANGUAGE sql AS $fn$ \
        DELETE FROM df_lines WHERE qty = tenant; \
      $fn$";

async fn contents(c: &Client) -> String {
    let mut out = String::new();
    for t in ["df_orders", "df_lines"] {
        let r = rows(c, &format!("SELECT * FROM {t} ORDER BY 1, 2, 3"))
            .await
            .unwrap();
        out.push_str(&format!("{t}: {r:?}\n"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_function_calls_match_postgres() {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard.batch_execute(TABLES).await.unwrap();
    plain.batch_execute(TABLES).await.unwrap();
    shard
        .batch_execute("SELECT create_distributed_table('df_orders', 'tenant')")
        .await
        .unwrap();
    shard
        .batch_execute(
            "SELECT create_distributed_table('df_lines', 'tenant', colocate_with := 'df_orders')",
        )
        .await
        .unwrap();
    for c in [&shard, &plain] {
        c.batch_execute(DATA).await.unwrap();
        c.batch_execute(FUNCTIONS).await.unwrap();
    }

    // Citus's errors.
    for (sql, code) in [
        ("SELECT create_distributed_function('df_nothing(int)', 'x', colocate_with := 'df_orders')", "42883"),
        ("SELECT create_distributed_function('df_drop_order(int, int)', 'nope', colocate_with := 'df_orders')", "22023"),
        ("SELECT create_distributed_function('df_drop_order(int, int)', '$3', colocate_with := 'df_orders')", "22023"),
    ] {
        let e = shard.simple_query(sql).await.unwrap_err();
        assert_eq!(sqlstate_and_message(&e).0, code, "{sql}: {e}");
    }
    for sql in [
        "SELECT create_distributed_function('df_drop_order(int, int)', 'tenant', colocate_with := 'df_orders')",
        "SELECT create_distributed_function('df_charge(bigint, int)', '$1', colocate_with := 'df_orders')",
        "SELECT create_distributed_function('df_named(int)', 'tenant', colocate_with := 'df_orders')",
    ] {
        let r = rows(&shard, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(r, vec![vec![Some(String::new())]], "{sql}");
    }

    // Calls: the same answer and the same contents after.
    for sql in [
        "SELECT df_drop_order(3, 8)",
        "SELECT df_drop_order(4, 9) AS done",
        "SELECT df_charge(2, 5)",
        "BEGIN; SELECT df_charge(1, 1); SELECT df_drop_order(1, 11); ROLLBACK",
        "BEGIN; SELECT df_drop_order(0, 10); COMMIT",
    ] {
        let got = rows(&shard, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let want = rows(&plain, sql).await.unwrap();
        assert_eq!(got, want, "{sql}");
        assert_eq!(
            contents(&shard).await,
            contents(&plain).await,
            "after {sql}"
        );
    }
    // The extended protocol: the same single void column.
    let r = shard
        .query("SELECT df_drop_order(2, 12)", &[])
        .await
        .unwrap();
    plain
        .query("SELECT df_drop_order(2, 12)", &[])
        .await
        .unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].columns()[0].name(), "df_drop_order");

    // A later statement fails (CHECK amount >= 0): the earlier one is undone too.
    let sql = "SELECT df_charge(3, 1000)";
    let got = sqlstate_and_message(&shard.simple_query(sql).await.unwrap_err());
    let want = sqlstate_and_message(&plain.simple_query(sql).await.unwrap_err());
    assert_eq!(got.0, want.0, "{got:?} vs {want:?}");
    assert_eq!(
        contents(&shard).await,
        contents(&plain).await,
        "after {sql}"
    );

    // Parameters named by name: refused, nothing done.
    let e = shard.simple_query("SELECT df_named(3)").await.unwrap_err();
    assert_eq!(sqlstate_and_message(&e).0, "0A000", "{e}");
    assert_eq!(contents(&shard).await, contents(&plain).await);
}
