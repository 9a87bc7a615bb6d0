-- A writer schema is decided for a table's values or for its keys (issue 41: Avro and JSON keys).
-- Portable to MySQL 8 and MariaDB.
--
-- A registry's ids are global, and one id can be a table's key schema and its value schema at once
-- (Apicurio hands out one id per content): the two decisions evolve different columns, so each is
-- its own row. Rows decided before this migration are of values.
ALTER TABLE schema_decisions ADD COLUMN part VARCHAR(5) NOT NULL DEFAULT 'value';
ALTER TABLE schema_decisions DROP PRIMARY KEY, ADD PRIMARY KEY (table_name, part, schema_id);
