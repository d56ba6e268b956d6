"""Complaints: the workflow (statuses and their rules, notes, SLA changes) and its pages.

``Complaint`` is a core model, so its workflow lives with it in the frame rather than in
an app that works on complaints: ``workflow`` (the one table of which change runs in which
status, the changes, each under the complaint's row lock, and the reporter's emails a
change queues), ``exceptions`` and ``answers`` (its refusals and their sentences),
``opt_out`` (the page the emails' link opens), ``forms``, ``selectors``,
``views`` and ``urls`` (the staff pages), and ``extensions`` (what fenced operations add to
them: the vendor section, column, filter and timeline entries, and the guard that makes
"in progress" wait for someone assigned and ends the assignment at a close). It names no
app.
"""
