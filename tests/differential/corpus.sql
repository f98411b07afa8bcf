-- Hand-written differential corpus (tests/differential.rs runs each statement through
-- pgshard and a plain PostgreSQL, simple and extended protocol, and compares results).
-- Tables: diff_items (distributed by int k), diff_texts (distributed by text name).
-- A statement ends with ';' at a line end. Every top-level ORDER BY here is total
-- (ties broken by grouping keys or id), so ordered results are compared in order.

-- Two-phase aggregates without GROUP BY
select count(*) from diff_items;
select count(*), count(i4), count(t), count(j) from diff_items;
select count(distinct k), count(distinct t), count(distinct vc), count(distinct u) from diff_items;
select count(distinct j), count(distinct b), count(distinct d) from diff_items;
select sum(s2), sum(i4), sum(i8), sum(n) from diff_items;
select sum(f4), sum(f8) from diff_items;
select avg(s2), avg(i4), avg(i8), avg(n) from diff_items;
select avg(f4), avg(f8) from diff_items where f8 <> 'NaN' and f8 not in ('Infinity', '-Infinity');
select min(s2), max(s2), min(i4), max(i4), min(i8), max(i8) from diff_items;
select min(n), max(n), min(f4), max(f4), min(f8), max(f8) from diff_items;
select min(t), max(t), min(vc), max(vc) from diff_items;
select min(d), max(d), min(ts), max(ts), min(tz), max(tz) from diff_items;
select bool_and(b), bool_or(b), every(b) from diff_items;
select bool_and(i4 > -5000), bool_or(t = 'apple'), every(k >= -40) from diff_items;
select stddev(i4), stddev_pop(i4), stddev_samp(i4), variance(i4), var_pop(i4), var_samp(i4) from diff_items;
select stddev(n), variance(n) from diff_items where n not in ('NaN', 'Infinity', '-Infinity');
select stddev(f8), var_pop(f8), stddev_samp(f4) from diff_items where f8 between -1e6 and 1e6 and f4 between -300 and 300;
select stddev(s2), variance(i8), var_samp(s2) from diff_items;
select string_agg(t, ', ' order by t, id) from diff_items where k = 1;
select string_agg(distinct t, '|' order by t) from diff_items;
select string_agg(vc, ';' order by vc desc nulls first, id) from diff_items where k between 0 and 3;
select array_agg(i4 order by i4, id) from diff_items where k = 2;
select array_agg(distinct s2 order by s2) from diff_items;
select array_agg(f8 order by f8 desc, id) from diff_items where k < -35;
select array_agg(j order by id) from diff_items where k = 0 and j is not null;
select sum(i4) * 100 / count(*) from diff_items;
select sum(n) * 100 / count(*), sum(n) / nullif(count(n), 0) from diff_items where n <> 'NaN';
select max(i4)::numeric - min(i4), count(*) - count(i4) from diff_items;
select round(avg(i4), 3), round(avg(n), 5) from diff_items where n < 1e12;
select count(*) filter (where b), sum(i4) filter (where t like 'a%'), count(*) filter (where t is null) from diff_items;
select count(*) from diff_items where false;
select sum(i4), avg(n), min(t), max(d), bool_and(b), string_agg(t, ',' order by t) from diff_items where false;
select sum(i4) * 100 / count(*) from diff_items where false;
select count(*), sum(i4) from diff_items where k = 1;
select count(*) from diff_items having count(*) > 10;
select count(*) from diff_items having count(*) > 1000000;
select 1 + count(*), sum(i4) + sum(s2), coalesce(max(t), 'none') from diff_items;
select count(*) as total, sum(i4) as "Sum I4", max(t) as "Ünïcode" from diff_items;
select count(*), sum(qty), avg(price), min(name), max(name) from diff_texts;
select count(distinct name), string_agg(distinct name, ',' order by name) from diff_texts;

