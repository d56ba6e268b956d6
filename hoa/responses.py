"""Answers shared by the staff pages of both apps (the 409 page, error pages)."""

from django.shortcuts import render


def conflict(request, *, title: str, message: str, lease=None, winner=None, retry_url=""):
    """Render the 409 page: who holds the lock or won, since and until when, what to do.

    ``lease`` is a ``LockHeld`` (holder, acquired_at, expires_at, retry_after) when the
    resource is busy; ``winner`` describes the holder whose work already won.
    """
    return render(
        request,
        "hoa/conflict.html",
        {
            "title": title,
            "message": message,
            "busy": lease,
            "winner": winner,
            "retry_url": retry_url,
        },
        status=409,
    )


def error_page(request, status: int, title: str, message: str):
    return render(
        request,
        "hoa/error.html",
        {"title": title, "message": message, "status": status},
        status=status,
    )
