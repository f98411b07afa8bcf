//! Client authentication rules, as PostgreSQL's pg_hba.conf: an ordered list of
//! `[[hba]]` entries in the config (connection type, database, user, client address,
//! method), the first entry matching a connection decides how it authenticates. Pure:
//! the listener describes the connection (`Connection`) and gets a `Decision`.
//!
//! Without a list every connection uses the config's `auth` method (SCRAM-SHA-256 by
//! default). With a list, a connection no entry matches is refused, as by PostgreSQL.

use crate::config::AuthMethod;
use crate::error::{sqlstate, PgError};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;

/// One entry of the list (`[[hba]]` in the config).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HbaRule {
    #[serde(rename = "type")]
    pub conn_type: ConnType,
    /// `all`, `sameuser`, or database names separated by commas.
    pub database: DatabaseMatch,
    /// `all`, or role names separated by commas.
    pub user: UserMatch,
    /// For `host*` entries: `all` or a CIDR block (`127.0.0.1/32`, `::1/128`,
    /// `0.0.0.0/0`); `local` entries have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<AddressMatch>,
    pub method: HbaMethod,
}

/// Which connections an entry is about, as in pg_hba.conf.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ConnType {
    /// The Unix-domain socket.
    Local,
    /// TCP, encrypted or not.
    Host,
    /// TCP with TLS.
    Hostssl,
    /// TCP without TLS.
    Hostnossl,
}

/// What an entry tells a matching connection to do.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum HbaMethod {
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    Trust,
    Reject,
}

/// The database column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum DatabaseMatch {
    All,
    /// The database named as the user.
    SameUser,
    Names(Vec<String>),
}

/// The user column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum UserMatch {
    All,
    Names(Vec<String>),
}

/// The address column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum AddressMatch {
    All,
    Cidr { network: IpAddr, prefix: u8 },
}

/// A client connection as the rules see it.
#[derive(Debug, Clone, Copy)]
pub struct Connection<'a> {
    /// The client's address; None for the Unix-domain socket.
    pub address: Option<IpAddr>,
    /// TLS is in use.
    pub encrypted: bool,
    pub database: &'a str,
    pub user: &'a str,
}

/// How a connection goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    ScramSha256,
    Trust,
    /// Refused before any authentication exchange (FATAL 28000 with PostgreSQL's text).
    Refuse(PgError),
}

/// The first rule matching `conn` decides; no rules: `default` for every connection.
pub fn decide(rules: &[HbaRule], default: AuthMethod, conn: &Connection) -> Decision {
    if rules.is_empty() {
        return match default {
            AuthMethod::ScramSha256 => Decision::ScramSha256,
            AuthMethod::Trust => Decision::Trust,
        };
    }
    match rules.iter().find(|r| r.matches(conn)) {
        Some(r) => match r.method {
            HbaMethod::ScramSha256 => Decision::ScramSha256,
            HbaMethod::Trust => Decision::Trust,
            HbaMethod::Reject => {
                Decision::Refuse(refusal("pg_hba.conf rejects connection for host", conn))
            }
        },
        None => Decision::Refuse(refusal("no pg_hba.conf entry for host", conn)),
    }
}

/// PostgreSQL's FATAL texts (auth.c, `uaReject` and `uaImplicitReject`).
fn refusal(what: &str, conn: &Connection) -> PgError {
    let host = match conn.address {
        Some(ip) => ip.to_string(),
        None => "[local]".to_string(),
    };
    let encryption = if conn.encrypted {
        "SSL encryption"
    } else {
        "no encryption"
    };
    PgError::fatal(
        sqlstate::INVALID_AUTHORIZATION,
        format!(
            "{what} \"{host}\", user \"{}\", database \"{}\", {encryption}",
            conn.user, conn.database
        ),
    )
}

/// Warnings about a list that cannot work as written (logged at start-up).
pub fn warnings(rules: &[HbaRule], ssl: bool) -> Vec<String> {
    let mut out = Vec::new();
    if !ssl && rules.iter().any(|r| r.conn_type == ConnType::Hostssl) {
        // PostgreSQL's own warning for the same list.
        out.push("hostssl record cannot match because SSL is disabled (set ssl = true)".into());
    }
    out
}

