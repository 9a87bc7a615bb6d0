-- Topic registry and the claim table (issue: worker slots, rendezvous ownership, claims).
-- Portable to MySQL 8 and MariaDB >= 10.6. All timestamps are UTC (sessions run with time_zone +00:00).

CREATE TABLE IF NOT EXISTS topics (
    -- Stable id: names are not unique across clusters, and a re-created topic is a new topic.
    topic_id        CHAR(36)     NOT NULL,
    cluster         VARCHAR(255) NOT NULL,
    name            VARCHAR(249) NOT NULL,
    partition_count INT          NOT NULL,
    -- retention.ms from the topic's config; -1 means infinite.
    retention_ms    BIGINT       NOT NULL DEFAULT -1,
    linker_workers  INT          NOT NULL DEFAULT 1,
    min_workers     INT          NOT NULL DEFAULT 1,
    max_workers     INT          NOT NULL DEFAULT 8,
    -- A topic deleted on the broker is disabled, never dropped: its offsets are kept.
    enabled         BOOLEAN      NOT NULL DEFAULT TRUE,
    created_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (topic_id),
    UNIQUE KEY uq_topics_cluster_name (cluster, name),
    CONSTRAINT ck_topics_workers CHECK (min_workers >= 1 AND min_workers <= max_workers
                                        AND linker_workers >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS topic_partitions (
    topic_id         CHAR(36)     NOT NULL,
    partition_id     INT          NOT NULL,
    -- The next offset to consume, stored by the pipeline itself; NULL until the first commit.
    committed_offset BIGINT       NULL,
    -- Worker slot UUID holding the row, NULL when unclaimed.
    claimed_by       CHAR(36)     NULL,
    -- Fencing token: bumped by every claim; a commit must present the epoch it claimed with.
    claim_epoch      BIGINT       NOT NULL DEFAULT 0,
    lease_expires_at TIMESTAMP(6) NULL,
    -- Claim order is oldest first so no partition starves; NULL (never picked) sorts first.
    last_picked_at   TIMESTAMP(6) NULL,
    updated_at       TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (topic_id, partition_id),
    -- The claim query filters on topic and claim state and orders by last_picked_at.
    KEY ix_topic_partitions_claim (topic_id, claimed_by, lease_expires_at, last_picked_at),
    KEY ix_topic_partitions_holder (claimed_by),
    CONSTRAINT fk_topic_partitions_topic FOREIGN KEY (topic_id) REFERENCES topics (topic_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
