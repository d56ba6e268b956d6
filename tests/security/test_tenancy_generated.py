"""Every way in, generated rather than listed: each staff URL with an association in it, each
admin view and action, each management command that takes an association, an actor or an
id, asked by omar (staff of Oak Ridge, with every permission of the product's apps) about
Maple Court's rows. None may reach them: no page that shows them, no write, no redirect to
a success; the expected answers are 403/404/405, an admin that hides the row, a command's
exit 1 naming omar.

The walks come from Django's own registries (the URLconf, ``admin.site._registry``,
``get_commands()`` and each command's parser), print what they walked (``pytest -s``) and
check they walked the entries known today, so none can pass by walking nothing.
"""

import re
from collections.abc import Iterator
from io import StringIO

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse

from hoa.demo import seed_demo
from hoa.models import Organization
from vendors.models import Vendor, VendorContract

# The demo runs fenced services, which open their own transactions.
pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True)

A, B = "oak-ridge", "maple-court"
B_NAME = "Maple Court"
MEMBER_OF_A = "omar"
MEMBER_OF_B = "alice"
PRODUCT_APPS = ("hoa", "charges", "vendors", "locking", "budgets")
# What a refusal looks like on a page; 400 only answers a POST whose form is refused.
REFUSED_GET = {403, 404, 405}
REFUSED_POST = {400, 403, 404, 405}


@pytest.fixture
def world():
    seed_demo()
    omar = get_user_model().objects.get(username=MEMBER_OF_A)
    omar.user_permissions.add(
        *Permission.objects.filter(content_type__app_label__in=PRODUCT_APPS).exclude(
            content_type__app_label="locking"  # operators' rights are another test's
        )
    )
    assert list(Organization.objects.for_user(omar).values_list("slug", flat=True)) == [A]
    # A vendor both associations hold a contract with: the row they share.
    maple_vendor = Vendor.objects.filter(contracts__organization__slug=B).order_by("pk").first()
    contract = maple_vendor.contracts.first()
    VendorContract.objects.create(
        vendor=maple_vendor,
        organization=Organization.objects.get(slug=A),
        starts_on=contract.starts_on,
        ends_on=contract.ends_on,
        insurance_expires_on=contract.insurance_expires_on,
    )
    return get_user_model().objects.get(pk=omar.pk)  # fresh: no permission cache


def tenant_models() -> list:
    return [m for m in apps.get_models() if hasattr(m._default_manager.all(), "for_user")]


def rows_of_b_only(model, member):
    """The rows of ``model`` that ``member`` (staff of A) may not reach: B's."""
    rows = model._default_manager.all()
    return rows.exclude(pk__in=rows.for_user(member).values("pk")).order_by("pk")


def fingerprint(member) -> dict:
    """Every field of every row of B's: a write of any kind changes it."""
    return {
        model._meta.label: list(rows_of_b_only(model, member).values_list())
        for model in tenant_models()
    }


def foreign_only_ids(member) -> dict[str, int]:
    """Per model, one id of B's that is the id of no row of A's in any model: asked under A's
    slug, any answer but a refusal is B's row showing through."""
    a_ids = set()
    for model in tenant_models():
        rows = model._default_manager.all()
        a_ids |= {
            pk for pk in rows.for_user(member).values_list("pk", flat=True) if type(pk) is int
        }
    found = {}
    for model in tenant_models():
        for pk in rows_of_b_only(model, member).values_list("pk", flat=True)[:500]:
            if type(pk) is int and pk not in a_ids:
                found[model._meta.label] = pk
                break
    return found


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def say(kind: str, walked: list[str]) -> None:
    print(f"\n{kind}: {len(walked)} walked")
    for entry in walked:
        print(f"  {entry}")


# -- the URLconf --------------------------------------------------------------------------


def staff_patterns() -> Iterator[tuple[str, list[str]]]:
    """``(namespaced name, parameter names)`` of every named URL pattern with an
    ``org_slug``, from the resolver's tree."""

    def walk(resolver: URLResolver, namespace: str, params: list[str]):
        for entry in resolver.url_patterns:
            own = _params(entry.pattern)
            if isinstance(entry, URLResolver):
                inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
                yield from walk(entry, inner, params + own)
            elif isinstance(entry, URLPattern) and entry.name:
                names = params + own
                if "org_slug" in names:
                    yield f"{namespace}{entry.name}", names

    return walk(get_resolver(), "", [])


def _params(pattern) -> list[str]:
    converters = getattr(pattern, "converters", None)
    if converters is not None:
        return list(converters)
    return list(re.compile(str(pattern)).groupindex)


def view_model(url: str, member):
    """The model whose rows the view at ``url`` looks ids up in (its ``get_queryset``), or
    ``None`` when it cannot be read without running the view."""
    match = resolve(url)
    view_class = getattr(match.func, "view_class", None)
    if view_class is None:
        return None
    request = RequestFactory().get(url)
    request.user = member
    view = view_class()
    view.setup(request, *match.args, **match.kwargs)
    view.organization = Organization.objects.get(slug=match.kwargs["org_slug"])
    try:
        return view.get_queryset().model
    except (AttributeError, KeyError, TypeError):
        return None


