"""Settings of the HTTP case's gunicorn: the project's, URLs with the baseline's added."""

from hoa.settings import *  # noqa: F403

ROOT_URLCONF = "bench.http_baseline"
