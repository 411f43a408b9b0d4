-- The snapshot DAG's quality gate no longer has a task of its own: `check_landed` and `load`
-- are one task, `load` (issue 25). A failure of the old task recorded before the upgrade would
-- stay the latest outcome of a task that never runs again, so `task_failed` would fire for it
-- forever; the outcomes of the old task go.
DELETE FROM ops.task_runs
 WHERE task_id = 'check_landed' AND dag_id LIKE 'groupscope\_snapshot\_%';
