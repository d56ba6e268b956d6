from django import template

from hoa.web.money import format_money

register = template.Library()


@register.filter
def money(amount):
    """``{{ run.total|money }}``: ``$8,945.00`` with ``CURRENCY=USD`` in en-US."""
    return format_money(amount)
