//! TPC-H's eight tables on one target: schema, placement through pgshard (`lineitem` and
//! `orders` co-located by order key, `part` and `partsupp` co-located by part key,
//! `customer` and `supplier` by their keys, `nation` and `region` reference tables), and
//! the rows of `tpchgen` (dbgen-exact) sent with `COPY ... FROM STDIN` through a client
//! connection, generated on a blocking thread while the previous chunk travels. The same
//! code loads the plain PostgreSQL and pgshard, for `pgshard bench tpch` and
//! tests/tpch.rs.

use crate::sql::quote::{quote_ident, quote_literal};
use bytes::Bytes;
use std::fmt::{Display, Write as _};
use std::time::Instant;
use tokio_postgres::Client;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};

/// Where a table's rows live through pgshard.
#[derive(Debug, Clone, Copy)]
pub enum Placement {
    /// `create_reference_table` after its rows are loaded as a local table (pgshard
    /// refuses COPY into reference tables).
    Reference,
    /// `create_distributed_table(table, column [, colocate_with => other])` before
    /// the load: rows are routed by pgshard's COPY.
    Distributed {
        column: &'static str,
        colocate_with: Option<&'static str>,
    },
}

/// One TPC-H table.
pub struct Table {
    pub name: &'static str,
    pub create: &'static str,
    pub placement: Placement,
    /// Writes the table's rows at a scale factor in COPY text format (delimiter `|`)
    /// as chunks handed to `send` (false: stop, the receiver is gone); the rows written.
    generate: fn(f64, &mut dyn FnMut(Bytes) -> bool) -> u64,
}

/// The tables in load order (the specification's schema, with primary keys).
pub const TABLES: [Table; 8] = [
    Table {
        name: "region",
        create: "CREATE TABLE region (r_regionkey int PRIMARY KEY, r_name char(25) NOT NULL, \
                 r_comment varchar(152))",
        placement: Placement::Reference,
        generate: |sf, send| write_rows(RegionGenerator::new(sf, 1, 1).iter(), send),
    },
    Table {
        name: "nation",
        create: "CREATE TABLE nation (n_nationkey int PRIMARY KEY, n_name char(25) NOT NULL, \
                 n_regionkey int NOT NULL, n_comment varchar(152))",
        placement: Placement::Reference,
        generate: |sf, send| write_rows(NationGenerator::new(sf, 1, 1).iter(), send),
    },
    Table {
        name: "supplier",
        create: "CREATE TABLE supplier (s_suppkey bigint PRIMARY KEY, s_name char(25), \
                 s_address varchar(40), s_nationkey int, s_phone char(15), \
                 s_acctbal numeric(15,2), s_comment varchar(101))",
        placement: Placement::Distributed {
            column: "s_suppkey",
            colocate_with: None,
        },
        generate: |sf, send| write_rows(SupplierGenerator::new(sf, 1, 1).iter(), send),
    },
    Table {
        name: "customer",
        create: "CREATE TABLE customer (c_custkey bigint PRIMARY KEY, c_name varchar(25), \
                 c_address varchar(40), c_nationkey int, c_phone char(15), \
                 c_acctbal numeric(15,2), c_mktsegment char(10), c_comment varchar(117))",
        placement: Placement::Distributed {
            column: "c_custkey",
            colocate_with: None,
        },
        generate: |sf, send| write_rows(CustomerGenerator::new(sf, 1, 1).iter(), send),
    },
    Table {
        name: "part",
        create: "CREATE TABLE part (p_partkey bigint PRIMARY KEY, p_name varchar(55), \
                 p_mfgr char(25), p_brand char(10), p_type varchar(25), p_size int, \
                 p_container char(10), p_retailprice numeric(15,2), p_comment varchar(23))",
        placement: Placement::Distributed {
            column: "p_partkey",
            colocate_with: None,
        },
        generate: |sf, send| write_rows(PartGenerator::new(sf, 1, 1).iter(), send),
    },
    Table {
        name: "partsupp",
        create: "CREATE TABLE partsupp (ps_partkey bigint, ps_suppkey bigint, \
                 ps_availqty int, ps_supplycost numeric(15,2), ps_comment varchar(199), \
                 PRIMARY KEY (ps_partkey, ps_suppkey))",
        placement: Placement::Distributed {
            column: "ps_partkey",
            colocate_with: Some("part"),
        },
        generate: |sf, send| write_rows(PartSuppGenerator::new(sf, 1, 1).iter(), send),
    },
    Table {
        name: "orders",
        create: "CREATE TABLE orders (o_orderkey bigint PRIMARY KEY, o_custkey bigint, \
                 o_orderstatus char(1), o_totalprice numeric(15,2), o_orderdate date, \
                 o_orderpriority char(15), o_clerk char(15), o_shippriority int, \
                 o_comment varchar(79))",
        placement: Placement::Distributed {
            column: "o_orderkey",
            colocate_with: None,
        },
        generate: |sf, send| write_rows(OrderGenerator::new(sf, 1, 1).iter(), send),
    },
    Table {
        name: "lineitem",
        create: "CREATE TABLE lineitem (l_orderkey bigint, l_partkey bigint, \
                 l_suppkey bigint, l_linenumber int, l_quantity numeric(15,2), \
                 l_extendedprice numeric(15,2), l_discount numeric(15,2), \
                 l_tax numeric(15,2), l_returnflag char(1), l_linestatus char(1), \
                 l_shipdate date, l_commitdate date, l_receiptdate date, \
                 l_shipinstruct char(25), l_shipmode char(10), l_comment varchar(44), \
                 PRIMARY KEY (l_orderkey, l_linenumber))",
        placement: Placement::Distributed {
            column: "l_orderkey",
            colocate_with: Some("orders"),
        },
        generate: |sf, send| write_rows(LineItemGenerator::new(sf, 1, 1).iter(), send),
    },
];