impl HbaRule {
    pub fn matches(&self, conn: &Connection) -> bool {
        let type_matches = match (self.conn_type, conn.address) {
            (ConnType::Local, None) => true,
            (ConnType::Host, Some(_)) => true,
            (ConnType::Hostssl, Some(_)) => conn.encrypted,
            (ConnType::Hostnossl, Some(_)) => !conn.encrypted,
            _ => false,
        };
        let address_matches = match (self.address, conn.address) {
            (_, None) => true,
            (None, Some(_)) => false, // rejected at load time for host types
            (Some(a), Some(ip)) => a.contains(ip),
        };
        type_matches
            && address_matches
            && self.database.matches(conn.database, conn.user)
            && self.user.matches(conn.user)
    }

    /// The checks serde cannot express: an address exactly for the `host*` types.
    pub fn check(&self) -> Result<(), String> {
        match (self.conn_type, &self.address) {
            (ConnType::Local, Some(_)) => {
                Err("an hba entry of type \"local\" takes no address".into())
            }
            (ConnType::Local, None) | (_, Some(_)) => Ok(()),
            (t, None) => Err(format!(
                "an hba entry of type \"{}\" needs an address (a CIDR block such as \"127.0.0.1/32\", or \"all\")",
                t.keyword()
            )),
        }
    }
}

impl ConnType {
    fn keyword(self) -> &'static str {
        match self {
            ConnType::Local => "local",
            ConnType::Host => "host",
            ConnType::Hostssl => "hostssl",
            ConnType::Hostnossl => "hostnossl",
        }
    }
}

impl DatabaseMatch {
    fn matches(&self, database: &str, user: &str) -> bool {
        match self {
            DatabaseMatch::All => true,
            DatabaseMatch::SameUser => database == user,
            DatabaseMatch::Names(names) => names.iter().any(|n| n == database),
        }
    }
}

impl UserMatch {
    fn matches(&self, user: &str) -> bool {
        match self {
            UserMatch::All => true,
            UserMatch::Names(names) => names.iter().any(|n| n == user),
        }
    }
}

impl AddressMatch {
    /// IPv4 clients reaching an IPv6 socket (`::ffff:a.b.c.d`) count as IPv4; otherwise
    /// an IPv4 block matches only IPv4 clients and an IPv6 block only IPv6 ones, as in
    /// PostgreSQL.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (network, prefix) = match *self {
            AddressMatch::All => return true,
            AddressMatch::Cidr { network, prefix } => (network, prefix),
        };
        match (network, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - prefix as u32).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - prefix as u32).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// The comma-separated names of a column; `+group` and `@file` are pg_hba.conf
/// features pgshard does not have (an error rather than a literal name).
fn names(text: &str, column: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = text.split(',').map(|n| n.trim().to_string()).collect();
    for n in &names {
        if n.is_empty() {
            return Err(format!("empty name in the hba {column} list \"{text}\""));
        }
        if n.starts_with('+') || n.starts_with('@') {
            return Err(format!(
                "hba {column} \"{n}\": role membership (+) and file inclusion (@) are not supported"
            ));
        }
    }
    Ok(names)
}

impl TryFrom<String> for DatabaseMatch {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        match text.trim() {
            "all" => Ok(DatabaseMatch::All),
            "sameuser" => Ok(DatabaseMatch::SameUser),
            k @ ("samerole" | "samegroup" | "replication") => {
                Err(format!("hba database keyword \"{k}\" is not supported"))
            }
            t => names(t, "database").map(DatabaseMatch::Names),
        }
    }
}

impl From<DatabaseMatch> for String {
    fn from(m: DatabaseMatch) -> String {
        match m {
            DatabaseMatch::All => "all".into(),
            DatabaseMatch::SameUser => "sameuser".into(),
            DatabaseMatch::Names(n) => n.join(","),
        }
    }
}

impl TryFrom<String> for UserMatch {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        match text.trim() {
            "all" => Ok(UserMatch::All),
            t => names(t, "user").map(UserMatch::Names),
        }
    }
}

impl From<UserMatch> for String {
    fn from(m: UserMatch) -> String {
        match m {
            UserMatch::All => "all".into(),
            UserMatch::Names(n) => n.join(","),
        }
    }
}

