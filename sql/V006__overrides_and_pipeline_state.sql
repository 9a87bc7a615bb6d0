-- Manual overrides of linker_workers (issue 10, Tinybird's Black Friday case) and their link to the
-- scaling decisions that applied them. Portable to MySQL 8 and MariaDB >= 10.6; all times are UTC
-- (sessions run with time_zone +00:00).
--
-- The pipeline state (ok, stalled, stopped) is not stored here: it is derived at each measurement
-- from the lag history and the claim rows, and kept with the lag records in Redis (docs/lag.md).

CREATE TABLE IF NOT EXISTS scaling_overrides (
    id             BIGINT        NOT NULL AUTO_INCREMENT,
    cluster        VARCHAR(255)  NOT NULL,
    topic_id       CHAR(36)      NOT NULL,
    -- The name at creation (kept: a re-created topic is a new topic_id under the same name).
    topic          VARCHAR(249)  NOT NULL,
    -- The worker count pinned while the override is active (1 to the topic's partition count),
    -- and the count it replaced.
    linker_workers INT           NOT NULL,
    previous_workers INT         NOT NULL,
    -- Why, in the user's words, and who asked (an Airflow user or an OS user of the CLI).
    reason         VARCHAR(500)  NOT NULL,
    created_by     VARCHAR(255)  NOT NULL,
    -- DATETIME, not TIMESTAMP: these are values we compute (now + duration), never the server's
    -- clock, and DATETIME is never converted by the session time zone.
    created_at     DATETIME(6)   NOT NULL,
    expires_at     DATETIME(6)   NOT NULL,
    -- Set by a cancel, or when a newer override of the same topic replaces this one.
    cancelled_at   DATETIME(6)   NULL,
    cancelled_by   VARCHAR(255)  NULL,
    -- The caller's idempotency key (the Airflow run id): a retried task finds the override it made.
    request_id     VARCHAR(250)  NULL,
    -- The scaling_decisions row (rule 'override') that applied it, written in the same transaction.
    decision_id    BIGINT        NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uq_scaling_overrides_request (request_id),
    -- The evaluator reads a cluster's active overrides at every run; the page lists recent ones.
    KEY ix_scaling_overrides_cluster (cluster, expires_at),
    KEY ix_scaling_overrides_topic (topic_id, created_at),
    CONSTRAINT fk_scaling_overrides_topic FOREIGN KEY (topic_id) REFERENCES topics (topic_id),
    CONSTRAINT ck_scaling_overrides_values CHECK (linker_workers >= 1 AND expires_at > created_at
                                                  AND CHAR_LENGTH(reason) > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