/// Built after the load on both sides: Q17 and Q20 correlate on `l_partkey`, and
/// without it plain PostgreSQL needs over 300 s for each at SF 1.
pub const INDEXES: [&str; 1] = ["CREATE INDEX lineitem_l_partkey_idx ON lineitem (l_partkey)"];

/// Bytes per COPY data message.
const CHUNK: usize = 1 << 20;

/// Rows in COPY text format with `|` as delimiter. tpchgen's `Display` is dbgen's TBL
/// line (every field followed by `|`, no field containing one); the last `|` is
/// dropped, and a backslash (none in dbgen's text) would be doubled.
fn write_rows<T: Display>(
    rows: impl Iterator<Item = T>,
    send: &mut dyn FnMut(Bytes) -> bool,
) -> u64 {
    let mut buf = String::with_capacity(CHUNK + 4096);
    let mut n = 0;
    for row in rows {
        let start = buf.len();
        let _ = write!(buf, "{row}");
        if buf.ends_with('|') {
            buf.pop();
        }
        if buf[start..].contains('\\') {
            let escaped = buf[start..].replace('\\', "\\\\");
            buf.truncate(start);
            buf.push_str(&escaped);
        }
        buf.push('\n');
        n += 1;
        if buf.len() >= CHUNK {
            let chunk = std::mem::replace(&mut buf, String::with_capacity(CHUNK + 4096));
            if !send(Bytes::from(chunk)) {
                return n;
            }
        }
    }
    if !buf.is_empty() {
        send(Bytes::from(buf));
    }
    n
}

/// Which server a load is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Plain,
    Pgshard,
}

