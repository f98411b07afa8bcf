//! libpq `key=value` connection strings, as a standby's `primary_conninfo` holds them:
//! read, one key changed, written back quoted (pure functions). A standby that must
//! follow a new primary keeps its own keys (user, password, `application_name`, ...)
//! with the new primary's host and port.

/// The `key = value` pairs of a conninfo string, in order. Values may be single-quoted
/// with `\'` and `\\` escapes, as libpq reads them.
pub fn parse(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() {
            return out;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek() != Some(&'=') {
            return out;
        }
        chars.next();
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n);
                        }
                    }
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        out.push((key, value));
    }
}

/// Writes pairs back as a conninfo string, every value quoted.
pub fn format(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` with `key` set to `value` (added at the end when absent).
pub fn with(text: &str, key: &str, value: &str) -> String {
    let mut pairs = parse(text);
    match pairs.iter_mut().find(|(k, _)| k == key) {
        Some(pair) => pair.1 = value.to_string(),
        None => pairs.push((key.to_string(), value.to_string())),
    }
    format(&pairs)
}

/// The value of `key` in `text`.
pub fn get(text: &str, key: &str) -> Option<String> {
    parse(text)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_conninfo_gets_a_new_host_and_port() {
        let text = "user=postgres passfile='/root/.pgpass' channel_binding=prefer \
                    host='/tmp/c d/sockets' port=6435 application_name=s2 password='a\\'b'";
        assert_eq!(get(text, "host").as_deref(), Some("/tmp/c d/sockets"));
        assert_eq!(get(text, "password").as_deref(), Some("a'b"));
        let moved = with(&with(text, "port", "6440"), "host", "/x");
        assert_eq!(get(&moved, "port").as_deref(), Some("6440"));
        assert_eq!(get(&moved, "host").as_deref(), Some("/x"));
        assert_eq!(get(&moved, "application_name").as_deref(), Some("s2"));
        assert_eq!(get(&moved, "password").as_deref(), Some("a'b"));
        assert_eq!(parse(&moved).len(), 7);
        assert_eq!(get(&with("", "port", "1"), "port").as_deref(), Some("1"));
    }
}
