"""Memory across jobs: every diagnosis recorded in a history database, and what the history says about a node, an AIS
daemon or a failure signature (repeat offenders, recurring failures, failures per category over time).

The pieces, each knowing one thing:

* :mod:`.types`: the records and answers (plain data, no SQL).
* :mod:`.location`: where the history lives (``DEBUG_TRAINING_LOGS_HISTORY``: a SQLite path, a ``postgresql://`` DSN,
  or ``off``; default a SQLite file in the user's state directory) and how a DSN is shown (password redacted).
* :mod:`.schema`: the tables, as ordered migrations recorded in ``schema_version`` (never recreated).
* :mod:`.store`: one small interface over the two backends (SQLite from the standard library; PostgreSQL through
  psycopg 3, an optional extra), recording a job (an upsert on its identity) and running read queries.
* :mod:`.queries`: the questions (repeat offenders, signatures, categories per period, a node's or daemon's jobs,
  what this job's nodes and signature were part of before).
* :mod:`.record`: a job's identity (SLURM job id + attempt, else the logs directory + attempt) and its failure
  signature (category + the normalised first primary event).
* :mod:`.notes`: the sentences a diagnosis shows (``history_note``) and the action the history suggests
  (``history_action``).

What it must not do: write anything into a log directory, let log text reach SQL other than as a parameter, print a
DSN's password, or break a diagnosis (a history that cannot be read or written is reported, and the diagnosis runs).
Nothing here imports ``mcp`` or the tools.
"""
