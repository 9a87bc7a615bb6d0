-- Claim order index and the stored topic ownership (issue 3).
-- Portable to MySQL 8 and MariaDB >= 10.6.

-- The balanced assignment in force: owners of each topic in lane order. Balanced HRW is computed
-- from the previous assignment (docs/assignment.md), so the previous one is kept here. One row per
-- (topic, lane); the owner at lane `lane` holds fair_share(P, owners, lane) partitions.
CREATE TABLE IF NOT EXISTS topic_owners (
    topic_id    CHAR(36)     NOT NULL,
    lane        INT          NOT NULL,
    slot_id     CHAR(36)     NOT NULL,
    -- generation of assignment_state that wrote this row
    generation  BIGINT       NOT NULL,
    PRIMARY KEY (topic_id, lane),
    KEY ix_topic_owners_slot (slot_id),
    CONSTRAINT fk_topic_owners_topic FOREIGN KEY (topic_id) REFERENCES topics (topic_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- One row: which live-slot set and topic set the stored assignment was computed for. Writers lock
-- it (SELECT ... FOR UPDATE) so two recomputations never interleave; generation counts rewrites.
CREATE TABLE IF NOT EXISTS assignment_state (
    id           TINYINT      NOT NULL,
    generation   BIGINT       NOT NULL DEFAULT 0,
    -- sha256 of the sorted live slot ids and the (topic_id, partitions, linker_workers) list
    inputs_hash  CHAR(64)     NOT NULL DEFAULT '',
    computed_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id),
    CONSTRAINT ck_assignment_state_one_row CHECK (id = 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

INSERT IGNORE INTO assignment_state (id, generation, inputs_hash) VALUES (1, 0, '');

-- The claim query is `WHERE topic_id = ? AND (claimed_by IS NULL OR lease_expires_at <= now)
-- ORDER BY last_picked_at, partition_id LIMIT n FOR UPDATE [SKIP LOCKED]`. With this index InnoDB
-- walks one topic's rows already in claim order and stops after n matches, so a claimer locks only
-- the rows it examines; without it the sort reads (and locks) every claimable row of the topic.
-- MySQL 8 has no CREATE INDEX IF NOT EXISTS, so this statement comes last: every earlier one is
-- re-runnable, and the runner records the migration right after it.
CREATE INDEX ix_topic_partitions_pick
    ON topic_partitions (topic_id, last_picked_at, partition_id);
