"""psycopg 3 against pgshard (run by tests/driver_psycopg.rs; libpq env PGHOST etc.).

Each check prints "ok NAME" or "FAIL NAME" with the traceback; the last line is
"psycopg: N passed, M failed" and the exit status is 1 when anything failed.

    python3 psycopg_check.py               the checks that must pass
    python3 psycopg_check.py --known-bugs  checks of pgshard bugs not fixed yet
    python3 psycopg_check.py --only NAME   one check (of either list)
"""

import datetime
import decimal
import sys
import traceback

import psycopg
from psycopg import errors, sql

import os

# One table per run, so that concurrent runs (the Rust tests) do not collide.
TABLE = f"psy_items_{os.getpid()}"
CHECKS = []
KNOWN_BUGS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def known_bug(fn):
    KNOWN_BUGS.append(fn)
    return fn


def connect(**kw):
    return psycopg.connect(autocommit=True, **kw)


def expect(got, want, what=""):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def alive(conn):
    """The connection still answers after an error."""
    expect(conn.execute("select 1").fetchone(), (1,), "select 1 after the error")


def expect_error(conn, query, params, cls, sqlstate):
    try:
        conn.execute(query, params)
    except cls as e:
        expect(e.sqlstate, sqlstate, f"sqlstate of {query!r}")
        expect(type(e), cls, f"class of {query!r}")
    else:
        raise AssertionError(f"{query!r} raised nothing, want {cls.__name__}")


def setup():
    with connect() as conn:
        conn.execute(f"drop table if exists {TABLE}")
        conn.execute(
            f"create table {TABLE} (k int primary key, v text, n numeric(12,3),"
            " ts timestamptz, b bytea, f float8, flag bool)"
        )
        # Simple protocol (no parameters): see --known-bugs for the extended one.
        conn.execute(
            f"select create_distributed_table('{TABLE}', 'k')", prepare=False
        )
        # executemany pipelines its statements: inside a transaction block (see
        # --known-bugs for autocommit).
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                f"insert into {TABLE} (k, v, n, ts, b, f, flag)"
                " values (%s, %s, %s, %s, %s, %s, %s)",
                [
                    (
                        i,
                        f"item {i} – ünïcødé",
                        decimal.Decimal(i) / 8,
                        datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
                        + datetime.timedelta(hours=i),
                        bytes([i % 256, 0, 255]),
                        i * 0.5,
                        i % 2 == 0,
                    )
                    for i in range(1, 101)
                ],
            )


@check
def distributed_table_is_in_the_catalog():
    with connect() as conn:
        n = conn.execute(
            "select count(*) from pg_dist_shard where logicalrelid = %s::regclass",
            (TABLE,),
        ).fetchone()[0]
        if n < 2:
            raise AssertionError(f"{n} shards")
        expect(
            conn.execute(f"select count(*) from {TABLE}").fetchone(), (100,), "count"
        )


@check
def server_side_prepared_statements():
    with connect() as conn:
        query = f"select v, n from {TABLE} where k = %s"
        for k in [1, 2, 50, 99, 100, 7, 1]:
            row = conn.execute(query, (k,), prepare=True).fetchone()
            expect(row, (f"item {k} – ünïcødé", decimal.Decimal(k) / 8), f"k={k}")
        expect(conn.execute(query, (1000,), prepare=True).fetchone(), None, "missing")
        # psycopg really keeps it as a named server-side statement.
        if not conn._prepared._names:
            raise AssertionError("psycopg prepared nothing")
        # Prepared writes, reused.
        ins = f"insert into {TABLE} (k, v) values (%s, %s)"
        for k in range(1001, 1011):
            cur = conn.execute(ins, (k, f"p{k}"), prepare=True)
            expect(cur.rowcount, 1, f"insert {k} rowcount")
        cur = conn.execute(
            f"delete from {TABLE} where k = %s", (1005,), prepare=True
        )
        expect(cur.rowcount, 1, "delete rowcount")
        got = sorted(conn.execute(
            f"select k, v from {TABLE} where k between 1001 and 1010"
        ).fetchall())
        expect(got, [(k, f"p{k}") for k in range(1001, 1011) if k != 1005], "rows")
        for k in range(1001, 1011):
            conn.execute(f"delete from {TABLE} where k = %s", (k,), prepare=True)
        expect(
            conn.execute(f"select count(*) from {TABLE} where k > 1000").fetchone(),
            (0,),
            "prepared deletes",
        )


