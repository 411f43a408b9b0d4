-- Partition leaders (issue 28): the broker leading each partition a group touches, from the
-- snapshot's metadata request (-1: no leader, the partition is offline; null: not said, and
-- every row landed before this migration). The causes of a group's alert read it to name a
-- leader that moved, or a broker that is down, for partitions whose commits stopped.
ALTER TABLE raw.partition_offsets ADD COLUMN leader integer;
