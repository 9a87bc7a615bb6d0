-- Whether a writer schema may evolve a typed table (issue 41). Portable to MySQL 8 and MariaDB.
--
-- Decided once per (table, schema id) by the first slot that meets the schema, under a lock, and
-- never changed: the records of a schema id land in the same table (typed, or dead-letter) however
-- often and by whichever slot their range is read again, which exactly once across tables rests on.
CREATE TABLE IF NOT EXISTS schema_decisions (
    table_name VARCHAR(400) NOT NULL,
    schema_id BIGINT NOT NULL,
    accepted BOOLEAN NOT NULL,
    reason VARCHAR(2000) NULL,
    decided_by CHAR(36) NULL,
    decided_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (table_name, schema_id)
);