@check
def automatic_prepare_after_threshold():
    with connect(prepare_threshold=2) as conn:
        with conn.cursor() as cur:
            for i in range(6):
                k = 10 + i
                cur.execute(f"select k, flag from {TABLE} where k = %s", (k,))
                expect(cur.fetchall(), [(k, k % 2 == 0)], f"k={k}")


@check
def cursor_execute_with_params():
    with connect() as conn:
        with conn.cursor() as cur:
            cur.execute(
                f"select k, v, f from {TABLE} where k = %(k)s and v like %(pat)s",
                {"k": 42, "pat": "item%"},
            )
            expect(cur.fetchall(), [(42, "item 42 – ünïcødé", 21.0)], "named params")
            cur.execute(
                f"select count(*), sum(k), min(n), max(ts) from {TABLE} where k <= %s",
                (10,),
            )
            count, total, least, latest = cur.fetchone()
            expect((count, total, least), (10, 55, decimal.Decimal("0.125")), "agg")
            expect(
                latest,
                datetime.datetime(2024, 1, 1, 10, tzinfo=datetime.timezone.utc),
                "max(ts)",
            )
            cur.execute(f"select k from {TABLE} where k = any(%s)", ([3, 4, 500],))
            expect(sorted(cur.fetchall()), [(3,), (4,)], "any(array)")
            cur.execute(f"update {TABLE} set v = %s where k = %s", (None, 77))
            expect(cur.rowcount, 1, "update rowcount")
            cur.execute(f"select v is null from {TABLE} where k = %s", (77,))
            expect(cur.fetchone(), (True,), "NULL written")
            cur.execute(f"update {TABLE} set v = %s where k = %s", ("item 77 – ünïcødé", 77))


@check
def binary_results():
    with connect() as conn:
        with conn.cursor(binary=True) as cur:
            cur.execute(
                f"select k, v, n, ts, b, f, flag from {TABLE} where k = %s", (12,)
            )
            row = cur.fetchone()
            expect(
                row,
                (
                    12,
                    "item 12 – ünïcødé",
                    decimal.Decimal("1.500"),
                    datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone.utc),
                    bytes([12, 0, 255]),
                    6.0,
                    True,
                ),
                "binary row",
            )
            expect(cur.pgresult.fformat(0), 1, "column 0 format")
            cur.execute(f"select k, n from {TABLE} where k <= 3")
            expect(
                sorted(cur.fetchall()),
                [(k, decimal.Decimal(k) / 8) for k in (1, 2, 3)],
                "binary multi-shard",
            )
            expect(cur.pgresult.fformat(0), 1, "multi-shard format")
        cur = conn.cursor()
        cur.execute(f"select b, n from {TABLE} where k = %s", (200 - 199,), binary=True)
        expect(cur.fetchone(), (bytes([1, 0, 255]), decimal.Decimal("0.125")), "execute(binary=True)")
        expect(cur.pgresult.fformat(0), 1, "execute(binary=True) format")
        cur.execute(f"select b from {TABLE} where k = %s", (1,), binary=False)
        expect(cur.pgresult.fformat(0), 0, "text format again")
        expect(cur.fetchone(), (bytes([1, 0, 255]),), "bytea as text")


