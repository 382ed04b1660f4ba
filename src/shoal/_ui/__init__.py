"""`shoal ui`: a local web UI over the run records, logs and metrics of this machine.

Private, and imported only by `shoal.cli.ui_cmd`: Starlette and uvicorn (the ``shoal[ui]``
extra) load with it, never with ``import shoal``.

- ``guard.py``: who may talk to the server (the token, the Host header, a POST's Origin);
- ``views.py``: runs and one run as JSON (call tree, timeline, previews) from the records;
- ``gang_view.py``: one clustered call (ranks, restarts, first failure, checkpoints);
- ``metrics_view.py``: a run's metrics as chart data, from summaries, cached per run;
- ``metric_cells.py``: a series summarised in a bounded number of cells of x;
- ``logs_view.py``: log sources, live tails over server-sent events, downloads;
- ``pages.py``: the HTML pages (the data comes from the JSON endpoints);
- ``app.py``: the routes; ``server.py``: binding the port and serving.
"""
