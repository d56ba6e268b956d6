"""Insurance where staff work (issue 47, item 4): a lapsed vendor shown as such in the assign
menu, a certificate's expiry recorded on the vendor's insurance page (a compare-and-swap on
the expiry the page showed, with its history), and the 30-day list of what lapses on a live
contract."""

import re
from datetime import timedelta

from django.test import Client
from django.urls import reverse
from django.utils import timezone

from hoa.models import AccessDenial, Complaint
from tests.vendors_support import active_vendor, uninsured_vendor, vendor_with_contract
from vendors.insurance import record_certificate
from vendors.models import CertificateRecorded, VendorContract

_OPTION = re.compile(r"<option(?P<attrs>[^>]*)>(?P<label>[^<]*)</option>")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def insurance_url(vendor, slug="maple-court") -> str:
    return reverse("vendors:insurance", args=[slug, vendor.pk])


def record_url(vendor, slug="maple-court") -> str:
    return reverse("vendors:record_certificate", args=[slug, vendor.pk])


def menu(html: str) -> dict[str, tuple[str, bool]]:
    """The assign menu's options: value → (label, disabled)."""
    select = html.split('name="vendor"')[1].split("</select>")[0]
    options = {}
    for option in _OPTION.finditer(select):
        value = re.search(r'value="([^"]*)"', option["attrs"])[1]
        options[value] = (option["label"].strip(), " disabled" in option["attrs"])
    return options


def shown_fields(html: str) -> dict[str, str]:
    """The hidden fields of the (first) certificate form as the page rendered them."""
    form = html.split('data-testid="certificate-form"')[1].split("</form>")[0]
    fields = {}
    for tag in re.finditer(r"<input([^>]*)>", form):
        attrs = dict(re.findall(r'([a-z-]+)="([^"]*)"', tag[1]))
        if attrs.get("type") == "hidden" and attrs.get("name") != "csrfmiddlewaretoken":
            fields[attrs["name"]] = attrs.get("value", "")
    return fields


# -- the assign menu ------------------------------------------------------------------------------


def test_the_assign_menu_shows_a_lapsed_vendor_not_selectable_with_the_reason(alice, maple, pipe):
    lapsed = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=3)
    unknown = uninsured_vendor("No Paper", maple, lapsed_days_ago=None)
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    page = client_for(alice).get(reverse("complaints:complaint", args=[maple.slug, complaint.pk]))

    options = menu(page.content.decode())
    day = (timezone.localdate() - timedelta(days=3)).isoformat()
    assert options[str(lapsed.pk)] == (
        f"Bright Spark (plumbing) — insurance lapsed on {day}",
        True,
    )
    assert options[str(unknown.pk)] == (
        "No Paper (plumbing) — no insurance certificate on file",
        True,
    )
    assert options[str(pipe.pk)] == ("Pipe Pros (plumbing)", False)


# -- the insurance page ---------------------------------------------------------------------------


def test_staff_record_a_new_certificate_and_the_vendor_can_be_assigned_again(alice, maple):
    vendor = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=3)
    contract = VendorContract.objects.get(vendor=vendor)
    lapsed_on = contract.insurance_expires_on
    client = client_for(alice)
    page = client.get(insurance_url(vendor))
    html = page.content.decode()
    assert page.status_code == 200
    assert f"lapsed on {lapsed_on.isoformat()}" in html
    shown = shown_fields(html)
    assert shown == {"contract": str(contract.pk), "seen": lapsed_on.isoformat()}

    renewed = timezone.localdate() + timedelta(days=365)
    response = client.post(
        record_url(vendor), {**shown, "expires_on": renewed.isoformat()}, follow=True
    )

    assert response.redirect_chain == [(insurance_url(vendor), 303)]
    contract.refresh_from_db()
    assert contract.insurance_expires_on == renewed
    [record] = CertificateRecorded.objects.all()
    assert (record.expires_before, record.expires_on, record.actor, record.actor_label) == (
        lapsed_on,
        renewed,
        alice,
        "alice",
    )
    assert f"Certificate until {renewed.isoformat()}" in response.content.decode()
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    page = client.get(reverse("complaints:complaint", args=[maple.slug, complaint.pk]))
    assert menu(page.content.decode())[str(vendor.pk)] == ("Bright Spark (plumbing)", False)


