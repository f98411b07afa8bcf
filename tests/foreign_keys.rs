//! Foreign keys on distributed and reference tables (issue 22 item 2), against real
//! servers: the multi-tenant schema of Citus's tutorial (companies / campaigns / ads
//! distributed by company_id, composite keys including it, a reference table of ad
//! types the ads reference with ON DELETE CASCADE), created with its keys before
//! distribution, loaded with COPY through pgshard and queried like a plain
//! PostgreSQL that ran the same statements; violations answer 23503 as there; a
//! DELETE on the reference table cascades on every worker (rows counted on each
//! worker directly); ALTER TABLE ... ADD / DROP CONSTRAINT reach every shard pair;
//! Citus's refusals with its SQLSTATEs.
//!
//! Ids are `bigserial`s as in the tutorial: the loaded rows carry their own, a new
//! tenant's rows take theirs from the sequences, as on one PostgreSQL.

mod common;

use bytes::Bytes;
use common::{
    assert_no_prepared_xacts, assert_same_rows, cluster, outcome, plain_postgres, scalar,
};
use futures_util::{pin_mut, SinkExt};
use tokio_postgres::Client;

async fn exec(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// Each statement as a query string of its own: pgshard refuses Citus functions that
/// write inside the implicit transaction of a string of several statements.
async fn each(c: &Client, statements: &[&str]) {
    for sql in statements {
        exec(c, sql).await;
    }
}

/// The same outcome (rows and tags, or SQLSTATE) through pgshard and on plain PostgreSQL.
async fn same(pgs: &Client, plain: &Client, sql: &str) -> String {
    let a = outcome(pgs, sql).await;
    let b = outcome(plain, sql).await;
    assert_eq!(a, b, "{sql}");
    a
}

async fn copy_in(c: &Client, sql: &str, data: &str) {
    let sink = c.copy_in(sql).await.unwrap();
    pin_mut!(sink);
    sink.send(Bytes::from(data.to_string())).await.unwrap();
    sink.as_mut()
        .finish()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// An error's SQLSTATE and message through pgshard.
async fn error_of(c: &Client, sql: &str) -> (String, String) {
    let e = c
        .batch_execute(sql)
        .await
        .expect_err(&format!("{sql} succeeded"));
    let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
    (db.code().code().to_string(), db.message().to_string())
}

/// Rows of `table`'s shards matching `filter`, per worker, read on the workers directly.
async fn rows_per_worker(table: &str, filter: &str) -> Vec<i64> {
    let cl = cluster();
    let mut out = Vec::new();
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        let shards: Vec<String> = w
            .query(
                "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' AND tablename ~ $1",
                &[&format!("^{table}_[0-9]+$")],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut n = 0;
        for s in shards {
            let c: i64 = w
                .query_one(&format!("SELECT count(*) FROM {s} WHERE {filter}"), &[])
                .await
                .unwrap()
                .get(0);
            n += c;
        }
        out.push(n);
    }
    out
}

/// Foreign keys of `table`'s shards named `<name>_<shardid>`, with the table each
/// references, on every worker.
async fn shard_keys(table: &str, name: &str) -> Vec<(String, String)> {
    let cl = cluster();
    let mut out = Vec::new();
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        for r in w
            .query(
                "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint \
                 WHERE contype = 'f' AND conrelid::regclass::text ~ $1 AND conname ~ $2 ORDER BY 1",
                &[&format!("^{table}_[0-9]+$"), &format!("^{name}_[0-9]+$")],
            )
            .await
            .unwrap()
        {
            out.push((r.get(0), r.get(1)));
        }
    }
    out
}

const SCHEMA: &str = "
CREATE TABLE ad_types (id bigint PRIMARY KEY, name text NOT NULL);
CREATE TABLE companies (
    id bigserial PRIMARY KEY,
    name text NOT NULL,
    image_url text,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL
);
CREATE TABLE campaigns (
    id bigserial,
    company_id bigint REFERENCES companies (id),
    name text NOT NULL,
    cost_model text NOT NULL,
    state text NOT NULL,
    monthly_budget bigint,
    blacklisted_site_urls text[],
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    PRIMARY KEY (company_id, id)
);
CREATE TABLE ads (
    id bigserial,
    company_id bigint,
    campaign_id bigint,
    ad_type_id bigint REFERENCES ad_types (id) ON DELETE CASCADE,
    name text NOT NULL,
    image_url text,
    target_url text,
    impressions_count bigint DEFAULT 0,
    clicks_count bigint DEFAULT 0,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    PRIMARY KEY (company_id, id),
    FOREIGN KEY (company_id, campaign_id) REFERENCES campaigns (company_id, id)
);
";

fn companies_rows() -> String {
    (1..=20)
        .map(|i| {
            format!("{i}\tcompany {i}\thttp://img/{i}\t2026-01-01 00:00:00\t2026-01-02 00:00:00\n")
        })
        .collect()
}

fn campaigns_rows() -> String {
    let mut s = String::new();
    for c in 1..=20 {
        for k in 1..=3 {
            let id = c * 10 + k;
            s.push_str(&format!(
                "{id}\t{c}\tcampaign {id}\tcost_per_click\trunning\t{}\t{{http://x/{id}}}\t2026-01-01 00:00:00\t2026-01-02 00:00:00\n",
                1000 * k
            ));
        }
    }
    s
}

fn ads_rows() -> String {
    let mut s = String::new();
    for c in 1..=20 {
        for k in 1..=3 {
            let campaign = c * 10 + k;
            for a in 1..=2 {
                let id = campaign * 10 + a;
                s.push_str(&format!(
                    "{id}\t{c}\t{campaign}\t{}\tad {id}\t\\N\thttp://t/{id}\t{}\t{}\t2026-01-01 00:00:00\t2026-01-02 00:00:00\n",
                    (id % 3) + 1,
                    id * 7 % 1000,
                    id % 13
                ));
            }
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tutorial_schema_with_foreign_keys() {
    let cl = cluster();
    let pgs = cl.client().await;
    let plain = plain_postgres().client().await;
    exec(
        &plain,
        "DROP TABLE IF EXISTS ads, campaigns, companies, ad_types",
    )
    .await;
    exec(&pgs, SCHEMA).await;
    exec(&plain, SCHEMA).await;

    // The referenced table must be distributed first (Citus's error).
    let (code, msg) = error_of(
        &pgs,
        "SELECT create_distributed_table('campaigns', 'company_id')",
    )
    .await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("42P16", "cannot create foreign key constraint")
    );
    each(
        &pgs,
        &[
            "SELECT create_reference_table('ad_types')",
            "SELECT create_distributed_table('companies', 'id')",
            "SELECT create_distributed_table('campaigns', 'company_id')",
            "SELECT create_distributed_table('ads', 'company_id')",
        ],
    )
    .await;
    // Every shard pair has its key: each ads shard references the campaigns shard of
    // its own range on its own worker, and the ad_types placement there.
    let composite = shard_keys("ads", "ads_company_id_campaign_id_fkey").await;
    assert_eq!(composite.len(), 32, "{composite:?}");
    let campaign_shards: Vec<i64> = pgs
        .query(
            "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'campaigns'::regclass ORDER BY shardminvalue::int",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let ads_shards: Vec<i64> = pgs
        .query(
            "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'ads'::regclass ORDER BY shardminvalue::int",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for (a, c) in ads_shards.iter().zip(&campaign_shards) {
        assert!(
            composite.contains(&(format!("ads_{a}"), format!("campaigns_{c}"))),
            "ads_{a} -> campaigns_{c} missing: {composite:?}"
        );
    }
    assert_eq!(shard_keys("ads", "ads_ad_type_id_fkey").await.len(), 32);
    assert_eq!(
        shard_keys("campaigns", "campaigns_company_id_fkey")
            .await
            .len(),
        32
    );

    // Loaded: INSERT into the reference table, COPY into the distributed ones.
    for c in [&pgs, &plain] {
        exec(
            c,
            "INSERT INTO ad_types VALUES (1, 'banner'), (2, 'video'), (3, 'text')",
        )
        .await;
        copy_in(c, "COPY companies FROM STDIN", &companies_rows()).await;
        copy_in(c, "COPY campaigns FROM STDIN", &campaigns_rows()).await;
        copy_in(c, "COPY ads FROM STDIN", &ads_rows()).await;
    }
    for q in [
        "SELECT count(*) FROM ads",
        "SELECT a.campaign_id, a.id, a.impressions_count FROM ads a WHERE a.company_id = 5 ORDER BY 1, 2",
        "SELECT c.name, sum(a.clicks_count) FROM campaigns c JOIN ads a ON a.company_id = c.company_id \
         AND a.campaign_id = c.id WHERE c.company_id = 7 GROUP BY c.name ORDER BY 1",
        "SELECT t.name, count(*) FROM ads a JOIN ad_types t ON t.id = a.ad_type_id GROUP BY t.name ORDER BY 1",
    ] {
        assert_same_rows(&pgs, &plain, q).await;
    }

    // A new tenant: ids from the sequences (moved past the loaded ones first).
    for sql in [
        "SELECT setval('companies_id_seq', 20), setval('campaigns_id_seq', 1000), \
         setval('ads_id_seq', 10000)",
        "INSERT INTO companies (name, created_at, updated_at) \
         VALUES ('new co', '2026-02-01', '2026-02-01') RETURNING id",
        "INSERT INTO campaigns (company_id, name, cost_model, state, created_at, updated_at) \
         VALUES (21, 'c1', 'cpm', 'running', '2026-02-01', '2026-02-01'), \
         (21, 'c2', 'cpm', 'running', '2026-02-01', '2026-02-01') RETURNING id",
        "INSERT INTO ads (company_id, campaign_id, ad_type_id, name, created_at, updated_at) \
         SELECT 21, c.id, 1, 'ad of ' || c.name, '2026-02-01'::timestamp, '2026-02-01'::timestamp \
         FROM campaigns c WHERE c.company_id = 21 ORDER BY c.id RETURNING id, campaign_id",
        "SELECT id, company_id, campaign_id FROM ads WHERE company_id = 21 ORDER BY id",
    ] {
        let out = same(&pgs, &plain, sql).await;
        assert!(!out.starts_with("error"), "{sql}: {out}");
    }

    // Violations: 23503 as on one PostgreSQL, nothing written.
    for bad in [
        "INSERT INTO campaigns VALUES (1, 999, 'x', 'cpm', 'on', 1, NULL, now(), now())",
        "INSERT INTO ads VALUES (1, 3, 999, 1, 'x', NULL, NULL, 0, 0, now(), now())",
        "INSERT INTO ads VALUES (2, 3, 31, 77, 'x', NULL, NULL, 0, 0, now(), now())",
        "UPDATE ads SET ad_type_id = 9 WHERE company_id = 4 AND id = 411",
        "DELETE FROM companies WHERE id = 2",
        "DELETE FROM campaigns WHERE company_id = 3",
    ] {
        assert_eq!(same(&pgs, &plain, bad).await, "error 23503", "{bad}");
    }
    assert_same_rows(&pgs, &plain, "SELECT count(*), sum(ad_type_id) FROM ads").await;
    // A tenant's rows go together (co-located keys); its campaigns then its company.
    same(&pgs, &plain, "DELETE FROM ads WHERE company_id = 2").await;
    same(&pgs, &plain, "DELETE FROM campaigns WHERE company_id = 2").await;
    same(&pgs, &plain, "DELETE FROM companies WHERE id = 2").await;

    // ON DELETE CASCADE from the reference table: one distributed transaction, the
    // cascade on every worker.
    let before = rows_per_worker("ads", "ad_type_id = 2").await;
    assert!(before.iter().all(|n| *n > 0), "{before:?}");
    same(&pgs, &plain, "DELETE FROM ad_types WHERE id = 2").await;
    assert_eq!(rows_per_worker("ads", "ad_type_id = 2").await, vec![0, 0]);
    assert_eq!(rows_per_worker("ad_types", "id = 2").await, vec![0, 0]);
    assert_no_prepared_xacts().await;
    assert_same_rows(
        &pgs,
        &plain,
        "SELECT ad_type_id, count(*) FROM ads GROUP BY 1 ORDER BY 1",
    )
    .await;
    // Inside a block: the cascade is seen by the block's next read, and rolls back.
    exec(&pgs, "BEGIN").await;
    exec(&pgs, "DELETE FROM ad_types WHERE id = 3").await;
    assert_eq!(
        scalar(&pgs, "SELECT count(*) FROM ads WHERE ad_type_id = 3").await,
        "0"
    );
    exec(&pgs, "ROLLBACK").await;
    assert_same_rows(
        &pgs,
        &plain,
        "SELECT ad_type_id, count(*) FROM ads GROUP BY 1 ORDER BY 1",
    )
    .await;

    // ALTER TABLE ... DROP / ADD CONSTRAINT on every shard pair.
    same(
        &pgs,
        &plain,
        "ALTER TABLE ads DROP CONSTRAINT ads_ad_type_id_fkey",
    )
    .await;
    assert!(shard_keys("ads", "ads_ad_type_id_fkey").await.is_empty());
    same(
        &pgs,
        &plain,
        "INSERT INTO ads VALUES (5, 3, 31, 77, 'x', NULL, NULL, 0, 0, '2026-01-01', '2026-01-01')",
    )
    .await;
    // The existing row violates the new key: checked on the workers.
    let add = "ALTER TABLE ads ADD CONSTRAINT ads_type_fk FOREIGN KEY (ad_type_id) REFERENCES ad_types (id)";
    assert_eq!(same(&pgs, &plain, add).await, "error 23503");
    assert!(shard_keys("ads", "ads_type_fk").await.is_empty());
    same(&pgs, &plain, "DELETE FROM ads WHERE ad_type_id = 77").await;
    same(&pgs, &plain, add).await;
    let typed = shard_keys("ads", "ads_type_fk").await;
    let ref_shard = scalar(
        &pgs,
        "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'ad_types'::regclass",
    )
    .await;
    assert_eq!(typed.len(), 32);
    assert!(
        typed
            .iter()
            .all(|(_, to)| *to == format!("ad_types_{ref_shard}")),
        "{typed:?}"
    );
    assert_eq!(
        same(
            &pgs,
            &plain,
            "INSERT INTO ads VALUES (6, 3, 31, 77, 'x', NULL, NULL, 0, 0, now(), now())"
        )
        .await,
        "error 23503"
    );
    // Unnamed, and as a column's REFERENCES: PostgreSQL's names on the shell.
    same(
        &pgs,
        &plain,
        "ALTER TABLE campaigns ADD FOREIGN KEY (company_id) REFERENCES companies (id)",
    )
    .await;
    assert_eq!(
        shard_keys("campaigns", "campaigns_company_id_fkey1")
            .await
            .len(),
        32
    );
    same(
        &pgs,
        &plain,
        "ALTER TABLE ads ADD COLUMN alt_type bigint REFERENCES ad_types (id)",
    )
    .await;
    assert_eq!(shard_keys("ads", "ads_alt_type_fkey").await.len(), 32);
    assert_eq!(
        same(
            &pgs,
            &plain,
            "UPDATE ads SET alt_type = 8 WHERE company_id = 5"
        )
        .await,
        "error 23503"
    );
    same(
        &pgs,
        &plain,
        "UPDATE ads SET alt_type = 1 WHERE company_id = 5",
    )
    .await;
    assert_same_rows(&pgs, &plain, "SELECT count(*), sum(alt_type) FROM ads").await;

    // Dropping a referenced table alone: PostgreSQL's refusal; all together works in
    // any order.
    assert_eq!(
        same(&pgs, &plain, "DROP TABLE companies").await,
        "error 2BP01"
    );
    same(
        &pgs,
        &plain,
        "DROP TABLE ad_types, companies, campaigns, ads",
    )
    .await;
    assert_eq!(rows_per_worker("ads", "true").await, vec![0, 0]);
    assert_no_prepared_xacts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_refusals() {
    let cl = cluster();
    let pgs = cl.client().await;
    exec(
        &pgs,
        "CREATE TABLE r_kind (id bigint PRIMARY KEY); \
         CREATE TABLE r_tenant (id bigint PRIMARY KEY, other bigint, kind bigint); \
         CREATE TABLE r_item (tenant bigint, id bigint, amount bigint, PRIMARY KEY (tenant, id)); \
         CREATE TABLE r_apart (id bigint PRIMARY KEY);",
    )
    .await;
    each(
        &pgs,
        &[
            "SELECT create_reference_table('r_kind')",
            "SELECT create_distributed_table('r_tenant', 'id')",
            "SELECT create_distributed_table('r_item', 'tenant')",
            "SELECT create_distributed_table('r_apart', 'id', shard_count => 3)",
        ],
    )
    .await;
    let refusals = [
        // Not co-located.
        (
            "ALTER TABLE r_item ADD CONSTRAINT f1 FOREIGN KEY (tenant) REFERENCES r_apart (id)",
            "0A000",
            "cannot create foreign key constraint since relations are not colocated or not referencing a reference table",
        ),
        // Not on the distribution column / not at the same position.
        (
            "ALTER TABLE r_item ADD CONSTRAINT f2 FOREIGN KEY (amount) REFERENCES r_tenant (id)",
            "0A000",
            "cannot create foreign key constraint",
        ),
        (
            "ALTER TABLE r_item ADD CONSTRAINT f3 FOREIGN KEY (id, tenant) REFERENCES r_item (tenant, id)",
            "0A000",
            "cannot create foreign key constraint",
        ),
        // SET NULL / SET DEFAULT on the distribution column, ON UPDATE CASCADE.
        (
            "ALTER TABLE r_item ADD CONSTRAINT f4 FOREIGN KEY (tenant) REFERENCES r_tenant (id) ON DELETE SET NULL",
            "0A000",
            "cannot create foreign key constraint",
        ),
        (
            "ALTER TABLE r_item ADD CONSTRAINT f5 FOREIGN KEY (tenant) REFERENCES r_tenant (id) ON UPDATE CASCADE",
            "0A000",
            "cannot create foreign key constraint",
        ),
        // Reference -> distributed.
        (
            "ALTER TABLE r_kind ADD CONSTRAINT f6 FOREIGN KEY (id) REFERENCES r_tenant (id)",
            "0A000",
            "cannot create foreign key constraint since foreign keys from reference tables to distributed tables are not supported",
        ),
    ];
    for (sql, code, msg) in refusals {
        let (c, m) = error_of(&pgs, sql).await;
        assert_eq!((c.as_str(), m.as_str()), (code, msg), "{sql}");
    }
    // Inside a transaction block (the block's later statements are planned with the
    // catalog as it was).
    exec(&pgs, "BEGIN").await;
    let (c, m) = error_of(
        &pgs,
        "ALTER TABLE r_item ADD CONSTRAINT f7 FOREIGN KEY (tenant) REFERENCES r_tenant (id)",
    )
    .await;
    assert_eq!(c, "0A000", "{m}");
    assert!(m.contains("adding a foreign key"), "{m}");
    exec(&pgs, "ROLLBACK").await;
    // Nothing was left on the shell or the shards.
    assert_eq!(
        scalar(
            &pgs,
            "SELECT count(*) FROM pg_constraint WHERE conname ~ '^f[0-9]$'"
        )
        .await,
        "0"
    );
    for t in ["r_item", "r_kind"] {
        for f in ["f1", "f2", "f3", "f4", "f5", "f6", "f7"] {
            assert!(shard_keys(t, f).await.is_empty(), "{t} {f}");
        }
    }
    // Allowed: distributed -> reference on a non-distribution column with SET NULL.
    exec(
        &pgs,
        "ALTER TABLE r_tenant ADD CONSTRAINT kind_fk FOREIGN KEY (kind) REFERENCES r_kind (id) ON DELETE SET NULL",
    )
    .await;
    assert_eq!(shard_keys("r_tenant", "kind_fk").await.len(), 32);
    exec(
        &pgs,
        "INSERT INTO r_kind VALUES (1); INSERT INTO r_tenant VALUES (1, NULL, 1), (2, NULL, 1)",
    )
    .await;
    exec(&pgs, "DELETE FROM r_kind WHERE id = 1").await;
    assert_eq!(
        scalar(&pgs, "SELECT count(*) FROM r_tenant WHERE kind IS NULL").await,
        "2"
    );

    // Local tables: referencing a reference or distributed table needs a placement on
    // the coordinator node (Citus's error), a local table referenced is refused at
    // distribution.
    exec(&pgs, "CREATE TABLE r_local (a bigint PRIMARY KEY)").await;
    let (c, m) = error_of(
        &pgs,
        "ALTER TABLE r_local ADD FOREIGN KEY (a) REFERENCES r_kind (id)",
    )
    .await;
    assert_eq!(
        (c.as_str(), m.as_str()),
        ("0A000", "coordinator is not added to the metadata")
    );
    let (c, _) = error_of(
        &pgs,
        "ALTER TABLE r_local ADD FOREIGN KEY (a) REFERENCES r_tenant (id)",
    )
    .await;
    assert_eq!(c, "0A000");
    exec(
        &pgs,
        "CREATE TABLE r_to_local (a bigint REFERENCES r_local (a))",
    )
    .await;
    let (c, _) = error_of(&pgs, "SELECT create_distributed_table('r_to_local', 'a')").await;
    assert_eq!(c, "42P16");
    let (c, _) = error_of(&pgs, "SELECT create_reference_table('r_to_local')").await;
    assert_eq!(c, "42P16");
    // Reference -> distributed at creation.
    exec(
        &pgs,
        "CREATE TABLE r_ref2 (t bigint REFERENCES r_tenant (id))",
    )
    .await;
    let (c, _) = error_of(&pgs, "SELECT create_reference_table('r_ref2')").await;
    assert_eq!(c, "0A000");
    // Not co-located at creation.
    let (c, _) = error_of(
        &pgs,
        "SELECT create_distributed_table('r_ref2', 't', shard_count => 5)",
    )
    .await;
    assert_eq!(c, "0A000");
    // undistribute_table of a table in a key.
    let (c, _) = error_of(&pgs, "SELECT undistribute_table('r_tenant')").await;
    assert_eq!(c, "0A000");

    // DROP ... CASCADE drops the other tables' keys, on the shards too.
    exec(&pgs, "DROP TABLE r_ref2, r_to_local, r_local").await;
    exec(&pgs, "DROP TABLE r_kind CASCADE").await;
    assert!(shard_keys("r_tenant", "kind_fk").await.is_empty());
    exec(&pgs, "INSERT INTO r_tenant VALUES (3, NULL, 42)").await;
    exec(&pgs, "DROP TABLE r_tenant, r_item, r_apart").await;
    assert_no_prepared_xacts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn between_reference_tables_and_self_referencing() {
    let cl = cluster();
    let pgs = cl.client().await;
    let plain = plain_postgres().client().await;
    let schema = "CREATE TABLE s_region (id bigint PRIMARY KEY, name text); \
                  CREATE TABLE s_country (id bigint PRIMARY KEY, region bigint REFERENCES s_region (id) ON DELETE CASCADE); \
                  CREATE TABLE s_node (tenant bigint, id bigint, parent bigint, PRIMARY KEY (tenant, id), \
                      FOREIGN KEY (tenant, parent) REFERENCES s_node (tenant, id));";
    exec(&plain, "DROP TABLE IF EXISTS s_country, s_region, s_node").await;
    exec(&pgs, schema).await;
    exec(&plain, schema).await;
    each(
        &pgs,
        &[
            "SELECT create_reference_table('s_region')",
            "SELECT create_reference_table('s_country')",
            "SELECT create_distributed_table('s_node', 'tenant')",
        ],
    )
    .await;
    for c in [&pgs, &plain] {
        exec(
            c,
            "INSERT INTO s_region VALUES (1, 'eu'), (2, 'us'); \
             INSERT INTO s_country VALUES (10, 1), (11, 1), (20, 2); \
             INSERT INTO s_node VALUES (1, 1, NULL), (1, 2, 1), (2, 1, NULL);",
        )
        .await;
    }
    for bad in [
        "INSERT INTO s_country VALUES (30, 3)",
        "INSERT INTO s_node VALUES (2, 2, 7)",
        "INSERT INTO s_node VALUES (2, 3, 2)",
        "DELETE FROM s_node WHERE tenant = 1 AND id = 1",
    ] {
        assert_eq!(same(&pgs, &plain, bad).await, "error 23503", "{bad}");
    }
    same(&pgs, &plain, "DELETE FROM s_region WHERE id = 1").await;
    assert_eq!(rows_per_worker("s_country", "true").await, vec![1, 1]);
    assert_same_rows(&pgs, &plain, "SELECT * FROM s_country ORDER BY id").await;
    assert_same_rows(&pgs, &plain, "SELECT * FROM s_node ORDER BY tenant, id").await;
    exec(&pgs, "DROP TABLE s_country, s_region, s_node").await;
    assert_no_prepared_xacts().await;
}
