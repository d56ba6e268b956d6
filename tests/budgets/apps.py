from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    """Annual budget approval: the third fenced operation, installed by the test settings
    only, that proves the frame's registry (docs/architecture.md, "Adding an operation")."""

    name = "tests.budgets"
    label = "budgets"
    verbose_name = "Budgets"

    def ready(self):
        from hoa.operations import register
        from tests.budgets import answers  # noqa: F401  (renders the refusals' sentences)
        from tests.budgets.operations import APPROVAL

        register(APPROVAL)
