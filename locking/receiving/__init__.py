"""The receiving side of a fenced call and the envelope both sides sign.

``signing``: what a sender puts on the wire (``seal_call``) and what a receiver checks
(``verify_signature``, ``open_call``); its signed answers (``seal_answer``, ``open_answer``).
``receiver``: ``receive_call`` and ``fenced_receiver``, the highest token per key in one
conditional statement. Import the public names from ``locking.receiving``.
"""

from locking.exceptions import StaleAtReceiver
from locking.receiving.receiver import CallVerdict, Receipt, fenced_receiver, receive_call
from locking.receiving.signing import FencedCall, SealedCall, seal_call, verify_signature

__all__ = [
    "CallVerdict",
    "FencedCall",
    "Receipt",
    "SealedCall",
    "StaleAtReceiver",
    "fenced_receiver",
    "receive_call",
    "seal_call",
    "verify_signature",
]
