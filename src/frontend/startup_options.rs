//! The startup packet's `options` parameter (libpq's `options=` / `PGOPTIONS`), read as
//! PostgreSQL reads it: command-line switches for the session, of which pgshard accepts
//! the ones that set a setting (`-c name=value`, `-cname=value`, `--name=value`).
//! `citus.*` settings become the session's own; the rest are replayed on every node
//! connection the session uses, like a SET.

use crate::error::{sqlstate, PgError};

/// Splits `options` into arguments as PostgreSQL's `pg_split_opts` does: blanks separate
/// them, a backslash makes the next character literal (so `\ ` is a space in a value).
pub fn split(options: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = options.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return args;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                c if c.is_ascii_whitespace() => break,
                '\\' => {
                    if let Some(n) = chars.next() {
                        arg.push(n);
                    }
                }
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
}

/// `options` that gives `settings` (`-c name=value`, blanks and backslashes escaped as
/// `split` reads them).
pub fn join<'a>(settings: impl IntoIterator<Item = &'a (String, String)>) -> String {
    let mut out = String::new();
    for (name, value) in settings {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str("-c ");
        for c in name
            .chars()
            .chain(std::iter::once('='))
            .chain(value.chars())
        {
            if c.is_ascii_whitespace() || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// The settings `options` asks for, in order, as (name, value). Names are lower-cased
/// and `-` becomes `_` in the `--name=value` form, as PostgreSQL does.
pub fn settings(options: &str) -> Result<Vec<(String, String)>, PgError> {
    let bad = |arg: &str| {
        PgError::new(
            sqlstate::SYNTAX_ERROR,
            format!("invalid command-line argument for server process: {arg}"),
        )
        .with_hint("Only -c name=value and --name=value are accepted in options.")
    };
    let args = split(options);
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let assignment = if arg == "-c" {
            i += 1;
            args.get(i).ok_or_else(|| bad(arg))?.clone()
        } else if let Some(rest) = arg.strip_prefix("-c") {
            rest.to_string()
        } else if let Some(rest) = arg.strip_prefix("--") {
            match rest.split_once('=') {
                Some((n, v)) => format!("{}={v}", n.replace('-', "_")),
                None => return Err(bad(arg)),
            }
        } else {
            return Err(bad(arg));
        };
        let Some((name, value)) = assignment.split_once('=') else {
            return Err(PgError::new(
                sqlstate::SYNTAX_ERROR,
                format!("-c {assignment} requires a value"),
            ));
        };
        if name.is_empty() {
            return Err(bad(arg));
        }
        out.push((name.to_ascii_lowercase(), value.to_string()));
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn splits_like_postgres() {
        assert_eq!(split("  -c  a=b\t-cx=y "), vec!["-c", "a=b", "-cx=y"]);
        assert_eq!(split(r"-c search_path=a\ b"), vec!["-c", "search_path=a b"]);
        assert_eq!(split(r"-c x=\\"), vec!["-c", r"x=\"]);
        assert!(split("   ").is_empty());
    }

    #[test]
    fn reads_every_setting_form() {
        assert_eq!(
            settings(
                "-c citus.multi_shard_commit_protocol=1pc -cstatement_timeout=5s --work-mem=64MB"
            )
            .unwrap(),
            pairs(&[
                ("citus.multi_shard_commit_protocol", "1pc"),
                ("statement_timeout", "5s"),
                ("work_mem", "64MB"),
            ])
        );
        assert_eq!(
            settings("-c DateStyle=ISO,\\ DMY").unwrap(),
            pairs(&[("datestyle", "ISO, DMY")])
        );
        assert_eq!(settings("").unwrap(), vec![]);
    }

    #[test]
    fn joined_settings_split_back() {
        let given = pairs(&[("datestyle", "ISO, DMY"), ("search_path", r"a\b")]);
        let options = join(&given);
        assert_eq!(options, r"-c datestyle=ISO,\ DMY -c search_path=a\\b");
        assert_eq!(settings(&options).unwrap(), given);
        assert_eq!(join(&[]), "");
    }

    #[test]
    fn refuses_other_switches() {
        for bad in ["-d 5", "-c", "-c novalue", "--flag", "plain", "-c =x"] {
            let e = settings(bad).unwrap_err();
            assert_eq!(e.code, sqlstate::SYNTAX_ERROR, "{bad}");
        }
    }
}
