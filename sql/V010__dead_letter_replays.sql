-- Dead letters re-decoded into their typed table (issue 41, the lagsched_replay DAG). Portable to
-- MySQL 8 and MariaDB.
--
-- One row per dead letter that landed in its typed table, recorded after the table's commit: a
-- replay reads only dead letters without a row here, and one killed between its commit and this
-- record finds the rows in the typed table on its next run and only records them (exactly once).
CREATE TABLE IF NOT EXISTS dead_letter_replays (
    dead_letter_table VARCHAR(400) NOT NULL,
    topic VARCHAR(249) NOT NULL,
    kafka_partition INT NOT NULL,
    kafka_offset BIGINT NOT NULL,
    target_table VARCHAR(400) NOT NULL,
    replay_id CHAR(36) NOT NULL,
    replayed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (dead_letter_table, topic, kafka_partition, kafka_offset)
);
