"""Complaints: the workflow (statuses and their rules, notes, SLA changes) and its pages.

``Complaint`` is a core model, so its workflow lives with it in the frame rather than in
an app that works on complaints: ``workflow`` (the rules and the compare-and-swap writes),
``exceptions`` and ``answers`` (its refusals and their sentences), ``forms``, ``selectors``,
``views`` and ``urls`` (the staff pages), and ``extensions`` (what fenced operations add to
them: the vendor section, column, filter and timeline entries, and the guard that makes
"in progress" wait for someone assigned). It names no app.
"""
