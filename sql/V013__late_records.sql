-- Late records (issue 42, docs/completeness.md): records committed into an hour of a table that
-- was already complete (its watermark past the hour's end plus the allowed lateness) before the
-- commit. An append log: one row per (commit, partition, hour), written by the slot in the same
-- transaction as the partition's offset, so a row exists exactly when its offset moved (a slot
-- killed between its table commit and that transaction leaves the records in the table, uncounted). The
-- restatements of lagsched_hours read the rows recorded in each interval (recorded_at, MySQL's
-- clock) and announce the hours again on the table's restatements asset.
-- Portable to MySQL 8 and MariaDB >= 10.6.

-- Whether the topic's message.timestamp.type is LogAppendTime (the broker stamps each record as it
-- arrives): its records are never late, so its tables need no allowed lateness. Kept by topic sync.
ALTER TABLE topics
    ADD COLUMN log_append_time BOOLEAN NOT NULL DEFAULT FALSE AFTER retention_ms;

CREATE TABLE IF NOT EXISTS late_records (
    id            BIGINT       NOT NULL AUTO_INCREMENT,
    topic_id      CHAR(36)     NOT NULL,
    partition_id  INT          NOT NULL,
    -- The table the records landed in, catalog.namespace.table.
    table_name    VARCHAR(255) NOT NULL,
    -- The start of the records' hour (ms since the epoch, UTC).
    hour_start_ms BIGINT       NOT NULL,
    records       BIGINT       NOT NULL,
    -- The partition's committed offset once they landed (they are below it).
    committed_offset BIGINT    NOT NULL,
    recorded_at   TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    KEY ix_late_records_recorded (recorded_at),
    KEY ix_late_records_table (table_name, hour_start_ms),
    CONSTRAINT fk_late_records_partition FOREIGN KEY (topic_id, partition_id)
        REFERENCES topic_partitions (topic_id, partition_id),
    CONSTRAINT ck_late_records CHECK (records > 0 AND committed_offset > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
