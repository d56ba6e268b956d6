"""Admin actions that run a fenced operation, in the shape of Django's ``delete_selected``.

The first POST answers an intermediate page (``ask``: the selection, the action's form);
the submit runs the operation's service once per selected object (``answer_each``), each
reported on the changelist at its answer's level (``hoa.answers.table``). An operation
that asks one form declares its action with ``fenced_action``.
"""

import re
from collections.abc import Callable, Iterable

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.template.response import TemplateResponse

from hoa.admin_mixins import AdminExtension, extend
from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.security.audit import check_fenced_post, client_ip
from hoa.web.lists import first_error

APPLY_FIELD = "apply"


class ShownRows(forms.Form):
    """What an intermediate page showed of each selected row (its version, its vendor…),
    carried by the confirmation in one hidden field: an action applies what it showed or
    nothing. ``shown_of`` writes it; ``rows_shown()`` reads it back; ``changed(now)`` says
    whether the rows as they are now differ (another selection included)."""

    shown = forms.RegexField(
        regex=re.compile(r"^[0-9]{1,19}:[a-z0-9]{1,20}( [0-9]{1,19}:[a-z0-9]{1,20})*$"),
        widget=forms.HiddenInput,
        error_messages={
            "required": "This confirmation was out of date: confirm again.",
            "invalid": "This confirmation was out of date: confirm again.",
        },
    )

    @staticmethod
    def shown_of(rows: dict[int, object]) -> str:
        return " ".join(f"{pk}:{'none' if fact is None else fact}" for pk, fact in rows.items())

    def rows_shown(self) -> dict[int, str]:
        pairs = (pair.split(":") for pair in self.cleaned_data["shown"].split())
        return {int(pk): fact for pk, fact in pairs}

    def changed(self, now: dict[int, object]) -> bool:
        return self.rows_shown() != {pk: "none" if f is None else str(f) for pk, f in now.items()}


def applying(request) -> bool:
    """Whether this POST submits the intermediate page; it counts as one fenced POST of
    the user and of the address (429 past either limit)."""
    if APPLY_FIELD not in request.POST:
        return False
    check_fenced_post(request)
    return True


def ask(modeladmin, request, queryset, form, template: str, *, title: str, **context):
    """The intermediate page (``admin/hoa/action_form.html`` extended by ``template``)."""
    if form.is_bound and form.errors:
        modeladmin.message_user(request, first_error(form), messages.ERROR)
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(
        request,
        template,
        {
            **modeladmin.admin_site.each_context(request),
            "title": title,
            "subtitle": None,
            "opts": modeladmin.model._meta,
            "selected": queryset,
            "form": form,
            "action_name": request.POST.get("action", ""),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "apply_field": APPLY_FIELD,
            "media": modeladmin.media,
            **context,
        },
    )


def answer_each(modeladmin, request, objects: Iterable, run: Callable) -> None:
    """``run(obj)``, one service call, for each object; report each result or refusal on
    the changelist at the level of its kind of answer."""
    for obj in objects:
        try:
            result = run(obj)
        except Refusal as refusal:
            answer_table.admin_message(modeladmin, request, refusal)
        else:
            answer_table.admin_done(modeladmin, request, result)


def fenced_action(
    name: str,
    form_class: type[forms.Form],
    run: Callable,
    *,
    description: str,
    title: str,
    intro: str,
    submit: str,
    initial: Callable[[], dict] = dict,
    template: str = "admin/hoa/action_form.html",
    extends: str = "",
    permission: str = "",
):
    """The admin action ``name`` of an operation that asks ``form_class``: its page says
    ``intro`` above the selection and the form, its button ``submit``; once the form is
    valid, ``run(obj, cleaned_data, actor=user, ip=address)`` for each selected object.
    ``extends``: the frame model (``"hoa.Organization"``) whose admin offers it to users
    with ``permission`` (``hoa.admin_mixins.extend``)."""

    def action(modeladmin, request, queryset):
        form = form_class(request.POST) if applying(request) else form_class(initial=initial())
        if form.is_bound and form.is_valid():
            who = {"actor": request.user, "ip": client_ip(request)}
            answer_each(
                modeladmin, request, queryset, lambda obj: run(obj, form.cleaned_data, **who)
            )
            return None  # back to the changelist, which shows the messages
        return ask(
            modeladmin, request, queryset, form, template, title=title, intro=intro, submit=submit
        )

    action.__name__ = action.__qualname__ = name
    action = admin.action(description=description)(action)
    if extends:
        extend(AdminExtension(extends, permission=permission, actions=(action,)))
    return action
