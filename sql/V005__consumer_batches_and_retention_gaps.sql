-- The Spark consumer (issue 9): a batch recorded before it is written, and records lost to retention.
-- Portable to MySQL 8 and MariaDB >= 10.6.

-- The batch a holder is writing: [pending_start, pending_end). Recorded under the claim's epoch
-- (fenced) before any file is written, cleared by the commit of that batch. A new holder that finds
-- it set redoes exactly that range, to the same file names, so a stale holder that wakes up and
-- finishes its write only replaces identical content (docs/consumer.md). The start is stored
-- because it is not always the committed offset: a first batch starts at the log start, and a
-- batch after a retention gap starts past the gap.
ALTER TABLE topic_partitions
    ADD COLUMN pending_start BIGINT NULL AFTER committed_offset,
    ADD COLUMN pending_end BIGINT NULL AFTER pending_start,
    ADD CONSTRAINT ck_topic_partitions_pending CHECK (
        (pending_start IS NULL AND pending_end IS NULL)
        OR (pending_start >= 0 AND pending_end > pending_start));

-- Ranges a consumer found deleted by retention before it read them: [from_offset, to_offset).
-- One row per skipped start: a redo of the same batch finds its row already there.
CREATE TABLE IF NOT EXISTS retention_gaps (
    topic_id     CHAR(36)     NOT NULL,
    partition_id INT          NOT NULL,
    from_offset  BIGINT       NOT NULL,
    to_offset    BIGINT       NOT NULL,
    records      BIGINT       NOT NULL,
    slot_id      CHAR(36)     NOT NULL,
    detected_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (topic_id, partition_id, from_offset),
    CONSTRAINT fk_retention_gaps_partition FOREIGN KEY (topic_id, partition_id)
        REFERENCES topic_partitions (topic_id, partition_id),
    CONSTRAINT ck_retention_gaps_range CHECK (from_offset >= 0 AND to_offset > from_offset
                                              AND records = to_offset - from_offset)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
