-- Data completeness (issue 42): what the pipeline knows of each partition's time (docs/completeness.md).
-- Portable to MySQL 8 and MariaDB >= 10.6.

-- The largest record timestamp (Kafka's, ms since the epoch) below committed_offset, moved by the
-- same fenced UPDATE that moves the offset, after the table commit that holds those records. NULL:
-- none known yet (no record committed since this column exists). It only grows.
ALTER TABLE topic_partitions
    ADD COLUMN max_timestamp_ms BIGINT NULL AFTER pending_end;

-- What the lag monitor saw of each partition's end (written by adapters/watermarks.py alone):
-- * end_offset, observed_ms: at observed_ms every record appended so far sat below end_offset (the
--   last stable offset, read after observed_ms was taken). Once committed_offset >= end_offset the
--   pipeline holds everything appended before observed_ms. A reading is replaced only once it is
--   reached, so a busy partition's credit is never lost to a newer reading it has not reached yet.
-- * caught_up_ms: the latest time the pipeline was known to hold everything appended before it
--   (a reading reached, or no lag at the reading). It only grows.
-- So an idle partition does not hold a table's watermark back; a stalled one does.
CREATE TABLE IF NOT EXISTS partition_ends (
    topic_id     CHAR(36) NOT NULL,
    partition_id INT      NOT NULL,
    end_offset   BIGINT   NOT NULL,
    observed_ms  BIGINT   NOT NULL,
    caught_up_ms BIGINT   NULL,
    PRIMARY KEY (topic_id, partition_id),
    CONSTRAINT fk_partition_ends_partition FOREIGN KEY (topic_id, partition_id)
        REFERENCES topic_partitions (topic_id, partition_id),
    CONSTRAINT ck_partition_ends CHECK (end_offset >= 0 AND observed_ms >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
