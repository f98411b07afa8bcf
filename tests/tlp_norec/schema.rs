//! The generated oracles' schema and data: two schemas holding tables of the same names
//! (distributed by columns with typmods, collations and domains, a reference table, a
//! local table, and a name that is local in one schema and distributed in the other),
//! NULL-heavy rows whose values PostgreSQL changes on the way in (`numeric(10,1)` rounds
//! 1.54 to 1.5, `timestamp(0)` rounds fractions, `varchar(6)` trims trailing spaces past
//! its length, `char(4)` pads), loaded through every write path pgshard routes: one-row
//! INSERT, multi-row INSERT, COPY FROM STDIN and INSERT ... SELECT from a local table.

use super::common::rng::Rng;

/// The schemas holding the query tables; both are on some search paths.
pub const SCHEMAS: &[&str] = &["tlp_a", "tlp_b"];

/// Objects the tables' columns depend on, created before the tables.
pub const TYPES_DDL: &str = "
create schema tlp_types;
create type tlp_types.mood as enum ('sad', 'ok', 'happy');
create domain tlp_types.amount as numeric(8,2) check (value > -1000);
";

/// How a table is spread.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Distributed(&'static str),
    Reference,
    Local,
}

/// A query table: its name, and how it is spread in each schema (index as `SCHEMAS`).
pub struct Table {
    pub name: &'static str,
    pub kinds: [Kind; 2],
}

pub const TABLES: &[Table] = &[
    Table {
        name: "tn",
        kinds: [Kind::Distributed("n"), Kind::Distributed("n")],
    },
    Table {
        name: "tt",
        kinds: [Kind::Distributed("ts"), Kind::Distributed("ts")],
    },
    Table {
        name: "tv",
        kinds: [Kind::Distributed("vc"), Kind::Distributed("vc")],
    },
    Table {
        name: "tc",
        kinds: [Kind::Distributed("ch"), Kind::Distributed("ch")],
    },
    Table {
        name: "tm",
        kinds: [Kind::Distributed("m"), Kind::Distributed("id")],
    },
    Table {
        name: "tr",
        kinds: [Kind::Reference, Kind::Reference],
    },
    // Local in tlp_a, distributed in tlp_b: which one a bare `sh` means depends on the path.
    Table {
        name: "sh",
        kinds: [Kind::Local, Kind::Distributed("id")],
    },
];

/// Column name, SQL type, and the value pool (SQL literals; NULL is added separately).
pub struct Column {
    pub name: &'static str,
    pub sql_type: &'static str,
    pub values: &'static [&'static str],
    /// What queries compare the column with (may differ from what is stored).
    pub probes: &'static [&'static str],
    /// Orderable with `<` and usable in min/max.
    pub ordered: bool,
}

pub const COLUMNS: &[Column] = &[
    Column {
        name: "id",
        sql_type: "int",
        values: &[],
        probes: &["0", "1", "7", "20", "39", "-1"],
        ordered: true,
    },
    Column {
        name: "n",
        sql_type: "numeric(10,1)",
        values: &[
            "1.54", "1.5", "1.46", "-0.05", "0", "2.25", "2.35", "10", "-3.3", "1.50",
        ],
        probes: &[
            "1.5", "1.54", "1.50", "2.3", "2.4", "-0.1", "0", "10.0", "-3.3", "2.25",
        ],
        ordered: true,
    },
    Column {
        name: "ts",
        sql_type: "timestamp(0)",
        values: &[
            "'2024-01-01 10:00:00.4'",
            "'2024-01-01 10:00:00.6'",
            "'2024-01-01 10:00:01'",
            "'2024-02-29 23:59:59.5'",
            "'2023-12-31 00:00:00'",
        ],
        probes: &[
            "'2024-01-01 10:00:00'",
            "'2024-01-01 10:00:01'",
            "'2024-01-01 10:00:00.6'",
            "'2024-03-01 00:00:00'",
            "'2023-12-31'",
        ],
        ordered: true,
    },
    Column {
        name: "vc",
        sql_type: "varchar(6)",
        values: &[
            "'abc'",
            "'abc   '",
            "'abcdef  '",
            "'ABC'",
            "'x'",
            "''",
            "'ä'",
        ],
        probes: &["'abc'", "'abc   '", "'abcdef'", "'ABC'", "'x '", "''"],
        ordered: true,
    },
    Column {
        name: "ch",
        sql_type: "char(4)",
        values: &["'ab'", "'ab  '", "'abcd'", "'a b'", "''", "'Ab'"],
        probes: &["'ab'", "'ab  '", "'abcd'", "'a b '", "''", "'ab'::text"],
        ordered: true,
    },
    Column {
        name: "tx",
        sql_type: "text collate \"C\"",
        values: &["'a'", "'B'", "'b'", "'Z'", "'ä'", "''", "' '"],
        probes: &["'a'", "'b'", "'Z'", "'ä'", "''"],
        ordered: true,
    },
    Column {
        name: "tci",
        sql_type: "text collate \"en-x-icu\"",
        values: &["'a'", "'B'", "'b'", "'Z'", "'ä'", "'A'"],
        probes: &["'a'", "'b'", "'B'", "'z'", "'ä'"],
        ordered: true,
    },
    Column {
        name: "m",
        sql_type: "numeric(8,2)",
        values: &["12.345", "12.34", "0", "-5.5", "999.999", "1"],
        probes: &["12.34", "12.35", "0", "-5.50", "1000.00", "1"],
        ordered: true,
    },
    Column {
        name: "e",
        sql_type: "text",
        values: &["'sad'", "'ok'", "'happy'"],
        probes: &["'sad'", "'ok'", "'happy'"],
        ordered: true,
    },
    Column {
        name: "b",
        sql_type: "bool",
        values: &["true", "false"],
        probes: &["true", "false"],
        ordered: false,
    },
    Column {
        name: "i",
        sql_type: "int",
        values: &["0", "1", "2", "3", "-1", "100"],
        probes: &["0", "1", "2", "3", "-1", "100"],
        ordered: true,
    },
];

