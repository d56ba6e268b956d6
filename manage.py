#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hoa.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A misconfiguration is an operator's problem: one clear line, no traceback.
        sys.stderr.write(f"Configuration error: {exc}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
