-- Scaling decisions (issue 4): every change of a topic's linker_workers, with its reasons.
-- Portable to MySQL 8 and MariaDB >= 10.6. All timestamps are UTC (sessions run with time_zone +00:00).

CREATE TABLE IF NOT EXISTS scaling_decisions (
    decision_id   BIGINT        NOT NULL AUTO_INCREMENT,
    -- The evaluation run that made it (the Airflow run_id). Unique with topic_id, so a retried
    -- evaluation finds the decision it already applied instead of applying a second step.
    evaluation_id VARCHAR(250)  NOT NULL,
    decided_at    TIMESTAMP(6)  NOT NULL,
    topic_id      CHAR(36)      NOT NULL,
    cluster       VARCHAR(255)  NOT NULL,
    -- The name at decision time (kept: a topic can be re-created under the same name, new id).
    topic         VARCHAR(249)  NOT NULL,
    old_workers   INT           NOT NULL,
    new_workers   INT           NOT NULL,
    -- `lag` is a reserved word in MySQL 8 (the window function), hence lag_records.
    lag_records   BIGINT        NOT NULL,
    time_lag_s    DOUBLE        NOT NULL,
    slope         DOUBLE        NOT NULL,
    fit_r2        DOUBLE        NOT NULL,
    policy        VARCHAR(32)   NOT NULL,
    rule          VARCHAR(64)   NOT NULL,
    reason        VARCHAR(1000) NOT NULL,
    -- Set once the decision was published on lagsched:scaling; NULL means a retry must publish it.
    announced_at  TIMESTAMP(6)  NULL,
    PRIMARY KEY (decision_id),
    UNIQUE KEY uq_scaling_decisions_evaluation (evaluation_id, topic_id),
    -- The evaluator's cooldown reads the latest decision per topic; ops read a topic's history.
    KEY ix_scaling_decisions_topic (topic_id, decided_at),
    CONSTRAINT fk_scaling_decisions_topic FOREIGN KEY (topic_id) REFERENCES topics (topic_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
