//! The tutorials' schema and small generated data in place of Citus's CSV downloads
//! (deterministic: `common::rng`), shaped so that the tutorials' questions have answers and
//! their ORDER BY ... LIMIT cut no ties: company 5 owns campaigns 41..=50 (46 among them)
//! and ad 290, each company's budgets differ, user `u` of the real-time tutorial created
//! `u` repositories, and user 24305673 exists.

use super::common::rng::Rng;

/// Tables, in creation order, with their DDL (the tutorials' own columns).
pub const SCHEMA: &[&str] = &[
    "CREATE TABLE companies (
        id bigint NOT NULL, name text NOT NULL, image_url text,
        created_at timestamp without time zone NOT NULL,
        updated_at timestamp without time zone NOT NULL)",
    "CREATE TABLE campaigns (
        id bigint NOT NULL, company_id bigint NOT NULL, name text NOT NULL,
        cost_model text NOT NULL, state text NOT NULL, monthly_budget bigint,
        blacklisted_site_urls text[],
        created_at timestamp without time zone NOT NULL,
        updated_at timestamp without time zone NOT NULL)",
    "CREATE TABLE ads (
        id bigint NOT NULL, company_id bigint NOT NULL, campaign_id bigint NOT NULL,
        name text NOT NULL, image_url text, target_url text,
        impressions_count bigint DEFAULT 0, clicks_count bigint DEFAULT 0,
        created_at timestamp without time zone NOT NULL,
        updated_at timestamp without time zone NOT NULL)",
    "ALTER TABLE companies ADD PRIMARY KEY (id)",
    "ALTER TABLE campaigns ADD PRIMARY KEY (id, company_id)",
    "ALTER TABLE ads ADD PRIMARY KEY (id, company_id)",
    // The multi-tenant use-case guide's click and impression tables, and its reference table.
    "CREATE TABLE clicks (
        id bigint, company_id bigint, ad_id bigint,
        clicked_at timestamp without time zone NOT NULL, site_url text NOT NULL,
        cost_per_click_usd numeric(20,10), user_ip inet NOT NULL, user_data jsonb NOT NULL,
        PRIMARY KEY (company_id, id))",
    "CREATE TABLE impressions (
        id bigint, company_id bigint, ad_id bigint,
        seen_at timestamp without time zone NOT NULL, site_url text NOT NULL,
        cost_per_impression_usd numeric(20,10), user_ip inet NOT NULL, user_data jsonb NOT NULL,
        PRIMARY KEY (company_id, id))",
    "CREATE TABLE geo_ips (
        addrs cidr NOT NULL PRIMARY KEY,
        latlon point NOT NULL
          CHECK (-90 <= latlon[0] AND latlon[0] <= 90 AND -180 <= latlon[1] AND latlon[1] <= 180))",
    // The real-time analytics tutorial.
    "CREATE TABLE github_events (
        event_id bigint, event_type text, event_public boolean, repo_id bigint,
        payload jsonb, repo jsonb, user_id bigint, org jsonb, created_at timestamp)",
    "CREATE TABLE github_users (
        user_id bigint, url text, login text, avatar_url text, gravatar_id text,
        display_login text)",
    "CREATE INDEX event_type_index ON github_events (event_type)",
    "CREATE INDEX payload_index ON github_events USING GIN (payload jsonb_path_ops)",
    // The real-time dashboards guide.
    "CREATE TABLE http_request (
        site_id INT, ingest_time TIMESTAMPTZ DEFAULT now(), url TEXT, request_country TEXT,
        ip_address TEXT, status_code INT, response_time_msec INT)",
    "CREATE TABLE http_request_1min (
        site_id INT, ingest_time TIMESTAMPTZ, error_count INT, success_count INT,
        request_count INT, average_response_time_msec INT,
        CHECK (request_count = error_count + success_count),
        CHECK (ingest_time = date_trunc('minute', ingest_time)))",
    "CREATE INDEX http_request_1min_idx ON http_request_1min (site_id, ingest_time)",
    "CREATE TABLE latest_rollup (
        minute timestamptz PRIMARY KEY, CHECK (minute = date_trunc('minute', minute)))",
];