-- GROUP BY on columns and expressions
select k, count(*) from diff_items group by k;
select k, count(*), sum(i4), avg(n), min(t), max(d) from diff_items group by k order by k;
select t, count(*) from diff_items group by t order by t;
select t, count(*) from diff_items group by t order by t desc nulls last;
select lower(t), count(*), count(distinct t) from diff_items group by lower(t) order by 1;
select b, count(*), avg(i4) from diff_items group by b order by b nulls first;
select s2 % 5, count(*), sum(i8) from diff_items group by 1 order by 1;
select i4 % 10 as bucket, count(*) from diff_items group by bucket order by bucket;
select date_trunc('year', d), count(*), min(ts) from diff_items group by 1 order by 1;
select extract(dow from ts) as dow, count(*), avg(f4) from diff_items group by dow order by dow;
select jsonb_typeof(j), count(*) from diff_items group by 1 order by 1;
select j, count(*) from diff_items group by j order by j;
select u, count(*) from diff_items group by u order by u;
select n, count(*) from diff_items group by n order by n;
select f8, count(*) from diff_items group by f8 order by f8 limit 20;
select f4, count(*), sum(f4) from diff_items group by f4 order by f4;
select tz::date, count(*) from diff_items group by 1 order by 1;
select k, b, count(*) from diff_items group by k, b order by k, b;
select t, vc, count(*), max(i4) from diff_items group by t, vc order by t, vc;
select count(*) from diff_items group by t;
select sum(i4) from diff_items group by k, s2;
select k, count(*) from diff_items where i4 > 0 group by k order by k;
select k, count(*) from diff_items where k = 3 group by k;
select (i4 > 0), count(*) from diff_items group by (i4 > 0) order by 1;
select length(t), count(*), string_agg(t, '/' order by t, id) from diff_items group by length(t) order by 1;
select name, count(*), sum(qty), avg(price) from diff_texts group by name order by name;
select flag, count(*), sum(price) from diff_texts group by flag order by flag;
select left(note, 1), count(*) from diff_texts group by 1 order by 1;

-- Aggregates of every family per group
select k, count(distinct t), sum(distinct i4), avg(distinct s2) from diff_items group by k order by k;
select k, bool_and(b), bool_or(b) from diff_items group by k order by k;
select k, stddev(i4), variance(s2), var_pop(i8), stddev_pop(n) from diff_items where n not in ('NaN', 'Infinity', '-Infinity') group by k order by k;
select k, stddev(f8), var_samp(f4) from diff_items where f8 between -1e6 and 1e6 and f4 between -300 and 300 group by k order by k;
select k, string_agg(t, ',' order by t, id), array_agg(i4 order by i4 nulls first, id) from diff_items group by k order by k;
select b, string_agg(distinct vc, ',' order by vc) from diff_items group by b order by b;
select s2, sum(i4) * 100 / count(*), max(n) - min(n) from diff_items group by s2 order by s2;
select k, count(*) filter (where b), sum(n) filter (where n > 0) from diff_items group by k order by k;

-- HAVING
select k, count(*) from diff_items group by k having count(*) > 10 order by k;
select k, sum(i4) from diff_items group by k having sum(i4) > 1000 order by k;
select t, count(*) from diff_items group by t having min(i4) < 0 and max(i4) > 0 order by t;
select b, count(*) from diff_items group by b having bool_or(i4 > 900) order by b;
select k from diff_items group by k having count(distinct t) >= 5 order by k;
select k, avg(n) from diff_items group by k having avg(n) is not null and count(*) > 3 order by k;
select k, count(*) from diff_items group by k having count(*) > 5 or sum(s2) < 0 order by k;
select k, count(*) from diff_items group by k having k > 100 order by k;

