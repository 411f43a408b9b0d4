-- The probable causes of each group incident (issue 28), as the alert evaluation ranked them at
-- its latest evaluation (ops.alert_incidents.details -> 'causes', written by
-- groupscope.serve.alerting.causes): one row per incident and cause, best first (rank 1), for
-- Group detail's "Likely causes" panel. The evidence lines are what the notification said; an
-- incident whose causes were read and matched nothing has one row, "none known", as its
-- notification says. Incidents of conditions the causes do not explain have no row.
CREATE VIEW serve.group_alert_causes AS
SELECT i.evaluated_at AS "time", i.cluster, i.group_id, i.incident_id, i.rule, i.severity,
       i.state, i.started_at, i.resolved_at, c.ordinality::integer AS rank,
       c.cause->>'kind' AS kind, c.cause->>'title' AS cause,
       c.cause->>'evidence' AS evidence,
       (c.cause->>'since')::timestamptz AS since
FROM ops.alert_incidents i
CROSS JOIN LATERAL (
    SELECT e.cause, e.ordinality
    FROM jsonb_array_elements(
        CASE jsonb_typeof(i.details->'causes') WHEN 'array' THEN i.details->'causes'
             ELSE '[]'::jsonb END) WITH ORDINALITY AS e(cause, ordinality)
    UNION ALL
    SELECT jsonb_build_object(
               'kind', 'none', 'title', 'none known',
               'evidence', 'no member crashed or left, no stuck record, rebalance storm, '
                           'coordinator move, producer surge, slow consumer or rewind in the '
                           'group''s last hour'), 1
    WHERE i.details->'causes' = '[]'::jsonb
) AS c(cause, ordinality)
WHERE i.group_id <> '';
