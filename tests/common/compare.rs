//! One statement's answer from pgshard against the plain PostgreSQL's (the oracle), for the
//! generated and tutorial tests: what a server answered (rows and row counts, or an error's
//! SQLSTATE), and the verdict on the pair: the same, refused (0A000 from pgshard where
//! PostgreSQL answers), or different (a wrong answer).

use tokio_postgres::{Client, SimpleQueryMessage};

pub type Row = Vec<Option<String>>;

/// A server's answer to one simple-protocol query string.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Rows as text (NULL: None) in the order received, and each statement's row count
    /// (`UPDATE 3`: 3).
    Rows {
        rows: Vec<Row>,
        counts: Vec<u64>,
    },
    Error {
        code: String,
        message: String,
    },
}

impl Outcome {
    /// The same answer with its rows sorted (a multiset: no ORDER BY fixes their order).
    pub fn sorted(mut self) -> Outcome {
        if let Outcome::Rows { rows, .. } = &mut self {
            rows.sort();
        }
        self
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Outcome::Error { .. })
    }
}

/// Runs `sql` through the simple protocol.
pub async fn run(c: &Client, sql: &str) -> Outcome {
    match c.simple_query(sql).await {
        Ok(msgs) => {
            let mut rows = Vec::new();
            let mut counts = Vec::new();
            for m in msgs {
                match m {
                    SimpleQueryMessage::Row(r) => {
                        rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                    }
                    SimpleQueryMessage::CommandComplete(n) => counts.push(n),
                    _ => {}
                }
            }
            Outcome::Rows { rows, counts }
        }
        Err(e) => {
            let (code, message) = super::sqlstate_and_message(&e);
            Outcome::Error { code, message }
        }
    }
}

/// pgshard's answer judged against the oracle's.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Same rows and counts, or errors of the same SQLSTATE.
    Same,
    /// pgshard refused (0A000, with this message) what PostgreSQL answers.
    Refused(String),
    /// A wrong answer: different rows, counts or SQLSTATE.
    Differ,
}

/// Compares `got` (pgshard) with `want` (the oracle); rows as multisets unless `ordered`.
pub fn judge(got: &Outcome, want: &Outcome, ordered: bool) -> Verdict {
    let same = if ordered {
        got == want
    } else {
        got.clone().sorted() == want.clone().sorted()
    };
    match (got, want) {
        _ if same => Verdict::Same,
        (Outcome::Error { code: a, .. }, Outcome::Error { code: b, .. }) if a == b => Verdict::Same,
        (Outcome::Error { code, message }, Outcome::Rows { .. }) if code == "0A000" => {
            Verdict::Refused(message.clone())
        }
        _ => Verdict::Differ,
    }
}

/// A short rendering of an answer for failure messages.
pub fn show(o: &Outcome) -> String {
    match o {
        Outcome::Rows { rows, counts } if rows.len() > 12 => {
            format!("{} rows {counts:?}, first {:?}", rows.len(), &rows[..12])
        }
        Outcome::Rows { rows, counts } => format!("{rows:?} {counts:?}"),
        Outcome::Error { code, message } => format!("ERROR {code}: {message}"),
    }
}
