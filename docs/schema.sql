-- leafd's tables on MySQL 5.7/8 or MariaDB 10.x: the DDL leafd runs itself when it may
-- (--mysql-create-table, the default), for databases where the server's user has no DDL
-- rights. Apply it as an administrator to the database of --mysql-dsn:
--
--   mysql -u root ids < docs/schema.sql
--
-- then start leafd with --mysql-create-table=false as a user holding the grants at the end.
-- Every table is InnoDB with one index, its primary key; the server's default character set
-- and collation apply (a tag's letter case is told apart or not as the collation says, the
-- same in every table). leafd needs no other schema object.

-- Leaf's table, unchanged: one row per tag; a range is [max_id - step, max_id) after
-- UPDATE leaf_alloc SET max_id = max_id + step in one transaction with its SELECT. A shaped
-- tag's counters are rows named tag@period.
CREATE TABLE IF NOT EXISTS `leaf_alloc` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL DEFAULT '1',
  `step` int(11) NOT NULL,
  `description` varchar(256) DEFAULT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB;

-- The failover fence: which primary granted a tag's last range, and the tag's high-water,
-- which survives the deletion of its leaf_alloc row (docs/MYSQL.md, Failover). A leaf_alloc
-- row without a row here is NOTADOPTED until leafd adopt writes one.
CREATE TABLE IF NOT EXISTS `leafd_fence` (
  `biz_tag` varchar(128) NOT NULL,
  `server_id` bigint NOT NULL COMMENT '@@server_id of the primary that granted the last range',
  `server_uuid` varchar(64) NOT NULL DEFAULT '' COMMENT '@@server_uuid (MySQL; empty on MariaDB)',
  `epoch` bigint NOT NULL COMMENT 'grows by one at each takeover',
  `token` bigint NOT NULL COMMENT 'random, new at each takeover',
  `gap` bigint NOT NULL DEFAULT 0 COMMENT 'how far max_id was moved at the last takeover',
  `max_end` bigint NOT NULL DEFAULT 0 COMMENT 'high-water: highest range end ever granted for the tag; survives the deletion of its leaf_alloc row',
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB;

-- ORDERED tags: a row marks the tag ordered and holds its leader lease; who may take it is
-- judged on the instances' own clocks from version and server_id, never on the database's
-- (docs/SEGMENT.md, What the order rests on).
CREATE TABLE IF NOT EXISTS `leafd_leader` (
  `biz_tag` varchar(128) NOT NULL,
  `holder` varchar(255) NOT NULL DEFAULT '' COMMENT 'the instance holding the lease',
  `epoch` bigint NOT NULL DEFAULT 0 COMMENT 'term: grows by one at each take',
  `expires` datetime(3) NOT NULL DEFAULT '1970-01-02 00:00:00.000' COMMENT 'database clock; informative only',
  `server_id` bigint NOT NULL DEFAULT 0 COMMENT 'identity of the database that wrote the row last (a change: a failover); on Galera, of the cluster',
  `version` bigint NOT NULL DEFAULT 0 COMMENT 'grows by one at each write; a take compares it',
  `lease_us` bigint NOT NULL DEFAULT 0 COMMENT 'length of the latest grant',
  `longest_us` bigint NOT NULL DEFAULT 0 COMMENT 'longest lease ever granted in the row',
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB;

-- Shaped tags: the shape (template, period, zone, opaque key check) fixed at IDS.CREATE.
CREATE TABLE IF NOT EXISTS `leafd_tag_shape` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `spec` varchar(1024) NOT NULL,
  `create_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB;

-- Snowflake worker ids leased from MySQL (--worker-source mysql): one row per id, fenced
-- by token, epoch and version, the lease on the database's clock, the time bound in Unix ms
-- (docs/SNOWFLAKE.md, MySQL worker ids).
CREATE TABLE IF NOT EXISTS `leafd_worker` (
  `worker_id` INT NOT NULL,
  `holder` VARCHAR(255) NOT NULL DEFAULT '',
  `instance` VARCHAR(64) NOT NULL DEFAULT '',
  `token` VARCHAR(64) NOT NULL DEFAULT '',
  `epoch` BIGINT NOT NULL DEFAULT 0,
  `version` BIGINT NOT NULL DEFAULT 0,
  `lease_expires` DATETIME(3) NOT NULL,
  `reserved_until` BIGINT NOT NULL DEFAULT 0,
  `layout` VARCHAR(128) NOT NULL DEFAULT '',
  `updated_at` DATETIME(3) NOT NULL,
  PRIMARY KEY (`worker_id`)
) ENGINE=InnoDB;

-- The graceful-restart remainder: the row 'store' is the database's identity; every other
-- row is the token of a consumed remainder file (docs/SEGMENT.md, Graceful restart).
CREATE TABLE IF NOT EXISTS `leafd_remainder` (
  `token` varchar(64) NOT NULL COMMENT 'a consumed remainder file (hex token), or ''store'': the database identity',
  `value` varchar(64) NOT NULL DEFAULT '' COMMENT 'the identity (row ''store'')',
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (`token`)
) ENGINE=InnoDB;

-- The database's identity: one row with a random UUID, written once by the first leafd that
-- finds the table empty; it replicates with the data, so a promoted replica is the same
-- database. A data dir records it (store.json) and refuses another database
-- (docs/OPERATIONS.md, Which store a data dir serves).
CREATE TABLE IF NOT EXISTS `leafd_identity` (
  `id` tinyint NOT NULL COMMENT 'always 1',
  `uuid` char(36) NOT NULL COMMENT 'random, written once: this database, on every replica',
  `created` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB;

-- The region layout (--region k/n): one row, written by the first regional start on an empty
-- database, checked by every start after it (docs/MYSQL.md, Regions). A single-region
-- deployment never creates it.
CREATE TABLE IF NOT EXISTS `leafd_region` (
  `id` tinyint NOT NULL,
  `region` int NOT NULL,
  `regions` int NOT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB;

-- Grants. Replace ids with your database and the users with yours; each role needs exactly
-- these (cmd/leafd/schema_e2e_test.go serves every mode with them).
--
-- server: leafd itself, with --mysql-create-table=false on the tables above
--   GRANT SELECT, INSERT, UPDATE, DELETE ON ids.* TO 'leafd'@'%';
--
-- server-create: leafd creating and upgrading its tables itself (--mysql-create-table, the
-- default)
--   GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER ON ids.* TO 'leafd'@'%';
--
-- adopt: leafd adopt (records fence rows of rows leafd did not create; it runs CREATE TABLE
-- IF NOT EXISTS leafd_fence, and reads the replication status to refuse a replica: SLAVE
-- MONITOR on MariaDB 10.5+, REPLICATION CLIENT on MySQL)
--   GRANT SELECT, INSERT, UPDATE ON ids.* TO 'leafd_adopt'@'%';
--   GRANT CREATE ON ids.leafd_fence TO 'leafd_adopt'@'%';
--   GRANT SLAVE MONITOR ON *.* TO 'leafd_adopt'@'%';
--
-- raise-max-id: leafd raise-max-id --mysql-dsn (after a failover)
--   GRANT SELECT, UPDATE ON ids.leaf_alloc TO 'leafd_raise'@'%';
