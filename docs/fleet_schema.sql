-- The fleet store's tables (docs/fleet.md). nrtprofd --clickhouse_url runs these statements, in
-- the database --clickhouse_database names (default nrtprof), each time it (re)connects: every
-- one is CREATE TABLE IF NOT EXISTS, so a table made by hand beforehand (on a cluster: below) is
-- left alone. A table an older daemon made that lacks columns declared here (a column added
-- since) is given them, at its end as here: the daemon asks system.columns, then runs ALTER
-- TABLE ... ADD COLUMN for each missing one (18.16 has no ADD COLUMN IF NOT EXISTS); the
-- table's rows read them as their default ('', 0), and nothing on disk is rewritten. It alters
-- only a MergeTree table (one it made): a table of another engine (a cluster's Distributed
-- table) lacking one is said in its log and status, and it sends nothing until the columns are
-- added by hand, ON CLUSTER, to it and the local tables (docs/fleet.md). Written for Debian's
-- ClickHouse 18.16; newer servers take them as they are.
--
-- Both tables are ReplacingMergeTree, keyed so that a row sent twice (an insert retried after
-- its answer was lost) is the same key: (daemon, seq) names one export batch of one daemon.
-- The daemon asks, before it retries a batch, whether the batch is there already, so queries
-- can sum without FINAL; the engine also folds any duplicate that got in when it merges parts.

-- One row per (host, process, executable, model, op) per export (every 10 s): what happened in
-- that period only, so sums over a time range are the totals.
CREATE TABLE IF NOT EXISTS fleet_ops (
    time DateTime,              -- when the daemon exported the row (end of its period)
    host String,                -- nrtprofd --fleet_host (default: the machine's hostname)
    pid UInt32,                 -- 0: "other", past the daemon's 4096 processes
    executable String,          -- the program's file name
    model String,               -- the model the op ran most device time in; '' none
    op String,                  -- framework op (aten::mul), runtime call outside any op
                                -- (nrt_execute), or '(uncorrelated)' device time
    calls UInt64,               -- the op's calls (ranges, or runtime calls)
    host_ns UInt64,             -- self CPU time
    device_ns UInt64,           -- self NEURON (device) time
    executions UInt64,          -- device executions in device_ns
    device_hist Array(UInt64),  -- executions by device time: <= 10us, 50us, 100us, 250us,
                                -- 500us, 1ms, 2.5ms, 5ms, 10ms, 25ms, 50ms, 100ms, 500ms, 1s, more
    daemon String,              -- the exporting daemon's instance (host and a random id)
    seq UInt64                  -- its export batch
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (toStartOfHour(time), op, host, model, pid, executable, daemon, seq);

-- fleet_ops summed per minute, as ClickHouse inserts into fleet_ops (a materialized view: each
-- insert's rows are grouped and added here too; SummingMergeTree adds rows of one key up as it
-- merges, so a query still sums). A (host, process, model, op) exports every 10 s: six rows of
-- fleet_ops are one here, and `nrtprof fleet top` reads this. No histogram: that stays in
-- fleet_ops (sumForEach(device_hist)).
CREATE MATERIALIZED VIEW IF NOT EXISTS fleet_ops_by_minute
ENGINE = SummingMergeTree
PARTITION BY toYYYYMMDD(minute)
ORDER BY (minute, op, host, model, pid, executable)
AS SELECT
    toStartOfMinute(time) AS minute,
    host, pid, executable, model, op,
    sum(calls) AS calls,
    sum(host_ns) AS host_ns,
    sum(device_ns) AS device_ns,
    sum(executions) AS executions
FROM fleet_ops
GROUP BY minute, host, pid, executable, model, op;

-- One row per process that waited in collectives (a rank of a distributed job), per export:
-- its rank and how long it waited for the other ranks in the period (`nrtprof fleet top --by
-- rank`, docs/fleet.md). A table of its own, so that a store made before it needs nothing
-- migrated: the daemon makes it at its next (re)connection, and fleet_ops is as it was. The
-- rows of one period are few (one per rank process), so queries read this table directly.
CREATE TABLE IF NOT EXISTS fleet_ranks (
    time DateTime,              -- when the daemon exported the row (end of its period)
    host String,
    pid UInt32,                 -- 0: "other", past the daemon's 4096 processes
    executable String,
    rank Int32,                 -- RANK in its environment, else --rank N on its command line; -1
    job String,                 -- the job it names (NRTPROF_JOB, NEURON_RT_ROOT_COMM_ID), else
                                -- its command line without the rank, the program by file name
    collectives UInt64,         -- collectives it waited in (their barriers, cc_exec_barrier)
    wait_ns UInt64,             -- their time: waiting for the other ranks to arrive
    daemon String,
    seq UInt64
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (toStartOfHour(time), job, host, pid, rank, daemon, seq);

-- One row per capture a daemon wrote; of a capture a trigger rule took (nrtprofd --trigger,
-- docs/triggers.md), why, in the trigger_ columns (empty, 0, for a capture someone asked for).
CREATE TABLE IF NOT EXISTS fleet_captures (
    time DateTime,                 -- when it was written
    host String,
    capture_id String,
    hosts Array(String),           -- the hosts its processes ran on
    start_ms UInt64,               -- its window, Unix time in ms
    end_ms UInt64,
    output_dir String,             -- on the daemon's machine
    files Array(String),
    processes UInt32,
    events UInt64,
    events_dropped UInt64,
    top_ops Array(String),         -- its 10 ops of most self device time, most first
    top_ops_device_ns Array(UInt64),
    daemon String,
    seq UInt64,
    trigger_rule String,           -- the rule's name; '' for a capture someone asked for
    trigger_condition String,      -- the rule as written
    trigger_reason String,         -- "pid 12 (train): step 4711 took 3.9x the median ..."
    trigger_value_ns UInt64,       -- what was measured (0 for status and exit rules)
    trigger_threshold_ns UInt64    -- what it was held to
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(time)
ORDER BY (time, host, capture_id, daemon, seq);

-- The trigger_ columns came after the table (session 28): a fleet_captures made before them is
-- given them (above). Before them a triggered capture's reason was a row of a table of its
-- own, fleet_triggers, beside this one; it is no longer written nor made (a store that has it
-- keeps its rows; DROP TABLE nrtprof.fleet_triggers when they are not wanted).

-- Keeping 30 days. ClickHouse 18.16 has no TTL (it came in 19.6): drop old days' partitions,
-- e.g. daily from cron (the view's rows are in its inner table):
--   ALTER TABLE nrtprof.fleet_ops DROP PARTITION 20261101
--   ALTER TABLE nrtprof.`.inner.fleet_ops_by_minute` DROP PARTITION 20261101
--   ALTER TABLE nrtprof.fleet_ranks DROP PARTITION 20261101
-- On ClickHouse 19.6 or newer instead, once:
--   ALTER TABLE nrtprof.fleet_ops MODIFY TTL time + INTERVAL 30 DAY
--   ALTER TABLE nrtprof.fleet_ranks MODIFY TTL time + INTERVAL 30 DAY
--   ALTER TABLE nrtprof.fleet_captures MODIFY TTL time + INTERVAL 365 DAY