-- ORDER BY on columns, aggregates and expressions; ASC/DESC, NULLS FIRST/LAST
select k, count(*) from diff_items group by k order by count(*) desc, k;
select k, sum(i4) from diff_items group by k order by sum(i4) desc nulls last, k;
select k, sum(i4) from diff_items group by k order by 2 nulls first, 1 desc;
select k, max(t) from diff_items group by k order by max(t) desc, k;
select k, avg(n) as a from diff_items group by k order by a, k;
select k, count(*) from diff_items group by k order by count(*) * 2 - k, k;
select id, t from diff_items order by id;
select id, t from diff_items order by t nulls first, id;
select id, t from diff_items order by t desc nulls last, id desc;
select id, i4, n from diff_items order by i4 desc, n, id;
select id, f8 from diff_items order by f8, id;
select id, d, ts from diff_items order by d nulls first, ts desc, id;
select id, u from diff_items order by u, id;
select id, j from diff_items order by j desc, id;
select id, upper(t) from diff_items order by upper(t), id;
select id, i4 * 2 as dbl from diff_items order by dbl, id;
select * from diff_items order by id;
select * from diff_texts order by name, id;
select name, id from diff_texts order by name desc, id;

-- LIMIT / OFFSET
select id from diff_items order by id limit 10;
select id from diff_items order by id limit 10 offset 20;
select id from diff_items order by id offset 2990;
select id, t from diff_items order by t, id limit 5 offset 3;
select id from diff_items order by id limit 0;
select id from diff_items order by id desc limit all;
select id from diff_items order by id offset 5000;
select k, count(*) from diff_items group by k order by count(*) desc, k limit 10;
select k, count(*) from diff_items group by k order by k limit 5 offset 5;
select t, sum(i4) from diff_items group by t order by sum(i4) desc nulls last, t limit 3;
select name, count(*) from diff_texts group by name order by count(*) desc, name limit 7 offset 1;
select count(*) from diff_items limit 1;
select count(*) from diff_items offset 1;
select id from diff_items order by id fetch first 3 rows only;

-- DISTINCT and DISTINCT ON
select distinct k from diff_items;
select distinct k from diff_items order by k;
select distinct t from diff_items order by t nulls first;
select distinct b, s2 % 3 from diff_items order by 1, 2;
select distinct lower(t) from diff_items order by 1 limit 10;
select distinct j from diff_items order by j;
select distinct d from diff_items where d > date '2000-01-01' order by d desc limit 5 offset 2;
select distinct on (k) k, id, t from diff_items order by k, id;
select distinct on (k) k, id, i4 from diff_items order by k, i4 desc nulls last, id;
select distinct on (t) t, id from diff_items order by t nulls first, id desc;
select distinct on (b) b, id, n from diff_items order by b, n, id;
select distinct on (name) name, id, price from diff_texts order by name, price desc nulls last, id;
select distinct on (k) k, id from diff_items order by k, id limit 10 offset 5;
select distinct count(*) from diff_items group by k;
select distinct k, count(*) from diff_items group by k order by 2, 1;

-- Expressions over aggregates
select k, sum(i4) * 100 / count(*) from diff_items group by k order by k;
select k, round(100.0 * count(b) / count(*), 2) from diff_items group by k order by k;
select t, max(i4) - min(i4), count(*) - count(i4) from diff_items group by t order by t;
select k, sum(n) / nullif(sum(s2), 0) from diff_items where n <> 'NaN' group by k order by k;
select k, case when count(*) > 10 then 'big' else 'small' end from diff_items group by k order by k;
select k, coalesce(sum(i4), 0) + coalesce(max(s2), 0) from diff_items group by k order by k;
select k, avg(i4)::int8, (sum(i8) / count(*))::numeric(30, 2) from diff_items group by k order by k;
select b, count(*)::float8 / (select 1) from diff_items group by b order by b;