@check
def transaction_commit():
    with psycopg.connect() as conn:  # not autocommit: psycopg sends BEGIN itself
        with conn.cursor() as cur:
            cur.execute(f"insert into {TABLE} (k, v) values (%s, %s)", (2001, "tx"))
            cur.execute(f"update {TABLE} set v = 'tx2' where k = %s", (2001,))
            cur.execute(f"select v from {TABLE} where k = %s", (2001,))
            expect(cur.fetchone(), ("tx2",), "read own write")
            expect(conn.info.transaction_status, psycopg.pq.TransactionStatus.INTRANS, "status")
        conn.commit()
    with connect() as other:
        expect(
            other.execute(f"select v from {TABLE} where k = 2001").fetchone(),
            ("tx2",),
            "committed row from another connection",
        )
        with other.transaction():
            other.execute(f"delete from {TABLE} where k = 2001")
        expect(
            other.execute(f"select count(*) from {TABLE} where k = 2001").fetchone(),
            (0,),
            "deleted in a committed transaction block",
        )


@check
def transaction_rollback():
    with psycopg.connect() as conn:
        conn.execute(f"insert into {TABLE} (k, v) values (%s, %s)", (2002, "gone"))
        conn.execute(f"update {TABLE} set v = 'changed' where k = %s", (3,))
        conn.rollback()
        expect(
            conn.execute(f"select count(*) from {TABLE} where k = 2002").fetchone(),
            (0,),
            "rolled back insert",
        )
        conn.rollback()
    with connect() as conn:
        with conn.transaction() as tx:
            conn.execute(f"delete from {TABLE} where k = %s", (4,))
            raise psycopg.Rollback(tx)
        got = sorted(conn.execute(f"select k, v from {TABLE} where k in (3, 4)").fetchall())
        expect(got, [(3, "item 3 – ünïcødé"), (4, "item 4 – ünïcødé")], "rolled back")


@check
def error_undefined_table():
    with connect() as conn:
        expect_error(conn, "select * from psy_no_such_table", None, errors.UndefinedTable, "42P01")
        alive(conn)
        expect_error(conn, "select * from psy_no_such_table where k = %s", (1,), errors.UndefinedTable, "42P01")
        alive(conn)


@check
def error_syntax():
    with connect() as conn:
        expect_error(conn, "selec 1", None, errors.SyntaxError, "42601")
        alive(conn)
        expect_error(conn, "select from where %s", (1,), errors.SyntaxError, "42601")
        alive(conn)


@check
def error_wrong_type():
    with connect() as conn:
        expect_error(
            conn, f"select * from {TABLE} where k = 'abc'", None,
            errors.InvalidTextRepresentation, "22P02",
        )
        alive(conn)
        expect(conn.execute(f"select v from {TABLE} where k = %s", (5,)).fetchone(), ("item 5 – ünïcødé",), "routed query after errors")


@check
def error_inside_transaction():
    with psycopg.connect() as conn:
        conn.execute(f"select v from {TABLE} where k = 1")
        try:
            conn.execute(f"insert into {TABLE} (k, v) values (1, 'duplicate')")
        except errors.UniqueViolation as e:
            expect(e.sqlstate, "23505", "duplicate key")
        else:
            raise AssertionError("duplicate key accepted")
        expect(conn.info.transaction_status, psycopg.pq.TransactionStatus.INERROR, "status")
        try:
            conn.execute("select 1")
        except errors.InFailedSqlTransaction as e:
            expect(e.sqlstate, "25P02", "in failed transaction")
        else:
            raise AssertionError("statement accepted in an aborted transaction")
        # ROLLBACK with the simple protocol (psycopg's own rollback(): --known-bugs).
        conn.pgconn.exec_(b"ROLLBACK")
        expect(conn.info.transaction_status, psycopg.pq.TransactionStatus.IDLE, "status")
        expect(conn.execute(f"select v from {TABLE} where k = 1").fetchone(), ("item 1 – ünïcødé",), "row intact")
        conn.rollback()


