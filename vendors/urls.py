from django.urls import path

from vendors import invoice_views, views

app_name = "vendors"

# Included under orgs/<slug:org_slug>/ (hoa/urls.py).
urlpatterns = [
    path("complaints/<id:pk>/assign/", views.AssignVendorView.as_view(), name="assign"),
    path(
        "complaints/<id:pk>/invoices/new/",
        invoice_views.RecordInvoiceView.as_view(),
        name="record_invoice",
    ),
    path("vendors/", views.VendorListView.as_view(), name="vendors"),
    path("vendors/<id:pk>/insurance/", views.InsuranceView.as_view(), name="insurance"),
    path(
        "vendors/<id:pk>/insurance/record/",
        views.RecordCertificateView.as_view(),
        name="record_certificate",
    ),
    path("invoices/", invoice_views.InvoiceListView.as_view(), name="invoices"),
    path("invoices.csv", invoice_views.InvoiceCsvView.as_view(), name="invoices_csv"),
    path("invoices/<id:pk>/", invoice_views.InvoiceDetailView.as_view(), name="invoice"),
    path(
        "invoices/<id:pk>/invoice.pdf", invoice_views.InvoicePdfView.as_view(), name="invoice_pdf"
    ),
    path("invoices/<id:pk>/approve/", invoice_views.ApproveInvoiceView.as_view(), name="approve"),
    path(
        "invoices/<id:pk>/amount/", invoice_views.ChangeAmountView.as_view(), name="change_amount"
    ),
    path("invoices/<id:pk>/reject/", invoice_views.RejectInvoiceView.as_view(), name="reject"),
    path("invoices/<id:pk>/void/", invoice_views.VoidInvoiceView.as_view(), name="void"),
    path("invoices/<id:pk>/pay/", invoice_views.PayInvoiceView.as_view(), name="pay"),
]
