-- The compose file's PostgreSQL (profile cdc): the tutorial's shop database, section 7.
-- Deletes carry their row (REPLICA IDENTITY FULL); the connector's snapshot reads these rows.
CREATE TABLE customers (id int PRIMARY KEY, name text, balance numeric(10,2));
ALTER TABLE customers REPLICA IDENTITY FULL;
INSERT INTO customers VALUES (1, 'Ada', 100), (2, 'Bob', 20.5), (3, 'Cy', 0);
