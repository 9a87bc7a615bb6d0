-- Re-created topics and optional per-topic worker limits (issue 8).
-- Portable to MySQL 8.0.19+ and MariaDB >= 10.6. DDL commits implicitly, so the migration runner
-- records each statement as it completes and a rerun after a failure resumes after the last one.

-- Kafka's own topic id (a base64 UUID, 22 characters) tells a re-created topic from the one it
-- replaced: same name, new id. NULL on rows registered before this migration; the next sync fills it.
ALTER TABLE topics ADD COLUMN kafka_topic_id CHAR(22) NULL AFTER name;

-- A re-created topic gets a new row while the old one stays, disabled, with its history, so the
-- name is unique only among enabled rows: a generated column that is NULL on disabled rows
-- carries the unique key (NULLs never collide).
ALTER TABLE topics ADD COLUMN enabled_name VARCHAR(249) AS (CASE WHEN enabled THEN name END) STORED;

ALTER TABLE topics ADD UNIQUE KEY uq_topics_cluster_enabled_name (cluster, enabled_name);

ALTER TABLE topics DROP INDEX uq_topics_cluster_name;

ALTER TABLE topics ADD KEY ix_topics_cluster_name (cluster, name);

-- A row's worker limits are the operator's optional overrides for one topic; NULL means none,
-- so the Variable's min_workers/max_workers apply. Before, every row got max_workers 8, which
-- silently beat the Variable's default of 32.
ALTER TABLE topics DROP CONSTRAINT ck_topics_workers;

ALTER TABLE topics MODIFY min_workers INT NULL DEFAULT NULL, MODIFY max_workers INT NULL DEFAULT NULL;

-- Rows still holding exactly the old column defaults (1, 8) were never set by anyone.
UPDATE topics SET min_workers = NULL, max_workers = NULL WHERE min_workers = 1 AND max_workers = 8;

ALTER TABLE topics ADD CONSTRAINT ck_topics_worker_limits CHECK (
    linker_workers >= 1
    AND (min_workers IS NULL OR min_workers >= 1)
    AND (max_workers IS NULL OR max_workers >= 1)
    AND (min_workers IS NULL OR max_workers IS NULL OR min_workers <= max_workers));
