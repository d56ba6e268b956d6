"""locking's pytest plugin, for every test run of this checkout.

The wheel installs it as a pytest11 entry point; here locking is a directory, not an
installed distribution, so the plugin is named under the entry point's name, which pytest
loads once whichever way it comes (locking/pytest_plugin.py).
"""

pytest_plugins = ["locking.pytest_plugin"]