impl TryFrom<String> for AddressMatch {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        let t = text.trim();
        if t == "all" {
            return Ok(AddressMatch::All);
        }
        let bad = |why: &str| {
            format!("hba address \"{t}\": {why} (expected a CIDR block such as \"127.0.0.1/32\" or \"::1/128\", or \"all\")")
        };
        let Some((ip, prefix)) = t.split_once('/') else {
            return Err(bad("no mask length"));
        };
        let network: IpAddr = ip.parse().map_err(|_| bad("not an IP address"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| bad("invalid mask length"))?;
        Ok(AddressMatch::Cidr { network, prefix })
    }
}

impl From<AddressMatch> for String {
    fn from(m: AddressMatch) -> String {
        m.to_string()
    }
}

impl fmt::Display for AddressMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressMatch::All => write!(f, "all"),
            AddressMatch::Cidr { network, prefix } => write!(f, "{network}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(toml_text: &str) -> Vec<HbaRule> {
        #[derive(Deserialize)]
        struct List {
            hba: Vec<HbaRule>,
        }
        let list: List = toml::from_str(toml_text).unwrap();
        for r in &list.hba {
            r.check().unwrap();
        }
        list.hba
    }

    fn tcp<'a>(ip: &str, encrypted: bool, user: &'a str) -> Connection<'a> {
        Connection {
            address: Some(ip.parse().unwrap()),
            encrypted,
            database: "postgres",
            user,
        }
    }

    fn local(user: &str) -> Connection<'_> {
        Connection {
            address: None,
            encrypted: false,
            database: "postgres",
            user,
        }
    }

    const LIST: &str = r#"
        [[hba]]
        type = "local"
        database = "all"
        user = "postgres"
        method = "trust"
        [[hba]]
        type = "host"
        database = "all"
        user = "blocked"
        address = "all"
        method = "reject"
        [[hba]]
        type = "hostssl"
        database = "postgres"
        user = "app,report"
        address = "10.1.0.0/16"
        method = "scram-sha-256"
        [[hba]]
        type = "hostnossl"
        database = "all"
        user = "all"
        address = "127.0.0.1/32"
        method = "trust"
        [[hba]]
        type = "host"
        database = "sameuser"
        user = "all"
        address = "::1/128"
        method = "scram-sha-256"
    "#;

    #[test]
    fn no_list_means_the_auth_setting_everywhere() {
        let c = tcp("192.0.2.1", false, "app");
        assert_eq!(
            decide(&[], AuthMethod::ScramSha256, &c),
            Decision::ScramSha256
        );
        assert_eq!(decide(&[], AuthMethod::Trust, &local("x")), Decision::Trust);
    }

    #[test]
    fn the_first_matching_entry_wins() {
        let r = rules(LIST);
        let d = |c: &Connection| decide(&r, AuthMethod::ScramSha256, c);
        assert_eq!(d(&local("postgres")), Decision::Trust);
        // `blocked` is rejected before the trust entry for 127.0.0.1 is reached.
        assert!(matches!(
            d(&tcp("127.0.0.1", false, "blocked")),
            Decision::Refuse(_)
        ));
        assert_eq!(d(&tcp("127.0.0.1", false, "app")), Decision::Trust);
        assert_eq!(d(&tcp("10.1.200.3", true, "report")), Decision::ScramSha256);
    }

    #[test]
    fn ssl_types_follow_the_encryption() {
        let r = rules(LIST);
        let d = |c: &Connection| decide(&r, AuthMethod::ScramSha256, c);
        // hostssl for 10.1/16 only when encrypted; hostnossl for 127.0.0.1 only when not.
        assert!(matches!(
            d(&tcp("10.1.0.9", false, "app")),
            Decision::Refuse(_)
        ));
        assert!(matches!(
            d(&tcp("127.0.0.1", true, "app")),
            Decision::Refuse(_)
        ));
    }

    #[test]
    fn addresses_users_and_databases_must_all_match() {
        let r = rules(LIST);
        let d = |c: &Connection| decide(&r, AuthMethod::ScramSha256, c);
        assert!(matches!(
            d(&tcp("10.2.0.1", true, "app")),
            Decision::Refuse(_)
        ));
        assert!(matches!(
            d(&tcp("10.1.0.1", true, "other")),
            Decision::Refuse(_)
        ));
        assert!(matches!(d(&local("app")), Decision::Refuse(_)));
        // sameuser: database "postgres" only for user "postgres".
        assert_eq!(d(&tcp("::1", false, "postgres")), Decision::ScramSha256);
        assert!(matches!(d(&tcp("::1", false, "app")), Decision::Refuse(_)));
    }

    #[test]
    fn refusals_carry_postgresql_text_and_sqlstate() {
        let r = rules(LIST);
        let Decision::Refuse(e) =
            decide(&r, AuthMethod::Trust, &tcp("127.0.0.1", false, "blocked"))
        else {
            panic!()
        };
        assert_eq!(e.code, "28000");
        assert_eq!(e.severity, "FATAL");
        assert_eq!(
            e.message,
            "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"blocked\", database \"postgres\", no encryption"
        );
        let Decision::Refuse(e) = decide(&r, AuthMethod::Trust, &tcp("10.9.9.9", true, "app"))
        else {
            panic!()
        };
        assert_eq!(
            e.message,
            "no pg_hba.conf entry for host \"10.9.9.9\", user \"app\", database \"postgres\", SSL encryption"
        );
        let Decision::Refuse(e) = decide(&r, AuthMethod::Trust, &local("app")) else {
            panic!()
        };
        assert_eq!(
            e.message,
            "no pg_hba.conf entry for host \"[local]\", user \"app\", database \"postgres\", no encryption"
        );
    }

    #[test]
    fn cidr_blocks() {
        let a = |s: &str| AddressMatch::try_from(s.to_string()).unwrap();
        assert!(a("127.0.0.1/32").contains("127.0.0.1".parse().unwrap()));
        assert!(!a("127.0.0.1/32").contains("127.0.0.2".parse().unwrap()));
        assert!(a("0.0.0.0/0").contains("203.0.113.7".parse().unwrap()));
        assert!(a("192.168.0.0/23").contains("192.168.1.255".parse().unwrap()));
        assert!(!a("192.168.0.0/23").contains("192.168.2.0".parse().unwrap()));
        // An IPv4 client on a dual-stack socket is IPv4.
        assert!(a("127.0.0.0/8").contains("::ffff:127.0.0.5".parse().unwrap()));
        // Families do not mix otherwise.
        assert!(!a("0.0.0.0/0").contains("::1".parse().unwrap()));
        assert!(!a("::/0").contains("127.0.0.1".parse().unwrap()));
        assert!(a("fe80::/10").contains("fe80::1:2".parse().unwrap()));
        assert!(a("all").contains("::1".parse().unwrap()));
        for bad in ["127.0.0.1", "127.0.0.1/33", "::1/129", "localhost/8", "x"] {
            assert!(AddressMatch::try_from(bad.to_string()).is_err(), "{bad}");
        }
        assert_eq!(String::from(a("10.0.0.0/8")), "10.0.0.0/8");
    }

    #[test]
    fn entries_are_checked_when_loaded() {
        let parse = |t: &str| toml::from_str::<HbaRule>(t);
        assert!(parse("type = \"host\"\ndatabase = \"all\"\nuser = \"+admins\"\naddress = \"all\"\nmethod = \"trust\"").is_err());
        assert!(parse("type = \"host\"\ndatabase = \"all\"\nuser = \"all\"\naddress = \"all\"\nmethod = \"md5\"").is_err());
        assert!(parse("type = \"host\"\ndatabase = \"all\"\nuser = \"all\"\naddress = \"all\"\nmethod = \"trust\"\nextra = 1").is_err());
        let no_address =
            parse("type = \"host\"\ndatabase = \"all\"\nuser = \"all\"\nmethod = \"trust\"")
                .unwrap();
        assert!(no_address.check().is_err());
        let local_address = parse("type = \"local\"\ndatabase = \"all\"\nuser = \"all\"\naddress = \"all\"\nmethod = \"trust\"").unwrap();
        assert!(local_address.check().is_err());
    }

    #[test]
    fn a_hostssl_list_without_ssl_is_warned_about() {
        assert_eq!(warnings(&rules(LIST), false).len(), 1);
        assert!(warnings(&rules(LIST), true).is_empty());
    }
}