-- Row-level expressions without aggregates (plain multi-shard selections)
select id, t || '!' , length(t), upper(vc) from diff_items where k = 1;
select id, n * 2, round(n, 2), f8 / 3, f4 * 2 from diff_items where id < 50;
select id, d + 7, extract(year from ts), date_trunc('hour', tz), tz at time zone 'UTC' from diff_items where id % 100 = 0;
select id, j->'a', j->>'a', j ? 'a' from diff_items where j is not null and id < 300;
select id from diff_items where t ilike '%ä%';
select id from diff_items where t in ('apple', 'Apple', 'ß', '日本語', '');
select id from diff_items where vc between 'a' and 'z';
select id from diff_items where u = (select u from diff_items where u is not null order by id limit 1);

-- Errors: pgshard must answer with the same SQLSTATE
select sum(i4) / 0 from diff_items;
select k, count(*) / 0 from diff_items group by k;
select 1 / (i4 - i4) from diff_items where i4 is not null;
select s2 * 1000 from diff_items;
select sum(i4) from diff_items group by no_such_column;
select count(*) from diff_items having t = 'x';
select k, t from diff_items group by k;
select distinct on (k) k, id from diff_items order by id;
select string_agg(i4, ',') from diff_items;
select id from diff_items order by 5;
select avg(t) from diff_items;

-- Shapes beyond the list: pgshard answers them right or refuses them (0A000)
select k, count(*) from diff_items where k in (1, 2, 250) group by k order by k;
select count(*) from diff_items where k = 1 or k = 2;
select t from diff_items where k < 0 order by t collate "C", id;
select b, s2 % 2, count(*) from diff_items group by rollup (b, s2 % 2) order by 1, 2, 3;
select b, count(*) from diff_items group by grouping sets ((b), ()) order by 1, 2;
select count(*) from diff_items group by ();
select 1 from diff_items group by k;
select k, 'const', count(*) from diff_items group by k order by k;
select k, count(*) over () from diff_items where k < 0 order by k, id;
select id, sum(i4) over (partition by k order by id) from diff_items where k < 0 order by id;
select percentile_cont(0.5) within group (order by i4) from diff_items;
select k, percentile_disc(0.9) within group (order by n) from diff_items group by k order by k;
select mode() within group (order by t) from diff_items;
select jsonb_agg(j order by id) from diff_items where k = 0;
select k, jsonb_object_agg(id, t order by id) from diff_items where k < -30 and t is not null group by k order by k;
select bit_and(i4), bit_or(s2) from diff_items;
select k, bit_or(i4) from diff_items group by k order by k;
select sum(i4)::float8 / count(*), (avg(i8) * 2)::numeric(40, 3) from diff_items;
select count(*) from diff_items where t = 'ß' collate "C";
select id from diff_items order by id limit null;
select id from diff_items order by id offset null;
select id from diff_items order by id limit 3 offset 0;
select distinct on (k) k, i4 from diff_items order by k, i4 nulls first, id limit 3;
select min(k), max(k), count(distinct k) from diff_items where k between -5 and 5;
select name, count(*) from diff_texts where name in ('apple', 'Apple', 'ß', '') group by name order by name;
select name, sum(qty) from diff_texts where name = 'apple' group by name;
select upper(name), count(*) from diff_texts group by upper(name) order by 1;
select count(*), count(distinct (k, t)) from diff_items;
select k, count(*) from diff_items group by k having count(*) = (select 3) order by k;
select avg(i4) filter (where i4 > 0), stddev(i4) filter (where b) from diff_items;
select k, array_agg(distinct t order by t) filter (where t is not null) from diff_items where k < -30 group by k order by k;
select k, min(t collate "C"), max(t collate "C") from diff_items group by k order by k;
select sum(n), avg(n), min(n), max(n) from diff_items where n not in ('NaN', 'Infinity', '-Infinity');
select sum(i8), avg(i8) from diff_items where i8 > 0;
select d, count(*) from diff_items group by d order by count(*) desc, d limit 3;
select k, count(*) from diff_items group by k order by count(*) desc, k offset 290;
