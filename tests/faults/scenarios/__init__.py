"""The scenarios of issue 9, the randomized nemesis of issue 15 (9) and its second
generation of issue 26 (10). Importing this package registers them; the report lists them
in registration order (1-3, then 4-6, 7, 8, 9, 10)."""

from tests.faults.scenarios import pauses  # noqa: F401, I001  (1-3: pauses, kills)
from tests.faults.scenarios import outages  # noqa: F401  (4-6: Redis, PostgreSQL, network)
from tests.faults.scenarios import clock  # noqa: F401  (7: wall-clock jumps)
from tests.faults.scenarios import load  # noqa: F401  (8: load and the history checker)
from tests.faults.scenarios import nemesis  # noqa: F401  (9: randomized nemesis, issue 15)
from tests.faults.scenarios import nemesis2  # noqa: F401  (10: second generation, issue 26)
