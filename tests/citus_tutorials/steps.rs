//! The statements of Citus's two tutorials, in their order, written from Citus's
//! documentation: the multi-tenant tutorial and its use-case guide (companies, campaigns,
//! ads, clicks, impressions distributed by company; `geo_ips` a reference table) and the
//! real-time analytics tutorial (github_events / github_users distributed by user) with the
//! real-time dashboards guide (http_request rolled up into http_request_1min). The last
//! section asks the tutorials' questions the way applications also write them (a CTE on
//! one tenant, subqueries, UNION), the shapes issue 19 found refused.
//! Left out: the HLL extension's queries (not installed), `isolate_tenant_to_new_shard`, and
//! `SET citus.replication_model` (removed in Citus 11, which rejects it as pgshard does, with
//! 42704, while a plain PostgreSQL takes it as a placeholder setting).

/// How a step runs and is compared.
pub enum Kind {
    /// Rows compared in order (`ordered`: the ORDER BY is total) or as a multiset.
    Read { ordered: bool },
    /// A write (or transaction block): answers compared, then these tables' contents.
    Write { tables: &'static [&'static str] },
    /// A Citus API call: pgshard only, must succeed.
    CitusOnly,
}

pub struct Step {
    pub name: &'static str,
    pub sql: String,
    pub kind: Kind,
}

/// What the contents of a written table are compared by (now() columns as a flag).
pub fn contents_query(table: &str) -> String {
    match table {
        "companies" => "SELECT id, name, image_url, created_at = updated_at FROM companies".into(),
        t => format!("SELECT * FROM {t}"),
    }
}

fn read(name: &'static str, sql: &str, ordered: bool) -> Step {
    Step {
        name,
        sql: sql.to_string(),
        kind: Kind::Read { ordered },
    }
}