def url_for(name: str, params: list[str], slug: str, some_id: int) -> str:
    kwargs = {}
    for param in params:
        if param == "org_slug":
            kwargs[param] = slug
        elif param in ("pk", "id") or param.endswith("_id"):
            kwargs[param] = some_id
        elif param == "month":
            kwargs[param] = "2026-03"
        else:
            kwargs[param] = "x"
    return reverse(name, kwargs=kwargs)


def test_no_staff_url_reaches_another_associations_rows(world):
    member = world
    client = client_of(member)
    ids = foreign_only_ids(member)
    before = fingerprint(member)
    walked, reached = [], []

    def ask(method: str, url: str) -> None:
        # A redirect is followed: what counts is where it lands (a GET on a decision's
        # address goes to the object's page, which must refuse too).
        answer = getattr(client, method)(url, follow=True)
        hops = "".join(f" -> {status} {to}" for to, status in answer.redirect_chain)
        body = answer.content.decode(errors="replace") if answer.status_code == 200 else ""
        allowed = REFUSED_GET if method == "get" else REFUSED_POST
        walked.append(f"{method.upper()} {url}{hops} -> {answer.status_code}")
        wrote = fingerprint(member) != before
        if answer.status_code not in allowed or B_NAME in body or wrote:
            reached.append(walked[-1])

    patterns = list(staff_patterns())
    by_model = {}
    for name, params in patterns:
        some_b_id = next(iter(ids.values()))
        for method in ("get", "post"):
            ask(method, url_for(name, params, B, some_b_id))  # B's own address
        if any(p in ("pk", "id") or p.endswith("_id") for p in params):
            # B's row of the view's own model under A's address; a view whose model cannot
            # be read is asked with the ids of B's that are no id of A's in any model.
            model = view_model(url_for(name, params, A, some_b_id), member)
            by_model[name] = model._meta.label if model else "?"
            if model is not None:
                pks = list(rows_of_b_only(model, member).values_list("pk", flat=True)[:1])
            else:
                pks = sorted(set(ids.values()))
            for pk in pks:
                for method in ("get", "post"):
                    ask(method, url_for(name, params, A, pk))

    say("staff URLs", walked)
    names = {name for name, _params in patterns}
    assert {"hoa:dashboard", "charges:generate", "vendors:pay", "vendors:assign"} <= names
    print(f"models of the views with an id: {by_model}")
    assert len(patterns) >= 20 and ids
    assert {"hoa.Complaint", "vendors.Invoice"} <= set(by_model.values())
    assert reached == []
    assert fingerprint(member) == before


# -- the admin ----------------------------------------------------------------------------


def test_no_admin_view_or_action_reaches_another_associations_rows(world):
    member = world
    client = client_of(member)
    before = fingerprint(member)
    admin_index = reverse("admin:index")
    walked, reached = [], []

    for model, model_admin in admin.site._registry.items():
        info = (model._meta.app_label, model._meta.model_name)
        changelist = reverse("admin:{}_{}_changelist".format(*info))
        answer = client.get(changelist)
        walked.append(f"GET {changelist} -> {answer.status_code}")
        tenant = hasattr(model._default_manager.all(), "for_user")
        b_ids = (
            list(rows_of_b_only(model, member).values_list("pk", flat=True)[:3]) if tenant else []
        )
        if answer.status_code == 200 and tenant:
            shown = {row.pk for row in answer.context_data["cl"].result_list}
            if shown & set(rows_of_b_only(model, member).values_list("pk", flat=True)):
                reached.append(walked[-1])
        if not b_ids:
            continue
        b_id = b_ids[0]
        for view in ("change", "history", "delete"):
            url = reverse(f"admin:{info[0]}_{info[1]}_{view}", args=[b_id])
            for method, data in (("get", None), ("post", {"post": "yes"})):
                answer = getattr(client, method)(url, data)
                walked.append(f"{method.upper()} {url} -> {answer.status_code}")
                to_index = answer.status_code == 302 and answer.url == admin_index
                if not (to_index or answer.status_code in (403, 404)):
                    reached.append(walked[-1])
        request = client.get(changelist).wsgi_request
        actions = list(model_admin.get_actions(request)) if hasattr(request, "user") else []
        for action in actions:
            data = {
                "action": action,
                ACTION_CHECKBOX_NAME: [str(pk) for pk in b_ids],
                "post": "yes",
                "apply": "yes",
                "confirm": "yes",
            }
            answer = client.post(changelist, data)
            walked.append(f"action {model._meta.label}.{action} -> {answer.status_code}")
            body = answer.content.decode(errors="replace") if answer.status_code == 200 else ""
            if B_NAME in body:
                reached.append(walked[-1])

    shared = shared_rows_walk(client, member)
    walked += shared["walked"]
    reached += shared["reached"]

    say("admin views and actions", walked)
    actions = {entry.split(" ")[1] for entry in walked if entry.startswith("action ")}
    assert {"vendors.Vendor.delete_selected", "vendors.Invoice.pay_invoices"} <= actions
    assert any(e.startswith("POST /admin/vendors/vendor/") for e in walked)
    assert any(e.startswith("shared vendors.Vendor") for e in walked)
    assert reached == []
    assert fingerprint(member) == before


