"""What locking's documentation site needs beyond Sphinx, MyST and autodoc (docs/locking/conf.py).

**Nothing public left out.** api.md documents each name where ``locking`` exports it
(``locking.FenceLock``), never by the module that defines it, so those modules can move
without a page changing (autodoc records the defining path only as the name's canonical
alias, which follows the code). ``check_api_reference`` warns, so that ``make docs``
fails, for a name of ``locking.__all__`` that the reference does not document or that has
no docstring, and for a documented ``locking.X`` that is not public.

**The settings reference from the code.** ``.. locking-settings::`` (settings.md) lists
every setting locking reads, made from ``locking/conf.py`` as its docstring is
(``SETTING_NAMES``, ``describe_default``, ``DESCRIPTIONS``); a setting without a
description warns.
"""

import importlib

from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

import locking
from locking import conf

logger = logging.getLogger(__name__)

# Documented beside locking.__all__: the models, which Django loads from locking.models, and
# the helpers of the pytest plugin (testing.md), a submodule that imports Django's test client.
PUBLIC_PREFIXES = ("locking.models.", "locking.testing.")
# The documented submodules adopters import by name (as redis.asyncio): each one's __all__
# is public, documented under its own path.
SUBMODULES = (
    "asyncio",
    "audit",
    "sending",
    "receiving",
    "operators",
    "advisory",
    "keys",
    "tracing",
)


def public_names() -> dict[str, object]:
    """Every public name's documented path, and the object it names."""
    names = {f"locking.{name}": getattr(locking, name) for name in locking.__all__}
    for sub in SUBMODULES:
        module = importlib.import_module(f"locking.{sub}")
        names.update(
            {
                f"locking.{sub}.{name}": getattr(module, name)
                for name in module.__all__
                if name not in locking.__all__  # documented once, as locking's
            }
        )
    return names


def check_api_reference(app, env) -> None:
    """``env-check-consistency``: every public name documented, with a docstring."""
    documented = env.get_domain("py").objects
    public = public_names()
    for path, obj in public.items():
        if path not in documented:
            logger.warning("%s is public but not in the API reference (api.md)", path)
        if not (obj.__doc__ or "").strip():
            logger.warning("%s has no docstring for the API reference", path)
    for path, entry in documented.items():
        if entry.aliased or entry.objtype == "module" or path.startswith(PUBLIC_PREFIXES):
            continue
        if path.startswith("locking") and not any(
            path == name or path.startswith(name + ".") for name in public
        ):
            logger.warning(
                "%s is documented but is not a public name (locking.__all__ or a documented "
                "submodule's)",
                path,
                location=entry.docname,
            )


class LockingSettings(SphinxDirective):
    """``.. locking-settings::``: each setting, its default and what it is for."""

    def run(self):
        lines = []
        for name in conf.SETTING_NAMES:
            description = conf.DESCRIPTIONS.get(name)
            if not description:
                logger.warning(
                    "%s has no description in locking.conf.DESCRIPTIONS",
                    name,
                    location=self.get_location(),
                )
            lines += [
                f"``{name}``",
                f"   Default: {conf.describe_default(name)}",
                "",
                f"   {description or ''}",
                "",
            ]
        for name in sorted(set(conf.DESCRIPTIONS) - set(conf.SETTING_NAMES)):
            logger.warning(
                "locking.conf.DESCRIPTIONS describes %s, which locking does not read",
                name,
                location=self.get_location(),
            )
        return self.parse_text_to_nodes("\n".join(lines))


def setup(app):
    app.connect("env-check-consistency", check_api_reference)
    app.add_directive("locking-settings", LockingSettings)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