/// The Citus calls of the tutorials (pgshard only), after `SCHEMA`.
pub const DISTRIBUTION: &[&str] = &[
    "SELECT create_distributed_table('companies', 'id')",
    "SELECT create_distributed_table('campaigns', 'company_id')",
    "SELECT create_distributed_table('ads', 'company_id')",
    "SELECT create_distributed_table('clicks', 'company_id')",
    "SELECT create_distributed_table('impressions', 'company_id')",
    "SELECT create_reference_table('geo_ips')",
    "SELECT create_distributed_table('github_users', 'user_id')",
    "SELECT create_distributed_table('github_events', 'user_id')",
    "SELECT create_distributed_table('http_request', 'site_id')",
    "SELECT create_distributed_table('http_request_1min', 'site_id')",
];

/// CSV lines per table, loaded by `COPY <table> FROM STDIN WITH CSV` on both sides.
pub fn csv_data() -> Vec<(&'static str, String)> {
    let mut rng = Rng::new(0x0c17_05ad);
    let ts = |day: i64, sec: i64| {
        format!(
            "2024-03-{:02} {:02}:{:02}:{:02}",
            1 + day,
            sec / 3600 % 24,
            sec / 60 % 60,
            sec % 60
        )
    };
    let (mut companies, mut campaigns, mut ads, mut clicks, mut impressions) = (
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
    );
    let states = ["running", "paused", "ended", "running"];
    let models = ["cost_per_click", "cost_per_impression"];
    for c in 1..=20i64 {
        companies += &format!(
            "{c},Company {c},https://example.com/{c}.png,{},{}\n",
            ts(c % 7, c * 61),
            ts(c % 7 + 1, c * 67)
        );
        for j in 1..=10i64 {
            let campaign = (c - 1) * 10 + j;
            // One NULL budget in every even company; the others all differ.
            let budget = if c % 2 == 0 && j == 3 {
                String::new()
            } else {
                (c * 1000 + j * 37 + rng.range(0, 30)).to_string()
            };
            let blacklist = if j % 3 == 0 {
                format!("\"{{http://site{}.com,http://junk{c}.org}}\"", j % 6)
            } else {
                String::new()
            };
            campaigns += &format!(
                "{campaign},{c},Campaign {campaign},{},{},{budget},{blacklist},{},{}\n",
                models[(j % 2) as usize],
                states[(j % 4) as usize],
                ts(j % 5, campaign * 13),
                ts(j % 5 + 2, campaign * 17)
            );
            for a in 0..6i64 {
                let ad = campaign * 6 + a;
                ads += &format!(
                    "{ad},{c},{campaign},Ad {ad},{},http://target{}.com,{},{},{},{}\n",
                    if a % 4 == 0 {
                        String::new()
                    } else {
                        format!("http://img/{ad}")
                    },
                    ad % 9,
                    rng.range(0, 5000),
                    rng.range(0, 300),
                    ts(a, ad * 7),
                    ts(a + 1, ad * 11)
                );
                for e in 0..rng.range(0, 3) {
                    let id = ad * 10 + e;
                    let mobile = match rng.below(3) {
                        0 => r#"{""is_mobile"": true}"#.to_string(),
                        1 => r#"{""is_mobile"": false, ""agent"": ""firefox""}"#.to_string(),
                        _ => format!(r#"{{""cookie"": ""c{}""}}"#, rng.below(50)),
                    };
                    let ip = format!(
                        "10.{}.{}.{}",
                        rng.below(8),
                        rng.below(256),
                        1 + rng.below(250)
                    );
                    clicks += &format!(
                        "{id},{c},{ad},{},http://site{}.com,0.{:010},{ip},\"{mobile}\"\n",
                        ts(e, id % 86_000),
                        rng.below(6),
                        rng.range(1, 9_999_999_999)
                    );
                    impressions += &format!(
                        "{id},{c},{ad},{},http://site{}.com,0.{:010},{ip},\"{mobile}\"\n",
                        ts(e + 1, id % 80_000),
                        rng.below(6),
                        rng.range(1, 999_999)
                    );
                }
            }
        }
    }
    let geo_ips: String = (0..8)
        .map(|i| format!("10.{i}.0.0/16,\"({}.5,{}.25)\"\n", i * 10 - 40, i * 20 - 70))
        .collect();

    let (mut users, mut events) = (String::new(), String::new());
    let mut event_id = 1_000_000i64;
    for u in (1..=40i64).chain([24305673]) {
        users += &format!(
            "{u},https://api.github.com/users/user{u},user{u},https://avatars/{u},,user{u}\n"
        );
        // User u (1..=40) created u repositories: the top ten have distinct counts.
        let creates = if u <= 40 { u } else { 3 };
        for r in 0..creates {
            event_id += 1;
            let ref_type = if r % 5 == 4 { "branch" } else { "repository" };
            let repo = u * 100 + r;
            events += &format!(
                "{event_id},CreateEvent,true,{repo},\"{{\"\"ref_type\"\": \"\"{ref_type}\"\"}}\",\"{{\"\"name\"\": \"\"r{repo}\"\"}}\",{u},,{}\n",
                ts(0, (event_id * 7) % 3600)
            );
        }
        for _ in 0..rng.range(0, 6) {
            event_id += 1;
            events += &format!(
                "{event_id},PushEvent,true,{},\"{{\"\"distinct_size\"\": {}, \"\"size\"\": 9}}\",,{u},\"{{\"\"login\"\": \"\"org{}\"\"}}\",{}\n",
                u * 100,
                rng.range(0, 12),
                u % 4,
                ts(0, rng.range(0, 600))
            );
        }
        if u % 3 == 0 {
            event_id += 1;
            events += &format!("{event_id},WatchEvent,false,{},{{}},,{u},,\n", u * 100);
        }
    }

    vec![
        ("companies", companies),
        ("campaigns", campaigns),
        ("ads", ads),
        ("clicks", clicks),
        ("impressions", impressions),
        ("geo_ips", geo_ips),
        ("github_users", users),
        ("github_events", events),
    ]
}

/// The dashboards' raw requests, as one multi-row INSERT (times are expressions over
/// `now_hour`, the current hour read once, in UTC): the "last 5 minutes" rows lie two hours
/// after it, the expired ones days before, so no answer depends on when a side runs.
pub fn http_request_insert(now_hour: &str) -> String {
    let mut rng = Rng::new(0x0477_9e57);
    let countries = ["China", "India", "USA", "Indonesia"];
    let rows: Vec<String> = (0..400i64)
        .map(|i| {
            let when = if i % 4 == 3 {
                format!("'{now_hour}+00'::timestamptz - interval '{} hours'", 30 + i)
            } else {
                format!(
                    "'{now_hour}+00'::timestamptz + interval '2 hours {} seconds'",
                    i * 7
                )
            };
            format!(
                "({}, {when}, 'http://example.com/{}', '{}', '{}.{}.{}.{}', {}, {})",
                rng.below(32),
                rng.below(1000),
                rng.pick(&countries),
                rng.range(2, 251),
                rng.range(2, 251),
                rng.range(2, 251),
                rng.range(2, 251),
                if rng.chance(0.5) { 200 } else { 404 },
                rng.range(5, 155)
            )
        })
        .collect();
    format!(
        "INSERT INTO http_request (site_id, ingest_time, url, request_country, ip_address, \
         status_code, response_time_msec) VALUES {}",
        rows.join(", ")
    )
}