@known_bug
def rollback_after_error_in_transaction():
    """psycopg's rollback() sends ROLLBACK through the extended protocol (Parse/Bind/
    Execute); in an aborted transaction pgshard answers it with 25P02 instead of
    rolling back, and the connection stays stuck in the failed transaction."""
    with psycopg.connect() as conn:
        try:
            conn.execute(f"insert into {TABLE} (k, v) values (1, 'duplicate')")
        except errors.UniqueViolation:
            pass
        expect(conn.info.transaction_status, psycopg.pq.TransactionStatus.INERROR, "status")
        conn.rollback()
        expect(conn.info.transaction_status, psycopg.pq.TransactionStatus.IDLE, "status")
        alive(conn)


@known_bug
def invalid_parameter_for_the_distribution_column():
    """A value that is not a valid int for the int distribution column must give
    PostgreSQL's 22P02, not pgshard's 0A000 ("cannot route a parameter of type 23",
    "UPDATE ... without a condition fixing k")."""
    with connect() as conn:
        expect_error(
            conn, f"update {TABLE} set v = 'x' where k = 'abc'", None,
            errors.InvalidTextRepresentation, "22P02",
        )
        alive(conn)
        expect_error(
            conn, f"select * from {TABLE} where k = %s::int", ("abc",),
            errors.InvalidTextRepresentation, "22P02",
        )
        alive(conn)


@check
def named_cursors():
    """Server-side cursors (DECLARE / FETCH / CLOSE): a multi-shard query read in
    batches, one routed by a parameter, a scrollable one, binary results."""
    with psycopg.connect() as conn:
        with conn.cursor(name="all_items") as cur:
            cur.itersize = 7
            cur.execute(f"select k, n from {TABLE} where k <= %s order by k", (30,))
            got = [r for r in cur]
            expect(got, [(k, decimal.Decimal(k) / 8) for k in range(1, 31)], "iterated")
        with conn.cursor(name="one_item", binary=True) as cur:
            cur.execute(f"select k, v, f, flag from {TABLE} where k = %s", (42,))
            expect(cur.fetchall(), [(42, "item 42 – ünïcødé", 21.0, True)], "routed")
        with conn.cursor(name="scrolled", scrollable=True) as cur:
            cur.execute(f"select k from {TABLE} order by k desc limit 5")
            expect(cur.fetchmany(2), [(100,), (99,)], "first two")
            cur.scroll(0, mode="absolute")
            expect(cur.fetchone(), (100,), "back to the first")
            expect(cur.fetchall(), [(99,), (98,), (97,), (96,)], "the rest")
        conn.commit()


@known_bug
def order_by_across_shards():
    """ORDER BY on a multi-shard query (was 0A000; combined on the coordinator node now)."""
    with connect() as conn:
        got = conn.execute(f"select k from {TABLE} where k <= 3 order by k desc").fetchall()
        expect(got, [(3,), (2,), (1,)], "ordered")


@known_bug
def copy_from_stdin():
    """COPY FROM STDIN into a distributed table (was 0A000; rows routed per shard now)."""
    with connect() as conn:
        with conn.cursor() as cur:
            with cur.copy(f"copy {TABLE} (k, v) from stdin") as copy:
                for k in range(3001, 3021):
                    copy.write_row((k, f"copied {k}"))
            got = cur.execute(f"select count(*), min(v) from {TABLE} where k between 3001 and 3020").fetchone()
            expect(got, (20, "copied 3001"), "copied rows")
            cur.execute(f"delete from {TABLE} where k > 3000")
            expect(cur.rowcount, 20, "delete copied")


@check
def many_connections_and_pipeline():
    conns = [connect() for _ in range(8)]
    try:
        for i, c in enumerate(conns):
            expect(c.execute(f"select k from {TABLE} where k = %s", (i + 1,)).fetchone(), (i + 1,), f"conn {i}")
    finally:
        for c in conns:
            c.close()
    with connect() as conn:
        with conn.pipeline():
            curs = [conn.execute(f"select v from {TABLE} where k = %s", (k,)) for k in range(20, 30)]
        got = [c.fetchone()[0] for c in curs]
        expect(got, [f"item {k} – ünïcødé" for k in range(20, 30)], "pipeline")


