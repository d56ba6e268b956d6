"""The fault-injection and load suite (``make faults``; docs/reliability.md).

- ``procs``: the processes it starts and breaks (PostgreSQL cluster, redis-server,
  gunicorn), process groups, SIGSTOP / SIGCONT;
- ``proxy``: the asyncio TCP proxy between the app and Redis / the external endpoint;
- ``stack``: everything assembled, with the environment the app runs with;
- ``seed``: the associations, users, vendors and complaints the scenarios use;
- ``clients``: staff over HTTP and cron over ``manage.py``, each answer recorded;
- ``checker``: the history checker (what clients were told against the database);
- ``scenario`` and ``scenarios/``: the scenarios of issue 9 and how each one runs;
- ``report``: the table, the JSON under tests/faults/results/ and the markdown matrix.
"""
