"""The signal that a lease was lost: ``lease.lost``, a ``threading.Event`` set at most once.

A lease's ``Tenure`` (locking/tenure.py) owns one; the keep-alives and ``check()`` set it
when the lease is ``LOST``, its release sets it quietly, and the callbacks registered with
``on_lost`` run once, on a loss only. It knows the lease by its resource and token (what it
logs and counts): the callbacks come bound to the lease they are told about.
"""

import logging
import threading
from collections.abc import Callable

from locking import metrics
from locking.outcomes import LossCause

# The lease's own log, as before the signal had a module of its own.
logger = logging.getLogger("locking.lease")


# Guards the lazy creation of every signal, and of every signal's condition
# (Tenure.lost; LostSignal._cond, _set_flag).
SIGNAL_CONDITIONS = threading.Lock()


class LostSignal(threading.Event):
    """Set once a lease is no longer its holder's: ``lease.lost.is_set()``, ``.wait()``.

    A ``threading.Event`` that is set at most once and never cleared, with the ``reason``
    it was set. ``bool(lease.lost)`` is ``is_set()``, as the boolean ``lost`` it replaces
    was, so ``if lease.lost:`` keeps its meaning. Callbacks registered with
    ``Lease.on_lost`` run once when the lease is lost; never when its holder released it
    first (that is the end of the work, not a loss).
    """

    def __init__(self, resource: str, token: int):
        # Not ``Event.__init__``: its ``Condition`` is built on first use (``_cond``), since
        # most leases are released without anyone ever waiting on their signal, and a
        # Condition per lease is a measurable part of a lock cycle.
        self._flag = False
        self.reason = ""
        self._guard = threading.Lock()
        self.resource = resource
        self.token = token
        self._callbacks: list[Callable[[], object]] = []
        self._fired = False  # the callbacks ran
        self._quiet = False  # released by its holder: there is no loss to report

    @property
    def _cond(self) -> threading.Condition:
        """The Event's condition, made by the first waiter or setter that needs it."""
        cond = self.__dict__.get("_lazy_cond")
        if cond is None:
            with SIGNAL_CONDITIONS:
                cond = self.__dict__.setdefault("_lazy_cond", threading.Condition(threading.Lock()))
        return cond

    def _set_flag(self) -> None:
        """``Event.set`` without making a condition that nobody waits on: with none made
        (under the guard that makes them), no thread can be waiting, so the flag alone
        will do; a waiter that comes later reads it."""
        with SIGNAL_CONDITIONS:
            if "_lazy_cond" not in self.__dict__:
                self._flag = True
                return
        super().set()

    def __bool__(self) -> bool:
        return self._flag

    def __repr__(self) -> str:
        return f"<LostSignal {'set: ' + self.reason if self.is_set() else 'not set'}>"

    def set(self) -> None:
        """Mark the lease lost by hand (e.g. the work learned it elsewhere)."""
        if self._mark("marked lost by its holder", notify=True):
            metrics.lease_lost(self.resource, LossCause.MARKED)

    def clear(self) -> None:
        raise RuntimeError("a lost lease stays lost: acquire a new one")

    @property
    def released(self) -> bool:
        """Whether the holder released the lease (set quietly, no loss to report)."""
        return self._quiet

    def _mark(self, reason: str, *, notify: bool) -> bool:
        """Set the signal once; with ``notify``, run the callbacks, each once. Return
        whether this call set it."""
        with self._guard:
            newly = not self._flag
            if newly:
                self.reason = reason
                self._set_flag()
            if not notify:
                self._quiet = True
                return newly
            if self._quiet or self._fired:
                return newly
            self._fired = True
            callbacks = list(self._callbacks)
        for callback in callbacks:
            self._run(callback)
        return newly

    def _add_callback(self, callback: Callable[[], object]) -> None:
        """Run ``callback()`` once on a loss (at once if there was one): ``on_lost``'s,
        bound to its lease."""
        with self._guard:
            self._callbacks.append(callback)
            run_now = self._fired
        if run_now:
            self._run(callback)

    def _run(self, callback: Callable[[], object]) -> None:
        try:
            callback()
        except Exception:  # a callback's bug must not stop the keep-alive that called it
            logger.exception(
                "on_lost callback failed", extra={"resource": self.resource, "token": self.token}
            )
