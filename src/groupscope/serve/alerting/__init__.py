"""Alerting: the rules (``rules``, the built-in ``default_rules.yaml``, the last valid file kept
in ``rules_store``), what they look at (``conditions``), the incident lifecycle and its store
(``incidents``), the messages and their delivery (``notify``), and the channels (``channels``;
``airflow_channels`` for the ones that are Airflow connections). ``alerts`` is the local log
of failed tasks. The dashboards are ``groupscope.serve.grafana``, beside this package."""