pub fn column(name: &str) -> &'static Column {
    COLUMNS.iter().find(|c| c.name == name).expect("column")
}

/// Rows per table and schema.
pub const ROWS: usize = 40;

fn create_table_sql(schema: &str, table: &str) -> String {
    let cols: Vec<String> = COLUMNS
        .iter()
        .map(|c| format!("{} {}", c.name, c.sql_type))
        .collect();
    format!("create table {schema}.{table} ({})", cols.join(", "))
}

/// One row's literals, in column order.
fn row(rng: &mut Rng, id: usize, dist_column: Option<&str>) -> Vec<String> {
    COLUMNS
        .iter()
        .map(|c| {
            if c.name == "id" {
                return id.to_string();
            }
            // A distribution column holds no NULLs (Citus refuses them, as pgshard does).
            let nulls = if Some(c.name) == dist_column {
                0.0
            } else {
                0.3
            };
            if rng.chance(nulls) {
                "NULL".to_string()
            } else {
                rng.pick(c.values).to_string()
            }
        })
        .collect()
}

/// COPY text form of a literal: the value PostgreSQL's input function reads.
fn copy_field(literal: &str) -> String {
    if literal == "NULL" {
        return "\\N".into();
    }
    let unquoted = literal
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .unwrap_or(literal);
    unquoted.replace('\\', "\\\\")
}

/// A step of loading the data, run the same way on both sides.
pub enum Load {
    Sql(String),
    /// `COPY <table> FROM STDIN` with these text-format lines.
    Copy {
        statement: String,
        data: String,
    },
}

/// The statements that create and fill every table, for pgshard (`distributed`: with the
/// Citus calls) or for the plain PostgreSQL oracle.
pub fn load_steps(seed: u64, distributed: bool) -> Vec<Load> {
    let mut steps = vec![Load::Sql(TYPES_DDL.to_string())];
    for schema in SCHEMAS {
        steps.push(Load::Sql(format!("create schema {schema}")));
    }
    let mut rng = Rng::new(seed);
    for (si, schema) in SCHEMAS.iter().enumerate() {
        for t in TABLES {
            let kind = t.kinds[si];
            steps.push(Load::Sql(create_table_sql(schema, t.name)));
            let qualified = format!("{schema}.{}", t.name);
            if distributed {
                match kind {
                    Kind::Distributed(col) => steps.push(Load::Sql(format!(
                        "select create_distributed_table('{qualified}', '{col}')"
                    ))),
                    Kind::Reference => steps.push(Load::Sql(format!(
                        "select create_reference_table('{qualified}')"
                    ))),
                    Kind::Local => {}
                }
            }
            let dist_column = match kind {
                Kind::Distributed(c) => Some(c),
                _ => None,
            };
            let rows: Vec<Vec<String>> =
                (0..ROWS).map(|id| row(&mut rng, id, dist_column)).collect();
            let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
            let names = names.join(", ");
            // A quarter of the rows by each path.
            let quarter = ROWS / 4;
            for r in &rows[..quarter] {
                steps.push(Load::Sql(format!(
                    "insert into {qualified} ({names}) values ({})",
                    r.join(", ")
                )));
            }
            let multi: Vec<String> = rows[quarter..2 * quarter]
                .iter()
                .map(|r| format!("({})", r.join(", ")))
                .collect();
            steps.push(Load::Sql(format!(
                "insert into {qualified} ({names}) values {}",
                multi.join(", ")
            )));
            let data: String = rows[2 * quarter..3 * quarter]
                .iter()
                .map(|r| {
                    let fields: Vec<String> = r.iter().map(|v| copy_field(v)).collect();
                    fields.join("\t") + "\n"
                })
                .collect();
            if kind == Kind::Reference {
                // COPY into reference tables is not supported yet (issue 22).
                let rows: Vec<String> = rows[2 * quarter..3 * quarter]
                    .iter()
                    .map(|r| format!("({})", r.join(", ")))
                    .collect();
                steps.push(Load::Sql(format!(
                    "insert into {qualified} ({names}) values {}",
                    rows.join(", ")
                )));
            } else {
                steps.push(Load::Copy {
                    statement: format!("copy {qualified} ({names}) from stdin"),
                    data,
                });
            }
            // The last quarter through a local staging table (INSERT ... SELECT of local
            // rows into a reference table is not supported yet: a multi-row INSERT there).
            if kind == Kind::Reference {
                let rest: Vec<String> = rows[3 * quarter..]
                    .iter()
                    .map(|r| format!("({})", r.join(", ")))
                    .collect();
                steps.push(Load::Sql(format!(
                    "insert into {qualified} ({names}) values {}",
                    rest.join(", ")
                )));
                continue;
            }
            let staging = format!("tlp_staging_{schema}_{}", t.name);
            steps.push(Load::Sql(create_table_sql("public", &staging)));
            let rest: Vec<String> = rows[3 * quarter..]
                .iter()
                .map(|r| format!("({})", r.join(", ")))
                .collect();
            steps.push(Load::Sql(format!(
                "insert into public.{staging} ({names}) values {}",
                rest.join(", ")
            )));
            steps.push(Load::Sql(format!(
                "insert into {qualified} ({names}) select {names} from public.{staging}"
            )));
            steps.push(Load::Sql(format!("drop table public.{staging}")));
        }
    }
    steps
}
