"""The receiving side of a fenced call and the envelope both sides sign.

``signing``: what a sender puts on the wire (``seal_call``) and what a receiver checks
(``verify_signature``, ``open_call``); its signed answers (``seal_answer``, ``open_answer``).
``receiver``: ``receive_call`` and ``fenced_receiver``, the highest token per key in one
conditional statement. Import the public names from ``locking``; this package has no
``__init__`` exports, so importing one of its modules loads that module alone.
"""
