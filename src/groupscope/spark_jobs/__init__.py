"""The spark-submit entry points: thin files (arguments in, JSON summary out) that Spark runs as
scripts. They ship in the wheel and are found with ``importlib.resources``
(``groupscope.analyze.submit.job_path``)."""
