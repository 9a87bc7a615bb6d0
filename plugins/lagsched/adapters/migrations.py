"""Apply the versioned SQL migrations in ``sql/`` in order, recording what was applied.

Files are named ``V<number>__<what>.sql``. Each applied file is recorded in ``schema_migrations``
with its checksum; re-running is a no-op, and a recorded file that was edited afterwards is an error
(write a new migration instead). MySQL commits DDL implicitly, so a migration cannot be one
transaction: each statement is recorded in ``schema_migration_steps`` as it completes, and a run
that stopped half way resumes after the last recorded statement (an ``ALTER TABLE ... ADD COLUMN``
cannot be written to be re-runnable on MySQL 8).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pymysql

from lagsched.adapters.transactions import commit

if TYPE_CHECKING:
    from lagsched.connections import MySQLParams

log = logging.getLogger(__name__)

#: The package's ``sql/``: in a checkout a link to the repository's ``sql/``, in an installed wheel
#: the migrations themselves (package data), so `pip install` carries what the setup DAG applies.
SQL_DIR = Path(__file__).resolve().parents[1] / "sql"
_NAME = re.compile(r"^V(\d{3,})__([a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    """A migration file is malformed, was edited after it was applied, or failed."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text()

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    def statements(self) -> list[str]:
        """The file's statements: ``--`` comments dropped, split on ``;`` at the end of a line."""
        body = "\n".join(line for line in self.sql.splitlines() if not line.lstrip().startswith("--"))
        return [s.strip() for s in re.split(r";\s*$", body, flags=re.M) if s.strip()]


def discover(sql_dir: Path = SQL_DIR) -> list[Migration]:
    migrations = []
    for path in sorted(sql_dir.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: migration files must be named V<number>__<snake_case>.sql")
        migrations.append(Migration(int(match[1]), match[2], path))
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {sql_dir}: {sorted(versions)}")
    return sorted(migrations, key=lambda m: m.version)


def migrate_database(params: MySQLParams) -> list[str]:
    """`migrate` on a connection of its own to ``params``' database; the names applied."""
    from lagsched.adapters.mysql import connect

    conn = connect(params)
    try:
        return migrate(conn)
    finally:
        conn.close()


def migrate(conn: pymysql.connections.Connection[pymysql.cursors.Cursor], sql_dir: Path = SQL_DIR) -> list[str]:
    """Apply every pending migration; returns the names applied (empty when up to date)."""
    applied_now: list[str] = []
    with conn.cursor() as cur:
        # Two migrators (two DAG runs, a test and a DAG) must not interleave.
        cur.execute("SELECT GET_LOCK('lagsched_migrations', 60)")
        row = cur.fetchone()
        if not row or row[0] != 1:
            raise MigrationError("another migration holds the lock 'lagsched_migrations' for over 60 s")
        try:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version INT NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL,"
                " checksum CHAR(64) NOT NULL,"
                " applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
            )
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migration_steps ("
                " version INT NOT NULL, step INT NOT NULL, checksum CHAR(64) NOT NULL,"
                " PRIMARY KEY (version, step))"
            )
            cur.execute("SELECT version, checksum FROM schema_migrations")
            done = {int(v): str(c) for v, c in cur.fetchall()}
            for migration in discover(sql_dir):
                if migration.version in done:
                    if done[migration.version] != migration.checksum:
                        raise MigrationError(
                            f"{migration.path.name} changed after it was applied; "
                            "add a new migration instead of editing an applied one"
                        )
                    continue
                log.info("applying %s", migration.path.name)
                _apply_steps(cur, migration)
                cur.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
                cur.execute("DELETE FROM schema_migration_steps WHERE version = %s", (migration.version,))
                commit(conn)
                applied_now.append(migration.path.name)
        finally:
            cur.execute("DO RELEASE_LOCK('lagsched_migrations')")
            commit(conn)
    return applied_now


def _apply_steps(cur: pymysql.cursors.Cursor, migration: Migration) -> None:
    """Run the migration's statements that an earlier, interrupted run did not complete."""
    cur.execute("SELECT step, checksum FROM schema_migration_steps WHERE version = %s", (migration.version,))
    done = {int(s): str(c) for s, c in cur.fetchall()}
    if done and set(done.values()) != {migration.checksum}:
        raise MigrationError(
            f"{migration.path.name} changed after a run applied part of it (steps {sorted(done)}); "
            "restore the file as it was, let it finish, and put the change in a new migration"
        )
    for step, statement in enumerate(migration.statements()):
        if step in done:
            continue
        try:
            cur.execute(statement)
        except pymysql.MySQLError as exc:
            raise MigrationError(
                f"{migration.path.name} failed at statement {step + 1}: {exc}\n{statement[:500]}"
            ) from exc
        cur.execute(
            "INSERT INTO schema_migration_steps (version, step, checksum) VALUES (%s, %s, %s)",
            (migration.version, step, migration.checksum),
        )
        commit(cur.connection)
