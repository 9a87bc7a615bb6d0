-- One name for linker_workers (issue 18, item 1). Portable to MySQL 8 and MariaDB >= 10.5.2.
--
-- A decision's counts were old_workers and new_workers, an override's replaced count
-- previous_workers; in code and in JSON the same count went under several more names. Both tables
-- now say what the topics table says: linker_workers (the count the row set or pins) and
-- previous_linker_workers (the topic's count before it). A rename keeps every row.
ALTER TABLE scaling_decisions
    RENAME COLUMN old_workers TO previous_linker_workers,
    RENAME COLUMN new_workers TO linker_workers;

ALTER TABLE scaling_overrides
    RENAME COLUMN previous_workers TO previous_linker_workers;