def test_a_certificate_posted_from_a_page_shown_before_another_was_recorded_is_409(
    alice, bob, maple
):
    vendor = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=3)
    contract = VendorContract.objects.get(vendor=vendor)
    shown = shown_fields(client_for(alice).get(insurance_url(vendor)).content.decode())
    theirs = timezone.localdate() + timedelta(days=200)
    record_certificate(
        contract=contract, expires_on=theirs, seen=contract.insurance_expires_on, actor=bob
    )

    mine = timezone.localdate() + timedelta(days=300)
    response = client_for(alice).post(record_url(vendor), {**shown, "expires_on": mine})

    html = response.content.decode()
    said = re.sub(r"<[^>]+>", "", html)  # dates are marked up as moments
    assert response.status_code == 409
    assert f"it now expires on {theirs.isoformat()}; nothing was saved" in said
    assert "Try again" not in html  # the same form can never succeed: look again
    contract.refresh_from_db()
    assert contract.insurance_expires_on == theirs
    assert CertificateRecorded.objects.count() == 1


def test_a_date_out_of_range_is_a_400_beside_the_field(alice, maple):
    vendor = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=3)
    shown = shown_fields(client_for(alice).get(insurance_url(vendor)).content.decode())
    response = client_for(alice).post(record_url(vendor), {**shown, "expires_on": "9999-12-31"})

    assert response.status_code == 400
    assert "The expiry date must be between" in response.content.decode()
    assert not CertificateRecorded.objects.exists()


def test_recording_needs_the_permission_and_the_association(alice, viewer, mallory, maple):
    vendor = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=3)
    contract = VendorContract.objects.get(vendor=vendor)
    fields = {"contract": contract.pk, "seen": "", "expires_on": "2030-01-01"}

    assert client_for(viewer).post(record_url(vendor), fields).status_code == 403
    assert client_for(mallory).post(record_url(vendor), fields).status_code == 404
    assert client_for(mallory).post(record_url(vendor, "oak-ridge"), fields).status_code == 404
    contract.refresh_from_db()
    assert contract.insurance_expires_on < timezone.localdate()
    assert AccessDenial.objects.filter(reason="permission").exists()
    page = client_for(alice).get(insurance_url(vendor)).content.decode()
    assert 'data-testid="certificate-form"' in page


# -- the 30-day list ------------------------------------------------------------------------------


def test_the_30_day_list_shows_what_lapses_on_a_live_contract_only(alice, maple):
    vendor_with_contract(
        "Long Gone", maple, starts_in_days=-800, ends_in_days=-300, insured_for_days=-365
    )
    vendor_with_contract("Not Yet", maple, starts_in_days=10, ends_in_days=400, insured_for_days=5)
    active_vendor("Soon", maple, insured_for_days=12)

    html = client_for(alice).get(reverse("vendors:vendors", args=[maple.slug])).content.decode()

    panel = html.split('data-testid="insurance-lapsing"')[1].split("</section>")[0]
    assert ">Soon</a></strong>" in panel
    assert "Long Gone" not in panel and "Not Yet" not in panel


def test_a_live_vendor_is_listed_by_its_latest_certificate_on_any_contract(alice, maple):
    vendor = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=2)
    today = timezone.localdate()
    VendorContract.objects.create(
        vendor=vendor,
        organization=maple,
        starts_on=today - timedelta(days=900),
        ends_on=today - timedelta(days=400),
        insurance_expires_on=today - timedelta(days=500),
    )
    html = client_for(alice).get(reverse("vendors:vendors", args=[maple.slug])).content.decode()

    panel = html.split('data-testid="insurance-lapsing"')[1].split("</section>")[0]
    assert panel.count(">Bright Spark</a></strong>") == 1
    row = panel.split(">Bright Spark</a></strong>")[1].split("</li>")[0]
    assert f"lapsed on {(today - timedelta(days=2)).isoformat()}" in row
