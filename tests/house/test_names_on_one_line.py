"""Names typed on one line (issue 47, item 6): an association's name with a line break made
a From header Django refuses, and stopped the reporters' emails. Where names are typed (the
admin's one-line fields, the complaint form), a line break or a control character is
refused with one sentence, and nothing is written."""

import pytest
from django.test import Client
from django.urls import reverse

from hoa.models import Complaint, Organization

pytestmark = pytest.mark.django_db

SENTENCE = "Write this on one line, without line breaks or control characters."


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("name", ["Maple\nCourt", "Maple\rCourt", "Maple\tCourt", "Maple\x1bCourt"])
def test_the_admin_refuses_a_name_that_is_not_one_line(root, maple, name):
    url = reverse("admin:hoa_organization_change", args=[maple.pk])
    page = _client(root).get(url)
    form = page.context["adminform"].form
    data = {key: value for key, value in form.initial.items() if value is not None}
    data.update({"name": name, "slug": maple.slug, "units-TOTAL_FORMS": "0"})
    data.update({"units-INITIAL_FORMS": "0", "units-MIN_NUM_FORMS": "0"})
    data["units-MAX_NUM_FORMS"] = "1000"

    response = _client(root).post(url, data)

    assert response.status_code == 200  # the form again, with the sentence
    assert SENTENCE in response.content.decode()
    assert Organization.objects.get(pk=maple.pk).name == "Maple Court"


def test_the_complaint_form_refuses_a_title_or_reporter_on_two_lines(alice, maple):
    url = reverse("complaints:new", args=[maple.slug])
    base = {
        "title": "Leaking pipe",
        "description": "Under the sink.\nSince Monday.",  # a text area: lines are fine
        "priority": "normal",
        "reporter_name": "Ana Ruiz",
        "reporter_email": "ana@example.org",
    }
    for field in ("title", "reporter_name"):
        response = _client(alice).post(url, {**base, field: "Two\nlines"})
        assert response.status_code == 400, field
        assert SENTENCE in response.content.decode()
    assert not Complaint.objects.exists()
