"""``bench history``: every run folder read together, as series over commits, with change points.

``read`` finds run folders under the roots and reads them in place (run.json with ``json``,
every cases.parquet in one DuckDB query), ``series`` orders the runs and builds one series
per impl x scenario x figure-changing parameters x machine class and metric, ``changes``
finds change points with Apache Otava's E-divisive means, ``check`` turns the newest change
point of each series into a verdict under the gate's rules, and ``command`` ties them
together and hands plain data to ``dashboards.history`` for the page.
"""
