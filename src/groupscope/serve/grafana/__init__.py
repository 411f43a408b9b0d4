"""Grafana: dashboards as code over the ``serve`` views, Grafana alerting exported from the alert
rules file, a provisioning tree to mount and a publisher for a running Grafana.

The names below are the contract between the dashboards, the provisioning files, the alert
messages' links (``groupscope.serve.alerting.notify``) and the warehouse role: change them in
one place.
"""

from __future__ import annotations

# The warehouse datasource every panel and variable query uses: a fixed uid, so the committed
# dashboards resolve it in any Grafana the provisioning or the publisher configured.
DATASOURCE_UID = "groupscope-warehouse"
DATASOURCE_TYPE = "grafana-postgresql-datasource"
DATASOURCE_NAME = "groupscope warehouse"

# The read-only warehouse role Grafana logs in as (SELECT on the ``serve`` schema only).
READER_ROLE = "grafana_reader"
# The environment variable holding its password, wherever it is needed (Grafana's datasource
# reads it as $__env{...}; create-reader and publish read it).
READER_PASSWORD_ENV = "GROUPSCOPE_READER_PASSWORD"  # noqa: S105 - a variable name
SERVE_SCHEMA = "serve"

FOLDER_UID = "groupscope"
FOLDER_TITLE = "groupscope"

# Dashboard uid -> the slug of its URL. The alert messages link to the first two
# (``/d/<uid>/<slug>?var-cluster=..&var-group=..``): keep them.
DASHBOARDS = {
    "groupscope-overview": "overview",
    "groupscope-group": "group-detail",
    "groupscope-rebalances": "rebalances",
    "groupscope-strategies": "assignment-strategies",
    "groupscope-coordinators": "coordinators-and-brokers",
}