fn write(name: &'static str, sql: &str, tables: &'static [&'static str]) -> Step {
    Step {
        name,
        sql: sql.to_string(),
        kind: Kind::Write { tables },
    }
}

fn citus(name: &'static str, sql: &str) -> Step {
    Step {
        name,
        sql: sql.to_string(),
        kind: Kind::CitusOnly,
    }
}

/// The multi-tenant tutorial and use-case guide.
fn multi_tenant() -> Vec<Step> {
    vec![
        write(
            "mt: insert a company",
            "INSERT INTO companies VALUES (5000, 'New Company', 'https://randomurl/image.png', now(), now())",
            &["companies"],
        ),
        write(
            "mt: double the budgets",
            "UPDATE campaigns SET monthly_budget = monthly_budget*2 WHERE company_id = 5",
            &["campaigns"],
        ),
        write(
            "mt: delete a campaign and its ads atomically",
            "BEGIN; DELETE FROM campaigns WHERE id = 46 AND company_id = 5; \
             DELETE FROM ads WHERE campaign_id = 46 AND company_id = 5; COMMIT",
            &["campaigns", "ads"],
        ),
        write(
            "mt: create delete_campaign",
            "CREATE OR REPLACE FUNCTION delete_campaign(company_id int, campaign_id int) \
             RETURNS void LANGUAGE plpgsql AS $fn$ BEGIN \
               DELETE FROM campaigns WHERE id = $2 AND campaigns.company_id = $1; \
               DELETE FROM ads WHERE ads.campaign_id = $2 AND ads.company_id = $1; \
             END; $fn$",
            &[],
        ),
        citus(
            "mt: create_distributed_function",
            "SELECT create_distributed_function('delete_campaign(int, int)', 'company_id', \
             colocate_with := 'campaigns')",
        ),
        write(
            "mt: run delete_campaign",
            "SELECT delete_campaign(5, 45)",
            &["campaigns", "ads"],
        ),
        read(
            "mt: campaigns with the highest budget",
            "SELECT name, cost_model, state, monthly_budget FROM campaigns \
             WHERE company_id = 5 ORDER BY monthly_budget DESC LIMIT 10",
            false,
        ),
        read(
            "mt: running campaigns with the most clicks and impressions",
            "SELECT campaigns.id, campaigns.name, campaigns.monthly_budget, \
                    sum(impressions_count) as total_impressions, sum(clicks_count) as total_clicks \
             FROM ads, campaigns \
             WHERE ads.company_id = campaigns.company_id AND campaigns.company_id = 5 \
               AND campaigns.state = 'running' \
             GROUP BY campaigns.id, campaigns.name, campaigns.monthly_budget \
             ORDER BY total_impressions, total_clicks",
            false,
        ),
        write(
            "mt: reallocate budget in a transaction",
            "BEGIN; \
             UPDATE campaigns SET monthly_budget = monthly_budget + 1000 WHERE company_id = 5 AND id = 40; \
             UPDATE campaigns SET monthly_budget = monthly_budget - 1000 WHERE company_id = 5 AND id = 41; \
             COMMIT",
            &["campaigns"],
        ),
        read(
            "mt: rank ads by impressions",
            "SELECT a.campaign_id, \
                    RANK() OVER (PARTITION BY a.campaign_id ORDER BY a.campaign_id, count(*) desc), \
                    count(*) as n_impressions, a.id \
             FROM ads as a JOIN impressions as i ON i.company_id = a.company_id AND i.ad_id = a.id \
             WHERE a.company_id = 5 GROUP BY a.campaign_id, a.id \
             ORDER BY a.campaign_id, n_impressions desc",
            false,
        ),
        read(
            "mt: where the clickers of ad 290 are",
            "SELECT c.id, clicked_at, latlon FROM geo_ips, clicks c \
             WHERE addrs >> c.user_ip AND c.company_id = 5 AND c.ad_id = 290",
            false,
        ),
        write("mt: add a caption column", "ALTER TABLE ads ADD COLUMN caption text", &["ads"]),
        read(
            "mt: mobile or not",
            "SELECT user_data->>'is_mobile' AS is_mobile, count(*) AS count FROM clicks \
             WHERE company_id = 5 GROUP BY user_data->>'is_mobile' ORDER BY count DESC",
            false,
        ),
        write(
            "mt: partial index for one tenant",
            "CREATE INDEX click_user_data_is_mobile ON clicks ((user_data->>'is_mobile')) \
             WHERE company_id = 5",
            &[],
        ),
        write(
            "mt: GIN index on user_data",
            "CREATE INDEX click_user_data ON clicks USING gin (user_data)",
            &[],
        ),
        read(
            "mt: clicks with is_mobile",
            "SELECT id FROM clicks WHERE user_data ? 'is_mobile' AND company_id = 5",
            false,
        ),
    ]
}

/// The real-time analytics tutorial and the real-time dashboards guide.
fn real_time() -> Vec<Step> {
    vec![
        read("rt: how many users", "SELECT count(*) FROM github_users", true),
        read(
            "rt: commits per minute",
            "SELECT date_trunc('minute', created_at) AS minute, \
                    sum((payload->>'distinct_size')::int) AS num_commits \
             FROM github_events WHERE event_type = 'PushEvent' GROUP BY minute ORDER BY minute",
            true,
        ),
        // The tutorial orders by count(*) alone: logins with equal counts may come in
        // any order (pushed down, the combine step's order differs from one server's).
        read(
            "rt: top repo creators",
            "SELECT login, count(*) FROM github_events ge JOIN github_users gu \
             ON ge.user_id = gu.user_id \
             WHERE event_type = 'CreateEvent' AND payload @> '{\"ref_type\": \"repository\"}' \
             GROUP BY login ORDER BY count(*) DESC, login LIMIT 10",
            true,
        ),
        write(
            "rt: update a display login",
            "UPDATE github_users SET display_login = 'no1youknow' WHERE user_id = 24305673",
            &["github_users"],
        ),
        read(
            "rt: dashboard over raw requests",
            "SELECT site_id, date_trunc('minute', ingest_time) as minute, COUNT(1) AS request_count, \
                    SUM(CASE WHEN (status_code between 200 and 299) THEN 1 ELSE 0 END) as success_count, \
                    SUM(CASE WHEN (status_code between 200 and 299) THEN 0 ELSE 1 END) as error_count, \
                    SUM(response_time_msec) / COUNT(1) AS average_response_time_msec \
             FROM http_request WHERE date_trunc('minute', ingest_time) > now() - '5 minutes'::interval \
             GROUP BY site_id, minute ORDER BY minute ASC",
            false,
        ),
        write(
            "rt: initialize latest_rollup",
            "INSERT INTO latest_rollup VALUES ('10-10-1901')",
            &["latest_rollup"],
        ),
        // rollup_http_request()'s statements, its variables written out.
        write(
            "rt: roll up into http_request_1min",
            "INSERT INTO http_request_1min (site_id, ingest_time, request_count, success_count, \
                 error_count, average_response_time_msec) \
             SELECT site_id, date_trunc('minute', ingest_time), COUNT(1) as request_count, \
                    SUM(CASE WHEN (status_code between 200 and 299) THEN 1 ELSE 0 END) as success_count, \
                    SUM(CASE WHEN (status_code between 200 and 299) THEN 0 ELSE 1 END) as error_count, \
                    SUM(response_time_msec) / COUNT(1) AS average_response_time_msec \
             FROM http_request \
             WHERE date_trunc('minute', ingest_time) <@ \
                   tstzrange('1901-10-10', date_trunc('minute', now()) + interval '1 day', '(]') \
             GROUP BY 1, 2",
            &["http_request_1min"],
        ),
        write(
            "rt: advance latest_rollup",
            "UPDATE latest_rollup SET minute = date_trunc('minute', now()) + interval '1 day'",
            &[],
        ),
        read(
            "rt: dashboard over the rollup",
            "SELECT site_id, ingest_time as minute, request_count, success_count, error_count, \
                    average_response_time_msec \
             FROM http_request_1min \
             WHERE ingest_time > date_trunc('minute', now()) - '5 minutes'::interval",
            false,
        ),
        write(
            "rt: expire raw data",
            "DELETE FROM http_request WHERE ingest_time < now() - interval '1 day'",
            &["http_request"],
        ),
        write(
            "rt: expire rollups",
            "DELETE FROM http_request_1min WHERE ingest_time < now() - interval '1 month'",
            &["http_request_1min"],
        ),
        write(
            "rt: add country_counters",
            "ALTER TABLE http_request_1min ADD COLUMN country_counters JSONB",
            &["http_request_1min"],
        ),
        write(
            "rt: roll up with country counters",
            "INSERT INTO http_request_1min (site_id, ingest_time, request_count, success_count, \
                 error_count, average_response_time_msec, country_counters) \
             SELECT site_id, date_trunc('minute', ingest_time), COUNT(1) as request_count, \
                    SUM(CASE WHEN (status_code between 200 and 299) THEN 1 ELSE 0 END) as success_count, \
                    SUM(CASE WHEN (status_code between 200 and 299) THEN 0 ELSE 1 END) as error_count, \
                    SUM(response_time_msec) / COUNT(1) AS average_response_time_msec, \
                    jsonb_object_agg(request_country, country_count) AS country_counters \
             FROM (SELECT *, count(1) OVER (PARTITION BY site_id, date_trunc('minute', ingest_time), \
                                                       request_country) AS country_count \
                   FROM http_request) h \
             WHERE date_trunc('minute', ingest_time) <@ \
                   tstzrange('1901-10-10', date_trunc('minute', now()) + interval '1 day', '(]') \
             GROUP BY 1, 2",
            &["http_request_1min"],
        ),
        read(
            "rt: American visitors",
            "SELECT request_count, success_count, error_count, average_response_time_msec, \
                    COALESCE(country_counters->>'USA', '0')::int AS american_visitors \
             FROM http_request_1min \
             WHERE ingest_time > date_trunc('minute', now()) - '5 minutes'::interval",
            false,
        ),
    ]
}

/// The tutorials' questions as applications also write them.
fn application_forms() -> Vec<Step> {
    vec![
        read(
            "app: CTE on one tenant",
            "WITH running AS (SELECT * FROM campaigns WHERE company_id = 5 AND state = 'running') \
             SELECT count(*), sum(monthly_budget) FROM running",
            true,
        ),
        read(
            "app: top creators through a subquery in FROM",
            "SELECT login, n FROM github_users gu JOIN \
               (SELECT user_id, count(*) AS n FROM github_events \
                WHERE event_type = 'CreateEvent' AND payload @> '{\"ref_type\": \"repository\"}' \
                GROUP BY user_id) c ON c.user_id = gu.user_id \
             ORDER BY n DESC, login LIMIT 10",
            true,
        ),
        read(
            "app: top creators through a CTE",
            "WITH creators AS (SELECT user_id, count(*) AS n FROM github_events \
                WHERE event_type = 'CreateEvent' AND payload @> '{\"ref_type\": \"repository\"}' \
                GROUP BY user_id) \
             SELECT login, n FROM creators JOIN github_users USING (user_id) ORDER BY n DESC, login LIMIT 10",
            true,
        ),
        read(
            "app: campaigns of companies with clicks (IN)",
            "SELECT count(*) FROM campaigns WHERE company_id IN (SELECT company_id FROM clicks \
             WHERE user_data->>'is_mobile' = 'true')",
            true,
        ),
        read(
            "app: ads without impressions (NOT EXISTS, correlated on the tenant)",
            "SELECT a.company_id, count(*) FROM ads a WHERE NOT EXISTS \
               (SELECT 1 FROM impressions i WHERE i.company_id = a.company_id AND i.ad_id = a.id) \
             GROUP BY a.company_id",
            false,
        ),
        read(
            "app: share of the company's impressions (scalar subquery)",
            "SELECT id, impressions_count * 100 / \
                    (SELECT sum(impressions_count) FROM ads WHERE company_id = 5) AS pct \
             FROM ads WHERE company_id = 5 AND campaign_id = 48",
            false,
        ),
        read(
            "app: users who pushed or watched (UNION)",
            "SELECT user_id FROM github_events WHERE event_type = 'PushEvent' \
             UNION SELECT user_id FROM github_events WHERE event_type = 'WatchEvent'",
            false,
        ),
        read(
            "app: one tenant's campaigns above its average budget (HAVING subquery)",
            "SELECT state, count(*) FROM campaigns WHERE company_id = 7 GROUP BY state \
             HAVING max(monthly_budget) > (SELECT avg(monthly_budget) FROM campaigns WHERE company_id = 7)",
            false,
        ),
        write(
            "app: pause campaigns with a much-clicked ad (UPDATE ... FROM)",
            "UPDATE campaigns c SET state = 'paused' FROM ads a \
             WHERE a.company_id = c.company_id AND a.campaign_id = c.id AND c.company_id = 3 \
               AND a.clicks_count > 250",
            &["campaigns"],
        ),
        write(
            "app: delete clicks of blacklisted sites (DELETE ... USING)",
            "DELETE FROM clicks USING campaigns, ads \
             WHERE ads.company_id = clicks.company_id AND ads.id = clicks.ad_id \
               AND campaigns.company_id = ads.company_id AND campaigns.id = ads.campaign_id \
               AND clicks.site_url = ANY (campaigns.blacklisted_site_urls)",
            &["clicks"],
        ),
        write(
            "app: view of running campaigns",
            "CREATE VIEW running_campaigns AS SELECT * FROM campaigns WHERE state = 'running'",
            &[],
        ),
        read(
            "app: read the view",
            "SELECT company_id, count(*) FROM running_campaigns GROUP BY company_id",
            false,
        ),
    ]
}

/// Every compared step, in order.
pub fn steps() -> Vec<Step> {
    let mut all = multi_tenant();
    all.extend(real_time());
    all.extend(application_forms());
    all
}