@known_bug
def create_distributed_table_through_extended_protocol():
    """`select create_distributed_table(...)` through the extended protocol: Describe
    gives its void column, Execute one row."""
    with connect() as conn:
        for t in ["psy_ext1", "psy_ext2"]:
            conn.execute(f"drop table if exists {t}")
            conn.execute(f"create table {t} (k int, v text)")
        cur = conn.execute("select create_distributed_table('psy_ext1', 'k')", prepare=True)
        expect([d.name for d in cur.description], ["create_distributed_table"], "columns")
        expect(cur.fetchall(), [("",)], "one void row (PostgreSQL prints void as an empty string)")
        cur = conn.execute("select create_distributed_table(%s, %s)", ("psy_ext2", "k"))
        expect(cur.fetchall(), [("",)], "one void row (parameters)")
        expect(
            conn.execute(
                "select count(*) from pg_dist_partition"
                " where logicalrelid in ('psy_ext1'::regclass, 'psy_ext2'::regclass)"
            ).fetchone(),
            (2,),
            "both distributed",
        )
        for t in ["psy_ext1", "psy_ext2"]:
            conn.execute(f"drop table {t}")


@known_bug
def executemany_in_autocommit():
    """psycopg's executemany pipelines INSERTs up to one Sync: one implicit transaction,
    which pgshard turns into a two-phase-committed block when it writes on several
    workers."""
    with connect() as conn:
        with conn.cursor() as cur:
            cur.executemany(
                f"insert into {TABLE} (k, v) values (%s, %s)",
                [(k, f"many {k}") for k in range(4001, 4021)],
            )
        got = conn.execute(f"select count(*) from {TABLE} where k between 4001 and 4020").fetchone()
        expect(got, (20,), "rows inserted")
        with conn.cursor() as cur:
            cur.executemany(f"delete from {TABLE} where k = %s", [(k,) for k in range(4001, 4021)])
        got = conn.execute(f"select count(*) from {TABLE} where k between 4001 and 4020").fetchone()
        expect(got, (0,), "rows deleted")
        # All or nothing: a duplicate key in the last row leaves none of the batch.
        rows = [(k, "atomic") for k in range(4101, 4111)] + [(4101, "duplicate")]
        try:
            with conn.cursor() as cur:
                cur.executemany(f"insert into {TABLE} (k, v) values (%s, %s)", rows)
            raise AssertionError("the duplicate key was accepted")
        except psycopg.errors.UniqueViolation:
            pass
        got = conn.execute(f"select count(*) from {TABLE} where k between 4101 and 4110").fetchone()
        expect(got, (0,), "nothing of a failed batch stays")


def main():
    args = sys.argv[1:]
    if "--known-bugs" in args:
        checks = KNOWN_BUGS
    elif "--only" in args:
        name = args[args.index("--only") + 1]
        checks = [fn for fn in CHECKS + KNOWN_BUGS if fn.__name__ == name]
        if not checks:
            print(f"no check {name}")
            return 2
    else:
        checks = CHECKS
    passed = failed = 0
    try:
        setup()
    except Exception:
        traceback.print_exc(file=sys.stdout)
        print("FAIL setup")
        print(f"psycopg: 0 passed, {len(checks)} failed")
        return 1
    for fn in checks:
        try:
            fn()
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc(file=sys.stdout)
        else:
            passed += 1
            print(f"ok {fn.__name__}")
    try:
        with connect() as conn:
            conn.execute(f"drop table if exists {TABLE}")
    except Exception:
        traceback.print_exc(file=sys.stdout)
    print(f"psycopg: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
