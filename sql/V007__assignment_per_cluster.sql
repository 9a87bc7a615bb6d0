-- Ownership per Kafka cluster (issue 17, item 3). Portable to MySQL 8 and MariaDB >= 10.6.
--
-- Before, one assignment_state row and one set of topic_owners covered every enabled topic of
-- every cluster, and slots of one cluster were handed lanes of another's topics, which nobody then
-- claimed. Each cluster now has its own assignment: its topic_owners rows (by cluster) and its
-- generation and inputs hash in its cluster_assignment_state row, created by the first slot that
-- stores an assignment for it.
--
-- The stored owners were computed across clusters, so they are dropped: each cluster's first slot
-- computes its own (owners may move once; the claim protocol keeps that safe). topic_owners is
-- made again with its cluster, which MySQL 8 cannot add with ADD COLUMN IF NOT EXISTS.
DROP TABLE IF EXISTS topic_owners;

CREATE TABLE IF NOT EXISTS topic_owners (
    cluster     VARCHAR(255) NOT NULL,
    topic_id    CHAR(36)     NOT NULL,
    lane        INT          NOT NULL,
    slot_id     CHAR(36)     NOT NULL,
    -- generation of the cluster's cluster_assignment_state that wrote this row
    generation  BIGINT       NOT NULL,
    PRIMARY KEY (topic_id, lane),
    KEY ix_topic_owners_cluster (cluster, topic_id, lane),
    KEY ix_topic_owners_slot (slot_id),
    CONSTRAINT fk_topic_owners_topic FOREIGN KEY (topic_id) REFERENCES topics (topic_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS cluster_assignment_state (
    cluster      VARCHAR(255) NOT NULL,
    generation   BIGINT       NOT NULL DEFAULT 0,
    -- sha256 of the sorted live slot ids and the cluster's (topic_id, partitions, linker_workers) list
    inputs_hash  CHAR(64)     NOT NULL DEFAULT '',
    computed_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (cluster)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

DROP TABLE IF EXISTS assignment_state;