/// A statement that failed during the load: the server's SQLSTATE (None: a client or
/// connection error) and message, with the statement.
#[derive(Debug, Clone)]
pub struct LoadError {
    pub sqlstate: Option<String>,
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match &self.sqlstate {
            Some(code) => write!(f, "ERROR {code}: {}", self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for LoadError {}

fn failed(statement: &str, e: &tokio_postgres::Error) -> LoadError {
    let short: String = statement.chars().take(80).collect();
    match e.as_db_error() {
        Some(db) => LoadError {
            sqlstate: Some(db.code().code().to_string()),
            message: format!("{short}: {}", db.message()),
        },
        None => LoadError {
            sqlstate: None,
            message: format!("{short}: {e}"),
        },
    }
}

async fn execute(client: &Client, sql: &str) -> Result<(), LoadError> {
    client.batch_execute(sql).await.map_err(|e| failed(sql, &e))
}

/// Rows and seconds of one table's COPY.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableLoad {
    pub table: &'static str,
    pub rows: u64,
    pub copy_s: f64,
}

/// How long each step of a load took.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LoadTimes {
    /// CREATE TABLE (and, through pgshard, create_distributed_table of the empty tables).
    pub schema_s: f64,
    pub tables: Vec<TableLoad>,
    /// The COPYs together.
    pub copy_s: f64,
    /// create_reference_table of the loaded local tables (pgshard only).
    pub reference_s: f64,
    /// INDEXES.
    pub index_s: f64,
}

impl LoadTimes {
    /// Everything the load did.
    pub fn total_s(&self) -> f64 {
        self.schema_s + self.copy_s + self.reference_s + self.index_s
    }
}

/// Creates the tables on `side` through `client`, places them (pgshard), COPYs the rows
/// of scale factor `scale` and builds INDEXES; `progress` hears about each step. No
/// VACUUM or ANALYZE: the caller chooses how (`analyze`, or the bench's vacuum of the
/// shards on the workers).
pub async fn load(
    client: &Client,
    side: Side,
    scale: f64,
    progress: &(dyn Fn(String) + Sync),
) -> Result<LoadTimes, LoadError> {
    // tpchgen's shared text pool (300 MB of dbgen's grammar) is made once, on first
    // use: not part of any table's time.
    tokio::task::spawn_blocking(|| {
        tpchgen::text::TextPool::get_or_init_default();
        tpchgen::distribution::Distributions::static_default();
    })
    .await
    .map_err(|e| LoadError {
        sqlstate: None,
        message: format!("preparing tpchgen: {e}"),
    })?;
    let mut times = LoadTimes::default();
    let t = Instant::now();
    for table in &TABLES {
        execute(client, table.create).await?;
    }
    if side == Side::Pgshard {
        for table in &TABLES {
            if let Placement::Distributed {
                column,
                colocate_with,
            } = table.placement
            {
                let colocation = colocate_with
                    .map(|other| format!(", colocate_with => {}", quote_literal(other)))
                    .unwrap_or_default();
                let call = format!(
                    "SELECT create_distributed_table({}, {}{colocation})",
                    quote_literal(table.name),
                    quote_literal(column)
                );
                execute(client, &call).await?;
            }
        }
    }
    times.schema_s = t.elapsed().as_secs_f64();

    for table in &TABLES {
        let t = Instant::now();
        let rows = copy_table(client, table, scale).await?;
        let copy_s = t.elapsed().as_secs_f64();
        progress(format!(
            "  {}: {rows} rows in {copy_s:.1} s ({:.0} rows/s)",
            table.name,
            rows as f64 / copy_s.max(1e-9)
        ));
        times.copy_s += copy_s;
        times.tables.push(TableLoad {
            table: table.name,
            rows,
            copy_s,
        });
    }

    if side == Side::Pgshard {
        let t = Instant::now();
        for table in &TABLES {
            if let Placement::Reference = table.placement {
                let call = format!(
                    "SELECT create_reference_table({})",
                    quote_literal(table.name)
                );
                execute(client, &call).await?;
            }
        }
        times.reference_s = t.elapsed().as_secs_f64();
    }

    let t = Instant::now();
    for index in INDEXES {
        execute(client, index).await?;
    }
    times.index_s = t.elapsed().as_secs_f64();
    progress(format!(
        "  indexes in {:.1} s; load total {:.1} s",
        times.index_s,
        times.total_s()
    ));
    Ok(times)
}

/// `ANALYZE` of every table through `client` (through pgshard: of their shards).
pub async fn analyze(client: &Client) -> Result<(), LoadError> {
    for table in &TABLES {
        execute(client, &format!("ANALYZE {}", quote_ident(table.name))).await?;
    }
    Ok(())
}

/// One table's rows by `COPY ... FROM STDIN`, generated on a blocking thread.
async fn copy_table(client: &Client, table: &'static Table, scale: f64) -> Result<u64, LoadError> {
    use futures_util::SinkExt;
    let statement = format!(
        "COPY {} FROM STDIN WITH (DELIMITER '|')",
        quote_ident(table.name)
    );
    let sink = client
        .copy_in::<_, Bytes>(&statement)
        .await
        .map_err(|e| failed(&statement, &e))?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let generate = table.generate;
    let generator = tokio::task::spawn_blocking(move || {
        generate(scale, &mut |chunk| tx.blocking_send(chunk).is_ok())
    });
    futures_util::pin_mut!(sink);
    while let Some(chunk) = rx.recv().await {
        if let Err(e) = sink.send(chunk).await {
            // Dropping the receiver stops the generator.
            drop(rx);
            let _ = generator.await;
            return Err(failed(&statement, &e));
        }
    }
    let generated = generator.await.map_err(|e| LoadError {
        sqlstate: None,
        message: format!("generating {}: {e}", table.name),
    })?;
    let copied = sink.finish().await.map_err(|e| failed(&statement, &e))?;
    if copied != generated {
        return Err(LoadError {
            sqlstate: None,
            message: format!("{statement}: {copied} rows copied of {generated} generated"),
        });
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_copy_text_without_the_trailing_delimiter() {
        let mut chunks = Vec::new();
        let n = (TABLES[1].generate)(0.01, &mut |c| {
            chunks.push(c);
            true
        });
        assert_eq!(n, 25);
        let text = String::from_utf8(chunks.concat()).unwrap();
        let first = text.lines().next().unwrap();
        assert!(first.starts_with("0|ALGERIA|0|"), "{first}");
        assert!(!first.ends_with('|'), "{first}");
        assert!(text.lines().all(|l| l.split('|').count() == 4));
    }
}