def shared_rows_walk(client, member) -> dict[str, list[str]]:
    """Rows A's staff and B's both reach (a vendor under contract with both): A's staff may
    neither delete them nor change their own fields, through any admin that shows them."""
    walked, reached = [], []
    member_of_b = get_user_model().objects.get(username=MEMBER_OF_B)
    assert list(Organization.objects.for_user(member_of_b).values_list("slug", flat=True)) == [B]
    for model in admin.site._registry:
        if model not in tenant_models():
            continue
        rows = model._default_manager.all()
        both = rows.for_user(member).filter(pk__in=rows.for_user(member_of_b).values("pk"))
        shared = list(both.order_by("pk"))
        info = (model._meta.app_label, model._meta.model_name)
        for row in shared[:2]:
            label = f"shared {model._meta.label} {row.pk}"
            before = list(model._default_manager.filter(pk=row.pk).values_list())
            delete = reverse("admin:{}_{}_delete".format(*info), args=[row.pk])
            change = reverse("admin:{}_{}_change".format(*info), args=[row.pk])
            changed = {
                field.name: "changed-by-a"
                for field in model._meta.fields
                if field.editable and field.get_internal_type() == "CharField"
            }
            answers = [
                ("GET delete", client.get(delete).status_code),
                ("POST delete", client.post(delete, {"post": "yes"}).status_code),
                ("POST change", client.post(change, changed).status_code),
                (
                    "action delete_selected",
                    client.post(
                        reverse("admin:{}_{}_changelist".format(*info)),
                        {
                            "action": "delete_selected",
                            ACTION_CHECKBOX_NAME: [row.pk],
                            "post": "yes",
                        },
                    ).status_code,
                ),
            ]
            for what, status in answers:
                walked.append(f"{label} {what} -> {status}")
            after = list(model._default_manager.filter(pk=row.pk).values_list())
            if after != before or answers[0][1] != 403 or answers[1][1] != 403:
                reached.append(f"{label}: {before} -> {after}, {answers}")
    return {"walked": walked, "reached": reached}


# -- the management commands -------------------------------------------------------------

TARGETS = ("org", "all_orgs")


def command_probes(member, b_rows: dict) -> Iterator[tuple[str, list[str], bool]]:
    """``(command, arguments, aimed at B)`` for every command of the product that takes an
    association, an actor or an id, one per way of naming its target."""
    models = {model._meta.model_name: model for model in apps.get_models()}
    for name, app in sorted(get_commands().items()):
        if app.split(".")[-1] not in PRODUCT_APPS:
            continue
        parser = load_command_class(app, name).create_parser("manage.py", name)
        options = {a.dest: a for a in parser._actions if a.option_strings}
        id_options = [dest for dest in options if dest in models and dest in b_rows]
        if not ({"actor", *TARGETS} & set(options) or id_options):
            print(f"  (command {name}: no association, actor or id to aim)")
            continue
        grouped = {a.dest for g in parser._mutually_exclusive_groups for a in g._group_actions}
        common = ["--actor", MEMBER_OF_A] if "actor" in options else []
        common += [arg for dest in options if dest == "year" for arg in ("--year", "2027")]
        common += [
            arg
            for dest in id_options
            if dest not in grouped
            for arg in (options[dest].option_strings[-1], str(b_rows[dest]))
        ]
        targets = [d for d in options if d in grouped] or [d for d in options if d in TARGETS]
        if not targets:
            yield name, common, bool(id_options)
        for target in targets:
            flag = options[target].option_strings[-1]
            if target == "org":
                yield name, [*common, flag, B], True
            elif target == "all_orgs":
                yield name, [*common, flag], False
            elif target in b_rows:
                yield name, [*common, flag, str(b_rows[target])], True


def test_no_command_reaches_another_associations_rows(world):
    member = world
    before = fingerprint(member)
    b_rows = {
        model._meta.model_name: rows_of_b_only(model, member).values_list("pk", flat=True)[0]
        for model in tenant_models()
        if rows_of_b_only(model, member).exists()
    }
    walked, reached = [], []

    for name, arguments, aimed_at_b in command_probes(member, b_rows):
        try:
            call_command(name, *arguments, stdout=StringIO(), stderr=StringIO())
            status, line = 0, ""
        except CommandError as exc:
            status, line = exc.returncode, str(exc)
        walked.append(f"{name} {' '.join(arguments)} -> {status} {line}")
        now = fingerprint(member)
        if now != before or (aimed_at_b and not (status == 1 and MEMBER_OF_A in line)):
            reached.append(walked[-1])
            before = now

    say("commands", walked)
    names = {entry.split(" ")[0] for entry in walked}
    assert {"pay_approved_invoices", "generate_monthly_charges", "assign_vendor"} <= names
    assert any("--invoice" in entry for entry in walked)
    assert any("--complaint" in entry for entry in walked)
    assert reached == []
