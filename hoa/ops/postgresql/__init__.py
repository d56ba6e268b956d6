"""Django's PostgreSQL backend with a client-side read timeout (``base.DatabaseWrapper``)."""
